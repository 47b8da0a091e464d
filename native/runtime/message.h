// What ranks tell each other during negotiation: a RequestMeta says "I have this collective
// ready"; a Response says "everyone does: execute it" (or "you disagree: here is the error").
// These are the only structures on the negotiation wire and in the response cache.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/reduce_op.h"

namespace herring {

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  kAddProcessSet = 7,
  kRemoveProcessSet = 8,
  // A rank leaving the job in order while the others go on (engine/departures.cc): submitted by
  // the leaving rank alone, agreed in one cycle, then every rank stops counting on it.
  kLeave = 9,
};
constexpr int kNumOpTypes = 10;
const char* OpTypeName(OpType t);

// A collective as the engine files it: (process set, name). Looked up per tensor in hashed
// tables where order does not matter: names share long prefixes ("allreduce.layer1.0.conv1...")
// that an ordered table compares byte by byte at every level.
using CollectiveKey = std::pair<int32_t, std::string>;
struct CollectiveKeyHash {
  size_t operator()(const CollectiveKey& k) const noexcept {
    return std::hash<std::string>()(k.second) ^
           (static_cast<size_t>(static_cast<uint32_t>(k.first)) * 0x9e3779b97f4a7c15ULL);
  }
};

// Orders what names a collective (a request, a report entry) as CollectiveKey orders: by set, then
// name. Lists built from a hashed table are put in this order where their order is seen.
struct ByCollectiveKey {
  template <class T>
  bool operator()(const T& a, const T& b) const {
    return std::tie(a.process_set, a.name) < std::tie(b.process_set, b.name);
  }
};

struct TensorMeta {
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // alltoall: rows sent to each member of the process set
};

// One collective as one rank submitted it. A grouped collective is one request with several
// tensors: it is negotiated, cached and executed as a unit, so a group is never split.
struct RequestMeta {
  OpType type = OpType::kAllreduce;
  std::string name;
  int32_t process_set = 0;
  int32_t rank = 0;  // global rank of the submitter
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = -1;                 // broadcast root (global rank)
  std::vector<TensorMeta> tensors;
  std::vector<int32_t> set_ranks;    // process-set changes: the ranks of the set
  int32_t set_id = -1;               // remove: the id of the set
  uint32_t waited_ms = 0;            // how long the submitter had it pending when it sent it
};

// The agreed form of a collective. per_member holds what legitimately differs between members:
// allgather: per_member[t][m] = first dimension of tensor t on member m; alltoall:
// per_member[m] = the splits member m sends (one row of the split matrix).
struct Response {
  OpType type = OpType::kAllreduce;
  std::string name;
  int32_t process_set = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = -1;
  std::vector<std::vector<int64_t>> shapes;      // per tensor (allgather: shape of member 0)
  std::vector<std::vector<int64_t>> per_member;
  std::vector<int32_t> joined;     // global ranks that had joined when this was decided
  std::vector<int32_t> set_ranks;  // process-set changes
  int32_t set_id = -1;             // process-set changes: the id added or removed
  std::string error;               // non-empty: every member fails this collective with it

  bool ok() const { return error.empty(); }
};

void EncodeRequest(const RequestMeta& r, class WireWriter* w);
RequestMeta DecodeRequest(class WireReader* r);
void EncodeResponse(const Response& r, class WireWriter* w);
Response DecodeResponse(class WireReader* r);

int64_t NumElements(const std::vector<int64_t>& shape);
// Bytes of every tensor a request or a response names (an allreduce's share of a fused buffer).
size_t TensorBytes(const RequestMeta& request);
size_t TensorBytes(const Response& response);
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace herring
