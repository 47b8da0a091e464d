// `_native.Work`: Python's handle on one collective request (Horovod's handle API in
// hvd_herring/torch/mpi_ops.py). One request may be several engine requests: a group whose tensors
// differ in dtype runs as one grouped collective per dtype (hvd_herring/dtype_groups.py), so a
// Work holds one part per engine handle and there is no second handle space in Python.
//
// The Work owns what a pending request needs from Python: the tensors whose addresses the engine
// reads and writes (held until the result is taken), the result the caller provided (in-place and
// preallocated outputs) or the `finish` that turns engine-allocated outputs into the caller's
// objects. Results are taken from the engine's HandleTable as soon as a part is seen complete.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "engine/engine.h"

namespace herring {

// A wait's deadline from Python's timeout in seconds (negative: none).
inline Deadline WaitDeadline(double timeout_seconds) {
  return timeout_seconds < 0 ? Deadline::Never() : Deadline::AfterSeconds(timeout_seconds);
}

// Waits for an engine handle without the GIL, in slices between which Python's signal handlers
// run: Ctrl-C, and pytest-timeout's alarm, interrupt a wait the way they interrupt time.sleep().
// Returns Timeout if still pending at `deadline`.
Status WaitServingSignals(Engine& e, int64_t handle, Deadline deadline);

// The Python exception a failed status raises: ValueError (invalid arguments), TimeoutError (a
// handle still pending at its deadline) or hvd_herring._native.HerringError with `.code`. One
// function, so that Work.exception() returns what Work.wait() raises.
pybind11::object ExceptionFor(const Status& s);

// Registers HerringError and the translation of Error into ExceptionFor's exceptions.
void BindErrors(pybind11::module_& m);

class Work {
 public:
  Work(std::shared_ptr<Engine> engine, pybind11::object keep_alive, pybind11::object result,
       pybind11::object finish);
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // One engine request of this Work, with its dtype (to export engine-allocated outputs) and the
  // positions of its tensors in the whole request (empty: in order, for a Work of one part).
  void Add(int64_t handle, int dtype, std::vector<int64_t> positions);
  // The integer Horovod's API hands out: the first part's engine handle (unique, positive).
  int64_t handle() const;
  // True once every part completed; never blocks.
  bool Poll();
  // Blocks until every part completed or the deadline (< 0: none); raises TimeoutError if still
  // pending (the Work stays valid), else the first failed part's error.
  void Wait(double timeout_seconds);
  // The error of a completed, failed request; None while pending or after success.
  pybind11::object Exception();
  // The result, once: the caller's `result` object, or finish(capsules, received splits, value).
  // Releases the tensors. Raises the request's error, or ValueError if pending or already taken.
  pybind11::object Take();

 private:
  struct Part {
    int64_t handle;
    DataType dtype;
    std::vector<int64_t> positions;
    bool collected = false;  // its OpResult was taken from the engine into `result`
    OpResult result;
  };
  void Collect(Part& p);
  Status FirstError() const;

  std::shared_ptr<Engine> engine_;  // handles are only valid on the engine that issued them
  std::vector<Part> parts_;
  pybind11::object keep_alive_;
  pybind11::object result_;
  pybind11::object finish_;
  bool taken_ = false;
};

void BindWork(pybind11::module_& m);

}  // namespace herring
