// Synchronization points (join, barrier) and the topology ops (size, rank...), which read the
// engine when the graph runs rather than when it is built, as Horovod's do.
#include <algorithm>

#include "op_attrs.h"
#include "op_shapes.h"
#include "tf_adapter.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace herring {
namespace tfops {
namespace {

namespace tf = ::tensorflow;

// Horovod's return codes of process_set_included when it cannot answer yes or no.
constexpr int32_t kProcessSetErrorInit = -1;
constexpr int32_t kProcessSetErrorUnknownSet = -3;

Request ControlRequest(OpType type, std::string name, int32_t process_set) {
  Request request;
  request.meta.type = type;
  request.meta.name = std::move(name);
  request.meta.process_set = process_set;
  request.meta.dtype = DataType::kUInt8;
  return request;
}

// HerringJoin: this rank has no more data; until every rank joined it takes part in the others'
// allreduces with zeros. Returns the rank that joined last.
class JoinKernel : public tf::AsyncOpKernel {
 public:
  explicit JoinKernel(tf::OpKernelConstruction* c) : tf::AsyncOpKernel(c), engine_(c) {}

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    tf::Tensor* last = nullptr;
    OP_REQUIRES_OK_ASYNC(context, context->allocate_output(0, tf::TensorShape({}), &last), done);
    Submit(context, engine_, ControlRequest(OpType::kJoin, "join", 0),
           [last](OpResult& result) {
             last->scalar<int32_t>()() = static_cast<int32_t>(result.value);
             return absl::OkStatus();
           },
           std::move(done));
  }

 private:
  EngineRef engine_;
};

// HerringBarrier: completes when every member of the process set reached it.
class BarrierKernel : public tf::AsyncOpKernel {
 public:
  explicit BarrierKernel(tf::OpKernelConstruction* c) : tf::AsyncOpKernel(c), engine_(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }

  void ComputeAsync(tf::OpKernelContext* context, DoneCallback done) override {
    Submit(context, engine_, ControlRequest(OpType::kBarrier, "", process_set_id_),
           [](OpResult&) { return absl::OkStatus(); }, std::move(done));
  }

 private:
  EngineRef engine_;
  int process_set_id_ = 0;
};

// The topology ops: one int32 scalar computed from the running engine.
class TopologyKernel : public tf::OpKernel {
 public:
  explicit TopologyKernel(tf::OpKernelConstruction* c) : tf::OpKernel(c), engine_(c) {
    if (c->HasAttr("process_set_id")) OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }

  void Compute(tf::OpKernelContext* context) override {
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, tf::TensorShape({}), &out));
    std::shared_ptr<Engine> engine = engine_.Current();
    const std::string& op = type_string();
    if (op == "HerringProcessSetIncluded") {
      out->scalar<int32_t>()() = Included(engine.get());
      return;
    }
    OP_REQUIRES_OK(context, engine_.Running(&engine));
    int32_t value = 0;
    if (op == "HerringSize") {
      try {
        value = static_cast<int32_t>(engine->ProcessSetRanks(process_set_id_).size());
      } catch (const Error& e) {
        OP_REQUIRES_OK(context, ToTensorFlowStatus(e.status()));
      }
    } else if (op == "HerringLocalSize") {
      value = engine->local_size();
    } else if (op == "HerringRank") {
      value = engine->rank();
    } else if (op == "HerringLocalRank") {
      value = engine->local_rank();
    }
    out->scalar<int32_t>()() = value;
  }

 private:
  int32_t Included(Engine* engine) const {
    if (!engine || !engine->running()) return kProcessSetErrorInit;
    try {
      auto ranks = engine->ProcessSetRanks(process_set_id_);
      return std::find(ranks.begin(), ranks.end(), engine->rank()) != ranks.end() ? 1 : 0;
    } catch (const Error&) {
      return kProcessSetErrorUnknownSet;
    }
  }

  EngineRef engine_;
  int process_set_id_ = 0;
};

}  // namespace

REGISTER_OP("HerringJoin")
    HERRING_ENGINE_ATTRS
    .Output("last_joined_rank: int32")
    .SetIsStateful()
    .SetShapeFn(Scalar);
REGISTER_OP("HerringBarrier")
    HERRING_ENGINE_ATTRS
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::NoOutputs);
REGISTER_OP("HerringSize")
    HERRING_ENGINE_ATTRS
    .Attr("process_set_id: int = 0")
    .Output("size: int32")
    .SetIsStateful()
    .SetShapeFn(Scalar);
REGISTER_OP("HerringLocalSize")
    HERRING_ENGINE_ATTRS
    .Output("local_size: int32")
    .SetIsStateful()
    .SetShapeFn(Scalar);
REGISTER_OP("HerringRank")
    HERRING_ENGINE_ATTRS
    .Output("rank: int32")
    .SetIsStateful()
    .SetShapeFn(Scalar);
REGISTER_OP("HerringLocalRank")
    HERRING_ENGINE_ATTRS
    .Output("local_rank: int32")
    .SetIsStateful()
    .SetShapeFn(Scalar);
REGISTER_OP("HerringProcessSetIncluded")
    HERRING_ENGINE_ATTRS
    .Attr("process_set_id: int = 0")
    .Output("included: int32")
    .SetIsStateful()
    .SetShapeFn(Scalar);

REGISTER_KERNEL_BUILDER(Name("HerringJoin").Device(tf::DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("HerringBarrier").Device(tf::DEVICE_CPU), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("HerringSize").Device(tf::DEVICE_CPU), TopologyKernel);
REGISTER_KERNEL_BUILDER(Name("HerringLocalSize").Device(tf::DEVICE_CPU), TopologyKernel);
REGISTER_KERNEL_BUILDER(Name("HerringRank").Device(tf::DEVICE_CPU), TopologyKernel);
REGISTER_KERNEL_BUILDER(Name("HerringLocalRank").Device(tf::DEVICE_CPU), TopologyKernel);
REGISTER_KERNEL_BUILDER(Name("HerringProcessSetIncluded").Device(tf::DEVICE_CPU), TopologyKernel);

}  // namespace tfops
}  // namespace herring
