#include "runtime/control_messages.h"

#include <cstring>

#include "runtime/wire.h"

namespace herring {

std::string EncodeBits(uint64_t cycle, const std::vector<uint64_t>& bits) {
  WireWriter w;
  w.U64(cycle);
  w.U64s(bits);
  return w.Take();
}

std::vector<uint64_t> DecodeBits(const std::string& payload, uint64_t* cycle) {
  WireReader r(payload, "bit vector");
  *cycle = r.U64();
  auto bits = r.U64s();
  r.ExpectEnd();
  return bits;
}

std::string EncodeContribution(uint64_t cycle, const std::vector<uint64_t>& bits,
                               const std::vector<ShardSample>& samples, const std::vector<HostSum>& sums) {
  WireWriter w;
  w.U64(cycle);
  w.U64s(bits);
  w.U32(static_cast<uint32_t>(samples.size()));
  for (const auto& s : samples) {
    w.I32(s.shard);
    w.F64(s.seconds);
    w.F64(s.mib);
  }
  w.U32(static_cast<uint32_t>(sums.size()));
  for (const auto& s : sums) {
    w.I32(s.leader);
    w.U32(s.position);
    w.Str(s.bytes);
  }
  return w.Take();
}

std::vector<uint64_t> DecodeContribution(const std::string& payload, uint64_t* cycle,
                                         std::vector<ShardSample>* samples, std::vector<HostSum>* sums) {
  WireReader r(payload, "contribution");
  *cycle = r.U64();
  auto bits = r.U64s();
  uint32_t n = r.Count(20);
  for (uint32_t i = 0; i < n; ++i) {
    ShardSample s;
    s.shard = r.I32();
    s.seconds = r.F64();
    s.mib = r.F64();
    samples->push_back(s);
  }
  uint32_t k = r.Count(12);
  for (uint32_t i = 0; i < k; ++i) {
    HostSum s;
    s.leader = r.I32();
    s.position = r.U32();
    s.bytes = r.Str();
    if (sums) sums->push_back(std::move(s));
  }
  r.ExpectEnd();
  return bits;
}

std::string EncodeResult(uint64_t cycle, const std::vector<uint64_t>& bits, const std::vector<MapUpdate>& maps,
                         const std::vector<MembershipChange>& members, const CarriedTotal& total) {
  WireWriter w;
  w.U64(cycle);
  w.U64s(bits);
  w.U32(static_cast<uint32_t>(maps.size()));
  for (const auto& m : maps) {
    w.I32(m.process_set);
    w.U64(m.version);
    w.U32(static_cast<uint32_t>(m.weights.size()));
    for (double x : m.weights) w.F64(x);
  }
  w.U32(static_cast<uint32_t>(members.size()));
  for (const auto& c : members) {
    w.U8(c.kind);
    w.I32(c.rank);
    w.Str(c.hostname);
  }
  w.U32(total.position);
  w.Str(total.bytes);
  return w.Take();
}

std::vector<uint64_t> DecodeResult(const std::string& payload, uint64_t* cycle, std::vector<MapUpdate>* maps,
                                   std::vector<MembershipChange>* members, CarriedTotal* total) {
  WireReader r(payload, "negotiation result");
  *cycle = r.U64();
  auto bits = r.U64s();
  uint32_t n = r.Count(16);
  for (uint32_t i = 0; i < n; ++i) {
    MapUpdate m;
    m.process_set = r.I32();
    m.version = r.U64();
    uint32_t k = r.Count(8);
    for (uint32_t j = 0; j < k; ++j) m.weights.push_back(r.F64());
    maps->push_back(std::move(m));
  }
  uint32_t k = r.Count(9);
  for (uint32_t i = 0; i < k; ++i) {
    MembershipChange c;
    c.kind = r.U8();
    c.rank = r.I32();
    c.hostname = r.Str();
    if (c.kind != MembershipChange::kJoin && c.kind != MembershipChange::kLeave) {
      throw Error(Status::Internal("malformed negotiation result: membership change kind"));
    }
    members->push_back(std::move(c));
  }
  CarriedTotal t;
  t.position = r.U32();
  t.bytes = r.Str();
  if (total) *total = std::move(t);
  r.ExpectEnd();
  return bits;
}

std::string EncodeR2spSession(const R2spSessionSpec& spec) {
  WireWriter w;
  w.U32(spec.id);
  w.I64(spec.count);
  w.F64(spec.lr);
  w.F64(spec.momentum);
  w.F64(spec.weight_decay);
  w.I32s(spec.workers);
  w.U32(static_cast<uint32_t>(spec.shards.size()));
  for (const auto& s : spec.shards) {
    w.I32(s.shard);
    w.I64(s.begin);
    w.I64(s.end);
  }
  return w.Take();
}

R2spSessionSpec DecodeR2spSession(const std::string& payload) {
  WireReader r(payload, "R2SP session");
  auto bad = [](const std::string& what) { return Error(Status::Internal("malformed R2SP session: " + what)); };
  R2spSessionSpec spec;
  spec.id = r.U32();
  spec.count = r.I64();
  spec.lr = r.F64();
  spec.momentum = r.F64();
  spec.weight_decay = r.F64();
  spec.workers = r.I32s();
  uint32_t n = r.Count(20);
  for (uint32_t i = 0; i < n; ++i) {
    R2spShardRange s;
    s.shard = r.I32();
    s.begin = r.I64();
    s.end = r.I64();
    if (s.shard < 0 || s.shard >= kMaxR2spShards) throw bad("shard index");
    if (s.begin < 0 || s.begin > s.end || s.end > spec.count) throw bad("shard range outside the parameters");
    spec.shards.push_back(s);
  }
  r.ExpectEnd();
  if (spec.id == 0 || spec.id > kMaxR2spSessionId) throw bad("session id");
  if (spec.count <= 0) throw bad("parameter count");
  if (spec.workers.empty()) throw bad("no workers");
  for (int32_t w : spec.workers) {
    if (w < 0) throw bad("worker rank");
  }
  return spec;
}

namespace {

// A message of one number (R2SP's end of a session, a cycle's begin).
template <typename T>
std::string EncodeNumber(T value, void (WireWriter::*put)(T)) {
  WireWriter w;
  (w.*put)(value);
  return w.Take();
}

template <typename T>
T DecodeNumber(const std::string& payload, const char* what, T (WireReader::*get)()) {
  WireReader r(payload, what);
  T value = (r.*get)();
  r.ExpectEnd();
  return value;
}

}  // namespace

std::string EncodeR2spEnd(uint32_t session) { return EncodeNumber(session, &WireWriter::U32); }

uint32_t DecodeR2spEnd(const std::string& payload) { return DecodeNumber(payload, "R2SP end", &WireReader::U32); }

std::string EncodeCycle(uint64_t cycle) { return EncodeNumber(cycle, &WireWriter::U64); }

uint64_t DecodeCycle(const std::string& payload) { return DecodeNumber(payload, "cycle", &WireReader::U64); }

namespace {

// The coordinator's two messages of a cycle have one layout: the cycle, a list of records (each in
// its own codec) and a list of response-cache positions.
template <typename Record>
std::string EncodeRecordsAndPositions(uint64_t cycle, const std::vector<Record>& records,
                                      void (*encode)(const Record&, WireWriter*),
                                      const std::vector<uint32_t>& positions) {
  WireWriter w;
  w.U64(cycle);
  w.U32(static_cast<uint32_t>(records.size()));
  for (const auto& q : records) encode(q, &w);
  w.U32(static_cast<uint32_t>(positions.size()));
  for (auto p : positions) w.U32(p);
  return w.Take();
}

template <typename Record>
void DecodeRecordsAndPositions(const std::string& payload, const char* what, uint64_t* cycle,
                               std::vector<Record>* records, Record (*decode)(WireReader*),
                               std::vector<uint32_t>* positions) {
  WireReader r(payload, what);
  *cycle = r.U64();
  uint32_t n = r.Count(16);
  for (uint32_t i = 0; i < n; ++i) records->push_back(decode(&r));
  uint32_t s = r.Count(4);
  for (uint32_t i = 0; i < s; ++i) positions->push_back(r.U32());
  r.ExpectEnd();
}

}  // namespace

std::string EncodeUncached(uint64_t cycle, const std::vector<RequestMeta>& requests,
                           const std::vector<uint32_t>& stale) {
  return EncodeRecordsAndPositions(cycle, requests, &EncodeRequest, stale);
}

void DecodeUncached(const std::string& payload, uint64_t* cycle, std::vector<RequestMeta>* requests,
                    std::vector<uint32_t>* stale) {
  DecodeRecordsAndPositions(payload, "uncached requests", cycle, requests, &DecodeRequest, stale);
}

std::string EncodeResponses(uint64_t cycle, const std::vector<Response>& responses,
                            const std::vector<uint32_t>& evict) {
  return EncodeRecordsAndPositions(cycle, responses, &EncodeResponse, evict);
}

void DecodeResponses(const std::string& payload, uint64_t* cycle, std::vector<Response>* responses,
                     std::vector<uint32_t>* evict) {
  DecodeRecordsAndPositions(payload, "responses", cycle, responses, &DecodeResponse, evict);
}

uint64_t CycleOf(const std::string& payload) {
  uint64_t c = 0;
  if (payload.size() >= sizeof c) std::memcpy(&c, payload.data(), sizeof c);
  return c;
}

std::string EncodeAwaited(const std::vector<AwaitedCollective>& awaited) {
  WireWriter w;
  w.U32(static_cast<uint32_t>(awaited.size()));
  for (const auto& a : awaited) {
    w.I32(a.process_set);
    w.Str(a.name);
    w.U8(static_cast<uint8_t>(a.type));
    w.U8(a.in_program_order ? 1 : 0);
  }
  return w.Take();
}

std::vector<AwaitedCollective> DecodeAwaited(const std::string& payload) {
  constexpr uint32_t kMaxAwaited = 1u << 16;  // far more than a rank can have pending
  WireReader r(payload, "blocked report");
  const uint32_t n = r.U32();
  if (n > kMaxAwaited) throw Error(Status::Internal("blocked report: " + std::to_string(n) + " collectives"));
  std::vector<AwaitedCollective> out(n);
  for (auto& a : out) {
    a.process_set = r.I32();
    a.name = r.Str();
    const uint8_t type = r.U8();
    if (type >= kNumOpTypes) throw Error(Status::Internal("blocked report: bad op type"));
    a.type = static_cast<OpType>(type);
    const uint8_t in_program_order = r.U8();
    if (in_program_order > 1) throw Error(Status::Internal("blocked report: bad program-order flag"));
    a.in_program_order = in_program_order == 1;
  }
  r.ExpectEnd();
  return out;
}

std::string EncodeRelayedReport(int32_t origin, const std::string& report) {
  WireWriter w;
  w.I32(origin);
  w.Str(report);
  return w.Take();
}

std::string DecodeRelayedReport(const std::string& payload, int32_t* origin) {
  WireReader r(payload, "relayed blocked report");
  *origin = r.I32();
  std::string report = r.Str();
  r.ExpectEnd();
  return report;
}

std::string EncodeMissingQuery(const CollectiveKey& key) {
  WireWriter w;
  w.I32(key.first);
  w.Str(key.second);
  return w.Take();
}

CollectiveKey DecodeMissingQuery(const std::string& payload) {
  WireReader r(payload, "missing-ranks query");
  CollectiveKey key;
  key.first = r.I32();
  key.second = r.Str();
  r.ExpectEnd();
  return key;
}

std::string EncodeMissingAnswer(const CollectiveKey& key, const std::optional<std::vector<int>>& missing) {
  WireWriter w;
  w.I32(key.first);
  w.Str(key.second);
  w.U8(missing ? 1 : 0);
  if (missing) w.I32s(std::vector<int32_t>(missing->begin(), missing->end()));
  return w.Take();
}

CollectiveKey DecodeMissingAnswer(const std::string& payload, std::optional<std::vector<int>>* missing) {
  WireReader r(payload, "missing-ranks answer");
  CollectiveKey key;
  key.first = r.I32();
  key.second = r.Str();
  const uint8_t known = r.U8();
  if (known > 1) throw Error(Status::Internal("missing-ranks answer: bad flag"));
  missing->reset();
  if (known == 1) {
    const std::vector<int32_t> ranks = r.I32s();
    *missing = std::vector<int>(ranks.begin(), ranks.end());
  }
  r.ExpectEnd();
  return key;
}

}  // namespace herring
