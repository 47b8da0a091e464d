// Execution of the responses of one cycle: fuse allreduces into balanced buffers, hand each unit
// to the operation manager, complete the handles. Every rank sees the same response list, so the
// fusion decisions (and the tags derived from them) are identical on every member.
#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "engine/engine.h"
#include "kernels/hash.h"
#include "kernels/integer_average.h"
#include "ops/verify.h"

namespace herring {
namespace {

// An integer Average runs as the int64 Sum of each element's quotient and remainder by n
// (kernels/integer_average.h): the quotients of the fused layout, then its remainders. Members
// and dedicated servers lay it out alike; `split` null: the layout only (a server).
void LayOutAverageSplit(int64_t total, int64_t* split, AllreduceBatch* batch) {
  batch->dtype = DataType::kInt64;
  batch->op = ReduceOp::kSum;
  batch->prescale = batch->postscale = 1.0;
  batch->entries.clear();
  for (int64_t* half : {split, split ? split + total : nullptr}) batch->entries.push_back({half, half, total});
}

bool Fusable(const Response& a, const Response& b) {
  return b.ok() && b.type == OpType::kAllreduce && a.process_set == b.process_set && a.dtype == b.dtype &&
         a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.joined == b.joined;
}

}  // namespace

ExecContext Engine::MakeContext(ProcessSet& set, uint32_t unit) {
  return ExecContext{cycle_config_, *transport_, set, topo_, rank(), MakeTagBase(cycle_, unit), counters_,
                     [this] { return CheckAbort(); }, timeline_.get(), "", &faults_, zero_copy_.get()};
}

void Engine::Execute(const std::vector<Response>& ready, const CarriedWithBits& with_bits) {
  if (autotuner_) {
    for (const Response& r : ready) {
      const ProcessSet* set = sets_.Find(r.process_set);
      if (r.ok() && set != nullptr && set->contains(rank())) ObserveForAutotune(r);
    }
  }
  std::vector<bool>& done = fused_;
  done.assign(ready.size(), false);
  const size_t threshold = static_cast<size_t>(cycle_config_.fusion_threshold_bytes);
  for (size_t i = 0; i < ready.size(); ++i) {
    if (done[i]) continue;
    done[i] = true;
    const Response& r = ready[i];
    const uint32_t unit = static_cast<uint32_t>(i);  // the same on every rank
    if (r.type == OpType::kLeave) continue;  // applied around execution (departures.cc)
    // Process-set changes and join concern every rank; the rest only the members.
    if (r.type == OpType::kAddProcessSet || r.type == OpType::kRemoveProcessSet || r.type == OpType::kJoin) {
      ExecuteOne(r, unit);
      continue;
    }
    const ProcessSet* set = sets_.Find(r.process_set);
    if (set == nullptr) continue;
    const bool member = set->contains(rank());
    const bool serves = is_dedicated_server() && set->servers.dedicated && set->hosts.size() > 1;
    if (!member && !(serves && r.ok() && r.type == OpType::kAllreduce)) continue;
    if (!r.ok() || r.type != OpType::kAllreduce) {
      ExecuteOne(r, unit);
      continue;
    }
    std::vector<const Response*>& batch = fusion_;
    batch.assign(1, &r);
    size_t bytes = TensorBytes(r);
    if (threshold > 0) {
      for (size_t j = i + 1; j < ready.size(); ++j) {
        if (done[j] || !Fusable(r, ready[j])) continue;
        size_t more = TensorBytes(ready[j]);
        if (bytes + more > threshold) continue;
        batch.push_back(&ready[j]);
        bytes += more;
        done[j] = true;
      }
    }
    if (member) {
      ExecuteAllreduceBatch(batch, unit, with_bits);
    } else {
      ServeAllreduceBatch(batch, unit);
    }
  }
}

void Engine::ServeAllreduceBatch(const std::vector<const Response*>& responses, uint32_t unit) {
  // The same fusion every member computed, with no tensors: a server needs the layout only.
  const Response& first = *responses.front();
  ProcessSet& set = *sets_.Find(first.process_set);
  AllreduceBatch batch;
  batch.dtype = first.dtype;
  batch.op = ExecutedOp(first.reduce_op);
  for (const Response* r : responses) {
    for (const auto& shape : r->shapes) batch.entries.push_back({nullptr, nullptr, NumElements(shape)});
    batch.label += (batch.label.empty() ? "" : ", ") + r->name;
  }
  if (IsIntegerAverage(first.dtype, first.reduce_op)) LayOutAverageSplit(batch.total_count(), nullptr, &batch);
  ExecContext ctx = MakeContext(set, unit);
  ctx.lane = "served: allreduce." + first.name + (responses.size() > 1 ? " +" + std::to_string(responses.size() - 1) : "");
  TimelinePhase phase(timeline_.get(), ctx.lane, "SERVE");
  ops_->ServeAllreduce(ctx, batch);
}

Engine::Pending* Engine::FindPending(const Response& r) {
  auto it = pending_.find({r.process_set, r.name});
  if (it != pending_.end()) return &it->second;
  if (joined_) return nullptr;  // a joined rank takes part with neutral data
  throw Error(Status::Internal("rank " + std::to_string(rank()) + " was asked to execute " + OpTypeName(r.type) +
                               " '" + r.name + "' that it never submitted"));
}

void Engine::Finish(const Response& r, OpResult result) {
  auto it = pending_.find({r.process_set, r.name});
  if (it == pending_.end()) return;
  last_activity_ = Clock::now();
  int64_t handle = it->second.handle;
  pending_.erase(it);
  {
    // Free the name before waking the adapter, which may submit the same name right away.
    std::lock_guard<std::mutex> lock(queue_mu_);
    ReleaseNameLocked(Key{r.process_set, r.name});
  }
  handles_.Complete(handle, std::move(result));
}

void Engine::FinishSucceeded(const std::vector<const Response*>& responses) {
  std::vector<int64_t>& handles = finished_handles_;
  handles.clear();
  {
    // The names are the adapters' too (queue_mu_); pending_ is the loop's own.
    std::lock_guard<std::mutex> lock(queue_mu_);
    for (const Response* r : responses) {
      auto it = pending_.find({r->process_set, r->name});
      if (it == pending_.end()) continue;  // a joined rank's neutral part
      handles.push_back(it->second.handle);
      ReleaseNameLocked(it->first);
      spare_pending_ = pending_.extract(it);  // its node serves the next request taken
    }
  }
  if (handles.empty()) return;
  last_activity_ = Clock::now();
  handles_.CompleteAll(handles);
}

void Engine::ReleaseNameLocked(const Key& key) {
  // The name is free again, or passes to the request held behind it (program order), which the
  // loop takes with its next cycle.
  auto held = held_.find(key);
  if (held == held_.end()) {
    auto node = in_flight_.extract(key);
    if (!node.empty()) spare_name_ = std::move(node);  // serves the next name enqueued
    return;
  }
  incoming_.push_back(std::move(held->second.front()));
  held->second.pop_front();
  if (held->second.empty()) held_.erase(held);
}

bool Engine::HeldRequestAwaited(const Key& key) const {
  std::lock_guard<std::mutex> lock(queue_mu_);
  auto held = held_.find(key);
  if (held == held_.end()) return false;
  for (const auto& item : held->second) {
    if (handles_.Awaited(item.second)) return true;
  }
  return false;
}

void Engine::ExecuteAllreduceBatch(const std::vector<const Response*>& responses, uint32_t unit,
                                   const CarriedWithBits& with_bits) {
  const Response& first = *responses.front();
  ProcessSet& set = *sets_.Find(first.process_set);
  AllreduceBatch& batch = fusion_batch_;
  batch.dtype = first.dtype;
  batch.op = ExecutedOp(first.reduce_op);
  batch.prescale = first.prescale;
  batch.postscale = ExecutedPostscale(first.reduce_op, first.postscale, set.size());
  batch.entries.clear();
  batch.label.clear();
  const size_t esz = ElementSize(first.dtype);

  // A joined rank contributes zeros and discards the result. Each request is looked up once.
  std::vector<Pending*>& requests = fusion_requests_;
  requests.clear();
  size_t missing = 0;
  for (const Response* r : responses) {
    requests.push_back(FindPending(*r));
    if (requests.back() == nullptr) missing += TensorBytes(*r);
  }
  uint8_t* zeros = nullptr;
  uint8_t* sink = nullptr;
  if (missing) {
    zeros = joined_zeros_.Get(missing);
    std::memset(zeros, 0, missing);
    sink = joined_sink_.Get(missing);
  }
  size_t sink_offset = 0;
  batch.entries.reserve(responses.size());
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response* r = responses[i];
    Pending* p = requests[i];
    for (size_t t = 0; t < r->shapes.size(); ++t) {
      int64_t count = NumElements(r->shapes[t]);
      if (p) {
        batch.entries.push_back({p->request.buffers[t].input, p->request.buffers[t].output, count});
      } else {
        batch.entries.push_back({zeros + sink_offset, sink + sink_offset, count});
        sink_offset += count * esz;
      }
    }
    if (!batch.label.empty()) batch.label += ", ";
    batch.label += r->name;
  }
  ExecContext ctx = MakeContext(set, unit);
  // An integer Average (which never posts its inputs with the bits: LoneSmallAllreduce) runs as
  // the int64 Sum of its split, then the average goes into the outputs.
  const bool split_average = IsIntegerAverage(first.dtype, first.reduce_op);
  AllreduceBatch& executed = split_average ? average_split_batch_ : batch;
  int64_t* split = nullptr;
  if (split_average) {
    const int64_t total = batch.total_count();
    split = reinterpret_cast<int64_t*>(average_split_.Get(std::max<int64_t>(1, 2 * total) * sizeof(int64_t)));
    int64_t at = 0;
    for (const ReduceEntry& e : batch.entries) {
      SplitForAverage(e.input, e.count, batch.dtype, batch.prescale, set.size(), split + at, split + total + at);
      at += e.count;
    }
    LayOutAverageSplit(total, split, &executed);
    executed.label = batch.label;
  }
  // What came with the cycle's bit vectors rides on the batch it belongs to (the fusion buffer is
  // reused: each batch starts without them).
  executed.posted_inputs.clear();
  executed.total_with_bits = nullptr;
  executed.observe_shard = nullptr;
  const InputsWithBits& inputs = with_bits.inputs;
  if (!split_average && responses.size() == 1 && !inputs.by_rank.empty() &&
      first.process_set == inputs.process_set && first.name == inputs.name) {
    for (int member : set.local_members()) executed.posted_inputs.push_back(inputs.by_rank[set.ranks[member]]);
  }
  const TotalWithBits& total = with_bits.total;
  if (!split_average && responses.size() == 1 && total.bytes == batch.total_bytes() &&
      first.process_set == total.process_set && first.name == total.name) {
    executed.total_with_bits = total.data();
  }
  if (psld_->Measures(set.id)) {
    executed.observe_shard = [this](int shard, double seconds, double mib) { psld_->Observe(shard, seconds, mib); };
  }
  {
    std::vector<std::string> lanes;  // the timeline's names, only when it is on (the hot path pays nothing)
    if (timeline_) {
      for (const Response* r : responses) lanes.push_back(Timeline::TensorLane(OpTypeName(r->type), r->name));
      ctx.lane = responses.size() == 1 ? lanes[0] : "fused: " + lanes[0] + " +" + std::to_string(responses.size() - 1);
    }
    TimelineOperation op(timeline_.get(), std::move(lanes), "ALLREDUCE",
                         timeline_ ? std::to_string(batch.total_bytes()) + " bytes in " + ctx.lane : std::string());
    const char* impl = Ops().Allreduce(ctx, executed);
    if (timeline_) {
      op.SetEndArgs(std::string("\"implementation\": \"") + impl + "\"");
      for (size_t i = 0; i < responses.size(); ++i) {
        op.SetLaneEndArgs(i, Timeline::TensorArgs(DataTypeName(responses[i]->dtype), responses[i]->shapes));
      }
    }
  }
  if (split_average) {
    const int64_t total = batch.total_count();
    int64_t at = 0;
    for (const ReduceEntry& e : batch.entries) {
      AverageFromSplitSums(split + at, split + total + at, e.count, set.size(), first.postscale, batch.dtype, e.output);
      at += e.count;
    }
  }
  if (config_.verify) {
    uint64_t h = 0;
    for (const auto& e : batch.entries) h = HashBytes(e.output, e.count * esz, h);
    VerifyIdenticalOnMembers(ctx, h, "allreduce of '" + batch.label + "'");
  }
  counters_.fused_buffers++;
  counters_.allreduce_bytes += batch.total_bytes();
  psld_->AfterAllreduce(set.id, set.hosts.size(), set.servers.map);
  counters_.responses += responses.size();
  FinishSucceeded(responses);
}

void Engine::ExecuteOne(const Response& r, uint32_t unit) {
  if (!r.ok()) {
    if (r.type == OpType::kJoin) joined_ = false;  // a failed join (deadlock) ends it
    OpResult result;
    result.status = Status::Mismatch(r.error);
    Finish(r, std::move(result));
    return;
  }
  counters_.responses++;
  switch (r.type) {
    case OpType::kBarrier:
      Finish(r, OpResult{});
      return;
    case OpType::kJoin: {
      joined_ = false;
      OpResult result;
      result.value = r.root;
      Finish(r, std::move(result));
      return;
    }
    case OpType::kAddProcessSet:
    case OpType::kRemoveProcessSet:
      ApplyProcessSetChange(r);
      return;
    default:
      break;
  }
  ProcessSet& set = *sets_.Find(r.process_set);
  Pending* p = FindPending(r);
  if (p == nullptr) {
    // The coordinator fails every collective but allreduce and barrier while ranks have joined.
    throw Error(Status::Internal("joined rank " + std::to_string(rank()) + " was asked to execute " +
                                 OpTypeName(r.type) + " '" + r.name + "'"));
  }
  TensorIO io;
  for (size_t t = 0; t < r.shapes.size(); ++t) {
    io.inputs.push_back(p->request.buffers[t].input);
    io.outputs.push_back(p->request.buffers[t].output);
  }
  OpResult result;
  ExecContext ctx = MakeContext(set, unit);
  if (timeline_) ctx.lane = Timeline::TensorLane(OpTypeName(r.type), r.name);
  {
    TimelineOperation op(timeline_.get(), {ctx.lane}, Timeline::UpperName(OpTypeName(r.type)));
    Ops().Run(r.type, ctx, r, io, &result);
    // Horovod's end args: the output's dtype and shape (an allgather's or alltoall's as received).
    if (timeline_) op.SetLaneEndArgs(0, Timeline::TensorArgs(DataTypeName(r.dtype), result.output_shapes.empty() ? r.shapes : result.output_shapes));
  }
  if (config_.verify && (r.type == OpType::kBroadcast || r.type == OpType::kAllgather)) {
    uint64_t h = 0;
    const size_t esz = ElementSize(r.dtype);
    if (r.type == OpType::kBroadcast) {
      for (size_t t = 0; t < r.shapes.size(); ++t) h = HashBytes(io.outputs[t], NumElements(r.shapes[t]) * esz, h);
    } else {
      for (const auto& out : result.outputs) h = HashBytes(out->data(), out->size(), h);
    }
    VerifyIdenticalOnMembers(ctx, h, std::string(OpTypeName(r.type)) + " of '" + r.name + "'");
  }
  Finish(r, std::move(result));
}

void Engine::ApplyProcessSetChange(const Response& r) {
  OpResult result;
  result.value = -1;
  if (r.type == OpType::kAddProcessSet) {
    std::vector<int> ranks(r.set_ranks.begin(), r.set_ranks.end());
    if (sets_.FindByRanks(ranks) < 0) {
      int32_t id = sets_.next_id();
      CreateProcessSet(id, ranks, Deadline::AfterSeconds(config_.timeout_seconds));
      result.value = id;
    }
  } else if (r.set_id != 0 && sets_.Find(r.set_id) != nullptr) {
    // Forget its cached responses (identically everywhere) and fail what is still pending in it.
    for (uint32_t p = 0; p < cache_.capacity(); ++p) {
      if (cache_.occupied(p) && cache_.at(p).process_set == r.set_id) {
        cache_.Erase(p);
        RevertCachedAt(p);
      }
    }
    std::vector<Response> orphans;
    for (const auto& kv : pending_) {
      if (kv.first.first == r.set_id) {
        Response o;
        o.process_set = r.set_id;
        o.name = kv.first.second;
        orphans.push_back(o);
      }
    }
    for (const auto& o : orphans) {
      OpResult failed;
      failed.status = Status::InvalidArgument("process set " + std::to_string(r.set_id) + " was removed while '" +
                                              o.name + "' was pending in it");
      Finish(o, std::move(failed));
    }
    std::lock_guard<std::mutex> lock(sets_mu_);
    sets_.Remove(r.set_id);
    result.value = r.set_id;
  }
  Finish(r, std::move(result));
}

}  // namespace herring
