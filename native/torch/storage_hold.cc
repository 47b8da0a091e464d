#include "torch/storage_hold.h"

#include <ATen/MapAllocator.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace py = pybind11;

namespace herring {
namespace {

// A storage's memory while holds exist, freed once both the storage has let it go (torch replaced
// the data: resize_(), share_memory_()) and the last hold on it is gone.
// The storage's DataPtr is swapped for one that releases this instead of the memory; the last hold
// swaps the original back if the storage still has it.
struct DeferredMemory {
  at::DataPtr original;
  std::atomic<int> owners{2};  // the storage's DataPtr, and the pin
};

void ReleaseDeferred(void* context) {
  auto* memory = static_cast<DeferredMemory*>(context);
  if (memory->owners.fetch_sub(1) == 1) delete memory;
}

// The storages that in-flight requests hold: how many holds each, and its deferred memory. Holds
// are made and dropped with the GIL held today; the mutex keeps the table correct without relying
// on that (free-threaded Python).
struct Pin {
  int holds = 0;
  DeferredMemory* memory = nullptr;
};

std::mutex pins_mu;
// Never destroyed: holds leaked for good (HoldForever) outlive static destruction.
auto& pins = *new std::unordered_map<const c10::StorageImpl*, Pin>();

// Memory already in shared memory (share_memory_(), a tensor received from another process) keeps
// its own DataPtr: torch recognizes such storages by their deleter (is_shared(), and sharing them
// again is a no-op that moves nothing), and nothing replaces their memory.
bool MayBeReplaced(const c10::StorageImpl& impl) {
  return impl.data() != nullptr && at::MapAllocator::fromDataPtr(impl.data_ptr()) == nullptr;
}

void PinStorage(const c10::Storage& s) {
  c10::StorageImpl* impl = s.unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(pins_mu);
  auto it = pins.find(impl);
  if (it != pins.end()) {
    it->second.holds++;
    return;
  }
  Pin pin{1, nullptr};
  if (MayBeReplaced(*impl)) {
    void* data = impl->mutable_data();  // may throw (a storage torch forbids writing): nothing pinned yet
    pin.memory = new DeferredMemory();
    pin.memory->original = impl->set_data_ptr(at::DataPtr(data, pin.memory, &ReleaseDeferred, impl->device()));
  }
  pins.emplace(impl, pin);
}

void UnpinStorage(const c10::Storage& s) {
  c10::StorageImpl* impl = s.unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(pins_mu);
  auto it = pins.find(impl);
  if (it == pins.end() || --it->second.holds > 0) return;
  const Pin pin = it->second;
  pins.erase(it);
  if (pin.memory == nullptr) return;
  if (impl->data_ptr().get_context() == pin.memory) {
    // Still the storage's memory: given back (the wrapper's release runs as it is replaced).
    impl->set_data_ptr_noswap(std::move(pin.memory->original));
  }
  ReleaseDeferred(pin.memory);  // frees the memory if torch let go of it while the request used it
}

// The storages of the tensors in `objects`, a tensor or None or a (nested) list or tuple of them,
// as the fronts pass their requests' inputs and outputs. Read with CPython's own calls: a hold is
// made per request, a gradient's allreduce_async_ among them.
void CollectStorages(PyObject* objects, std::vector<c10::Storage>* out) {
  if (objects == Py_None) return;
  if (THPVariable_Check(objects)) {
    const at::Tensor& t = THPVariable_Unpack(objects);
    if (t.has_storage()) out->push_back(t.storage());
    return;
  }
  if (PyList_Check(objects) || PyTuple_Check(objects)) {
    PyObject** items = PySequence_Fast_ITEMS(objects);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(objects); ++i) CollectStorages(items[i], out);
    return;
  }
  throw py::type_error("hold_storages takes tensors, None, and lists or tuples of them");
}

// Each storage once: an in-place call's input is its output, a group's views may share one.
void KeepDistinct(std::vector<c10::Storage>* storages) {
  auto impl = [](const c10::Storage& s) { return s.unsafeGetStorageImpl(); };
  std::sort(storages->begin(), storages->end(), [&](const c10::Storage& a, const c10::Storage& b) { return impl(a) < impl(b); });
  storages->erase(std::unique(storages->begin(), storages->end(),
                              [&](const c10::Storage& a, const c10::Storage& b) { return impl(a) == impl(b); }),
                  storages->end());
}

}  // namespace

StorageHold::StorageHold(std::vector<c10::Storage> storages) : storages_(std::move(storages)) {
  KeepDistinct(&storages_);
  size_t pinned = 0;
  try {
    for (; pinned < storages_.size(); ++pinned) PinStorage(storages_[pinned]);
  } catch (...) {
    while (pinned > 0) UnpinStorage(storages_[--pinned]);  // no destructor runs for a failed constructor
    throw;
  }
}

StorageHold::~StorageHold() {
  for (const c10::Storage& s : storages_) UnpinStorage(s);
}

bool IsHeld(const c10::Storage& storage) {
  std::lock_guard<std::mutex> lock(pins_mu);
  return pins.count(storage.unsafeGetStorageImpl()) > 0;
}

void HoldForever(const at::Tensor& input, const at::Tensor& output) {
  std::vector<c10::Storage> storages;
  for (const at::Tensor* t : {&input, &output}) {
    if (t->has_storage()) storages.push_back(t->storage());
  }
  // Reachable from here, so the leak checker under the sanitizers does not report it. Called with
  // the GIL held, which guards the list.
  static auto* kept = new std::vector<std::unique_ptr<StorageHold>>();
  kept->push_back(std::make_unique<StorageHold>(std::move(storages)));
}

void BindStorageHold(py::module_& m) {
  m.def(
      "hold_storages",
      [](py::handle objects) {
        std::vector<c10::Storage> storages;
        CollectStorages(objects.ptr(), &storages);
        // A capsule rather than a bound class, cheaper to make: a hold is made per request.
        return py::capsule(new StorageHold(std::move(storages)),
                           [](void* hold) { delete static_cast<StorageHold*>(hold); });
      },
      py::arg("tensors"),
      "Holds the storages of a request's tensors (a tensor, None, or nested lists and tuples of them) while the "
      "engine uses their memory, until the returned object is dropped (native/torch/storage_hold.h).");
  m.def(
      "storage_is_held",
      [](py::handle tensor) {
        if (!THPVariable_Check(tensor.ptr())) throw py::type_error("storage_is_held takes a tensor");
        const at::Tensor& t = THPVariable_Unpack(tensor.ptr());
        return t.has_storage() && IsHeld(t.storage());
      },
      py::arg("tensor"), "Whether a request in flight holds the storage of `tensor`.");
}

}  // namespace herring
