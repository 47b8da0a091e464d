// StorageHold: what keeps a request's tensor memory where the engine reads and writes it.
//
// Why not the tensors: a request holds the addresses of its tensors' memory until it completes,
// and a reference to the tensor does not pin that memory. t.set_(), t.data = ..., t.resize_() to
// a larger size and t.untyped_storage().resize_(0) each free or move the memory of a tensor that
// is still referenced; the engine (and on one host the peers, through cross-memory writes) would
// then write freed memory. While any request on a storage is in flight, a hold
// - keeps the storage, so its memory outlives a set_() or the tensor;
// - defers the release of its memory, so a call that replaces it (resize_, share_memory_) leaves
//   the old memory in place for the engine until the last request on it completes; the tensor
//   goes on with the new memory, and the request's result lands in the old (as with set_()).
// Why not make the storage unresizable, as share_memory_() does: t.resize_() sets the tensor's
// new sizes before the storage refuses to grow, and the tensor then reads past its memory.
#pragma once

// torch's narrow headers, not <torch/extension.h>: that one brings the whole C++ frontend (nn,
// optim, data) and took 35 of the 40 CPU-seconds of compiling each file here.
#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <c10/util/SmallVector.h>
#include <pybind11/pybind11.h>

namespace herring {

struct DeferredMemory;  // storage_hold.cc

// Inline room for an in-place call's tensor, or an input and its output, without a heap block:
// a hold is made per request.
using Storages = c10::SmallVector<c10::Storage, 2>;

class StorageHold {
 public:
  explicit StorageHold(Storages storages);  // each pinned once
  ~StorageHold();
  StorageHold(const StorageHold&) = delete;
  StorageHold& operator=(const StorageHold&) = delete;

 private:
  Storages storages_;  // distinct
  // What each storage's pin counted (its deferred memory; null: a storage that keeps its DataPtr),
  // for the unpin: torch may replace a storage's memory while it is held.
  c10::SmallVector<DeferredMemory*, 2> memories_;
};

// Whether an in-flight request holds `storage`'s current memory (the zero-copy mover leaves such
// storages alone).
bool IsHeld(const c10::Storage& storage);

// For a request abandoned in flight (its wait interrupted): holds the tensors' storages for the
// rest of the process.
void HoldForever(const at::Tensor& input, const at::Tensor& output);

// _torch_native.hold_storages(tensors) and _torch_native.storage_is_held(tensor).
void BindStorageHold(pybind11::module_& m);

}  // namespace herring
