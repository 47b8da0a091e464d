// Python's view of point-to-point transfers (engine/p2p.cc): `_native.p2p_send/p2p_recv` return a
// Transfer, which the torch.distributed backend waits on (without the GIL, with a deadline).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "engine/engine.h"

namespace py = pybind11;

namespace herring {

namespace {

// True once `c` completed, False if still pending at the timeout; raises its error. Waits in
// slices, so that Python's signal handlers (Ctrl-C, test timeouts) run in between.
bool WaitForTransfer(Completion& c, double timeout_seconds) {
  const Deadline deadline = timeout_seconds < 0 ? Deadline::Never() : Deadline::AfterSeconds(timeout_seconds);
  Status s;
  while (true) {
    {
      py::gil_scoped_release release;
      s = c.Wait(Deadline::Earlier(Deadline::AfterSeconds(0.2), deadline));
    }
    if (s.code() != StatusCode::kTimeout || deadline.Expired()) break;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  if (s.code() == StatusCode::kTimeout) return false;  // still pending
  if (!s.ok()) throw Error(s);
  return true;
}

}  // namespace

void BindP2p(py::module_& m) {
  py::class_<Completion, std::shared_ptr<Completion>>(m, "Transfer")
      .def_property_readonly("done", &Completion::done)
      .def("wait", &WaitForTransfer, py::arg("timeout_seconds") = -1.0,
           "True once the transfer completed, False if still pending at the timeout; raises its error.");
  py::class_<AnySourceReceive, std::shared_ptr<AnySourceReceive>>(m, "AnySourceTransfer")
      .def_property_readonly("done", [](const AnySourceReceive& r) { return r.done->done(); })
      .def("wait", [](AnySourceReceive& r, double timeout_seconds) { return WaitForTransfer(*r.done, timeout_seconds); },
           py::arg("timeout_seconds") = -1.0,
           "True once the message is in the buffer, False if still pending at the timeout; raises its error.")
      .def_property_readonly("source", [](const AnySourceReceive& r) { return r.source.load(); },
                             "The global rank whose message it took (-1 until it took one).");
  m.def("p2p_send",
        [](Engine& e, int peer, uint32_t tag, uintptr_t data, size_t bytes) {
          return e.P2pSend(peer, tag, reinterpret_cast<const void*>(data), bytes);
        },
        py::arg("engine"), py::arg("peer"), py::arg("tag"), py::arg("data"), py::arg("bytes"),
        "Sends `bytes` at address `data` to global rank `peer`; the memory must stay valid until done.");
  m.def("p2p_recv",
        [](Engine& e, int peer, uint32_t tag, uintptr_t data, size_t bytes) {
          return e.P2pRecv(peer, tag, reinterpret_cast<void*>(data), bytes);
        },
        py::arg("engine"), py::arg("peer"), py::arg("tag"), py::arg("data"), py::arg("bytes"),
        "Receives exactly `bytes` from global rank `peer` into address `data`.");
  m.def("p2p_recv_any",
        [](Engine& e, const std::vector<int>& peers, uint32_t tag, uintptr_t data, size_t bytes) {
          return e.P2pRecvAny(peers, tag, reinterpret_cast<void*>(data), bytes);
        },
        py::arg("engine"), py::arg("peers"), py::arg("tag"), py::arg("data"), py::arg("bytes"),
        "Receives exactly `bytes` into address `data` from whichever of the global ranks `peers` sends first "
        "with `tag` (each sender's messages in the order it sent them); the result's `source` names it.");
}

}  // namespace herring
