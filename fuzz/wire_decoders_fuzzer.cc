// libFuzzer target over every decoder that sees bytes from the network: the frame header decoder
// of the transport, the negotiation codecs of the engine and R2SP's session messages. Built with
// -fsanitize=fuzzer,address,undefined (fuzz/CMakeLists.txt), so any out-of-bounds read, overflow
// or other undefined behaviour is a crash.
//
// What each decoder must do with arbitrary bytes: either throw herring::Error (or return a
// non-OK Status), or return a value that
//   - re-encodes to exactly the bytes it was decoded from (the encodings are canonical, so a
//     decoder that accepts something else has skipped a field or misread a length), and
//   - for frame headers, respects the limits the I/O loop relies on when it allocates and
//     places payloads (chunk inside its message, control payload under its limit...).
// Any other exception (std::bad_alloc, std::length_error...) is a bug: the engine only turns
// herring::Error into a clean job failure.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
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

[[noreturn]] void Fail(const char* decoder, const std::string& what) {
  std::fprintf(stderr, "wire fuzzer: %s: %s\n", decoder, what.c_str());
  std::abort();
}

void Require(bool ok, const char* decoder, const char* what) {
  if (!ok) Fail(decoder, what);
}

void CheckFrameHeader(const std::string& bytes) {
  if (bytes.size() < kFrameHeaderBytes) return;
  // Exactly 40 bytes on the heap: a read past the header is caught by AddressSanitizer.
  std::unique_ptr<uint8_t[]> in(new uint8_t[kFrameHeaderBytes]);
  std::copy(bytes.begin(), bytes.begin() + kFrameHeaderBytes, in.get());
  FrameHeader h;
  Status s = DecodeFrameHeader(in.get(), &h);
  if (!s.ok()) {
    Require(!s.message().empty(), "DecodeFrameHeader", "rejection without a reason");
    return;
  }
  uint8_t again[kFrameHeaderBytes];
  EncodeFrameHeader(h, again);
  Require(std::equal(again, again + kFrameHeaderBytes, in.get()), "DecodeFrameHeader",
          "accepted header does not re-encode to the same bytes");
  switch (h.kind) {
    case FrameKind::kHello:
      Require(h.payload_bytes == kNonceBytes && h.total_bytes == 0, "DecodeFrameHeader", "hello sizes");
      break;
    case FrameKind::kHelloAck:
      Require(h.payload_bytes == kNonceBytes + kProofBytes && h.total_bytes == 0, "DecodeFrameHeader",
              "hello-ack sizes");
      break;
    case FrameKind::kHelloProof:
      Require(h.payload_bytes == kProofBytes && h.total_bytes == 0, "DecodeFrameHeader", "proof sizes");
      break;
    case FrameKind::kData:
      Require(h.total_bytes <= kMaxMessageBytes, "DecodeFrameHeader", "message over the limit");
      Require(h.payload_bytes <= kMaxChunkBytes, "DecodeFrameHeader", "chunk over the limit");
      Require(h.offset <= h.total_bytes && h.payload_bytes <= h.total_bytes - h.offset, "DecodeFrameHeader",
              "chunk outside its message");
      Require(h.payload_bytes > 0 || h.total_bytes == 0, "DecodeFrameHeader", "empty chunk of a message");
      break;
    case FrameKind::kControl:
      Require(h.payload_bytes < kMaxControlPayloadBytes, "DecodeFrameHeader", "control payload over the limit");
      break;
    case FrameKind::kPing:
    case FrameKind::kGoodbye:
      Require(h.payload_bytes == 0 && h.total_bytes == 0, "DecodeFrameHeader", "payload on an empty frame");
      break;
    default:
      Fail("DecodeFrameHeader", "accepted an unknown kind");
  }
}

void CheckBits(const std::string& p) {
  uint64_t cycle = 0;
  auto bits = DecodeBits(p, &cycle);
  Require(EncodeBits(cycle, bits) == p, "DecodeBits", "does not re-encode to the same bytes");
}

void CheckCycle(const std::string& p) {
  uint64_t peeked = CycleOf(p);  // never throws: used on every control message before decoding
  if (p.size() < sizeof(uint64_t)) Require(peeked == 0, "CycleOf", "cycle of a short message");
  uint64_t cycle = DecodeCycle(p);
  Require(cycle == peeked, "DecodeCycle", "disagrees with CycleOf");
  Require(EncodeCycle(cycle) == p, "DecodeCycle", "does not re-encode to the same bytes");
}

void CheckContribution(const std::string& p) {
  uint64_t cycle = 0;
  std::vector<ShardSample> samples;
  std::vector<HostSum> sums;
  auto bits = DecodeContribution(p, &cycle, &samples, &sums);
  Require(EncodeContribution(cycle, bits, samples, sums) == p, "DecodeContribution",
          "does not re-encode to the same bytes");
}

void CheckResult(const std::string& p) {
  uint64_t cycle = 0;
  std::vector<MapUpdate> maps;
  std::vector<MembershipChange> members;
  CarriedTotal total;
  auto bits = DecodeResult(p, &cycle, &maps, &members, &total);
  Require(EncodeResult(cycle, bits, maps, members, total) == p, "DecodeResult", "does not re-encode to the same bytes");
}

void CheckUncached(const std::string& p) {
  uint64_t cycle = 0;
  std::vector<RequestMeta> requests;
  std::vector<uint32_t> stale;
  DecodeUncached(p, &cycle, &requests, &stale);
  Require(EncodeUncached(cycle, requests, stale) == p, "DecodeUncached", "does not re-encode to the same bytes");
}

void CheckResponses(const std::string& p) {
  uint64_t cycle = 0;
  std::vector<Response> responses;
  std::vector<uint32_t> evict;
  DecodeResponses(p, &cycle, &responses, &evict);
  Require(EncodeResponses(cycle, responses, evict) == p, "DecodeResponses",
          "does not re-encode to the same bytes");
}

// A request or a response decoded alone (DecodeRequest, DecodeResponse): its enumerations in
// range, and it re-encodes to the same bytes.
template <typename Message>
void CheckMessage(const std::string& p, const char* what, const char* decoder, Message (*decode)(WireReader*),
                  void (*encode)(const Message&, WireWriter*)) {
  WireReader r(p, what);
  Message m = decode(&r);
  r.ExpectEnd();
  Require(static_cast<int>(m.type) < kNumOpTypes, decoder, "op type out of range");
  Require(IsValidDataType(static_cast<int>(m.dtype)), decoder, "dtype out of range");
  Require(IsValidReduceOp(static_cast<int>(m.reduce_op)), decoder, "reduce op out of range");
  WireWriter w;
  encode(m, &w);
  Require(w.Take() == p, decoder, "does not re-encode to the same bytes");
}

void CheckRequest(const std::string& p) {
  CheckMessage<RequestMeta>(p, "request", "DecodeRequest", &DecodeRequest, &EncodeRequest);
}

void CheckResponse(const std::string& p) {
  CheckMessage<Response>(p, "response", "DecodeResponse", &DecodeResponse, &EncodeResponse);
}

void CheckR2spSession(const std::string& p) {
  R2spSessionSpec spec = DecodeR2spSession(p);
  for (const auto& s : spec.shards) {
    Require(s.begin >= 0 && s.begin <= s.end && s.end <= spec.count, "DecodeR2spSession", "range outside the parameters");
    Require(s.shard >= 0 && s.shard < kMaxR2spShards, "DecodeR2spSession", "shard index out of range");
  }
  Require(spec.id >= 1 && spec.id <= kMaxR2spSessionId, "DecodeR2spSession", "session id out of range");
  Require(EncodeR2spSession(spec) == p, "DecodeR2spSession", "does not re-encode to the same bytes");
}

void CheckR2spEnd(const std::string& p) {
  Require(EncodeR2spEnd(DecodeR2spEnd(p)) == p, "DecodeR2spEnd", "does not re-encode to the same bytes");
}

void CheckAwaited(const std::string& p) {
  Require(EncodeAwaited(DecodeAwaited(p)) == p, "DecodeAwaited", "does not re-encode to the same bytes");
}

void CheckMissingQuery(const std::string& p) {
  Require(EncodeMissingQuery(DecodeMissingQuery(p)) == p, "DecodeMissingQuery", "does not re-encode to the same bytes");
}

void CheckMissingAnswer(const std::string& p) {
  std::optional<std::vector<int>> missing;
  const CollectiveKey key = DecodeMissingAnswer(p, &missing);
  Require(EncodeMissingAnswer(key, missing) == p, "DecodeMissingAnswer", "does not re-encode to the same bytes");
}

const char* DecoderName(int which) {
  static const char* names[kNumWireDecoders] = {"frame header", "bits", "cycle", "contribution", "result",
                                                "uncached", "responses", "request", "response", "R2SP session",
                                                "R2SP end", "blocked report", "missing-ranks query",
                                                "missing-ranks answer"};
  return names[which];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int which = data[0] % kNumWireDecoders;
  const std::string payload(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (which) {
      case kFrameHeader: CheckFrameHeader(payload); break;
      case kBits: CheckBits(payload); break;
      case kCycle: CheckCycle(payload); break;
      case kContribution: CheckContribution(payload); break;
      case kResult: CheckResult(payload); break;
      case kUncached: CheckUncached(payload); break;
      case kResponses: CheckResponses(payload); break;
      case kRequest: CheckRequest(payload); break;
      case kResponse: CheckResponse(payload); break;
      case kR2spSession: CheckR2spSession(payload); break;
      case kR2spEnd: CheckR2spEnd(payload); break;
      case kAwaited: CheckAwaited(payload); break;
      case kMissingRanksQuery: CheckMissingQuery(payload); break;
      case kMissingRanksAnswer: CheckMissingAnswer(payload); break;
    }
  } catch (const Error& e) {
    // The expected outcome for malformed bytes: a clean error with a reason.
    Require(!e.status().ok() && !e.status().message().empty(), DecoderName(which), "Error without a reason");
  } catch (const std::exception& e) {
    Fail(DecoderName(which), std::string("threw something other than herring::Error: ") + e.what());
  }
  return 0;
}
