// Glue between TensorFlow kernels and the herring engine. The kernels only translate: a TF tensor
// becomes a Request (name, dtype, shape, pointers), the engine's result becomes TF outputs or a TF
// error. They never block a TensorFlow thread: each collective is an AsyncOpKernel whose done()
// is called from the engine's completion callback.
//
// This library links libherring_core.so, like the Python module does, and its kernels use the
// engine of the Python front that built their ops: every op names the front's EngineSlot in its
// attributes (engine/engine_slot.h explains the design), so a process that imports both
// TensorFlow and PyTorch still runs one engine, and functions traced before an elastic reset use
// the engine created after it. Nothing here is process-wide state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_slot.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace herring {
namespace tfops {

// The engine's dtype for a TensorFlow dtype; InvalidArgument for one the engine cannot move.
absl::Status ToEngineType(tensorflow::DataType dtype, DataType* out);

// The TensorFlow error for an engine status. Horovod's classes are kept: bad input ->
// InvalidArgument, ranks disagreeing -> FailedPrecondition, the job failing (lost peer, abort,
// deadline, shutdown) -> Unknown, which Horovod's elastic layer treats as HorovodInternalError.
absl::Status ToTensorFlowStatus(const Status& status);

std::vector<int64_t> DimsOf(const tensorflow::TensorShape& shape);
tensorflow::TensorShape ShapeFromDims(const std::vector<int64_t>& dims);

// A tensor that owns an engine-allocated (64-byte aligned) output without copying it.
tensorflow::Tensor AdoptEngineOutput(tensorflow::DataType dtype, const std::vector<int64_t>& dims,
                                     std::shared_ptr<AlignedBuffer> buffer);

// A kernel's way to its engine: the EngineSlot named by its op's engine_slot / engine_owner
// attributes, taken when TensorFlow constructs the kernel. Empty when the op names no slot or was
// built by another process (a graph loaded from disk): the address is then never read.
class EngineRef {
 public:
  explicit EngineRef(tensorflow::OpKernelConstruction* context);
  // The engine the front runs now, or null (before hvd.init(), after hvd.shutdown()).
  std::shared_ptr<Engine> Current() const { return slot_ ? slot_->Get() : nullptr; }
  // The same, or FailedPrecondition with Horovod's "not initialized" message.
  absl::Status Running(std::shared_ptr<Engine>* engine) const;

 private:
  std::shared_ptr<const EngineSlot> slot_;
};

// What a kernel does with the engine's result once the collective succeeded.
using Finish = std::function<absl::Status(OpResult& result)>;

// Hands the request to the engine `engine` names now; `finish` and done() run on the engine's
// thread when it completes. Any failure (no engine, rejected request, failed collective) becomes
// the kernel's status; done() is called exactly once in every case.
void Submit(tensorflow::OpKernelContext* context, const EngineRef& engine, Request request, Finish finish,
            tensorflow::AsyncOpKernel::DoneCallback done);

// The kernel's first `count` inputs as the request's tensors and input buffers (the dtype is the
// first input's).
absl::Status AddInputs(tensorflow::OpKernelContext* context, int count, Request* request);

// TensorFlow's outputs 0..count-1, shaped as the inputs (reusing an input's buffer where TensorFlow
// allows it), as the buffers the engine writes the request's results into.
absl::Status OutputIntoTensorFlow(tensorflow::OpKernelContext* context, int count, Request* request);

// The Finish of a collective whose `count` results the engine allocates: each becomes output i
// without a copy (AdoptEngineOutput). `op` names the collective in the error for a wrong count.
Finish AdoptOutputs(tensorflow::OpKernelContext* context, tensorflow::DataType dtype, int count, const char* op);

// Base of every collective kernel. Reads the attributes they share and names the collective:
//   auto_name=true        -> the engine names it (eager calls without a name: ranks call the
//                            collectives in the same order, as in Horovod)
//   tensor_name non-empty -> that name (eager calls with a name)
//   otherwise             -> the graph node's name, without its scope if ignore_name_scope
//                            (tf.function: identical on every rank because tracing is)
class CollectiveKernel : public tensorflow::AsyncOpKernel {
 public:
  CollectiveKernel(tensorflow::OpKernelConstruction* context, OpType type);

 protected:
  // A request with this kernel's type, name and process set filled in.
  Request NewRequest() const;

  EngineRef engine_;
  OpType type_;
  std::string name_;      // empty: the engine names it
  int32_t process_set_id_ = 0;
};

}  // namespace tfops
}  // namespace herring
