#include "ps/r2sp_server.h"

#include <algorithm>
#include <sstream>

#include "common/logging.h"
#include "common/thread_name.h"
#include "runtime/collective.h"

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

std::vector<ElementRange> R2spChunks(const R2spShardRange& range) {
  constexpr int64_t kMinChunkElements = (1 << 20) / sizeof(float);
  const int64_t n = range.end - range.begin;
  int64_t chunk = std::max<int64_t>(kMinChunkElements, (n + kMaxR2spChunks - 1) / kMaxR2spChunks);
  chunk = (chunk + 15) / 16 * 16;  // 64-byte boundaries
  std::vector<ElementRange> out;
  for (int64_t begin = 0; begin < n; begin += chunk) out.push_back({begin, std::min(n, begin + chunk)});
  if (out.empty()) out.push_back({0, 0});
  return out;
}

R2spServer::R2spServer(Transport* transport, R2spSessionSpec spec, Options options,
                       std::function<void(const Status&)> fail)
    : transport_(transport), spec_(std::move(spec)), options_(options), fail_(std::move(fail)) {
  for (const auto& range : spec_.shards) {
    ShardState s;
    s.range = range;
    s.chunks = R2spChunks(range);
    const auto n = static_cast<size_t>(range.end - range.begin);
    s.params.resize(n);
    s.grad.resize(n);
    s.outgoing.resize(spec_.workers.size());
    if (spec_.momentum != 0) s.velocity.assign(n, 0.0f);
    shards_.push_back(std::move(s));
  }
  thread_ = std::thread([this] { Run(); });
  NameThread(thread_, "herring-r2sp");
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
    // A Timeout may be this slice running out, or a transfer the job's abort failed with a
    // timeout's status (a stalled turn elsewhere): only the latter leaves a transfer done.
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
      transfers.push_back(transport_->Recv(options_.initial_from, MakeR2spTag(0, spec_.id, s.range.shard, 0, false),
                                           s.params.data(), s.params.size() * sizeof(float)));
    }
    if (!Await(transfers, options_.initial_from, 0, "receiving")) return;
    std::vector<std::vector<CompletionPtr>> pulls(spec_.workers.size());  // in flight, per turn
    for (uint64_t step = 1;; ++step) {
      for (size_t turn = 0; turn < spec_.workers.size(); ++turn) {
        const int worker = spec_.workers[turn];
        transfers.clear();
        for (auto& s : shards_) {
          for (uint32_t c = 0; c < s.chunks.size(); ++c) {
            transfers.push_back(transport_->Recv(worker, MakeR2spTag(step, spec_.id, s.range.shard, c, false),
                                                 s.grad.data() + s.chunks[c].begin, s.chunks[c].size() * sizeof(float)));
          }
        }
        if (!Await({transfers[0]}, worker, step, "receiving")) {
          // Ended in the middle of a round: the workers took different numbers of steps, and the
          // later ones' last gradients were never applied. Not silently.
          if (turn > 0) {
            HLOG(Warning) << Describe(worker, step) << " never came: the session ended after rank "
                          << spec_.workers[turn - 1] << " took " << step << " steps and rank " << worker << " "
                          << step - 1 << " (every worker should take the same number of steps)";
          }
          return;
        }
        // Each worker's pull leaves from a copy of its own, so the next turn's update need not
        // wait for it: with every shard answering the same worker at once, that worker's link
        // sets the pace of a pull, and the shards' links would idle through it. The copy is
        // reused a round later, when its previous pull has long left.
        std::vector<CompletionPtr>& previous = pulls[turn];
        if (!Await(previous, worker, step - 1, "sending the parameters back")) return;
        previous.clear();
        size_t next = 0;
        for (auto& s : shards_) {
          std::vector<float>& out = s.outgoing[turn];
          out.resize(s.params.size());
          // Chunk by chunk, in arrival order's likely order: the pull of a chunk leaves while
          // the next one is still being pushed.
          for (uint32_t c = 0; c < s.chunks.size(); ++c) {
            if (!Await({transfers[next++]}, worker, step, "receiving")) return;
            const ElementRange& k = s.chunks[c];
            R2spApplyUpdate(spec_, s.grad.data() + k.begin, s.params.data() + k.begin,
                            s.velocity.empty() ? nullptr : s.velocity.data() + k.begin, k.size());
            std::copy(s.params.begin() + k.begin, s.params.begin() + k.end, out.begin() + k.begin);
            previous.push_back(transport_->Send(worker, MakeR2spTag(step, spec_.id, s.range.shard, c, true),
                                                out.data() + k.begin, k.size() * sizeof(float)));
          }
        }
      }
    }
  } catch (const Error& e) {
    if (!stop_) fail_(e.status());
  }
}

}  // namespace herring
