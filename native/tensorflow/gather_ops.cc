// Data movement: allgather (single and grouped), broadcast and alltoall. Outputs whose size is
// only known after negotiation (allgather, alltoall) are allocated by the engine and adopted by
// TensorFlow without a copy.
#include "op_attrs.h"
#include "tf_adapter.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace herring {
namespace tfops {
namespace {

namespace tf = ::tensorflow;
using tf::shape_inference::InferenceContext;
using tf::shape_inference::ShapeHandle;

absl::Status FirstDimUnknown(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) {
    ShapeHandle in;
    TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &in));
    ShapeHandle out;
    TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
    c->set_output(i, out);
  }
  return absl::OkStatus();
}

// Every input tensor of the kernel as a request's tensors (the engine allocates the outputs).
absl::Status AddInputs(tf::OpKernelContext* context, int count, Request* request) {
  TF_RETURN_IF_ERROR(ToEngineType(context->input_dtype(0), &request->meta.dtype));
  for (int i = 0; i < count; ++i) {
    const tf::Tensor& in = context->input(i);
    request->meta.tensors.push_back({DimsOf(in.shape()), {}});
    request->buffers.push_back({in.tensor_data().data(), nullptr});
  }
  return absl::OkStatus();
}

// HerringAllgather / HerringGroupedAllgather: concatenation along the first dimension, which may
// differ per member.
class AllgatherKernel : public CollectiveKernel {
 public:
  explicit AllgatherKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kAllgather) {}

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    Request request = NewRequest();
    const int n = context->num_inputs();
    OP_REQUIRES_OK_ASYNC(context, AddInputs(context, n, &request), done);
    const tf::DataType dtype = context->input_dtype(0);
    Submit(context, engine_, std::move(request),
           [context, dtype, n](OpResult& result) -> absl::Status {
             if (static_cast<int>(result.outputs.size()) != n) {
               return absl::InternalError(
                   absl::StrCat("allgather returned ", result.outputs.size(), " outputs for ", n, " tensors"));
             }
             for (int i = 0; i < n; ++i) {
               context->set_output(i, AdoptEngineOutput(dtype, result.output_shapes[i], result.outputs[i]));
             }
             return absl::OkStatus();
           },
           std::move(done));
  }
};

// HerringBroadcast: the root's tensor on every member, written into TF's output.
class BroadcastKernel : public CollectiveKernel {
 public:
  explicit BroadcastKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kBroadcast) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
  }

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    Request request = NewRequest();
    request.meta.root = root_rank_;
    OP_REQUIRES_OK_ASYNC(context, AddInputs(context, 1, &request), done);
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(context, context->forward_input_or_allocate_output({0}, 0, context->input(0).shape(), &out),
                         done);
    request.buffers[0].output = const_cast<char*>(out->tensor_data().data());
    Submit(context, engine_, std::move(request), [](OpResult&) { return absl::OkStatus(); }, std::move(done));
  }

 private:
  int root_rank_ = 0;
};

// HerringAlltoall: rows splits[i] go to member i (an even split when `splits` is empty);
// returns the rows received and how many came from each member.
class AlltoallKernel : public CollectiveKernel {
 public:
  explicit AlltoallKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kAlltoall) {}

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    Request request = NewRequest();
    OP_REQUIRES_OK_ASYNC(context, AddInputs(context, 1, &request), done);
    const tf::Tensor& splits = context->input(1);
    OP_REQUIRES_ASYNC(context, splits.dims() == 1,
                      absl::InvalidArgumentError(absl::StrCat("alltoall splits must be a vector, got shape ",
                                                              splits.shape().DebugString())),
                      done);
    auto values = splits.flat<int32_t>();
    for (int64_t i = 0; i < values.size(); ++i) request.meta.tensors[0].splits.push_back(values(i));
    const tf::DataType dtype = context->input_dtype(0);
    Submit(context, engine_, std::move(request),
           [context, dtype](OpResult& result) -> absl::Status {
             if (result.outputs.size() != 1) {
               return absl::InternalError(absl::StrCat("alltoall returned ", result.outputs.size(), " outputs"));
             }
             context->set_output(0, AdoptEngineOutput(dtype, result.output_shapes[0], result.outputs[0]));
             tf::Tensor* received = nullptr;
             TF_RETURN_IF_ERROR(context->allocate_output(
                 1, tf::TensorShape({static_cast<int64_t>(result.received_splits.size())}), &received));
             auto out = received->flat<int32_t>();
             for (size_t i = 0; i < result.received_splits.size(); ++i) {
               out(i) = static_cast<int32_t>(result.received_splits[i]);
             }
             return absl::OkStatus();
           },
           std::move(done));
  }
};

}  // namespace

REGISTER_OP("HerringAllgather")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Input("tensor: T")
    .Output("gathered: T")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Concatenation of `tensor` from every member along the first dimension.");

REGISTER_OP("HerringGroupedAllgather")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Attr("num_tensors: int >= 1")
    .Input("tensors: num_tensors * T")
    .Output("gathered: num_tensors * T")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Allgather of several tensors as one unit.");

REGISTER_OP("HerringBroadcast")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Attr("root_rank: int")
    .Input("tensor: T")
    .Output("broadcast: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc("The root rank's `tensor` on every member (root_rank is a global rank).");

REGISTER_OP("HerringAlltoall")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle in;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &in));
      ShapeHandle out;
      TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("Rows splits[i] of `tensor` go to member i; returns what was received and from whom.");

REGISTER_KERNEL_BUILDER(Name("HerringAllgather").Device(tf::DEVICE_CPU), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("HerringGroupedAllgather").Device(tf::DEVICE_CPU), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("HerringBroadcast").Device(tf::DEVICE_CPU), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("HerringAlltoall").Device(tf::DEVICE_CPU), AlltoallKernel);

}  // namespace tfops
}  // namespace herring
