#include "bindings/work_handle.h"

#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "bindings/dlpack_export.h"

namespace py = pybind11;

namespace herring {

namespace {

PyObject* herring_error_type = nullptr;  // set by BindErrors; the module owns the type

}  // namespace

Status WaitServingSignals(Engine& e, int64_t handle, Deadline deadline) {
  while (true) {
    Status s;
    {
      py::gil_scoped_release release;
      s = e.Wait(handle, Deadline::Earlier(Deadline::AfterSeconds(0.2), deadline));
    }
    if (s.code() != StatusCode::kTimeout || deadline.Expired()) return s;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

py::object ExceptionFor(const Status& s) {
  if (s.code() == StatusCode::kInvalidArgument) return py::reinterpret_borrow<py::object>(PyExc_ValueError)(s.message());
  if (s.code() == StatusCode::kTimeout && s.message().rfind("handle ", 0) == 0) {
    return py::reinterpret_borrow<py::object>(PyExc_TimeoutError)(s.message());
  }
  py::object instance = py::reinterpret_borrow<py::object>(herring_error_type)(s.message());
  instance.attr("code") = StatusCodeName(s.code());
  return instance;
}

void BindErrors(py::module_& m) {
  // Never destroyed: a static object would release its reference after the interpreter is gone.
  static auto* herring_error = new py::exception<Error>(m, "HerringError", PyExc_RuntimeError);
  herring_error_type = herring_error->ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object instance = ExceptionFor(e.status());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance.ptr());
    }
  });
}

Work::Work(std::shared_ptr<Engine> engine, py::object keep_alive, py::object result, py::object finish)
    : engine_(std::move(engine)),
      keep_alive_(std::move(keep_alive)),
      result_(std::move(result)),
      finish_(std::move(finish)) {}

Work::~Work() {
  // Runs with the GIL held (Python deallocates the Work). A completed part's result is taken so
  // the engine's handle table does not keep it. A pending part still has the engine reading or
  // writing the tensors' memory: their references are leaked rather than freed under it (Horovod's
  // API keeps a Work registered until synchronize(), so this is only an abandoned request).
  for (Part& p : parts_) {
    if (p.collected) continue;
    try {
      if (engine_->Poll(p.handle)) {
        engine_->Take(p.handle);
        continue;
      }
    } catch (const Error&) {
      continue;  // taken elsewhere: nothing of it is pending
    }
    static_cast<void>(keep_alive_.release());
    static_cast<void>(result_.release());
  }
}

void Work::Add(int64_t handle, int dtype, std::vector<int64_t> positions) {
  if (!IsValidDataType(dtype)) throw Error(Status::InvalidArgument("bad dtype"));
  parts_.push_back(Part{handle, static_cast<DataType>(dtype), std::move(positions), false, {}});
}

int64_t Work::handle() const {
  if (parts_.empty()) throw Error(Status::InvalidArgument("a Work without engine requests has no handle"));
  return parts_.front().handle;
}

void Work::Collect(Part& p) {
  p.result = engine_->Take(p.handle);
  p.collected = true;
}

bool Work::Poll() {
  bool all = true;
  for (Part& p : parts_) {
    if (p.collected) continue;
    if (engine_->Poll(p.handle)) {
      Collect(p);
    } else {
      all = false;
    }
  }
  return all;
}

Status Work::FirstError() const {
  for (const Part& p : parts_) {
    if (p.collected && !p.result.status.ok()) return p.result.status;
  }
  return Status();
}

void Work::Wait(double timeout_seconds) {
  const Deadline deadline = WaitDeadline(timeout_seconds);
  // One deadline for all parts, waited in order. parts_ is not resized after the request was
  // enqueued, and is only changed with the GIL held: another thread waiting on this Work may
  // collect a part while this one waits without the GIL, which is checked before taking it.
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (parts_[i].collected) continue;
    // Already complete (the usual case after a step's other waits): no GIL hand-off for it.
    if (engine_->Poll(parts_[i].handle)) {
      Collect(parts_[i]);
      continue;
    }
    Status s = WaitServingSignals(*engine_, parts_[i].handle, deadline);
    if (parts_[i].collected) continue;
    if (!s.ok()) throw Error(s);  // Timeout: still pending, the Work stays valid
    Collect(parts_[i]);
  }
  Status error = FirstError();
  if (!error.ok()) throw Error(error);
}

py::object Work::Exception() {
  if (!Poll()) return py::none();
  Status error = FirstError();
  return error.ok() ? py::none() : ExceptionFor(error);
}

py::object Work::Take() {
  if (taken_) throw Error(Status::InvalidArgument("the result of handle " + std::to_string(handle()) + " was already taken"));
  if (!Poll()) throw Error(Status::InvalidArgument("handle " + std::to_string(handle()) + " is still pending"));
  Status error = FirstError();
  py::object out;
  if (error.ok() && !finish_.is_none()) {
    // Engine-allocated outputs, put back in the request's order (a split group's parts each
    // hold some positions), exported without a copy.
    size_t total = 0;
    for (const Part& p : parts_) total += p.positions.empty() ? p.result.outputs.size() : p.positions.size();
    py::list capsules;
    for (size_t i = 0; i < total; ++i) capsules.append(py::none());
    std::vector<int64_t> received_splits;
    int64_t value = 0;
    size_t next = 0;
    for (const Part& p : parts_) {
      const OpResult& r = p.result;
      for (size_t j = 0; j < r.outputs.size(); ++j) {
        const size_t at = p.positions.empty() ? next++ : static_cast<size_t>(p.positions.at(j));
        capsules[at] = ExportDLPack(r.outputs[j], r.output_shapes[j], p.dtype);
      }
      received_splits.insert(received_splits.end(), r.received_splits.begin(), r.received_splits.end());
      value = r.value;
    }
    out = finish_(capsules, received_splits, value);
  } else if (error.ok()) {
    out = result_;
  }
  // Taken: the engine is done with the tensors, so the Work lets go of them and of the outputs.
  taken_ = true;
  keep_alive_ = py::none();
  result_ = py::none();
  finish_ = py::none();
  for (Part& p : parts_) {
    p.result.outputs.clear();
    p.result.output_shapes.clear();
  }
  if (!error.ok()) throw Error(error);
  return out;
}

void BindWork(py::module_& m) {
  py::class_<Work, std::shared_ptr<Work>>(m, "Work")
      .def(py::init<std::shared_ptr<Engine>, py::object, py::object, py::object>(), py::arg("engine"),
           py::arg("keep_alive"), py::arg("result") = py::none(), py::arg("finish") = py::none(),
           "A request's handle: keeps `keep_alive` until the result is taken; the result is `result`, "
           "or finish(capsules, received_splits, value) for engine-allocated outputs.")
      .def("add", &Work::Add, py::arg("handle"), py::arg("dtype"), py::arg("positions") = std::vector<int64_t>(),
           "Adds an engine request (a part of a group split by dtype holds `positions`).")
      .def_property_readonly("handle", &Work::handle)
      .def("poll", &Work::Poll)
      .def("is_completed", &Work::Poll)
      .def("wait",
           [](Work& w, py::object timeout) { w.Wait(timeout.is_none() ? -1.0 : timeout.cast<double>()); },
           py::arg("timeout") = py::none(),
           "Waits without the GIL (signal handlers run); raises TimeoutError, or the request's error.")
      .def("exception", &Work::Exception)
      .def("take", &Work::Take)
      .def(
          "result",
          [](Work& w, py::object timeout) {
            w.Wait(timeout.is_none() ? -1.0 : timeout.cast<double>());
            return w.Take();
          },
          py::arg("timeout") = py::none(),
          "wait(timeout), then take(): one call for synchronize(), the hot path of a training step.");
}

}  // namespace herring
