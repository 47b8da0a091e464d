#include "ops/herring/herring_allreduce.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "kernels/reduce.h"
#include "ops/shm_staging.h"
#include "ops/tensor_notice.h"

namespace herring {

bool HerringAllreduce::Enabled(const ExecContext& ctx, const AllreduceBatch& batch) const {
  return ctx.n() > 1 && ctx.set.servers.shard_rank.size() < kMaxShards;
}

void HerringAllreduce::Execute(ExecContext& ctx, AllreduceBatch& batch) {
  const int64_t total = batch.total_count();
  if (total == 0) return;
  const size_t esz = ElementSize(batch.dtype);
  const int64_t chunk_elems = ChunkElements(ctx, batch);
  const int64_t chunks = (total + chunk_elems - 1) / chunk_elems;
  if (OneStepFits(ctx, batch.total_bytes()) &&
      static_cast<int64_t>(batch.total_bytes()) <=
          OneStepAllreduceBytes(ctx.config.small_message_bytes, ctx.set.arena.get())) {
    ReduceInOneStep(ctx, batch);
  } else if (HostSumsExchangeFits(ctx, batch.total_bytes())) {
    host_sums_.Execute(ctx, batch);
  } else if (ctx.set.arena) {
    const bool offer = ctx.set.hosts.size() == 1 && batch.total_bytes() >= ZeroCopyAllreduce::kMinBytes;
    PipelineThroughSharedMemory(ctx, batch, chunk_elems, chunks, offer);
  } else {
    // Alone on this host: nothing to share. Chunks go through private buffers to the servers,
    // kNetworkDepth in flight: chunk c + depth - 1 is pushed before chunk c's sums are awaited.
    constexpr int depth = kNetworkDepth;
    uint8_t* bufs[depth];
    for (int i = 0; i < depth; ++i) bufs[i] = private_slot_[i].Get(chunk_elems * esz);
    PullWork inflight[depth];
    ShardServer::Work serving[depth];
    int64_t served = 0;  // chunks whose shard sums this rank (a colocated server) has sent back
    auto serve_through = [&](int64_t last) {
      for (; served <= last; ++served) server_.Finish(ctx, batch, &serving[served % depth]);
    };
    auto start = [&](int64_t c) {
      const int64_t begin = c * chunk_elems, end = std::min(total, begin + chunk_elems);
      {
        TimelinePhase phase(ctx.timeline, ctx.lane, "GATHER");
        if (ctx.faults) ctx.faults->At("gather", &ctx.net);
        batch.GatherInputs(begin, end, bufs[c % depth], batch.prescale);
      }
      TimelinePhase phase(ctx.timeline, ctx.lane, "PUSH_PULL_SERVERS");
      inflight[c % depth] = PushAndPostPull(ctx, batch, c, end - begin, bufs[c % depth]);
      serving[c % depth] = server_.Post(ctx, batch, c, end - begin, static_cast<int>(c % depth));
      // Answer the previous chunk, not this one: its pieces had a chunk's time to arrive, whereas
      // waiting for this chunk's would stall the pipeline behind the slowest host's newest push
      // and keep only about one chunk queued on the links whatever the depth.
      serve_through(c - 1);
    };
    for (int64_t c = 0; c < std::min<int64_t>(depth - 1, chunks); ++c) start(c);
    for (int64_t c = 0; c < chunks; ++c) {
      // Reuses chunk c - 1's buffers: its sums were copied out and its answers sent.
      if (c + depth - 1 < chunks) start(c + depth - 1);
      const int64_t begin = c * chunk_elems, end = std::min(total, begin + chunk_elems);
      {
        TimelinePhase phase(ctx.timeline, ctx.lane, "PUSH_PULL_SERVERS");
        serve_through(c);  // every host's pull of chunk c needs this rank's answer
        AwaitPull(ctx, batch, inflight[c % depth]);
        WaitTransfers(serving[c % depth].outgoing, ctx, "server shard answering '" + batch.label + "'");
      }
      TimelinePhase phase(ctx.timeline, ctx.lane, "COPY_OUT");
      batch.ScatterOutputs(begin, end, bufs[c % depth], batch.postscale);
      if (ctx.faults) ctx.faults->At("scatter", &ctx.net, batch.entries[0].output, batch.entries[0].count ? 1 : 0);
    }
  }
  ctx.counters.herring_allreduces++;
}

void HerringAllreduce::PipelineThroughSharedMemory(ExecContext& ctx, AllreduceBatch& batch, int64_t chunk_elems,
                                                   int64_t chunks, bool offer_tensors) {
  const int64_t total = batch.total_count();
  const size_t esz = ElementSize(batch.dtype);
  ShmArena& arena = *ctx.set.arena;
  const int local_size = static_cast<int>(ctx.set.local_members().size());
  const int me = ctx.set.my_local_index;
  const size_t sub_slot_bytes = SubSlotStride(arena.slot_bytes());  // >= chunk_elems * esz
  // Every member runs the same batches in the same order, so sequence numbers agree.
  const uint64_t base = ctx.set.arena_sequence;
  ctx.set.arena_sequence += chunks;
  auto seq = [&](int64_t c) { return base + static_cast<uint64_t>(c) + 1; };
  auto offset = [&](int64_t c) { return (seq(c) % kPipelineDepth) * sub_slot_bytes; };
  auto range = [&](int64_t c) { return ElementRange{c * chunk_elems, std::min(total, (c + 1) * chunk_elems)}; };
  auto check = [](const Status& s, const char* step) { ThrowIfArenaFailed(s, step); };
  PullWork pulls[kPipelineDepth];
  // Without a prescale a staged input is its tensors' bytes, so the owner of a slice reads its
  // own input there straight from its tensors and stages only the other owners' slices: a copy
  // of 1/local_size of the buffer saved.
  const bool owner_reads_own_input = batch.prescale == 1.0;
  const bool one_host = ctx.set.hosts.size() == 1;
  // Set once every rank's notice is out (below): the others' slices of the sum are copied out of
  // their tensors (ops/herring/peer_output_reads.h), and mine are summed into a private buffer.
  bool read_peers = false;
  // My slice of a chunk, in elements from the chunk's start.
  auto my_slice = [&](const ElementRange& r) {
    return SplitEvenly(r.size(), local_size, AlignElements(batch.dtype))[me];
  };
  // Visits the parts of chunk r outside my slice (before it, after it) as visit(first element,
  // end element, byte offset in the chunk): what staging and copy-out move when my slice is
  // handled apart.
  auto around_my_slice = [&](const ElementRange& r, auto&& visit) {
    const ElementRange mine = my_slice(r);
    visit(r.begin, r.begin + mine.begin, size_t{0});
    visit(r.begin + mine.end, r.end, static_cast<size_t>(mine.end) * esz);
  };

  // Stage 1: my chunk into my sub-slot, once every owner finished reading it kPipelineDepth ago.
  auto copy_in = [&](int64_t c) {
    TimelinePhase phase(ctx.timeline, ctx.lane, "GATHER_INTO_SHM");
    if (ctx.faults) ctx.faults->At("gather", &ctx.net);
    if (seq(c) > kPipelineDepth) {
      check(arena.WaitAll(kSliceDone, seq(c) - kPipelineDepth, ctx.StepDeadline()), "shared-memory slot reuse");
    }
    const ElementRange r = range(c);
    uint8_t* slot = arena.slot(me) + offset(c);
    if (owner_reads_own_input) {  // everything but my slice: only the other owners read the slot
      around_my_slice(r, [&](int64_t begin, int64_t end, size_t at) { batch.GatherInputs(begin, end, slot + at, 1.0); });
    } else {
      batch.GatherInputs(r.begin, r.end, slot, batch.prescale);
    }
    arena.Publish(kInputReady, seq(c));
  };
  // Stage 2: reduce my slice of everyone's chunk (in local order), then across hosts.
  auto reduce = [&](int64_t c) {
    const ElementRange r = range(c);
    uint8_t* result = read_peers ? own_sum_.Get(sub_slot_bytes) : arena.result() + offset(c);
    {
      TimelinePhase phase(ctx.timeline, ctx.lane, "SHM_REDUCE_SCATTER");
      if (ctx.faults) ctx.faults->At("shm", &ctx.net);
      check(arena.WaitAll(kInputReady, seq(c), ctx.StepDeadline()), "staging in shared memory");
      if (seq(c) > kPipelineDepth && !read_peers) {
        check(arena.WaitAll(kConsumed, seq(c) - kPipelineDepth, ctx.StepDeadline()), "shared-memory result reuse");
      }
      const ElementRange mine = my_slice(r);
      std::vector<const void*> srcs(local_size);
      // Elements [at, at + count) of the chunk, in local order; `own` is my input there when I
      // read it from my tensors rather than from my slot.
      auto reduce_piece = [&](int64_t at, const uint8_t* own, int64_t count) {
        for (int i = 0; i < local_size; ++i) srcs[i] = arena.slot(i) + offset(c) + at * esz;
        if (own) srcs[me] = own;
        ReduceInto(result + at * esz, srcs.data(), local_size, count, batch.dtype, batch.op);
      };
      if (owner_reads_own_input) {
        batch.ForEachInputPiece(r.begin + mine.begin, r.begin + mine.end,
                                [&](int64_t at, const uint8_t* own, int64_t count) {
                                  reduce_piece(mine.begin + at, own, count);
                                });
      } else if (!mine.empty()) {
        reduce_piece(mine.begin, nullptr, mine.size());
      }
      if (one_host && !mine.empty()) {
        // My slice of the sum is final and still in this core's cache, and so are my tensors
        // there (just read): copying it out now costs almost no memory traffic, whereas copy-out
        // would read it back from memory a chunk later.
        batch.ScatterOutputs(r.begin + mine.begin, r.begin + mine.end, result + mine.begin * esz, batch.postscale);
      }
      ctx.counters.shm_chunks++;
    }
    if (!one_host) {
      // Push now, collect the sums at copy-out: the network works while the next chunk is reduced.
      TimelinePhase phase(ctx.timeline, ctx.lane, "PUSH_SERVE");
      pulls[c % kPipelineDepth] = PushAndPostPull(ctx, batch, c, r.size(), result);
      ShardServer::Work work = server_.Post(ctx, batch, c, r.size(), 0);
      server_.Finish(ctx, batch, &work);
      WaitTransfers(work.outgoing, ctx, "server shard answering '" + batch.label + "'");
    } else {
      arena.Publish(kSliceDone, seq(c));
    }
  };
  // Stage 3: the reduced chunk out to my tensors (on one host all but my slice, which went out at
  // the reduce).
  auto copy_out = [&](int64_t c) {
    if (!one_host) {
      TimelinePhase phase(ctx.timeline, ctx.lane, "PULL");
      AwaitPull(ctx, batch, pulls[c % kPipelineDepth]);
      arena.Publish(kSliceDone, seq(c));  // my slice now holds the sum over every host
    }
    TimelinePhase phase(ctx.timeline, ctx.lane, "COPY_OUT");
    const ElementRange r = range(c);
    if (read_peers) {  // each other rank's slice from its tensors, as soon as it is there
      const auto slices = SplitEvenly(r.size(), local_size, AlignElements(batch.dtype));
      for (int i = 0; i < local_size; ++i) {
        if (i == me || slices[i].empty()) continue;
        check(arena.WaitFor(kSliceDone, i, seq(c), ctx.StepDeadline()), "all-gather from the local ranks' tensors");
        peer_reads_.Read(ctx, batch, i, r.begin + slices[i].begin, r.begin + slices[i].end);
      }
    } else {
      check(arena.WaitAll(kSliceDone, seq(c), ctx.StepDeadline()), "all-gather in shared memory");
      const uint8_t* result = arena.result() + offset(c);
      if (one_host) {  // my own slice went out at the reduce
        around_my_slice(r, [&](int64_t begin, int64_t end, size_t at) {
          batch.ScatterOutputs(begin, end, result + at, batch.postscale);
        });
      } else {
        batch.ScatterOutputs(r.begin, r.end, result, batch.postscale);
      }
    }
    if (ctx.faults && !batch.entries.empty()) {
      ctx.faults->At("scatter", &ctx.net, batch.entries[0].output, batch.entries[0].count ? 1 : 0);
    }
    arena.Publish(kConsumed, seq(c));
  };

  // Where the tensors are offered, every rank first tells the others where its tensors are and
  // which route it offers; all read the same notices and take the same route.
  TensorReach reach = TensorReach::kStaged;
  uint64_t notice_round = 0;
  Clock::time_point notices_known;
  if (offer_tensors) {
    notice_round = OfferTensors(ctx, batch, OwnZeroCopyPool(ctx), routes_.Offer(ctx, batch.total_bytes()));
    AwaitNotices(ctx, notice_round);
    notices_known = Clock::now();
    reach = AgreedReach(arena, notice_round);
  }
  if (reach == TensorReach::kZeroCopy || reach == TensorReach::kTensorsByAddress) {
    // Nothing staged: close this batch's sequence numbers as if every chunk had gone through,
    // since later batches wait on these counters.
    arena.Publish(kSliceDone, seq(chunks - 1));
    arena.Publish(kConsumed, seq(chunks - 1));
    const bool ran = reach == TensorReach::kZeroCopy ? zero_copy_.Run(ctx, batch, notice_round)
                                                     : cross_memory_.Run(ctx, batch, notice_round);
    if (!ran) {
      PipelineThroughSharedMemory(ctx, batch, chunk_elems, chunks, false);  // afresh, staged
    } else if (reach == TensorReach::kTensorsByAddress) {
      routes_.Finished(ctx, batch.total_bytes(), reach,
                       std::chrono::duration<double>(Clock::now() - notices_known).count());
    }
    return;
  }
  read_peers = reach == TensorReach::kOutputsByAddress && peer_reads_.Prepare(ctx, batch, notice_round);

  // Software pipeline: while the others still reduce chunk c, stage chunk c + 1 and copy out
  // chunk c - 1. Each stage only waits for what other ranks did earlier in their own program
  // order, so this cannot deadlock (kPipelineDepth >= 3).
  copy_in(0);
  for (int64_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) copy_in(c + 1);
    reduce(c);
    if (c >= 1) copy_out(c - 1);
  }
  copy_out(chunks - 1);
  if (read_peers) {
    // My outputs must stay as they are until every other rank has copied my slices out of them.
    TimelinePhase phase(ctx.timeline, ctx.lane, "COPY_OUT");
    check(arena.WaitAll(kConsumed, seq(chunks - 1), ctx.StepDeadline()), "the local ranks reading this rank's tensors");
  }
  if (offer_tensors) {
    routes_.Finished(ctx, batch.total_bytes(), read_peers ? TensorReach::kOutputsByAddress : TensorReach::kStaged,
                     std::chrono::duration<double>(Clock::now() - notices_known).count());
  }
}

void HerringAllreduce::ReduceInOneStep(ExecContext& ctx, AllreduceBatch& batch) {
  TimelinePhase phase(ctx.timeline, ctx.lane, "ONE_STEP_SHM_REDUCE");
  // Every rank reduces every input: the same bits everywhere. One tensor (a synchronous call's
  // lone allreduce) takes its sum straight into its output, since every input is read from its
  // staged copy (in place too): a copy of the buffer saved.
  if (batch.entries.size() == 1) {
    ReduceEntry& only = batch.entries[0];
    uint8_t* out = static_cast<uint8_t*>(only.output);
    ReduceHostInOneStep(ctx, batch, out);
    if (batch.postscale != 1.0) ScaleInto(out, out, only.count, batch.dtype, batch.postscale);
    if (ctx.faults) ctx.faults->At("scatter", &ctx.net, out, only.count ? 1 : 0);
  } else {
    uint8_t* sum = one_step_sum_.Get(batch.total_bytes());
    ReduceHostInOneStep(ctx, batch, sum);
    ScatterWholeResult(ctx, batch, sum);
  }
  ctx.counters.one_step_allreduces++;
}

HerringAllreduce::PullWork HerringAllreduce::PushAndPostPull(ExecContext& ctx, const AllreduceBatch& batch,
                                                            int64_t chunk_index, int64_t n, uint8_t* result) {
  const size_t esz = ElementSize(batch.dtype);
  const int64_t align = AlignElements(batch.dtype);
  const ServerLayout& servers = ctx.set.servers;
  const auto ranges = servers.Ranges(n, align);
  const ElementRange mine = HostSlices(ctx, n, align)[ctx.set.my_host][ctx.set.my_local_index];
  if (ctx.faults) ctx.faults->At("push", &ctx.net);
  PullWork work;
  work.posted = Clock::now();
  std::vector<CompletionPtr>& transfers = work.transfers;
  // My slice, cut along the shard ranges: each piece goes to its shard, and its sum comes back
  // into the same place (the shard only answers once it has every host's piece, so the send has
  // left this buffer by then).
  const int shards = servers.map.num_shards();
  const bool round_robin = ctx.config.schedule == PushSchedule::kRoundRobin;
  // R2SP: pushers start at evenly spaced shards and visit them in turn, one push at a time, so
  // each shard receives from one pusher at a time instead of from all of them at once.
  const int start = round_robin ? static_cast<int>((static_cast<int64_t>(ctx.me()) * shards / std::max(1, ctx.n())) % shards) : 0;
  std::vector<std::pair<int, ElementRange>> pieces;
  for (int k = 0; k < shards; ++k) {
    const int s = (start + k) % shards;
    ElementRange piece = Intersect(mine, ranges[s]);
    if (!piece.empty()) pieces.push_back({s, piece});
  }
  for (const auto& [s, piece] : pieces) {  // every pull posted before any push
    work.pull_index.push_back(transfers.size());
    work.pull_shard.push_back(s);
    work.pull_mib.push_back(piece.size() * esz / 1048576.0);
    transfers.push_back(ctx.net.Recv(servers.shard_rank[s], ShardTag(ctx, chunk_index, s, 1),
                                     result + piece.begin * esz, piece.size() * esz));
  }
  for (const auto& [s, piece] : pieces) {
    CompletionPtr push = ctx.net.Send(servers.shard_rank[s], ShardTag(ctx, chunk_index, s, 0),
                                      result + piece.begin * esz, piece.size() * esz);
    ctx.counters.server_pushes++;
    transfers.push_back(push);
    if (round_robin) WaitTransfers({push}, ctx, "round-robin push of '" + batch.label + "'");
  }
  return work;
}

void HerringAllreduce::AwaitPull(ExecContext& ctx, const AllreduceBatch& batch, const PullWork& work) {
  if (ctx.faults) ctx.faults->At("pull", &ctx.net);
  WaitTransfers(work.transfers, ctx, "push/pull of '" + batch.label + "' with the server shards");
  if (batch.observe_shard) {
    for (size_t i = 0; i < work.pull_index.size(); ++i) {
      double seconds = std::chrono::duration<double>(work.transfers[work.pull_index[i]]->finished_at() - work.posted).count();
      batch.observe_shard(work.pull_shard[i], seconds, work.pull_mib[i]);
    }
  }
}

}  // namespace herring
