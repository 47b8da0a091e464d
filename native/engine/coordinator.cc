#include "engine/coordinator.h"

#include <algorithm>
#include <functional>
#include <sstream>

namespace herring {

std::string RankList(const std::vector<int>& ranks) {
  std::ostringstream s;
  s << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? ", " : "") << ranks[i];
  return s.str();
}

namespace {

// "ranks 0, 2 have [2, 3]; rank 1 has [4]": who has which value, for an error message.
template <typename T>
std::string WhoHasWhat(const std::vector<RequestMeta>& reqs, std::function<T(const RequestMeta&)> value,
                       std::function<std::string(const T&)> show) {
  std::vector<std::pair<T, std::vector<int>>> groups;
  for (const auto& q : reqs) {
    T v = value(q);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) {
      groups.push_back({v, {q.rank}});
    } else {
      it->second.push_back(q.rank);
    }
  }
  std::ostringstream s;
  for (size_t i = 0; i < groups.size(); ++i) {
    s << (i ? "; " : "") << RankList(groups[i].second) << (groups[i].second.size() == 1 ? " has " : " have ")
      << show(groups[i].first);
  }
  return s.str();
}

template <typename T>
bool AllEqual(const std::vector<RequestMeta>& reqs, std::function<T(const RequestMeta&)> value) {
  for (const auto& q : reqs) {
    if (!(value(q) == value(reqs[0]))) return false;
  }
  return true;
}

std::string Quoted(const std::string& name) { return "'" + name + "'"; }

std::string TensorLabel(const RequestMeta& q, size_t t) {
  if (q.tensors.size() <= 1) return "tensor " + Quoted(q.name);
  return "tensor " + std::to_string(t) + " of group " + Quoted(q.name);
}

}  // namespace

Response AgreeOnRequests(const std::vector<RequestMeta>& reqs, const ProcessSet& set,
                         const std::set<int>& joined) {
  const RequestMeta& first = reqs.front();
  Response r;
  r.type = first.type;
  r.name = first.name;
  r.process_set = first.process_set;
  r.dtype = first.dtype;
  r.reduce_op = first.reduce_op;
  r.prescale = first.prescale;
  r.postscale = first.postscale;
  r.root = first.root;
  r.set_ranks = first.set_ranks;
  r.set_id = first.set_id;
  for (int j : joined) {
    if (set.contains(j)) r.joined.push_back(j);
  }
  const std::string what = OpTypeName(first.type) + std::string(" ") + Quoted(first.name);

  auto fail = [&](const std::string& message) {
    r.error = message;
    return r;
  };

  if (!AllEqual<OpType>(reqs, [](const RequestMeta& q) { return q.type; })) {
    return fail("Mismatched collective operations for " + Quoted(first.name) + ": " +
                WhoHasWhat<OpType>(reqs, [](const RequestMeta& q) { return q.type; },
                                   [](const OpType& t) { return std::string(OpTypeName(t)); }));
  }
  if (!AllEqual<DataType>(reqs, [](const RequestMeta& q) { return q.dtype; })) {
    return fail("Mismatched data types for " + what + ": " +
                WhoHasWhat<DataType>(reqs, [](const RequestMeta& q) { return q.dtype; },
                                     [](const DataType& t) { return std::string(DataTypeName(t)); }));
  }
  if (!AllEqual<ReduceOp>(reqs, [](const RequestMeta& q) { return q.reduce_op; })) {
    return fail("Mismatched reduction operations for " + what + ": " +
                WhoHasWhat<ReduceOp>(reqs, [](const RequestMeta& q) { return q.reduce_op; },
                                     [](const ReduceOp& o) { return std::string(ReduceOpName(o)); }));
  }
  auto show_double = [](const double& d) { std::ostringstream s; s << d; return s.str(); };
  if (!AllEqual<double>(reqs, [](const RequestMeta& q) { return q.prescale; })) {
    return fail("Mismatched prescale factors for " + what + ": " +
                WhoHasWhat<double>(reqs, [](const RequestMeta& q) { return q.prescale; }, show_double));
  }
  if (!AllEqual<double>(reqs, [](const RequestMeta& q) { return q.postscale; })) {
    return fail("Mismatched postscale factors for " + what + ": " +
                WhoHasWhat<double>(reqs, [](const RequestMeta& q) { return q.postscale; }, show_double));
  }
  if (!AllEqual<int32_t>(reqs, [](const RequestMeta& q) { return q.root; })) {
    return fail("Mismatched broadcast root ranks for " + what + ": " +
                WhoHasWhat<int32_t>(reqs, [](const RequestMeta& q) { return q.root; },
                                    [](const int32_t& v) { return std::to_string(v); }));
  }
  if (!AllEqual<size_t>(reqs, [](const RequestMeta& q) { return q.tensors.size(); })) {
    return fail("Mismatched group sizes for " + what + ": " +
                WhoHasWhat<size_t>(reqs, [](const RequestMeta& q) { return q.tensors.size(); },
                                   [](const size_t& n) { return std::to_string(n) + " tensors"; }));
  }
  if (!AllEqual<std::vector<int32_t>>(reqs, [](const RequestMeta& q) { return q.set_ranks; })) {
    return fail("Mismatched process sets for " + what + ": " +
                WhoHasWhat<std::vector<int32_t>>(
                    reqs, [](const RequestMeta& q) { return q.set_ranks; },
                    [](const std::vector<int32_t>& v) {
                      return ShapeToString(std::vector<int64_t>(v.begin(), v.end()));
                    }));
  }
  if (!AllEqual<int32_t>(reqs, [](const RequestMeta& q) { return q.set_id; })) {
    return fail("Mismatched process set ids for " + what + ": " +
                WhoHasWhat<int32_t>(reqs, [](const RequestMeta& q) { return q.set_id; },
                                    [](const int32_t& v) { return std::to_string(v); }));
  }

  // Horovod's contract: while some ranks have joined, only allreduce (and barrier) run, the joined
  // ranks contributing neutral data; every other collective fails on the ranks that submitted it
  // and the job goes on (Horovod's own suites check exactly that).
  const bool needs_every_rank = r.type == OpType::kAllgather || r.type == OpType::kBroadcast ||
                                r.type == OpType::kAlltoall || r.type == OpType::kReducescatter;
  if (needs_every_rank && !r.joined.empty()) {
    std::string hint = r.type == OpType::kAllgather
                           ? " (DistributedOptimizer: pass sparse_as_dense=True so sparse gradients are allreduced)"
                           : "";
    return fail(std::string(OpTypeName(r.type)) + " " + Quoted(first.name) + " cannot run while " +
                RankList(r.joined) + (r.joined.size() == 1 ? " has" : " have") +
                " joined: only allreduce and barrier are supported with join" + hint);
  }

  const size_t ntensors = first.tensors.size();
  r.shapes.resize(ntensors);
  if (r.type == OpType::kAllgather) r.per_member.assign(ntensors, std::vector<int64_t>(set.size(), 0));
  if (r.type == OpType::kAlltoall) r.per_member.assign(set.size(), std::vector<int64_t>());
  for (size_t t = 0; t < ntensors; ++t) {
    auto shape_of = [t](const RequestMeta& q) { return q.tensors[t].shape; };
    auto show_shape = [](const std::vector<int64_t>& s) { return ShapeToString(s); };
    switch (r.type) {
      case OpType::kAllgather:
      case OpType::kAlltoall: {
        // Only the first dimension may differ between ranks.
        auto trailing = [t](const RequestMeta& q) {
          const auto& s = q.tensors[t].shape;
          return std::vector<int64_t>(s.begin() + (s.empty() ? 0 : 1), s.end());
        };
        if (!AllEqual<size_t>(reqs, [t](const RequestMeta& q) { return q.tensors[t].shape.size(); }) ||
            !AllEqual<std::vector<int64_t>>(reqs, trailing)) {
          return fail(std::string("Mismatched ") + OpTypeName(r.type) + " tensor shapes for " +
                      TensorLabel(first, t) + " (only the first dimension may differ): " +
                      WhoHasWhat<std::vector<int64_t>>(reqs, shape_of, show_shape));
        }
        r.shapes[t] = first.tensors[t].shape;
        for (const auto& q : reqs) {
          int m = set.member_index(q.rank);
          if (r.type == OpType::kAllgather) {
            r.per_member[t][m] = q.tensors[t].shape.empty() ? 0 : q.tensors[t].shape[0];
          } else {
            r.per_member[m] = q.tensors[t].splits;
          }
        }
        break;
      }
      default:
        if (!AllEqual<std::vector<int64_t>>(reqs, shape_of)) {
          return fail(std::string("Mismatched ") + OpTypeName(r.type) + " tensor shapes for " +
                      TensorLabel(first, t) + ": " +
                      WhoHasWhat<std::vector<int64_t>>(reqs, shape_of, show_shape));
        }
        r.shapes[t] = first.tensors[t].shape;
    }
  }
  return r;
}

Coordinator::Coordinator(int world_size, const ProcessSetTable* sets)
    : world_size_(world_size), sets_(sets) {}

void Coordinator::Submit(const RequestMeta& request) {
  if (request.type == OpType::kLeave) {
    // Only the leaving rank submits it: decided at once, announced to every rank this cycle.
    Response r;
    r.type = OpType::kLeave;
    r.name = request.name;
    r.process_set = 0;
    r.root = request.rank;
    ready_.push_back(r);
    return;
  }
  if (request.type == OpType::kJoin) {
    joined_.insert(request.rank);
    last_joined_ = request.rank;
    if (static_cast<int>(joined_.size()) == world_size_) {
      Response r;
      r.type = OpType::kJoin;
      r.name = request.name;
      r.process_set = 0;
      r.root = last_joined_;
      for (int j : joined_) r.joined.push_back(j);
      ready_.push_back(r);
      joined_.clear();
      last_joined_ = -1;
    }
    return;
  }
  Key key{request.process_set, request.name};
  auto it = table_.find(key);
  // The age of an entry counts from the earliest submission, including the time a request
  // spent as a cached hit on its rank before it was sent here (no clocks compared across hosts).
  const auto submitted = std::chrono::steady_clock::now() - std::chrono::milliseconds(request.waited_ms);
  if (it == table_.end()) {
    it = table_.emplace(key, Entry{}).first;
    it->second.first_seen = submitted;
    arrival_.push_back(key);
  }
  it->second.first_seen = std::min(it->second.first_seen, submitted);
  if (it->second.by_rank.count(request.rank)) {
    // The submitting rank guards against duplicate in-flight names, so this is a protocol bug.
    Response r;
    r.type = request.type;
    r.name = request.name;
    r.process_set = request.process_set;
    r.error = "rank " + std::to_string(request.rank) + " submitted " + Quoted(request.name) +
              " twice before it completed";
    ready_.push_back(r);
    return;
  }
  it->second.by_rank[request.rank] = request;
}

bool Coordinator::Complete(const Entry& e, const ProcessSet& set) const {
  if (e.by_rank.empty()) return false;
  for (int r : set.ranks) {
    if (!e.by_rank.count(r) && !joined_.count(r)) return false;
  }
  return true;
}

Response Coordinator::Build(const Key& key, const Entry& e, const ProcessSet& set) const {
  std::vector<RequestMeta> reqs;
  for (const auto& kv : e.by_rank) reqs.push_back(kv.second);
  return AgreeOnRequests(reqs, set, joined_);
}

std::vector<Response> Coordinator::TakeReady() {
  std::vector<Response> out = std::move(ready_);
  ready_.clear();
  std::vector<Key> still_waiting;
  for (const Key& key : arrival_) {
    auto it = table_.find(key);
    if (it == table_.end()) continue;
    const ProcessSet* set = sets_->Find(key.first);
    if (set == nullptr) {
      Response r;
      r.type = it->second.by_rank.begin()->second.type;
      r.name = key.second;
      r.process_set = key.first;
      r.error = "process set " + std::to_string(key.first) + " does not exist (was it removed?)";
      out.push_back(r);
      table_.erase(it);
      continue;
    }
    if (Complete(it->second, *set)) {
      out.push_back(Build(key, it->second, *set));
      table_.erase(it);
    } else {
      still_waiting.push_back(key);
    }
  }
  arrival_ = std::move(still_waiting);
  return out;
}

std::vector<Coordinator::Waiting> Coordinator::Entries() const {
  std::vector<Waiting> out;
  for (const Key& key : arrival_) {
    auto it = table_.find(key);
    if (it == table_.end()) continue;
    Waiting w{key.first, key.second, it->second.by_rank.begin()->second.type, {}, {}};
    for (const auto& kv : it->second.by_rank) w.submitted.push_back(kv.first);
    if (const ProcessSet* set = sets_->Find(key.first)) {
      for (int r : set->ranks) {
        if (!it->second.by_rank.count(r) && !joined_.count(r)) w.missing.push_back(r);
      }
    }
    out.push_back(std::move(w));
  }
  return out;
}

void Coordinator::FailEntries(const std::vector<std::pair<int32_t, std::string>>& keys, bool fail_join,
                              const std::string& error) {
  for (const Key& key : keys) {
    auto it = table_.find(key);
    if (it == table_.end()) continue;
    Response r;
    r.type = it->second.by_rank.begin()->second.type;
    r.name = key.second;
    r.process_set = key.first;
    r.error = error;
    ready_.push_back(r);
    table_.erase(it);
    arrival_.erase(std::remove(arrival_.begin(), arrival_.end(), key), arrival_.end());
  }
  if (fail_join && !joined_.empty()) {
    Response r;
    r.type = OpType::kJoin;
    r.name = "join";
    r.process_set = 0;
    r.error = error;
    ready_.push_back(r);
    joined_.clear();
    last_joined_ = -1;
  }
}

void Coordinator::ForgetSetsWith(int rank) {
  std::vector<Key> kept;
  for (const Key& key : arrival_) {
    const ProcessSet* set = sets_->Find(key.first);
    if (set != nullptr && set->contains(rank)) {
      table_.erase(key);
    } else {
      kept.push_back(key);
    }
  }
  arrival_ = std::move(kept);
}

std::vector<Coordinator::Stalled> Coordinator::StalledEntries(double min_age_seconds) const {
  std::vector<Stalled> out;
  auto now = std::chrono::steady_clock::now();
  for (const Key& key : arrival_) {
    auto it = table_.find(key);
    if (it == table_.end()) continue;
    double age = std::chrono::duration<double>(now - it->second.first_seen).count();
    if (age < min_age_seconds) continue;
    Stalled s{key.second, key.first, {}, age};
    if (const ProcessSet* set = sets_->Find(key.first)) {
      for (int r : set->ranks) {
        if (!it->second.by_rank.count(r) && !joined_.count(r)) s.missing_ranks.push_back(r);
      }
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace herring
