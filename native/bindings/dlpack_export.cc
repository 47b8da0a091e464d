#include "bindings/dlpack_export.h"

#include <cstdint>

namespace herring {
namespace {

// The DLPack ABI (dlpack.h v0.x), reproduced because it is a stable C struct layout.
struct DLDevice {
  int32_t device_type;  // 1 = CPU
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

struct Holder {
  std::shared_ptr<uint8_t> memory;  // whatever owns the bytes (an engine buffer, zero-copy memory)
  std::vector<int64_t> shape;
  DLManagedTensor managed;
};

DLDataType ToDL(DataType t) {
  switch (t) {
    case DataType::kUInt8: return {1, 8, 1};
    case DataType::kInt8: return {0, 8, 1};
    case DataType::kInt16: return {0, 16, 1};
    case DataType::kUInt16: return {1, 16, 1};
    case DataType::kInt32: return {0, 32, 1};
    case DataType::kInt64: return {0, 64, 1};
    case DataType::kFloat16: return {2, 16, 1};
    case DataType::kBFloat16: return {4, 16, 1};
    case DataType::kFloat32: return {2, 32, 1};
    case DataType::kFloat64: return {2, 64, 1};
    case DataType::kBool: return {6, 8, 1};
  }
  return {1, 8, 1};
}

void DeleteHolder(DLManagedTensor* m) { delete static_cast<Holder*>(m->manager_ctx); }

void CapsuleDestructor(PyObject* capsule) {
  // Only an unconsumed capsule still owns the tensor; a consumer renames it "used_dltensor".
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}

}  // namespace

pybind11::capsule ExportDLPack(std::shared_ptr<AlignedBuffer> buffer, const std::vector<int64_t>& shape,
                               DataType dtype) {
  uint8_t* data = buffer->data();
  return ExportDLPack(std::shared_ptr<uint8_t>(std::move(buffer), data), shape, dtype);
}

pybind11::capsule ExportDLPack(std::shared_ptr<uint8_t> memory, const std::vector<int64_t>& shape, DataType dtype) {
  auto* h = new Holder{std::move(memory), shape, {}};
  h->managed.dl_tensor.data = h->memory.get();
  h->managed.dl_tensor.device = {1, 0};
  h->managed.dl_tensor.ndim = static_cast<int32_t>(h->shape.size());
  h->managed.dl_tensor.dtype = ToDL(dtype);
  h->managed.dl_tensor.shape = h->shape.data();
  h->managed.dl_tensor.strides = nullptr;  // compact row-major
  h->managed.dl_tensor.byte_offset = 0;
  h->managed.manager_ctx = h;
  h->managed.deleter = DeleteHolder;
  PyObject* cap = PyCapsule_New(&h->managed, "dltensor", CapsuleDestructor);
  if (!cap) {
    delete h;
    throw pybind11::error_already_set();
  }
  return pybind11::reinterpret_steal<pybind11::capsule>(cap);
}

}  // namespace herring
