#include "tf_adapter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/pid_namespace.h"
#include "tensorflow/core/framework/allocation_description.pb.h"
#include "tensorflow/core/framework/types.h"

namespace herring {
namespace tfops {

namespace tf = ::tensorflow;

absl::Status ToEngineType(tf::DataType dtype, DataType* out) {
  switch (dtype) {
    case tf::DT_UINT8: *out = DataType::kUInt8; return absl::OkStatus();
    case tf::DT_INT8: *out = DataType::kInt8; return absl::OkStatus();
    case tf::DT_UINT16: *out = DataType::kUInt16; return absl::OkStatus();
    case tf::DT_INT16: *out = DataType::kInt16; return absl::OkStatus();
    case tf::DT_INT32: *out = DataType::kInt32; return absl::OkStatus();
    case tf::DT_INT64: *out = DataType::kInt64; return absl::OkStatus();
    case tf::DT_HALF: *out = DataType::kFloat16; return absl::OkStatus();
    case tf::DT_BFLOAT16: *out = DataType::kBFloat16; return absl::OkStatus();
    case tf::DT_FLOAT: *out = DataType::kFloat32; return absl::OkStatus();
    case tf::DT_DOUBLE: *out = DataType::kFloat64; return absl::OkStatus();
    case tf::DT_BOOL: *out = DataType::kBool; return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("hvd_herring does not support tensors of type ", tf::DataTypeString(dtype)));
  }
}

absl::Status ToTensorFlowStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return absl::OkStatus();
    case StatusCode::kInvalidArgument:
      return absl::InvalidArgumentError(status.message());
    case StatusCode::kMismatch:
      return absl::FailedPreconditionError(status.message());
    default:
      return absl::UnknownError(status.message());
  }
}

std::vector<int64_t> DimsOf(const tf::TensorShape& shape) {
  std::vector<int64_t> dims;
  dims.reserve(shape.dims());
  for (int i = 0; i < shape.dims(); ++i) dims.push_back(shape.dim_size(i));
  return dims;
}

tf::TensorShape ShapeFromDims(const std::vector<int64_t>& dims) {
  tf::TensorShape shape;
  for (int64_t d : dims) shape.AddDim(d);
  return shape;
}

namespace {

// Lends an engine buffer to TensorFlow: the tensor keeps the buffer alive through its reference.
class EngineTensorBuffer : public tf::TensorBuffer {
 public:
  explicit EngineTensorBuffer(std::shared_ptr<AlignedBuffer> buffer)
      : tf::TensorBuffer(buffer->data()), buffer_(std::move(buffer)) {}

  size_t size() const override { return buffer_->size(); }
  tf::TensorBuffer* root_buffer() override { return this; }
  void FillAllocationDescription(tf::AllocationDescription* proto) const override {
    proto->set_requested_bytes(static_cast<int64_t>(buffer_->size()));
    proto->set_allocated_bytes(static_cast<int64_t>(((buffer_->size() + 63) / 64) * 64));
    proto->set_allocator_name("herring_engine");
  }

 private:
  std::shared_ptr<AlignedBuffer> buffer_;
};

}  // namespace

tf::Tensor AdoptEngineOutput(tf::DataType dtype, const std::vector<int64_t>& dims,
                             std::shared_ptr<AlignedBuffer> buffer) {
  tf::core::RefCountPtr<tf::TensorBuffer> owned(new EngineTensorBuffer(std::move(buffer)));
  return tf::Tensor(dtype, ShapeFromDims(dims), std::move(owned));
}

EngineRef::EngineRef(tf::OpKernelConstruction* context) {
  int64_t address = 0;
  std::string owner;
  if (!context->GetAttr("engine_slot", &address).ok() || !context->GetAttr("engine_owner", &owner).ok()) return;
  // Only the process that wrote the address may follow it; there the front keeps the slot alive
  // at least until this reference is taken, and the reference keeps it alive afterwards.
  if (address == 0 || owner.empty() || owner != ProcessIdentity()) return;
  slot_ = reinterpret_cast<const EngineSlot*>(static_cast<uintptr_t>(address))->weak_from_this().lock();
}

absl::Status EngineRef::Running(std::shared_ptr<Engine>* engine) const {
  *engine = Current();
  if (!*engine) {
    return absl::FailedPreconditionError("Horovod has not been initialized; use hvd.init().");
  }
  return absl::OkStatus();
}

CollectiveKernel::CollectiveKernel(tf::OpKernelConstruction* context, OpType type)
    : tf::AsyncOpKernel(context), engine_(context), type_(type) {
  bool auto_name = false;
  bool ignore_name_scope = false;
  std::string tensor_name;
  OP_REQUIRES_OK(context, context->GetAttr("auto_name", &auto_name));
  OP_REQUIRES_OK(context, context->GetAttr("tensor_name", &tensor_name));
  OP_REQUIRES_OK(context, context->GetAttr("ignore_name_scope", &ignore_name_scope));
  int process_set_id = 0;
  OP_REQUIRES_OK(context, context->GetAttr("process_set_id", &process_set_id));
  process_set_id_ = process_set_id;
  if (auto_name) {
    name_.clear();
  } else if (!tensor_name.empty()) {
    name_ = tensor_name;
  } else {
    name_ = name();
    if (ignore_name_scope) {
      auto slash = name_.rfind('/');
      if (slash != std::string::npos) name_ = name_.substr(slash + 1);
    }
  }
}

Request CollectiveKernel::NewRequest() const {
  Request request;
  request.meta.type = type_;
  request.meta.name = name_;
  request.meta.process_set = process_set_id_;
  return request;
}

void Submit(tf::OpKernelContext* context, const EngineRef& engine_ref, Request request, Finish finish,
            tf::AsyncOpKernel::DoneCallback done) {
  // Held until the request is queued: a shutdown meanwhile fails the request, never frees the
  // engine under it. The completion callback does not hold it (the engine's own thread must never
  // drop the last reference).
  std::shared_ptr<Engine> engine;
  OP_REQUIRES_OK_ASYNC(context, engine_ref.Running(&engine), done);
  request.on_complete = [context, done, finish = std::move(finish)](OpResult result) {
    absl::Status status = result.status.ok() ? finish(result) : ToTensorFlowStatus(result.status);
    if (!status.ok()) context->SetStatus(status);
    done();
  };
  try {
    engine->Enqueue(std::move(request));
  } catch (const Error& e) {
    // Rejected before it was queued: the callback will never run.
    context->SetStatus(ToTensorFlowStatus(e.status()));
    done();
  } catch (const std::exception& e) {
    context->SetStatus(absl::InternalError(absl::StrCat("hvd_herring: ", e.what())));
    done();
  }
}

absl::Status AddInputs(tf::OpKernelContext* context, int count, Request* request) {
  TF_RETURN_IF_ERROR(ToEngineType(context->input_dtype(0), &request->meta.dtype));
  for (int i = 0; i < count; ++i) {
    const tf::Tensor& in = context->input(i);
    request->meta.tensors.push_back({DimsOf(in.shape()), {}});
    request->buffers.push_back({in.tensor_data().data(), nullptr});
  }
  return absl::OkStatus();
}

absl::Status OutputIntoTensorFlow(tf::OpKernelContext* context, int count, Request* request) {
  for (int i = 0; i < count; ++i) {
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(context->forward_input_or_allocate_output({i}, i, context->input(i).shape(), &out));
    request->buffers[i].output = const_cast<char*>(out->tensor_data().data());
  }
  return absl::OkStatus();
}

Finish AdoptOutputs(tf::OpKernelContext* context, tf::DataType dtype, int count, const char* op) {
  return [context, dtype, count, op](OpResult& result) -> absl::Status {
    if (static_cast<int>(result.outputs.size()) != count) {
      return absl::InternalError(absl::StrCat(op, " returned ", result.outputs.size(), " outputs for ", count,
                                              " tensors"));
    }
    for (int i = 0; i < count; ++i) {
      context->set_output(i, AdoptEngineOutput(dtype, result.output_shapes[i], result.outputs[i]));
    }
    return absl::OkStatus();
  };
}

}  // namespace tfops
}  // namespace herring
