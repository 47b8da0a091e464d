// A cached small allreduce across hosts, carried by the hierarchical plane itself. When it is the
// cycle's only collective on every rank, each host's inputs already came with its bit vectors
// (engine/shm_bits_exchange.h), so its leader can reduce the host's sum before it contributes
// the host's AND. The sums climb the leaders' tree with the contributions, unreduced; rank 0
// reduces them in host order and sends the total down with the result, and each leader posts it
// beside the result for its host. The allreduce then only copies the total out: no exchange of
// host sums after the negotiation (ops/herring/small_exchange.h), which waited for the leaders' log2 H
// rounds of Bruck's allgather and one more hand-off inside each host.
//
// The bits are the exchange's: a host's sum is its prescaled inputs reduced in local-rank order
// (or one rank's prescaled input), the total is the host sums reduced in the process set's host
// order with one rounding, and the postscale comes last, on every rank. Whether the total came
// is in the result every rank reads, so every rank takes the same path.
#include <algorithm>

#include "engine/engine.h"
#include "kernels/reduce.h"
#include "ops/herring/small_exchange.h"

namespace herring {

bool Engine::TotalMayRideTree(const ProcessSet& set, size_t bytes) const {
  // At most kMaxInputBytes at rank 0 (every host's sum) and in a host's result area (the total).
  return hierarchical_ && set.size() == world_size() && static_cast<int>(set.hosts.size()) == topo_.num_hosts() &&
         HostSumsExchangeFits(set, cycle_config_, bytes) &&
         bytes * set.hosts.size() <= ShmBitsExchange::kMaxInputBytes;
}

std::vector<HostSum> Engine::HostSumToCarry(size_t words, const InputsWithBits& posted) {
  uint32_t position;
  std::vector<const void*> inputs;  // prescaled, by local member
  const Pending* lone = nullptr;
  if (shm_bits_) {
    if (posted.by_rank.empty()) return {};
    position = posted.position;
  } else {  // alone on its host: its lone request, as it would have posted it
    lone = LoneSmallAllreduce(words);
    if (lone == nullptr) return {};
    position = lone->position;
  }
  const Response& r = cache_.at(position);
  const ProcessSet* set = sets_.Find(r.process_set);
  const size_t bytes = TensorBytes(r);
  if (set == nullptr || !TotalMayRideTree(*set, bytes)) return {};
  HostSum sum{rank(), position, std::string(bytes, '\0')};
  auto* out = reinterpret_cast<uint8_t*>(&sum.bytes[0]);
  if (lone != nullptr) {
    const AllreduceBatch batch = InputsOf(*lone);
    batch.GatherInputs(0, batch.total_count(), out, batch.prescale);
  } else {
    for (int member : set->local_members()) inputs.push_back(posted.by_rank[set->ranks[member]]);
    ReduceInto(out, inputs.data(), inputs.size(), bytes / ElementSize(r.dtype), r.dtype, ExecutedOp(r.reduce_op));
  }
  return {std::move(sum)};
}

CarriedTotal Engine::TotalOfHostSums(std::vector<HostSum> sums) const {
  if (sums.empty() || !cache_.occupied(sums[0].position)) return {};
  const uint32_t position = sums[0].position;
  const Response& r = cache_.at(position);
  const ProcessSet* set = sets_.Find(r.process_set);
  const size_t bytes = TensorBytes(r);
  if (set == nullptr || sums.size() != set->hosts.size() || !TotalMayRideTree(*set, bytes)) return {};
  // One sum per host of the set, from the host's first rank, in the set's host order.
  std::sort(sums.begin(), sums.end(), [](const HostSum& a, const HostSum& b) { return a.leader < b.leader; });
  std::vector<const void*> srcs;
  for (size_t g = 0; g < sums.size(); ++g) {
    const HostSum& s = sums[g];
    if (s.position != position || s.bytes.size() != bytes || s.leader != set->ranks[set->hosts[g][0]]) return {};
    srcs.push_back(s.bytes.data());
  }
  CarriedTotal total{position, std::string(bytes, '\0')};
  ReduceInto(&total.bytes[0], srcs.data(), srcs.size(), bytes / ElementSize(r.dtype), r.dtype, ExecutedOp(r.reduce_op));
  return total;
}

Engine::TotalWithBits Engine::TakeTotalWithBits(CarriedTotal total) {
  if (total.bytes.empty()) return {};
  TotalWithBits taken = NameTotalWithBits(total.position, total.bytes.size());
  taken.held = std::move(total.bytes);
  return taken;
}

Engine::TotalWithBits Engine::TakeTotalWithBitsFromHost(size_t words) {
  uint32_t position = 0, bytes = 0;
  const uint8_t* total = shm_bits_->ResultTotal(cycle_, words, &position, &bytes);
  if (total == nullptr) return {};
  TotalWithBits taken = NameTotalWithBits(position, bytes);
  taken.in_host_area = total;
  return taken;
}

Engine::TotalWithBits Engine::NameTotalWithBits(uint32_t position, size_t bytes) {
  // Every rank's cache holds what rank 0's does: a total for anything else is a corrupt result,
  // and a rank that ignored it would take another path than the rest.
  if (!cache_.occupied(position) || TensorBytes(cache_.at(position)) != bytes) {
    throw Error(Status::Internal("rank " + std::to_string(rank()) + " was sent a total of " + std::to_string(bytes) +
                                 " bytes for response cache position " + std::to_string(position) +
                                 ", which its cache does not hold at that size"));
  }
  const Response& r = cache_.at(position);
  TotalWithBits named;
  named.process_set = r.process_set;
  named.name = r.name;
  named.position = position;
  named.bytes = bytes;
  return named;
}

}  // namespace herring
