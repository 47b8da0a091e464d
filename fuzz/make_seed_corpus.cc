// Writes the fuzz target's seed corpus: real messages of every kind, encoded by the same encoders
// the engine sends with, each prefixed by the byte that routes it to its decoder
// (wire_fuzz_cases.h). Starting from valid messages lets the fuzzer reach the deep branches of
// each decoder (nested counts, per-tensor shapes) in seconds instead of guessing their layout.
//
// Usage: herring_fuzz_seeds DIR   (DIR must exist; prints the number of files written)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/control_messages.h"
#include "runtime/message.h"
#include "runtime/wire.h"
#include "transport/frame.h"
#include "wire_fuzz_cases.h"

namespace {

using namespace herring;
using namespace herring_fuzz;

int written = 0;

// A seed must be a message its decoder accepts (otherwise it would not lead the fuzzer into the
// decoder's deep branches); throws herring::Error if not.
void DecodeOrThrow(WireDecoder decoder, const std::string& p) {
  uint64_t cycle = 0;
  switch (decoder) {
    case kFrameHeader: {
      FrameHeader h;
      ThrowIfError(DecodeFrameHeader(reinterpret_cast<const uint8_t*>(p.data()), &h));
      break;
    }
    case kBits: DecodeBits(p, &cycle); break;
    case kCycle: DecodeCycle(p); break;
    case kContribution: {
      std::vector<ShardSample> samples;
      std::vector<HostSum> sums;
      DecodeContribution(p, &cycle, &samples, &sums);
      break;
    }
    case kResult: {
      std::vector<MapUpdate> maps;
      std::vector<MembershipChange> members;
      CarriedTotal total;
      DecodeResult(p, &cycle, &maps, &members, &total);
      break;
    }
    case kUncached: {
      std::vector<RequestMeta> requests;
      std::vector<uint32_t> stale;
      DecodeUncached(p, &cycle, &requests, &stale);
      break;
    }
    case kResponses: {
      std::vector<Response> responses;
      std::vector<uint32_t> evict;
      DecodeResponses(p, &cycle, &responses, &evict);
      break;
    }
    case kRequest: {
      WireReader r(p, "request");
      DecodeRequest(&r);
      r.ExpectEnd();
      break;
    }
    case kResponse: {
      WireReader r(p, "response");
      DecodeResponse(&r);
      r.ExpectEnd();
      break;
    }
    case kR2spSession: DecodeR2spSession(p); break;
    case kR2spEnd: DecodeR2spEnd(p); break;
    case kAwaited: DecodeAwaited(p); break;
    case kMissingRanksQuery: DecodeMissingQuery(p); break;
    case kMissingRanksAnswer: {
      std::optional<std::vector<int>> missing;
      DecodeMissingAnswer(p, &missing);
      break;
    }
    default: throw Error(Status::InvalidArgument("unknown decoder"));
  }
}

void Write(const std::string& dir, WireDecoder decoder, const std::string& bytes) {
  try {
    DecodeOrThrow(decoder, bytes);
  } catch (const Error& e) {
    std::fprintf(stderr, "seed %d (decoder %d) is not a valid message: %s\n", written, static_cast<int>(decoder),
                 e.what());
    std::exit(1);
  }
  std::string path = dir + "/seed_" + std::to_string(static_cast<int>(decoder)) + "_" + std::to_string(written);
  std::ofstream out(path, std::ios::binary);
  out.put(static_cast<char>(decoder));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  ++written;
}

std::string Header(FrameKind kind, uint32_t payload, uint64_t tag, uint64_t offset, uint64_t total) {
  FrameHeader h;
  h.kind = kind;
  h.payload_bytes = payload;
  h.tag = tag;
  h.offset = offset;
  h.total_bytes = total;
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(h, bytes);
  return std::string(reinterpret_cast<const char*>(bytes), kFrameHeaderBytes);
}

// The bit vector of a cache of `capacity` entries with `ready` positions ready on this rank.
std::vector<uint64_t> Bits(uint32_t capacity, uint32_t ready) {
  BitLayout layout(capacity);
  std::vector<uint64_t> bits(layout.words(), ~0ull);
  bits[0] = kAllStatusBits & ~kNoUncached;
  for (uint32_t p = 0; p < ready; ++p) bits[layout.idle_word(p)] &= ~BitLayout::mask(p);
  return bits;
}

std::vector<RequestMeta> Requests() {
  std::vector<RequestMeta> out;
  RequestMeta q;
  q.name = "DistributedOptimizer.Allreduce.layer1.weight";
  q.rank = 2;
  q.dtype = DataType::kFloat32;
  q.reduce_op = ReduceOp::kAverage;
  q.tensors = {{{512, 256}, {}}};
  out.push_back(q);

  q.name = "grouped.0";
  q.reduce_op = ReduceOp::kSum;
  q.prescale = 0.5;
  q.postscale = 0.25;
  q.dtype = DataType::kBFloat16;
  q.tensors = {{{10}, {}}, {{3, 4, 5}, {}}, {{}, {}}};
  out.push_back(q);

  RequestMeta g;
  g.type = OpType::kAllgather;
  g.name = "allgather.features";
  g.dtype = DataType::kInt64;
  g.tensors = {{{7, 3}, {}}};
  out.push_back(g);

  RequestMeta b;
  b.type = OpType::kBroadcast;
  b.name = "broadcast.parameters";
  b.root = 1;
  b.dtype = DataType::kFloat64;
  b.tensors = {{{100}, {}}};
  out.push_back(b);

  RequestMeta a;
  a.type = OpType::kAlltoall;
  a.name = "alltoall.tokens";
  a.dtype = DataType::kUInt8;
  a.tensors = {{{9, 2}, {2, 3, 4}}};
  a.waited_ms = 1500;
  out.push_back(a);

  RequestMeta rs;
  rs.type = OpType::kReducescatter;
  rs.name = "reducescatter.grad";
  rs.reduce_op = ReduceOp::kMax;
  rs.dtype = DataType::kFloat16;
  rs.tensors = {{{11, 4}, {}}};
  out.push_back(rs);

  RequestMeta barrier;
  barrier.type = OpType::kBarrier;
  barrier.name = "barrier";
  out.push_back(barrier);

  RequestMeta join;
  join.type = OpType::kJoin;
  join.name = "join";
  out.push_back(join);

  RequestMeta add;
  add.type = OpType::kAddProcessSet;
  add.name = "process_set.add";
  add.set_ranks = {0, 2, 3};
  out.push_back(add);

  RequestMeta remove;
  remove.type = OpType::kRemoveProcessSet;
  remove.name = "process_set.remove";
  remove.set_id = 1;
  remove.process_set = 0;
  out.push_back(remove);
  return out;
}

std::vector<Response> Responses() {
  std::vector<Response> out;
  Response p;
  p.name = "DistributedOptimizer.Allreduce.layer1.weight";
  p.reduce_op = ReduceOp::kAverage;
  p.shapes = {{512, 256}};
  out.push_back(p);

  Response g;
  g.type = OpType::kAllgather;
  g.name = "allgather.features";
  g.dtype = DataType::kInt64;
  g.shapes = {{7, 3}};
  g.per_member = {{7, 0, 12, 1}};
  out.push_back(g);

  Response a;
  a.type = OpType::kAlltoall;
  a.name = "alltoall.tokens";
  a.dtype = DataType::kUInt8;
  a.shapes = {{9, 2}};
  a.per_member = {{2, 3, 4}, {1, 1, 7}, {0, 0, 9}};
  a.joined = {3};
  out.push_back(a);

  Response add;
  add.type = OpType::kAddProcessSet;
  add.name = "process_set.add";
  add.set_ranks = {0, 2, 3};
  add.set_id = 2;
  out.push_back(add);

  Response bad;
  bad.name = "grad.7";
  bad.error = "Mismatched allreduce tensor shapes: rank 0 has [3, 4], rank 2 has [4, 3]";
  out.push_back(bad);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const uint64_t token = 0x9c3a5d7e11f00d42ull;

  // Every frame kind, with the sizes the transport really uses.
  Write(dir, kFrameHeader, Header(FrameKind::kHello, kNonceBytes, token, (2ull << 16) | 1, 0) + std::string(kNonceBytes, 'n'));
  Write(dir, kFrameHeader, Header(FrameKind::kHelloAck, kNonceBytes + kProofBytes, token, (0ull << 16) | 1, 0));
  Write(dir, kFrameHeader, Header(FrameKind::kHelloProof, kProofBytes, token, (2ull << 16) | 1, 0));
  Write(dir, kFrameHeader, Header(FrameKind::kData, 1 << 20, 0x100000007ull, 3ull << 20, 64ull << 20));
  Write(dir, kFrameHeader, Header(FrameKind::kData, 0, 42, 0, 0));
  Write(dir, kFrameHeader, Header(FrameKind::kControl, 280, kContributeMessage, 0, 0));
  Write(dir, kFrameHeader, Header(FrameKind::kPing, 0, 0, 0, 0));
  Write(dir, kFrameHeader, Header(FrameKind::kGoodbye, 0, 0, 0, 0));

  // Negotiation messages of a cache of 1024 entries and of a small one.
  Write(dir, kBits, EncodeBits(1, Bits(1024, 0)));
  Write(dir, kBits, EncodeBits(123456, Bits(1024, 200)));
  Write(dir, kBits, EncodeBits(9, Bits(64, 3)));
  Write(dir, kCycle, EncodeCycle(77));
  Write(dir, kContribution, EncodeContribution(5, Bits(1024, 10), {}));
  Write(dir, kContribution, EncodeContribution(6, Bits(128, 10), {{0, 0.0123, 4.0}, {3, 0.5, 16.25}}));
  // With host sums of a small allreduce riding up the leaders' tree (engine/host_sums_in_tree.cc).
  Write(dir, kContribution, EncodeContribution(8, Bits(128, 10), {}, {{4, 17, std::string(32, '\x01')}, {8, 17, "abcd"}}));
  Write(dir, kResult, EncodeResult(5, Bits(1024, 10), {}, {}));
  Write(dir, kResult, EncodeResult(8, Bits(128, 10), {}, {}, CarriedTotal{17, std::string(32, '\x02')}));
  Write(dir, kResult, EncodeResult(6, Bits(128, 10), {{0, 3, {1.0, 1.0, 0.5, 1.5}}, {2, 1, {2.0}}}, {}));
  Write(dir, kResult, EncodeResult(7, Bits(64, 3), {},
                                   {{MembershipChange::kJoin, 6, "simhost3"}, {MembershipChange::kLeave, 4, ""}}));

  const auto requests = Requests();
  const auto responses = Responses();
  Write(dir, kUncached, EncodeUncached(3, requests, {}));
  Write(dir, kUncached, EncodeUncached(4, {requests[0]}, {3, 17}));
  Write(dir, kUncached, EncodeUncached(5, {}, {0}));
  Write(dir, kResponses, EncodeResponses(3, responses, {}));
  Write(dir, kResponses, EncodeResponses(4, {responses[0], responses.back()}, {1, 2}));
  for (const auto& q : requests) {
    WireWriter w;
    EncodeRequest(q, &w);
    Write(dir, kRequest, w.Take());
  }
  for (const auto& p : responses) {
    WireWriter w;
    EncodeResponse(p, &w);
    Write(dir, kResponse, w.Take());
  }
  R2spSessionSpec r2sp;
  r2sp.id = 3;
  r2sp.count = 1000;
  r2sp.lr = 0.05;
  r2sp.momentum = 0.9;
  r2sp.workers = {0, 1, 2, 3};
  r2sp.shards = {{1, 336, 672}, {5, 672, 1000}};
  Write(dir, kR2spSession, EncodeR2spSession(r2sp));
  Write(dir, kR2spEnd, EncodeR2spEnd(3));
  Write(dir, kAwaited, EncodeAwaited({{0, "grad.fc1", OpType::kAllreduce}, {0, "join", OpType::kJoin},
                                        {0, "torch.allreduce.float32.4.sum", OpType::kAllreduce, true}}));
  Write(dir, kMissingRanksQuery, EncodeMissingQuery({0, "torch.allreduce.float32.4.sum"}));
  Write(dir, kMissingRanksAnswer, EncodeMissingAnswer({1, "grad.fc1"}, std::vector<int>{2, 5}));
  Write(dir, kMissingRanksAnswer, EncodeMissingAnswer({0, "grad.fc2"}, std::nullopt));
  std::printf("%d\n", written);
  return 0;
}
