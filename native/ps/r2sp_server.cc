#include "ps/r2sp_server.h"

#include <sstream>

#include "common/logging.h"
#include "ops/collective.h"

namespace herring {

void R2spApplyUpdate(const R2spSessionSpec& spec, const float* grad, float* params, float* velocity, int64_t n) {
  const float lr = static_cast<float>(spec.lr);
  const float momentum = static_cast<float>(spec.momentum);
  const float decay = static_cast<float>(spec.weight_decay);
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (decay != 0.0f) g = g + decay * params[i];
    if (momentum != 0.0f) {
      velocity[i] = momentum * velocity[i] + g;
      g = velocity[i];
    }
    params[i] = params[i] - lr * g;
  }
}

R2spServer::R2spServer(TcpTransport* transport, R2spSessionSpec spec, Options options,
                       std::function<void(const Status&)> fail)
    : transport_(transport), spec_(std::move(spec)), options_(options), fail_(std::move(fail)) {
  for (const auto& range : spec_.shards) {
    ShardState s;
    s.range = range;
    const auto n = static_cast<size_t>(range.end - range.begin);
    s.params.resize(n);
    s.grad.resize(n);
    if (spec_.momentum != 0) s.velocity.assign(n, 0.0f);
    shards_.push_back(std::move(s));
  }
  thread_ = std::thread([this] { Run(); });
}

R2spServer::~R2spServer() { Stop(); }

void R2spServer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::string R2spServer::Describe(int rank, uint64_t step) const {
  std::ostringstream out;
  out << "R2SP session " << spec_.id << ", server shard";
  if (shards_.size() > 1) out << "s";
  for (size_t i = 0; i < shards_.size(); ++i) out << (i ? "," : "") << " " << shards_[i].range.shard;
  out << " (rank " << transport_->rank() << "), rank " << rank << "'s ";
  if (step == 0) {
    out << "initial parameters";
  } else {
    out << "push of step " << step;
  }
  return out.str();
}

bool R2spServer::Await(const std::vector<CompletionPtr>& transfers, int rank, uint64_t step, const char* what) {
  const auto started = Clock::now();
  bool warned = false;
  while (true) {
    Status s = WaitAll(transfers, Deadline::AfterSeconds(0.2));
    if (s.ok()) return true;
    bool failed = false;
    for (const auto& t : transfers) {
      if (t->done() && !t->status().ok()) {
        s = t->status();
        failed = true;
        break;
      }
    }
    if (failed || s.code() != StatusCode::kTimeout) {
      throw Error(Status(s.code(), Describe(rank, step) + ": " + what + " failed: " + s.message()));
    }
    if (stop_) return false;
    const double waited = std::chrono::duration<double>(Clock::now() - started).count();
    // A worker that does not take its turn holds up everyone after it: say who, as the stall
    // inspector does for collectives.
    if (!warned && waited >= options_.stall_warning_seconds) {
      warned = true;
      HLOG(Warning) << Describe(rank, step) << ": waited " << static_cast<int>(waited)
                    << " s; every worker after it in the turn order waits too";
    }
    if (options_.stall_shutdown_seconds > 0 && waited >= options_.stall_shutdown_seconds) {
      throw Error(Status::Timeout(Describe(rank, step) + " did not arrive within " +
                                  std::to_string(static_cast<int>(options_.stall_shutdown_seconds)) +
                                  " s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS): shutting the job down"));
    }
  }
}

void R2spServer::Run() {
  try {
    std::vector<CompletionPtr> transfers;
    for (auto& s : shards_) {
      transfers.push_back(transport_->Recv(options_.initial_from, MakeR2spTag(0, spec_.id, s.range.shard, false),
                                           s.params.data(), s.params.size() * sizeof(float)));
    }
    if (!Await(transfers, options_.initial_from, 0, "receiving")) return;
    for (uint64_t step = 1;; ++step) {
      for (size_t turn = 0; turn < spec_.workers.size(); ++turn) {
        const int worker = spec_.workers[turn];
        transfers.clear();
        for (auto& s : shards_) {
          transfers.push_back(transport_->Recv(worker, MakeR2spTag(step, spec_.id, s.range.shard, false),
                                               s.grad.data(), s.grad.size() * sizeof(float)));
        }
        if (!Await(transfers, worker, step, "receiving")) {
          // Ended in the middle of a round: the workers took different numbers of steps, and the
          // later ones' last gradients were never applied. Not silently.
          if (turn > 0) {
            HLOG(Warning) << Describe(worker, step) << " never came: the session ended after rank "
                          << spec_.workers[turn - 1] << " took " << step << " steps and rank " << worker << " "
                          << step - 1 << " (every worker should take the same number of steps)";
          }
          return;
        }
        transfers.clear();
        for (auto& s : shards_) {
          R2spApplyUpdate(spec_, s.grad.data(), s.params.data(), s.velocity.empty() ? nullptr : s.velocity.data(),
                          static_cast<int64_t>(s.params.size()));
          transfers.push_back(transport_->Send(worker, MakeR2spTag(step, spec_.id, s.range.shard, true),
                                               s.params.data(), s.params.size() * sizeof(float)));
        }
        ++updates_;
        // The next update rewrites these parameters: their pull must have left first.
        if (!Await(transfers, worker, step, "sending the parameters back")) return;
      }
    }
  } catch (const Error& e) {
    if (!stop_) fail_(e.status());
  }
}

}  // namespace herring
