#include "ops/halving_doubling_allreduce.h"

#include <algorithm>

#include "common/logging.h"
#include "kernels/reduce.h"
#include "runtime/partition_map.h"

namespace herring {

namespace {

// Messages are cut into pieces of this size (or more, to stay within kPiecesPerStep), so the
// reduction of a piece overlaps the transfer of the next ones. Both ends derive the cut from
// the same element count, so it needs no agreement.
constexpr int64_t kPieceBytes = 1 << 20;
// Sub-tag = step * kPiecesPerStep + piece. Steps: 0 fold, 1..k reduce-scatter, k+1..2k
// all-gather, 2k+1 unfold; with k <= 30 that stays far below the reserved top sub-tag.
constexpr int64_t kPiecesPerStep = 4096;

int64_t PieceElements(int64_t count, size_t esz) {
  int64_t by_size = std::max<int64_t>(1, kPieceBytes / static_cast<int64_t>(esz));
  int64_t by_count = (count + kPiecesPerStep - 1) / kPiecesPerStep;
  return std::max(by_size, by_count);
}

}  // namespace

HalvingDoublingAllreduce::HalvingDoublingAllreduce(std::shared_ptr<const NetworkTopology> topology)
    : topology_(std::move(topology)) {}

const HalvingDoublingPlan& HalvingDoublingAllreduce::PlanFor(const ExecContext& ctx) {
  auto it = plans_.find(ctx.set.ranks);
  if (it != plans_.end()) return it->second;
  HalvingDoublingPlan plan;
  if (!topology_) {
    plan = HalvingDoublingPlan::RankOrder(ctx.n());
  } else {
    std::vector<std::string> hosts;
    for (int r : ctx.set.ranks) hosts.push_back(ctx.topo.hostname(ctx.topo.host_of(r)));
    LinkModel model(*topology_, hosts, ctx.set.ranks);
    TopologyMapping mapping = MapOntoTopology(model);
    HLOG(Info) << "hd-topo, process set " << ctx.set.id << ": " << DescribeMapping(mapping, model);
    plan = std::move(mapping.plan);
  }
  return plans_.emplace(ctx.set.ranks, std::move(plan)).first->second;
}

void HalvingDoublingAllreduce::Exchange(ExecContext& ctx, const AllreduceBatch& batch, int peer, int step,
                                        const uint8_t* send, int64_t send_count, uint8_t* into,
                                        int64_t recv_count, bool reduce, uint8_t* staging,
                                        const std::string& what) {
  const size_t esz = ElementSize(batch.dtype);
  const int64_t send_piece = PieceElements(send_count, esz), recv_piece = PieceElements(recv_count, esz);
  auto tag = [&](int64_t piece) { return ctx.Tag(static_cast<uint64_t>(step) * kPiecesPerStep + piece); };
  std::vector<CompletionPtr> receives, sends;
  uint8_t* landing = reduce ? staging : into;
  for (int64_t at = 0, i = 0; at < recv_count; at += recv_piece, ++i) {
    int64_t count = std::min(recv_piece, recv_count - at);
    receives.push_back(ctx.net.Recv(peer, tag(i), landing + at * esz, count * esz));
  }
  for (int64_t at = 0, i = 0; at < send_count; at += send_piece, ++i) {
    int64_t count = std::min(send_piece, send_count - at);
    sends.push_back(ctx.net.Send(peer, tag(i), send + at * esz, count * esz));
  }
  for (size_t i = 0; i < receives.size(); ++i) {
    WaitTransfers({receives[i]}, ctx, what);
    if (reduce) {
      const int64_t at = static_cast<int64_t>(i) * recv_piece, count = std::min(recv_piece, recv_count - at);
      // My partial first, then the peer's: the order is fixed by the positions.
      const void* srcs[2] = {into + at * esz, staging + at * esz};
      ReduceInto(into + at * esz, srcs, 2, count, batch.dtype, batch.op);
    }
  }
  WaitTransfers(sends, ctx, what);
}

void HalvingDoublingAllreduce::Execute(ExecContext& ctx, AllreduceBatch& batch) {
  const int64_t total = batch.total_count();
  if (total == 0) return;
  const HalvingDoublingPlan& plan = PlanFor(ctx);
  const size_t esz = ElementSize(batch.dtype);
  const int p = plan.p, k = plan.rounds(), me = plan.position_of[ctx.me()];
  auto rank_at = [&](int position) { return ctx.member_rank(plan.member_at[position]); };
  auto step_name = [&](const char* phase, int round, int position) {
    return std::string(name()) + " allreduce " + phase + (round >= 0 ? " round " + std::to_string(round) : "") +
           " of '" + batch.label + "' with rank " + std::to_string(rank_at(position));
  };
  TimelinePhase phase(ctx.timeline, ctx.lane, topology_ ? "HD_TOPO_ALLREDUCE" : "HD_ALLREDUCE");
  ctx.counters.hd_allreduces++;

  uint8_t* buf = buffer_.Get(total * esz);
  batch.GatherInputs(0, total, buf, batch.prescale);
  if (me >= p) {  // an extra position: the core position me - p reduces on its behalf
    Exchange(ctx, batch, rank_at(me - p), 0, buf, total, nullptr, 0, false, nullptr,
             step_name("fold-in", -1, me - p));
    Exchange(ctx, batch, rank_at(me - p), 2 * k + 1, nullptr, 0, buf, total, false, nullptr,
             step_name("unfold", -1, me - p));
    batch.ScatterOutputs(0, total, buf, batch.postscale);
    return;
  }
  const bool has_extra = me < plan.extras();
  if (has_extra) {
    Exchange(ctx, batch, rank_at(p + me), 0, nullptr, 0, buf, total, true, incoming_.Get(total * esz),
             step_name("fold-in", -1, p + me));
  }

  // Segment s of p is owned by one position at the end of the reduce-scatter; [a, b) are the
  // segments this position is still responsible for.
  const auto segs = SplitEvenly(total, p, std::max<int64_t>(1, 64 / static_cast<int64_t>(esz)));
  auto begin_of = [&](int s) { return s < p ? segs[s].begin : total; };
  auto count_of = [&](int a, int b) { return begin_of(b) - begin_of(a); };
  // The first round receives the most (half of the buffer, either half); the fold-in all of it.
  const int64_t widest = has_extra ? total : std::max(count_of(0, p / 2), count_of(p / 2, p));
  uint8_t* staging = incoming_.Get(widest * esz);
  int a = 0, b = p;
  for (int j = 0; j < k; ++j) {  // recursive halving: keep one half, send the other
    const int d = 1 << j, partner = me ^ d, mid = (a + b) / 2;
    const bool lower = (me & d) == 0;
    const int keep_a = lower ? a : mid, keep_b = lower ? mid : b;
    const int give_a = lower ? mid : a, give_b = lower ? b : mid;
    Exchange(ctx, batch, rank_at(partner), 1 + j, buf + begin_of(give_a) * esz, count_of(give_a, give_b),
             buf + begin_of(keep_a) * esz, count_of(keep_a, keep_b), true, staging,
             step_name("reduce-scatter", j, partner));
    a = keep_a;
    b = keep_b;
  }
  for (int j = k - 1; j >= 0; --j) {  // recursive doubling: swap owned ranges, in reverse order
    const int d = 1 << j, partner = me ^ d, w = b - a;
    const int sib_a = (me & d) == 0 ? b : a - w, sib_b = sib_a + w;
    Exchange(ctx, batch, rank_at(partner), 1 + k + (k - 1 - j), buf + begin_of(a) * esz, count_of(a, b),
             buf + begin_of(sib_a) * esz, count_of(sib_a, sib_b), false, nullptr,
             step_name("all-gather", k - 1 - j, partner));
    a = std::min(a, sib_a);
    b = std::max(b, sib_b);
  }
  if (has_extra) {
    Exchange(ctx, batch, rank_at(p + me), 2 * k + 1, buf, total, nullptr, 0, false, nullptr,
             step_name("unfold", -1, p + me));
  }
  batch.ScatterOutputs(0, total, buf, batch.postscale);
}

std::unique_ptr<AllreduceImpl> MakeHalvingDoublingAllreduce(const Config& config) {
  if (config.allreduce == AllreduceAlgorithm::kHalvingDoublingTopo) {
    return std::make_unique<HalvingDoublingAllreduce>(
        std::make_shared<const NetworkTopology>(NetworkTopology::Load(config.topology)));
  }
  return std::make_unique<HalvingDoublingAllreduce>();
}

}  // namespace herring
