// hvd_herring._torch_native: the torch front end's synchronous collectives of one tensor
// (hvd.allreduce_, allreduce, broadcast_, broadcast) with the tensors read in C++.
//
// Why a module of its own: the Python path reads five attributes of each tensor (is_cpu,
// is_contiguous, dtype, data_ptr, shape), 0.1-0.2 us each through torch's Python bindings, and
// hands them to the engine as 13 converted arguments. Read from the at::Tensor, they cost tens of
// nanoseconds. Measured with a prototype of this call, 4 KiB allreduce_ back to back: np=1 3.5 ->
// 2.1 us, np=2 6.9 -> 4.1-5.4 us per call.
//
// It is built with torch's headers and its bundled pybind11 (not the one _native is built with):
// the two modules share nothing but Python objects and libherring_core, where the engine lives.
// The engine is found through the Python front's EngineSlot (engine/engine_slot.h), as the
// TensorFlow kernels find it. The dtype table comes from Python (set_dtype_codes), so the
// mapping of torch's dtypes to the engine's is written once. Errors are raised as _native raises
// them (hvd_herring._native.error_for), so callers catch the same exceptions on either path.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>  // pybind11 with torch's type casters (at::Tensor arguments)

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "engine/engine.h"
#include "engine/engine_slot.h"
#include "torch/storage_hold.h"

namespace py = pybind11;

namespace herring {
namespace {

constexpr size_t kScalarTypes = static_cast<size_t>(at::ScalarType::NumOptions);

// torch dtype -> the engine's dtype code, -1 for none (set_dtype_codes).
std::array<int, kScalarTypes> dtype_codes = [] {
  std::array<int, kScalarTypes> codes{};
  codes.fill(-1);
  return codes;
}();

// hvd_herring._native.error_for, looked up once; never released (the interpreter may be gone
// when static objects are destroyed).
PyObject* error_for = nullptr;

[[noreturn]] void Raise(const Status& s) {
  if (error_for == nullptr) {
    py::object f = py::module_::import("hvd_herring._native").attr("error_for");
    error_for = f.release().ptr();
  }
  py::object error = py::reinterpret_borrow<py::object>(error_for)(static_cast<int>(s.code()), s.message());
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

void SetDtypeCodes(const std::vector<std::pair<at::Tensor, int>>& examples) {
  for (const auto& [example, code] : examples) {
    dtype_codes[static_cast<size_t>(example.scalar_type())] = code;
  }
}

// The tensor behind `object` if this path can take it: a dense contiguous CPU tensor of a dtype
// the engine reduces. Anything else is left to the Python path, which raises Horovod's errors.
const at::Tensor* Usable(py::handle object, int* code) {
  if (!THPVariable_Check(object.ptr())) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(object.ptr());
  if (!t.is_cpu() || t.layout() != at::kStrided || !t.is_contiguous()) return nullptr;
  *code = dtype_codes[static_cast<size_t>(t.scalar_type())];
  return *code < 0 ? nullptr : &t;
}

// Engine::Wait without the GIL, in slices between which Python's signal handlers run (Ctrl-C),
// as _native's WaitServingSignals (bindings/work_handle.cc) does for its callers.
Status WaitServingSignals(Engine& e, int64_t handle) {
  for (;;) {
    Status s;
    {
      py::gil_scoped_release release;
      s = e.Wait(handle, Deadline::AfterSeconds(0.2));
    }
    if (s.code() != StatusCode::kTimeout) return s;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

// Runs the collective of `in` into `out` through the engine and returns its value. Interrupted
// while the request is pending (a signal handler that raises), the engine still reads and writes
// the tensors' memory: their storages are held for good then (HoldForever).
py::object RunTensors(Engine& engine, const at::Tensor& in, const at::Tensor& out, int code, int op_type,
                      const std::string& name, int process_set, int reduce_op, double prescale, double postscale,
                      int root) {
  int64_t handle;
  try {
    Request req = MakeRequest(op_type, name, process_set, code, reduce_op, prescale, postscale, root,
                              /*waiter_follows=*/true);
    const at::IntArrayRef sizes = in.sizes();
    req.meta.tensors.push_back({std::vector<int64_t>(sizes.begin(), sizes.end()), {}});
    req.buffers.push_back({in.data_ptr(), out.data_ptr()});
    handle = engine.Enqueue(std::move(req));
  } catch (const Error& e) {
    Raise(e.status());
  }
  Status s;
  try {
    s = WaitServingSignals(engine, handle);
  } catch (...) {
    HoldForever(in, out);
    throw;
  }
  if (!s.ok()) Raise(s);
  OpResult r = engine.Take(handle);
  if (!r.status.ok()) Raise(r.status);
  return py::int_(r.value);
}

std::shared_ptr<Engine> EngineIn(uintptr_t slot_address) {
  return reinterpret_cast<const EngineSlot*>(slot_address)->Get();
}

// _native's Engine.run_one, reading the tensors here. Returns the collective's value, or None
// when the call is not this path's (see Usable, or no engine yet): the caller then takes the
// Python path.
py::object RunOne(uintptr_t slot_address, py::handle tensor, py::handle output, int op_type, const std::string& name,
                  int process_set, int reduce_op, double prescale, double postscale, int root) {
  int code = -1, output_code = -1;
  const at::Tensor* in = Usable(tensor, &code);
  const at::Tensor* out = in == nullptr ? nullptr : Usable(output, &output_code);
  if (out == nullptr || output_code != code) return py::none();
  std::shared_ptr<Engine> engine = EngineIn(slot_address);
  if (!engine) return py::none();
  return RunTensors(*engine, *in, *out, code, op_type, name, process_set, reduce_op, prescale, postscale, root);
}

// hvd.allreduce without autograd: the output allocated here, as the Python path allocates it
// (contiguous, like the input). None when the call is not this path's: an input that needs a
// gradient while grad mode is on (the Python path records the autograd function), or see RunOne.
py::object Allreduce(uintptr_t slot_address, py::handle tensor, const std::string& name, int process_set,
                     int reduce_op, double prescale, double postscale) {
  int code = -1;
  const at::Tensor* in = Usable(tensor, &code);
  if (in == nullptr || (in->requires_grad() && at::GradMode::is_enabled())) return py::none();
  std::shared_ptr<Engine> engine = EngineIn(slot_address);
  if (!engine) return py::none();
  at::Tensor out = at::empty_like(*in, at::MemoryFormat::Contiguous);
  RunTensors(*engine, *in, out, code, static_cast<int>(OpType::kAllreduce), name, process_set, reduce_op, prescale, postscale, -1);
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(out)));
}

}  // namespace
}  // namespace herring

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "hvd_herring's torch front end: synchronous collectives with the tensors read in C++";
  m.def("set_dtype_codes", &herring::SetDtypeCodes, py::arg("examples"),
        "[(a tensor of each dtype, its engine dtype code)]: the dtypes this path takes");
  m.def("allreduce", &herring::Allreduce, py::arg("slot_address"), py::arg("tensor"), py::arg("name"),
        py::arg("process_set"), py::arg("reduce_op"), py::arg("prescale"), py::arg("postscale"),
        "hvd.allreduce of one tensor without autograd into a new tensor, or None if this path does not take it.");
  m.def("run_one", &herring::RunOne, py::arg("slot_address"), py::arg("tensor"), py::arg("output"),
        py::arg("op_type"), py::arg("name"), py::arg("process_set"), py::arg("reduce_op"), py::arg("prescale"),
        py::arg("postscale"), py::arg("root"),
        "A synchronous collective of one tensor into `output`: its value, or None if this path does not take "
        "it (the caller then takes the Python path, which raises the right error).");
  herring::BindStorageHold(m);
}
