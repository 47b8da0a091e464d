#include "torch/storage_hold.h"

#include <ATen/MapAllocator.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace py = pybind11;

namespace herring {

// A storage's memory while holds exist, freed once both the storage has let it go (torch replaced
// the data: resize_(), share_memory_()) and the last hold on it is gone.
// The storage's DataPtr is swapped for one that releases this instead of the memory; the last hold
// swaps the original back if the storage still has it.
struct DeferredMemory {
  at::DataPtr original;
  // The DataPtr of the storage that has it (torch may move it to another storage:
  // _swap_data_ptr_), and the holds while there are any.
  std::atomic<int> owners{2};
  int holds = 0;  // under pins_mu
};

namespace {

void ReleaseDeferred(void* context) {
  auto* memory = static_cast<DeferredMemory*>(context);
  if (memory->owners.fetch_sub(1) == 1) delete memory;
}

// Holds are made and dropped with the GIL held today; the mutex keeps the counts correct without
// relying on that (free-threaded Python).
std::mutex pins_mu;
// Holds on storages whose DataPtr stays their own (shared memory, no data), by storage. A wrapped
// storage's holds are counted in its DeferredMemory, found through its DataPtr: no table to look
// up or to grow on the hot path.
// Never destroyed: holds leaked for good (HoldForever) outlive static destruction.
auto& unwrapped_pins = *new std::unordered_map<const c10::StorageImpl*, int>();

// Memory already in shared memory (share_memory_(), a tensor received from another process) keeps
// its own DataPtr: torch recognizes such storages by their deleter (is_shared(), and sharing them
// again is a no-op that moves nothing), and nothing replaces their memory.
bool MayBeReplaced(const c10::StorageImpl& impl) {
  return impl.data() != nullptr && at::MapAllocator::fromDataPtr(impl.data_ptr()) == nullptr;
}

// The storage's deferred memory if a hold wrapped its current DataPtr.
DeferredMemory* DeferredOf(const c10::StorageImpl& impl) {
  const at::DataPtr& data = impl.data_ptr();
  return data.get_deleter() == &ReleaseDeferred ? static_cast<DeferredMemory*>(data.get_context()) : nullptr;
}

// One hold on `s`: what Unpin needs to undo it (the deferred memory it counted, null for an
// unwrapped storage), since by then torch may have replaced the storage's memory.
DeferredMemory* Pin(const c10::Storage& s) {
  c10::StorageImpl* impl = s.unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(pins_mu);
  if (DeferredMemory* memory = DeferredOf(*impl)) {
    // Memory whose holds were all dropped while another storage had it (_swap_data_ptr_ of a
    // held storage): the holds take their share of it again.
    if (memory->holds++ == 0) memory->owners.fetch_add(1);
    return memory;
  }
  if (!MayBeReplaced(*impl)) {
    unwrapped_pins[impl]++;
    return nullptr;
  }
  void* data = impl->mutable_data();  // may throw (a storage torch forbids writing): nothing pinned yet
  auto* memory = new DeferredMemory();
  memory->holds = 1;
  memory->original = impl->set_data_ptr(at::DataPtr(data, memory, &ReleaseDeferred, impl->device()));
  return memory;
}

void Unpin(const c10::Storage& s, DeferredMemory* memory) {
  c10::StorageImpl* impl = s.unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(pins_mu);
  if (memory == nullptr) {
    auto it = unwrapped_pins.find(impl);
    if (it != unwrapped_pins.end() && --it->second == 0) unwrapped_pins.erase(it);
    return;
  }
  if (--memory->holds > 0) return;
  if (impl->data_ptr().get_context() == memory) {
    // Still the storage's memory: given back (the wrapper's release runs as it is replaced).
    impl->set_data_ptr_noswap(std::move(memory->original));
  }
  ReleaseDeferred(memory);  // frees the memory if torch let go of it while the request used it
}

// Fewer storages than this are kept distinct as they are collected (a look at each); more are
// sorted once collected.
constexpr size_t kDistinctByLooking = 4;

// Adds the storage of `t` (if it has one) to `out`, unless one of the first kDistinctByLooking
// storages is it already: KeepDistinct sorts out the rest.
void AddStorageOf(const at::Tensor& t, Storages* out) {
  if (!t.has_storage()) return;
  const c10::StorageImpl* impl = t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  if (out->size() < kDistinctByLooking &&
      std::any_of(out->begin(), out->end(), [&](const c10::Storage& s) { return s.unsafeGetStorageImpl() == impl; })) {
    return;
  }
  out->push_back(t.storage());
}

// The storages of the tensors in `objects`, a tensor or None or a (nested) list or tuple of them,
// as the fronts pass their requests' inputs and outputs. Read with CPython's own calls: a hold is
// made per request, a gradient's allreduce_async_ among them.
void CollectStorages(PyObject* objects, Storages* out) {
  if (objects == Py_None) return;
  if (THPVariable_Check(objects)) {
    AddStorageOf(THPVariable_Unpack(objects), out);
    return;
  }
  if (PyList_Check(objects) || PyTuple_Check(objects)) {
    PyObject** items = PySequence_Fast_ITEMS(objects);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(objects); ++i) CollectStorages(items[i], out);
    return;
  }
  throw torch::TypeError("hold_storages takes tensors, None, and lists or tuples of them");
}

// Each storage once: an in-place call's input is its output, a group's views may share one.
void KeepDistinct(Storages* storages) {
  if (storages->size() <= kDistinctByLooking) return;  // distinct already (AddStorageOf)
  auto impl = [](const c10::Storage& s) { return s.unsafeGetStorageImpl(); };
  std::sort(storages->begin(), storages->end(), [&](const c10::Storage& a, const c10::Storage& b) { return impl(a) < impl(b); });
  storages->erase(std::unique(storages->begin(), storages->end(),
                              [&](const c10::Storage& a, const c10::Storage& b) { return impl(a) == impl(b); }),
                  storages->end());
}

void DropHold(PyObject* capsule) { delete static_cast<StorageHold*>(PyCapsule_GetPointer(capsule, nullptr)); }

// _torch_native.hold_storages(tensors), with CPython's calling convention for one argument
// (METH_O) rather than pybind11's dispatch, which cost about as much again as the hold itself.
PyObject* HoldStorages(PyObject* /*module*/, PyObject* objects) {
  HANDLE_TH_ERRORS
  Storages storages;
  CollectStorages(objects, &storages);
  auto hold = std::make_unique<StorageHold>(std::move(storages));
  PyObject* capsule = PyCapsule_New(hold.get(), nullptr, &DropHold);
  if (capsule != nullptr) hold.release();
  return capsule;
  END_HANDLE_TH_ERRORS
}

PyMethodDef hold_storages_def = {
    "hold_storages", &HoldStorages, METH_O,
    "hold_storages(tensors): holds the storages of a request's tensors (a tensor, None, or nested lists and "
    "tuples of them) while the engine uses their memory, until the returned object is dropped "
    "(native/torch/storage_hold.h)."};

}  // namespace

StorageHold::StorageHold(Storages storages) : storages_(std::move(storages)) {
  KeepDistinct(&storages_);
  memories_.reserve(storages_.size());
  try {
    for (const c10::Storage& s : storages_) memories_.push_back(Pin(s));
  } catch (...) {
    // No destructor runs for a failed constructor.
    while (!memories_.empty()) {
      Unpin(storages_[memories_.size() - 1], memories_.back());
      memories_.pop_back();
    }
    throw;
  }
}

StorageHold::~StorageHold() {
  for (size_t i = 0; i < storages_.size(); ++i) Unpin(storages_[i], memories_[i]);
}

bool IsHeld(const c10::Storage& storage) {
  const c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(pins_mu);
  const DeferredMemory* memory = DeferredOf(*impl);
  return (memory != nullptr && memory->holds > 0) || unwrapped_pins.count(impl) > 0;
}

void HoldForever(const at::Tensor& input, const at::Tensor& output) {
  Storages storages;
  AddStorageOf(input, &storages);
  AddStorageOf(output, &storages);
  // Reachable from here, so the leak checker under the sanitizers does not report it. Called with
  // the GIL held, which guards the list.
  static auto* kept = new std::vector<std::unique_ptr<StorageHold>>();
  kept->push_back(std::make_unique<StorageHold>(std::move(storages)));
}

void BindStorageHold(py::module_& m) {
  PyObject* hold = PyCFunction_NewEx(&hold_storages_def, nullptr, m.ptr());
  if (hold == nullptr) throw py::error_already_set();
  m.add_object("hold_storages", py::reinterpret_steal<py::object>(hold));
  m.def(
      "storage_is_held",
      [](py::handle tensor) {
        if (!THPVariable_Check(tensor.ptr())) throw py::type_error("storage_is_held takes a tensor");
        const at::Tensor& t = THPVariable_Unpack(tensor.ptr());
        return t.has_storage() && IsHeld(t.storage());
      },
      py::arg("tensor"),
      "Whether a request in flight holds the memory of `tensor`'s storage (memory that torch replaced while "
      "it was held is no longer the storage's).");
}

}  // namespace herring
