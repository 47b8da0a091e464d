// Python's view of point-to-point transfers (engine/p2p.cc): `_native.p2p_send/p2p_recv` return a
// Transfer, which the torch.distributed backend waits on (without the GIL, with a deadline).
#include <pybind11/pybind11.h>

#include "engine/engine.h"

namespace py = pybind11;

namespace herring {

void BindP2p(py::module_& m) {
  py::class_<Completion, std::shared_ptr<Completion>>(m, "Transfer")
      .def_property_readonly("done", &Completion::done)
      .def("wait",
           [](Completion& c, double timeout_seconds) {
             // In slices, so that Python's signal handlers (Ctrl-C, test timeouts) run in between.
             const Deadline deadline =
                 timeout_seconds < 0 ? Deadline::Never() : Deadline::AfterSeconds(timeout_seconds);
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
           },
           py::arg("timeout_seconds") = -1.0,
           "True once the transfer completed, False if still pending at the timeout; raises its error.");
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
}

}  // namespace herring
