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

// Allreduce and reducescatter, single and grouped: the same request (every input tensor, with the
// reduction settings); they differ in where the results go.
//   kAllreduce     (HerringAllreduce, HerringGroupedAllreduce): the engine writes the result into
//                  TF's output, which reuses the input's buffer when TF allows it.
//   kReducescatter (HerringReducescatter, HerringGroupedReducescatter): each member receives its
//                  rows of the reduction; the engine allocates them and TF adopts the buffers.
template <OpType kType>
class ReductionKernel : public CollectiveKernel {
 public:
  explicit ReductionKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c, kType) {
    int reduce_op = 0;
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op));
    OP_REQUIRES(c, IsValidReduceOp(reduce_op),
                absl::InvalidArgumentError(absl::StrCat("unknown reduce_op ", reduce_op)));
    reduce_op_ = static_cast<ReduceOp>(reduce_op);
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    Request request = NewRequest();
    request.meta.reduce_op = reduce_op_;
    request.meta.prescale = prescale_;
    request.meta.postscale = postscale_;
    OP_REQUIRES_OK_ASYNC(context, AddInputs(context, context->num_inputs(), &request), done);
    if (kType == OpType::kAllreduce) {
      OP_REQUIRES_OK_ASYNC(context, OutputIntoTensorFlow(context, context->num_inputs(), &request), done);
      Submit(context, engine_, std::move(request), [](OpResult&) { return absl::OkStatus(); }, std::move(done));
    } else {
      Submit(context, engine_, std::move(request),
             AdoptOutputs(context, context->input_dtype(0), context->num_inputs(), "reducescatter"), std::move(done));
    }
  }

 private:
  ReduceOp reduce_op_ = ReduceOp::kSum;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

using AllreduceKernel = ReductionKernel<OpType::kAllreduce>;
using ReducescatterKernel = ReductionKernel<OpType::kReducescatter>;

}  // namespace

// The reduction settings ReductionKernel reads.
#define HERRING_REDUCTION_ATTRS              \
  .Attr("reduce_op: int")                    \
      .Attr("prescale_factor: float = 1.0")  \
      .Attr("postscale_factor: float = 1.0")

// A reduction of one tensor: the result has its type.
#define HERRING_SINGLE_REDUCTION_OP(name, shape_fn, doc) \
  REGISTER_OP(name)                                     \
      HERRING_COLLECTIVE_ATTRS                          \
      .Attr(HERRING_TF_TYPES)                           \
      HERRING_REDUCTION_ATTRS                           \
      .Input("tensor: T")                               \
      .Output("reduced: T")                             \
      .SetShapeFn(shape_fn)                             \
      .Doc(doc)

// A reduction of num_tensors tensors of one type, negotiated and reduced as one unit.
#define HERRING_GROUPED_REDUCTION_OP(name, shape_fn, doc) \
  REGISTER_OP(name)                                      \
      HERRING_COLLECTIVE_ATTRS                           \
      .Attr(HERRING_TF_TYPES)                            \
      .Attr("num_tensors: int >= 1")                     \
      HERRING_REDUCTION_ATTRS                            \
      .Input("tensors: num_tensors * T")                 \
      .Output("reduced: num_tensors * T")                \
      .SetShapeFn(shape_fn)                              \
      .Doc(doc)

HERRING_SINGLE_REDUCTION_OP("HerringAllreduce", SameShapes,
                            "Reduction of `tensor` over the members of the process set (herring engine).");
HERRING_GROUPED_REDUCTION_OP("HerringGroupedAllreduce", SameShapes,
                             "Allreduce of several tensors negotiated and reduced as one unit.");
HERRING_SINGLE_REDUCTION_OP("HerringReducescatter", FirstDimUnknown,
                            "Reduction of `tensor`, of which each member receives its share of the first dimension.");
HERRING_GROUPED_REDUCTION_OP("HerringGroupedReducescatter", FirstDimUnknown,
                             "Reducescatter of several tensors as one unit.");

REGISTER_KERNEL_BUILDER(Name("HerringAllreduce").Device(tf::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("HerringGroupedAllreduce").Device(tf::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("HerringReducescatter").Device(tf::DEVICE_CPU), ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("HerringGroupedReducescatter").Device(tf::DEVICE_CPU), ReducescatterKernel);

}  // namespace tfops
}  // namespace herring
