// Reductions: allreduce and reducescatter, single and grouped. A grouped op is one request with
// several tensors, so the engine negotiates and reduces the group as one unit.
#include "op_attrs.h"
#include "op_shapes.h"
#include "tf_adapter.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"

namespace herring {
namespace tfops {
namespace {

namespace tf = ::tensorflow;

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
    return AddInputs(context, context->num_inputs(), request);
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
    OP_REQUIRES_OK_ASYNC(context, OutputIntoTensorFlow(context, context->num_inputs(), &request), done);
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
    Submit(context, engine_, std::move(request),
           AdoptOutputs(context, context->input_dtype(0), context->num_inputs(), "reducescatter"), std::move(done));
  }
};

}  // namespace

// The reduction settings ReductionKernel reads.
#define HERRING_REDUCTION_ATTRS              \
  .Attr("reduce_op: int")                    \
      .Attr("prescale_factor: float = 1.0")  \
      .Attr("postscale_factor: float = 1.0")

REGISTER_OP("HerringAllreduce")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    HERRING_REDUCTION_ATTRS
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn(SameShapes)
    .Doc("Reduction of `tensor` over the members of the process set (herring engine).");

REGISTER_OP("HerringGroupedAllreduce")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Attr("num_tensors: int >= 1")
    HERRING_REDUCTION_ATTRS
    .Input("tensors: num_tensors * T")
    .Output("reduced: num_tensors * T")
    .SetShapeFn(SameShapes)
    .Doc("Allreduce of several tensors negotiated and reduced as one unit.");

REGISTER_OP("HerringReducescatter")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    HERRING_REDUCTION_ATTRS
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Reduction of `tensor`, of which each member receives its share of the first dimension.");

REGISTER_OP("HerringGroupedReducescatter")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Attr("num_tensors: int >= 1")
    HERRING_REDUCTION_ATTRS
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
