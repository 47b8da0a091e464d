// Reductions: allreduce and reducescatter, single and grouped. A grouped op is one request with
// several tensors, so the engine negotiates and reduces the group as one unit.
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

absl::Status SameShapes(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

// Each output keeps the input's shape except its first dimension, which the split decides.
absl::Status FirstDimUnknown(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) {
    ShapeHandle in;
    TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &in));
    ShapeHandle out;
    TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
    c->set_output(i, out);
  }
  return absl::OkStatus();
}

// The reduction settings of allreduce and reducescatter.
class ReductionKernel : public CollectiveKernel {
 public:
  ReductionKernel(tf::OpKernelConstruction* c, OpType type) : CollectiveKernel(c, type) {
    int reduce_op = 0;
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op));
    OP_REQUIRES(c, IsValidReduceOp(reduce_op),
                absl::InvalidArgumentError(absl::StrCat("unknown reduce_op ", reduce_op)));
    reduce_op_ = static_cast<ReduceOp>(reduce_op);
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }

 protected:
  // A request carrying every input tensor, with this kernel's reduction settings.
  absl::Status BuildRequest(tf::OpKernelContext* context, Request* request) const {
    *request = NewRequest();
    request->meta.reduce_op = reduce_op_;
    request->meta.prescale = prescale_;
    request->meta.postscale = postscale_;
    TF_RETURN_IF_ERROR(ToEngineType(context->input_dtype(0), &request->meta.dtype));
    for (int i = 0; i < context->num_inputs(); ++i) {
      const tf::Tensor& in = context->input(i);
      request->meta.tensors.push_back({DimsOf(in.shape()), {}});
      request->buffers.push_back({in.tensor_data().data(), nullptr});
    }
    return absl::OkStatus();
  }

 private:
  ReduceOp reduce_op_ = ReduceOp::kSum;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

// HerringAllreduce / HerringGroupedAllreduce: the engine writes the result into TF's output,
// which reuses the input's buffer when TF allows it.
class AllreduceKernel : public ReductionKernel {
 public:
  explicit AllreduceKernel(tf::OpKernelConstruction* c) : ReductionKernel(c, OpType::kAllreduce) {}

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    Request request;
    OP_REQUIRES_OK_ASYNC(context, BuildRequest(context, &request), done);
    for (int i = 0; i < context->num_inputs(); ++i) {
      tf::Tensor* out = nullptr;
      OP_REQUIRES_OK_ASYNC(context,
                           context->forward_input_or_allocate_output({i}, i, context->input(i).shape(), &out),
                           done);
      request.buffers[i].output = const_cast<char*>(out->tensor_data().data());
    }
    Submit(context, engine_, std::move(request), [](OpResult&) { return absl::OkStatus(); }, std::move(done));
  }
};

// HerringReducescatter / HerringGroupedReducescatter: each member receives its rows of the
// reduction; the engine allocates them and TF adopts the buffers.
class ReducescatterKernel : public ReductionKernel {
 public:
  explicit ReducescatterKernel(tf::OpKernelConstruction* c) : ReductionKernel(c, OpType::kReducescatter) {}

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    Request request;
    OP_REQUIRES_OK_ASYNC(context, BuildRequest(context, &request), done);
    const tf::DataType dtype = context->input_dtype(0);
    const int n = context->num_inputs();
    Submit(context, engine_, std::move(request),
           [context, dtype, n](OpResult& result) -> absl::Status {
             if (static_cast<int>(result.outputs.size()) != n) {
               return absl::InternalError(
                   absl::StrCat("reducescatter returned ", result.outputs.size(), " outputs for ", n, " tensors"));
             }
             for (int i = 0; i < n; ++i) {
               context->set_output(i, AdoptEngineOutput(dtype, result.output_shapes[i], result.outputs[i]));
             }
             return absl::OkStatus();
           },
           std::move(done));
  }
};

}  // namespace

REGISTER_OP("HerringAllreduce")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn(SameShapes)
    .Doc("Reduction of `tensor` over the members of the process set (herring engine).");

REGISTER_OP("HerringGroupedAllreduce")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Attr("num_tensors: int >= 1")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Input("tensors: num_tensors * T")
    .Output("reduced: num_tensors * T")
    .SetShapeFn(SameShapes)
    .Doc("Allreduce of several tensors negotiated and reduced as one unit.");

REGISTER_OP("HerringReducescatter")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Reduction of `tensor`, of which each member receives its share of the first dimension.");

REGISTER_OP("HerringGroupedReducescatter")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Attr("num_tensors: int >= 1")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Input("tensors: num_tensors * T")
    .Output("reduced: num_tensors * T")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Reducescatter of several tensors as one unit.");

REGISTER_KERNEL_BUILDER(Name("HerringAllreduce").Device(tf::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("HerringGroupedAllreduce").Device(tf::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("HerringReducescatter").Device(tf::DEVICE_CPU), ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("HerringGroupedReducescatter").Device(tf::DEVICE_CPU), ReducescatterKernel);

}  // namespace tfops
}  // namespace herring
