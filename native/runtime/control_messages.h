// The control messages of the negotiation protocol, one per step of a cycle. Every message
// starts with the cycle number it belongs to, so a late or early message is never mistaken for
// the current one.
//
//   worker -> rank 0   kContribute  this rank's bit vector (status bits inverted + cache bits)
//   rank 0 -> worker   kBegin       "cycle c started, contribute" (to ranks that had no new work)
//   rank 0 -> worker   kResult      the AND of every contribution
//   worker -> rank 0   kUncached    requests not in the cache, stale cache positions
//   rank 0 -> worker   kResponses   new responses and the cache positions to evict
//   anyone -> anyone   kAbort       "the job failed: <reason>"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/message.h"

namespace herring {

enum ControlType : uint32_t {
  kContributeMessage = 1,
  kBeginMessage = 2,
  kResultMessage = 3,
  kUncachedMessage = 4,
  kResponsesMessage = 5,
  kAbortMessage = 6,
  kJoinRequest = 7,    // joining server -> rank 0: "my hostname, my knobs"
  kLeaveRequest = 8,   // anyone -> rank 0: "dedicated server R should leave"
  kJoinSnapshot = 9,   // rank 0 -> joiner: the job's state at the cycle it joins after
  kR2spSessionMessage = 10,  // rank 0 -> server: serve these ranges of an R2SP session's parameters
  kR2spEndMessage = 11,      // rank 0 -> server: the session's workers are done
  kBlockedReport = 12,       // worker -> rank 0: what it is blocked on (engine/deadlock_detector.h)
  // The same, relayed by the hosts' leaders up the hierarchical plane's tree (engine/control_tree.h),
  // naming the rank whose report it is.
  kRelayedBlockedReport = 13,
  kMissingQuery = 14,   // anyone -> rank 0: who has not submitted this collective? (engine/missing_ranks.cc)
  kMissingAnswer = 15,  // rank 0 -> the asker: those members, or "not known"
};

// Status bits live in word 0 of the bit vector and are stored inverted (set = "no"), so the same
// AND that finds tensors everyone has ready also finds whether anyone wants something.
enum StatusBit : uint64_t {
  kNoShutdown = 1ull << 0,
  kNoUncached = 1ull << 1,
  kNoStale = 1ull << 2,
  kNoEmptyJoin = 1ull << 3,  // no rank joined with nothing of its own (engine/idle_join_patience.h)
};
constexpr uint64_t kAllStatusBits = kNoShutdown | kNoUncached | kNoStale | kNoEmptyJoin;
constexpr int kStatusWords = 1;

// Layout of the bit vector for a cache of `capacity` entries: the status word, then "ready" bits
// (1 = I have position p ready, or I do not take part in it: not a member, or joined), then
// "idle" bits (1 = I do not have position p pending). Position p runs when ready AND NOT idle:
// everyone can go and at least one rank really submitted it (so joined ranks alone never run it).
struct BitLayout {
  explicit BitLayout(uint32_t capacity) : words_per_half((capacity + 63) / 64) {}
  size_t words() const { return kStatusWords + 2 * words_per_half; }
  size_t ready_word(uint32_t p) const { return kStatusWords + p / 64; }
  size_t idle_word(uint32_t p) const { return kStatusWords + words_per_half + p / 64; }
  static uint64_t mask(uint32_t p) { return 1ull << (p % 64); }
  size_t words_per_half;
};

std::string EncodeBits(uint64_t cycle, const std::vector<uint64_t>& bits);
std::vector<uint64_t> DecodeBits(const std::string& payload, uint64_t* cycle);

// A partition map decided by rank 0's load balancer, switched to by every rank at the cycle in
// whose result it arrives.
struct MapUpdate {
  int32_t process_set = 0;
  uint64_t version = 0;
  std::vector<double> weights;
};
// A worker's measurements of the server shards since its last contribution, for rank 0's load
// balancer (PSLD): only the slice owners that push to a shard can time it.
struct ShardSample {
  int32_t shard = 0;
  double seconds = 0;
  double mib = 0;
};
// A host's sum of the cycle's lone small cached allreduce, which its leader reduced from the
// inputs that came with its host's bit vectors, carried up the leaders' tree so that rank 0 can
// send the job's total down with the result (engine/control_plane.cc).
struct HostSum {
  int32_t leader = -1;    // the host's first rank: rank 0 orders the sums as the process set's hosts
  uint32_t position = 0;  // the response cache position of the allreduce
  std::string bytes;      // the host's sum, prescaled inputs reduced in local-rank order
};
// The job's total of every host's sum, in the result (empty bytes: none this cycle).
struct CarriedTotal {
  uint32_t position = 0;
  std::string bytes;
};
std::string EncodeContribution(uint64_t cycle, const std::vector<uint64_t>& bits,
                               const std::vector<ShardSample>& samples, const std::vector<HostSum>& sums = {});
// `sums` may be null: a contribution's host sums are then read and dropped.
std::vector<uint64_t> DecodeContribution(const std::string& payload, uint64_t* cycle,
                                         std::vector<ShardSample>* samples, std::vector<HostSum>* sums = nullptr);

// A dedicated server joining or leaving: every rank applies it after executing the cycle in whose
// result it arrives, so ranges move to and from it between two steps.
struct MembershipChange {
  enum Kind : uint8_t { kJoin = 1, kLeave = 2 };
  uint8_t kind = kJoin;
  int32_t rank = -1;
  std::string hostname;  // join
};

std::string EncodeResult(uint64_t cycle, const std::vector<uint64_t>& bits, const std::vector<MapUpdate>& maps,
                         const std::vector<MembershipChange>& members, const CarriedTotal& total = {});
// `total` may be null: a carried total is then read and dropped.
std::vector<uint64_t> DecodeResult(const std::string& payload, uint64_t* cycle, std::vector<MapUpdate>* maps,
                                   std::vector<MembershipChange>* members, CarriedTotal* total = nullptr);

std::string EncodeCycle(uint64_t cycle);
uint64_t DecodeCycle(const std::string& payload);

std::string EncodeUncached(uint64_t cycle, const std::vector<RequestMeta>& requests,
                           const std::vector<uint32_t>& stale);
void DecodeUncached(const std::string& payload, uint64_t* cycle, std::vector<RequestMeta>* requests,
                    std::vector<uint32_t>* stale);

std::string EncodeResponses(uint64_t cycle, const std::vector<Response>& responses,
                            const std::vector<uint32_t>& evict);
void DecodeResponses(const std::string& payload, uint64_t* cycle, std::vector<Response>* responses,
                     std::vector<uint32_t>* evict);

// R2SP training mode (ps/r2sp_server.h): what one server process serves of a session. The
// optimizer's hyper-parameters travel as doubles and are applied in float32.
struct R2spShardRange {
  int32_t shard = 0;
  int64_t begin = 0, end = 0;  // elements of the flat parameter vector
};
struct R2spSessionSpec {
  uint32_t id = 0;
  int64_t count = 0;              // elements in the flat parameter vector
  double lr = 0, momentum = 0, weight_decay = 0;
  std::vector<int32_t> workers;   // the turn order
  std::vector<R2spShardRange> shards;  // hosted by the receiving process
};
// The largest session id and shard index the R2SP tags have room for (runtime/collective.h).
constexpr uint32_t kMaxR2spSessionId = 255;
constexpr int32_t kMaxR2spShards = 2048;
std::string EncodeR2spSession(const R2spSessionSpec& spec);
R2spSessionSpec DecodeR2spSession(const std::string& payload);  // validates ranges and ids
std::string EncodeR2spEnd(uint32_t session);
uint32_t DecodeR2spEnd(const std::string& payload);

// kBlockedReport (engine/deadlock_detector.h): the collectives a rank is blocked on; empty when
// it no longer is.
struct AwaitedCollective {
  int32_t process_set = 0;
  std::string name;
  OpType type = OpType::kAllreduce;
  // Paired by its position in the program (torch.distributed's collectives: Request::in_program_order),
  // not by a name the caller chose. Not part of the collective's identity (==).
  bool in_program_order = false;
  bool operator==(const AwaitedCollective& o) const {
    return process_set == o.process_set && name == o.name && type == o.type;
  }
};
std::string EncodeAwaited(const std::vector<AwaitedCollective>& awaited);
std::vector<AwaitedCollective> DecodeAwaited(const std::string& payload);  // validates
// kRelayedBlockedReport: `origin`'s kBlockedReport payload, as its leader forwards it.
std::string EncodeRelayedReport(int32_t origin, const std::string& report);
std::string DecodeRelayedReport(const std::string& payload, int32_t* origin);  // returns the report

// kMissingQuery / kMissingAnswer (engine/missing_ranks.cc): a collective, and the members of its
// process set that have not submitted it (global ranks; nullopt: rank 0 does not know).
std::string EncodeMissingQuery(const CollectiveKey& key);
CollectiveKey DecodeMissingQuery(const std::string& payload);
std::string EncodeMissingAnswer(const CollectiveKey& key, const std::optional<std::vector<int>>& missing);
CollectiveKey DecodeMissingAnswer(const std::string& payload, std::optional<std::vector<int>>* missing);

// Peeks at the cycle number any of the messages above starts with (0 if too short).
uint64_t CycleOf(const std::string& payload);

}  // namespace herring
