// Shape functions of the herring op registrations, written once.
#pragma once

#include "tensorflow/core/framework/shape_inference.h"

namespace herring {
namespace tfops {

// Output i has input i's shape (allreduce, broadcast).
inline absl::Status SameShapes(tensorflow::shape_inference::InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

// Output i has input i's shape except its first dimension, which only negotiation decides
// (allgather, reducescatter, alltoall).
inline absl::Status FirstDimUnknownAt(tensorflow::shape_inference::InferenceContext* c, int i) {
  tensorflow::shape_inference::ShapeHandle in;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &in));
  tensorflow::shape_inference::ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
  c->set_output(i, out);
  return absl::OkStatus();
}

// FirstDimUnknownAt for every output.
inline absl::Status FirstDimUnknown(tensorflow::shape_inference::InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) TF_RETURN_IF_ERROR(FirstDimUnknownAt(c, i));
  return absl::OkStatus();
}

// One scalar output (join, the topology ops).
inline absl::Status Scalar(tensorflow::shape_inference::InferenceContext* c) {
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

}  // namespace tfops
}  // namespace herring
