// The Python module `hvd_herring._native`: the engine object and every constant Python needs
// (dtypes, reduce ops, op types, knobs), so that none is written twice. Horovod's handles are
// Work objects (work_handle.h).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/dlpack_export.h"
#include "bindings/work_handle.h"
#include "common/dtype.h"
#include "common/knobs.h"
#include "common/reduce_op.h"
#include "common/pid_namespace.h"
#include "engine/engine.h"
#include "engine/engine_slot.h"
#include "ops/zero_copy_allreduce.h"
#include "transport/zero_copy_pool.h"

namespace py = pybind11;
using namespace herring;

namespace herring {
void BindP2p(py::module_& m);  // p2p_bindings.cc
}

namespace {

// One tensor as Python hands it over: (input address, output address, shape, splits).
using TensorArg = std::tuple<uintptr_t, uintptr_t, std::vector<int64_t>, std::vector<int64_t>>;

int64_t EnqueueFromPython(Engine& e, int op_type, const std::string& name, int process_set, int dtype,
                          int reduce_op, double prescale, double postscale, int root,
                          const std::vector<TensorArg>& tensors, const std::vector<int32_t>& set_ranks,
                          int set_id, bool in_program_order, bool waiter_follows) {
  Request req = MakeRequest(op_type, name, process_set, dtype, reduce_op, prescale, postscale, root, waiter_follows);
  req.meta.set_ranks = set_ranks;
  req.meta.set_id = set_id;
  req.in_program_order = in_program_order;
  for (const auto& t : tensors) {
    req.meta.tensors.push_back({std::get<2>(t), std::get<3>(t)});
    req.buffers.push_back({reinterpret_cast<const void*>(std::get<0>(t)), reinterpret_cast<void*>(std::get<1>(t))});
  }
  return e.Enqueue(std::move(req));
}

// The fast path for one tensor (most calls in a training step): no list of tuples to convert,
// and the shape moved, not copied.
int64_t EnqueueOne(Engine& e, int op_type, const std::string& name, int process_set, int dtype, int reduce_op,
                   double prescale, double postscale, int root, uintptr_t input, uintptr_t output,
                   std::vector<int64_t> shape, bool waiter_follows, bool in_program_order = false) {
  Request req = MakeRequest(op_type, name, process_set, dtype, reduce_op, prescale, postscale, root, waiter_follows);
  req.in_program_order = in_program_order;
  req.meta.tensors.push_back({std::move(shape), {}});
  req.buffers.push_back({reinterpret_cast<const void*>(input), reinterpret_cast<void*>(output)});
  return e.Enqueue(std::move(req));
}

// A synchronous call's whole life in one crossing into C++: measured at np=1, Horovod's
// allreduce_ spent about a quarter of its 4.5 us creating, registering and taking a Work that a
// synchronous call never hands out. The caller holds `tensor` and `output` for the whole call.
// Interrupted while the request is pending (Ctrl-C, a signal handler that raises), the engine
// still reads and writes them: their references are leaked then, as ~Work does for an abandoned
// request, rather than freed under it.
int64_t RunOne(Engine& e, py::object tensor, py::object output, int op_type, const std::string& name,
               int process_set, int dtype, int reduce_op, double prescale, double postscale, int root,
               uintptr_t input, uintptr_t output_address, std::vector<int64_t> shape) {
  const int64_t handle = EnqueueOne(e, op_type, name, process_set, dtype, reduce_op, prescale, postscale, root, input,
                                    output_address, std::move(shape), /*waiter_follows=*/true);
  Status s;
  try {
    s = WaitServingSignals(e, handle, Deadline::Never());
  } catch (...) {
    tensor.inc_ref();
    output.inc_ref();
    throw;
  }
  if (!s.ok()) throw Error(s);
  OpResult r = e.Take(handle);
  if (!r.status.ok()) throw Error(r.status);
  return r.value;
}

// Engine.wait / wait_and_take: raw engine handles, for the torch.distributed backend's Work
// (hvd_herring/torch/distributed/work.py). Horovod's handle API uses _native.Work (work_handle.h).
//
// Waits for a collective whose outputs the caller provided; returns its value (join: the last
// rank; process sets: the id) or raises its error.
int64_t WaitSimple(Engine& e, int64_t handle, double timeout_seconds) {
  Status s = WaitServingSignals(e, handle, WaitDeadline(timeout_seconds));
  if (!s.ok()) throw Error(s);
  OpResult r = e.Take(handle);
  if (!r.status.ok()) throw Error(r.status);
  return r.value;
}

// Waits (see WaitServingSignals), then returns (outputs as DLPack capsules, shapes, received splits,
// value) or raises the operation's error.
py::tuple WaitAndTake(Engine& e, int64_t handle, double timeout_seconds, int dtype) {
  Status s = WaitServingSignals(e, handle, WaitDeadline(timeout_seconds));
  if (!s.ok()) throw Error(s);  // still pending: the handle stays valid
  OpResult r = e.Take(handle);
  if (!r.status.ok()) throw Error(r.status);
  py::list outputs;
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    outputs.append(ExportDLPack(r.outputs[i], r.output_shapes[i], static_cast<DataType>(dtype)));
  }
  return py::make_tuple(outputs, r.output_shapes, r.received_splits, r.value);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "hvd_herring native core";

  BindErrors(m);  // HerringError, and Error -> ValueError / TimeoutError / HerringError
  m.def(
      "error_for",
      [](int code, const std::string& message) { return ExceptionFor(Status(static_cast<StatusCode>(code), message)); },
      py::arg("code"), py::arg("message"),
      "The exception this module raises for a status (code, message): how hvd_herring._torch_native raises "
      "the same errors without sharing this module's pybind11.");

  py::dict dtypes;
  for (int i = 0; i < kNumDataTypes; ++i) dtypes[DataTypeName(static_cast<DataType>(i))] = i;
  m.attr("DTYPES") = dtypes;
  py::dict ops;
  for (int i = 0; i < kNumReduceOps; ++i) ops[ReduceOpName(static_cast<ReduceOp>(i))] = i;
  m.attr("REDUCE_OPS") = ops;
  py::dict op_types;
  for (int i = 0; i < kNumOpTypes; ++i) op_types[OpTypeName(static_cast<OpType>(i))] = i;
  m.attr("OP_TYPES") = op_types;
  py::list knobs;
  for (const auto& k : AllKnobs()) {
    py::dict d;
    d["name"] = k.name;
    d["default"] = k.default_value;
    d["kind"] = k.kind;
    d["description"] = k.description;
    d["must_match_across_ranks"] = k.must_match_across_ranks;
    knobs.append(d);
  }
  m.attr("KNOBS") = knobs;
  // Below this a batch is staged even in zero-copy memory (torch.distributed moves no smaller
  // buffer there: hvd_herring/torch/distributed/persistent_buffers.py).
  m.attr("ZERO_COPY_MIN_BYTES") = ZeroCopyAllreduce::kMinBytes;
  // The largest synchronous request a caller runs itself where ranks outnumber CPUs (tests pick
  // sizes on either side).
  m.attr("OVERSUBSCRIBED_CALLER_BYTES") = kOversubscribedCallerBytes;
  m.def("bool_knob", &BoolKnobFromProcessEnvironment, py::arg("name"),
        "A bool knob as this process would use it (the table's default where unset).");
  m.def("resolved_knobs", [] { return Config::FromProcessEnvironment().resolved; },
        "Every knob's value as this process would use it.");
  // This process's zero-copy memory: the Python front owns one (hvd_herring.basics), creates the
  // pool with its first tensor and hands it to every engine it creates (Engine(zero_copy=...)).
  py::class_<ZeroCopyMemory, std::shared_ptr<ZeroCopyMemory>>(m, "ZeroCopyMemory")
      .def(py::init<>())
      .def("empty",
           [](ZeroCopyMemory& memory, const std::vector<int64_t>& shape, int dtype) {
             if (!IsValidDataType(dtype)) throw Error(Status::InvalidArgument("bad dtype"));
             int64_t elements = 1;
             for (int64_t d : shape) {
               if (d < 0) throw Error(Status::InvalidArgument("zero_copy_empty: negative dimension in the shape"));
               elements *= d;
             }
             const DataType t = static_cast<DataType>(dtype);
             // The knob is read once, when the first tensor creates the pool.
             ZeroCopyPool* pool = memory.pool();
             if (pool == nullptr) pool = &memory.GetOrCreate(Config::FromProcessEnvironment().zero_copy_bytes);
             return ExportDLPack(pool->Allocate(elements * ElementSize(t)), shape, t);
           },
           py::arg("shape"), py::arg("dtype"),
           "A zeroed tensor (DLPack capsule) in this zero-copy memory; it keeps the memory alive.")
      .def("contains",
           [](const ZeroCopyMemory& memory, uintptr_t address, size_t bytes) {
             const ZeroCopyPool* pool = memory.pool();
             uint64_t offset;
             return pool != nullptr && pool->Locate(reinterpret_cast<const void*>(address), bytes, &offset);
           },
           py::arg("address"), py::arg("bytes"), "True when these bytes lie in this zero-copy memory.")
      .def("bytes_in_use", [](const ZeroCopyMemory& memory) {
        const ZeroCopyPool* pool = memory.pool();
        return pool ? pool->bytes_in_use() : size_t{0};
      });

  // Where the TensorFlow kernels find the engine (engine/engine_slot.h): the Python front owns the
  // slot and puts its engine in it; TF ops carry (address, process_identity()).
  py::class_<EngineSlot, std::shared_ptr<EngineSlot>>(m, "EngineSlot")
      .def(py::init<>())
      .def("set", &EngineSlot::Set, py::arg("engine"), py::call_guard<py::gil_scoped_release>())
      .def("clear_if", [](EngineSlot& slot, const Engine* engine) { slot.ClearIf(engine); }, py::arg("engine"),
           py::call_guard<py::gil_scoped_release>(), "Empties the slot if it still holds `engine`.")
      .def_property_readonly("engine", &EngineSlot::Get)
      .def_property_readonly("address", [](const EngineSlot& slot) { return reinterpret_cast<uintptr_t>(&slot); });
  m.def("process_identity", &ProcessIdentity,
        "This process among all processes of all machines (boot id, pid namespace, pid, start time).");

  // R2SP's arrays: contiguous float32, never converted (a converted copy would silently swallow
  // the parameters written back in place).
  using FloatArray = py::array;
  auto check_float_array = [](const FloatArray& a, const char* what, bool writable) {
    if (!a.dtype().is(py::dtype::of<float>()) || !(a.flags() & py::array::c_style) ||
        (writable && !a.writeable())) {
      throw Error(Status::InvalidArgument(std::string("R2SP: ") + what + " must be a contiguous" +
                                          (writable ? ", writable" : "") + " float32 array"));
    }
  };
  py::class_<Engine, std::shared_ptr<Engine>>(m, "Engine")
      .def(py::init([](std::vector<std::vector<int>> process_sets, int epoch,
                       std::function<std::vector<std::string>(const std::string&)> exchange, bool join,
                       std::shared_ptr<ZeroCopyMemory> zero_copy, std::map<std::string, std::string> env) {
             EngineOptions o;
             o.env = std::move(env);
             o.process_sets = std::move(process_sets);
             o.epoch = epoch;
             o.exchange = std::move(exchange);
             o.join_running_job = join;
             o.zero_copy = std::move(zero_copy);
             return std::make_shared<Engine>(std::move(o));
           }),
           py::arg("process_sets"), py::arg("epoch"), py::arg("exchange") = nullptr, py::arg("join") = false,
           py::arg("zero_copy") = nullptr, py::arg("env") = std::map<std::string, std::string>{},
           py::call_guard<py::gil_scoped_release>())
      .def("shutdown", &Engine::Shutdown, py::call_guard<py::gil_scoped_release>())
      .def("leave", &Engine::Leave, py::call_guard<py::gil_scoped_release>(),
           "Leaves the job in order while the other ranks go on (torch.distributed's semantics; "
           "shutdown() is Horovod's collective one).")
      .def("abort_job", &Engine::AbortJob, py::arg("why"), py::call_guard<py::gil_scoped_release>(),
           "This rank's process is failing (an uncaught exception): the job fails with `why` on every "
           "rank, then this rank shuts down; never called an orderly departure.")
      .def("lost_ranks", &Engine::LostRanks, py::call_guard<py::gil_scoped_release>(),
           "The ranks this rank lost (crashed, killed, aborted; not those that left in order), "
           "sorted global ranks: what an application hands to shrink_group.")
      .def("start_timeline", &Engine::StartTimeline, py::arg("path"), py::arg("mark_cycles"),
           py::call_guard<py::gil_scoped_release>())
      .def("stop_timeline", &Engine::StopTimeline, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("running", &Engine::running)
      .def_property_readonly("is_dedicated_server", &Engine::is_dedicated_server)
      .def("serve_until_shutdown",
           [](Engine& e, double timeout_seconds) -> py::object {
             Status outcome;
             bool done;
             {
               py::gil_scoped_release release;
               done = e.ServeUntilShutdown(Deadline::AfterSeconds(timeout_seconds), &outcome);
             }
             if (!done) return py::none();
             return py::str(outcome.message());
           },
           py::arg("timeout_seconds"),
           "A dedicated server's life: None while it still serves after `timeout_seconds`, else "
           "'' after an orderly end (shutdown, or it left) or the job's failure.")
      .def("request_leave", &Engine::RequestLeave, py::arg("server"),
           "Asks rank 0 to retire dedicated server `server` between two steps.")
      .def_property_readonly("rank", &Engine::rank)
      .def_property_readonly("size", &Engine::size)
      .def_property_readonly("local_rank", &Engine::local_rank)
      .def_property_readonly("local_size", &Engine::local_size)
      .def_property_readonly("cross_rank", &Engine::cross_rank)
      .def_property_readonly("cross_size", &Engine::cross_size)
      .def_property_readonly("launcher", &Engine::launcher)
      .def_property_readonly("hostnames",
                             [](const Engine& e) {
                               std::vector<std::string> h;
                               for (int r = 0; r < e.size(); ++r) h.push_back(e.topology().hostname(e.topology().host_of(r)));
                               return h;
                             })
      .def("enqueue", &EnqueueFromPython, py::arg("op_type"), py::arg("name"), py::arg("process_set"),
           py::arg("dtype"), py::arg("reduce_op"), py::arg("prescale"), py::arg("postscale"), py::arg("root"),
           py::arg("tensors"), py::arg("set_ranks") = std::vector<int32_t>(), py::arg("set_id") = -1,
           py::arg("in_program_order") = false, py::arg("waiter_follows") = false)
      .def("enqueue_one", &EnqueueOne, py::arg("op_type"), py::arg("name"), py::arg("process_set"), py::arg("dtype"),
           py::arg("reduce_op"), py::arg("prescale"), py::arg("postscale"), py::arg("root"), py::arg("input"),
           py::arg("output"), py::arg("shape"), py::arg("waiter_follows") = false, py::arg("in_program_order") = false)
      .def(
          "enqueue_one_work",
          [](std::shared_ptr<Engine> e, py::object keep_alive, py::object result, int op_type, const std::string& name,
             int process_set, int dtype, int reduce_op, double prescale, double postscale, int root,
             uintptr_t input, uintptr_t output, std::vector<int64_t> shape, py::object finish, bool in_program_order,
             bool waiter_follows) {
            // enqueue_one and a Work holding its handle in one call: Horovod's allreduce_async_
            // is called per gradient, and each crossing into C++ costs about as much as the
            // engine's own work for a small tensor. torch.distributed's collectives come here too
            // (in program order; a synchronous one's waiter runs the cycle).
            auto work = std::make_shared<Work>(e, std::move(keep_alive), std::move(result), std::move(finish));
            work->Add(EnqueueOne(*e, op_type, name, process_set, dtype, reduce_op, prescale, postscale, root, input,
                                 output, std::move(shape), waiter_follows, in_program_order),
                      dtype, {});
            return work;
          },
          py::arg("keep_alive"), py::arg("result"), py::arg("op_type"), py::arg("name"), py::arg("process_set"),
          py::arg("dtype"), py::arg("reduce_op"), py::arg("prescale"), py::arg("postscale"), py::arg("root"),
          py::arg("input"), py::arg("output"), py::arg("shape"), py::arg("finish") = py::none(),
          py::arg("in_program_order") = false, py::arg("waiter_follows") = false,
          "One tensor: enqueues it and returns its _native.Work (output 0: the engine allocates it, and "
          "`finish` turns it into the caller's object).")
      .def("run_one", &RunOne, py::arg("tensor"), py::arg("output"), py::arg("op_type"), py::arg("name"),
           py::arg("process_set"), py::arg("dtype"), py::arg("reduce_op"), py::arg("prescale"), py::arg("postscale"),
           py::arg("root"), py::arg("input"), py::arg("output_address"), py::arg("shape"),
           "A synchronous collective of one tensor whose output the caller provided (hvd.allreduce, "
           "allreduce_, broadcast, broadcast_): enqueued for the calling thread to run, waited for without "
           "the GIL, and its value returned, in one call and without a Work. Raises the request's error.")
      .def("wait", &WaitSimple, py::arg("handle"), py::arg("timeout_seconds") = -1.0)
      .def("poll", &Engine::Poll)
      .def(
          "missing_ranks",
          [](Engine& e, int64_t handle, double timeout_seconds) {
            py::gil_scoped_release release;
            return e.MissingRanks(handle, Deadline::AfterSeconds(timeout_seconds));
          },
          py::arg("handle"), py::arg("timeout_seconds"),
          "The members (global ranks) that have not submitted the collective `handle` waits for, as rank 0 "
          "sees it; None if that is not known within `timeout_seconds` (for a wait that timed out).")
      .def("wait_and_take", &WaitAndTake, py::arg("handle"), py::arg("timeout_seconds") = -1.0,
           py::arg("dtype") = 0)
      .def("process_set_ids", &Engine::ProcessSetIds)
      .def("process_set_ranks", &Engine::ProcessSetRanks)
      .def("server_layout",
           [](const Engine& e, int32_t id) {
             ServerLayout l = e.ProcessSetServers(id);
             py::dict d;
             d["shard_ranks"] = l.shard_rank;
             d["dedicated"] = l.dedicated;
             d["weights"] = l.map.weights();
             d["version"] = l.map.version();
             return d;
           },
           py::arg("process_set") = 0)
      .def("r2sp_begin",
           [check_float_array](Engine& e, FloatArray initial, double lr, double momentum, double weight_decay) {
             check_float_array(initial, "the initial parameters", false);
             const float* data = static_cast<const float*>(initial.data());
             const int64_t n = static_cast<int64_t>(initial.size());
             py::gil_scoped_release release;
             return e.R2spBegin(data, n, lr, momentum, weight_decay);
           },
           py::arg("initial"), py::arg("lr"), py::arg("momentum") = 0.0, py::arg("weight_decay") = 0.0,
           "R2SP training mode: hands the flat float32 parameters to the server shards; returns the session.")
      .def("r2sp_step",
           [check_float_array](Engine& e, uint32_t session, FloatArray grad, FloatArray params) {
             check_float_array(grad, "the gradient", false);
             check_float_array(params, "the parameters", true);
             if (params.size() != grad.size()) {
               throw Error(Status::InvalidArgument("R2SP step: gradient and parameters differ in size"));
             }
             const float* g = static_cast<const float*>(grad.data());
             float* p = static_cast<float*>(params.mutable_data());
             const int64_t n = static_cast<int64_t>(grad.size());
             py::gil_scoped_release release;
             e.R2spStep(session, g, p, n);
           },
           py::arg("session"), py::arg("grad"), py::arg("params"),
           "This worker's turn: pushes `grad`, pulls the parameters it produced into `params` (in place).")
      .def("r2sp_end", &Engine::R2spEnd, py::arg("session"), py::call_guard<py::gil_scoped_release>())
      .def("counters", &Engine::CountersSnapshot)
      .def("failure", [](const Engine& e) { return e.failure().message(); });
  BindP2p(m);
  BindWork(m);
}
