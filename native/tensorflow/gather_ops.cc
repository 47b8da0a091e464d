// Data movement: allgather (single and grouped), broadcast and alltoall. Outputs whose size is
// only known after negotiation (allgather, alltoall) are allocated by the engine and adopted by
// TensorFlow without a copy.
#include "op_attrs.h"
#include "op_shapes.h"
#include "tf_adapter.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"

namespace herring {
namespace tfops {
namespace {

namespace tf = ::tensorflow;

// HerringAllgather / HerringGroupedAllgather: concatenation along the first dimension, which may
// differ per member.
class AllgatherKernel : public CollectiveKernel {
 public:
  explicit AllgatherKernel(tf::OpKernelConstruction* c) : CollectiveKernel(c, OpType::kAllgather) {}

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    Request request = NewRequest();
    const int n = context->num_inputs();
    OP_REQUIRES_OK_ASYNC(context, AddInputs(context, n, &request), done);
    Submit(context, engine_, std::move(request), AdoptOutputs(context, context->input_dtype(0), n, "allgather"),
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
    OP_REQUIRES_OK_ASYNC(context, OutputIntoTensorFlow(context, 1, &request), done);
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
    .SetShapeFn(SameShapes)
    .Doc("The root rank's `tensor` on every member (root_rank is a global rank).");

REGISTER_OP("HerringAlltoall")
    HERRING_COLLECTIVE_ATTRS
    .Attr(HERRING_TF_TYPES)
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      TF_RETURN_IF_ERROR(FirstDimUnknownAt(c, 0));
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
