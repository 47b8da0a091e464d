#include "transport/frame.h"

#include <cstdio>
#include <string>

namespace herring {
namespace {

// Byte layout of the header (little-endian):
//   0 magic u32 | 4 version u16 | 6 kind u8 | 7 flags u8 | 8 payload_bytes u32 | 12 reserved u32
//   16 tag u64 | 24 offset u64 | 32 total_bytes u64
constexpr size_t kMagicAt = 0, kVersionAt = 4, kKindAt = 6, kFlagsAt = 7, kPayloadAt = 8,
                 kReservedAt = 12, kTagAt = 16, kOffsetAt = 24, kTotalAt = 32;

template <typename T>
void Put(uint8_t* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

template <typename T>
T Get(const uint8_t* in) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(in[i]) << (8 * i);
  return value;
}

Status Invalid(const std::string& what) {
  return Status::InvalidArgument("invalid frame: " + what);
}

std::string Num(uint64_t v) { return std::to_string(v); }

Status CheckEmpty(const FrameHeader& h, const char* kind_name, bool allow_tag_offset) {
  if (h.payload_bytes != 0) {
    return Invalid(std::string(kind_name) + " frame with a payload of " + Num(h.payload_bytes) +
                   " bytes");
  }
  if (h.total_bytes != 0 || (!allow_tag_offset && (h.tag != 0 || h.offset != 0))) {
    return Invalid(std::string(kind_name) + " frame with non-zero fields");
  }
  return Status::OK();
}

Status CheckData(const FrameHeader& h) {
  if (h.total_bytes > kMaxMessageBytes) {
    return Invalid("message of " + Num(h.total_bytes) + " bytes exceeds the limit of " +
                   Num(kMaxMessageBytes));
  }
  if (h.payload_bytes > kMaxChunkBytes) {
    return Invalid("data chunk of " + Num(h.payload_bytes) + " bytes exceeds the limit of " +
                   Num(kMaxChunkBytes));
  }
  if (h.offset > h.total_bytes || h.payload_bytes > h.total_bytes - h.offset) {
    return Invalid("data chunk [" + Num(h.offset) + ", +" + Num(h.payload_bytes) +
                   ") outside its message of " + Num(h.total_bytes) + " bytes");
  }
  // Only a zero-byte message may travel as an empty chunk; otherwise every chunk must make
  // progress, which is what lets the receiver count a message complete by its byte total.
  if (h.payload_bytes == 0 && h.total_bytes != 0) return Invalid("empty data chunk");
  return Status::OK();
}

Status CheckHandshake(const FrameHeader& h, const char* kind_name, uint32_t payload) {
  if (h.payload_bytes != payload) {
    return Invalid(std::string(kind_name) + " frame with a payload of " + Num(h.payload_bytes) +
                   " bytes, expected " + Num(payload));
  }
  if (h.total_bytes != 0) return Invalid(std::string(kind_name) + " frame with a message size");
  return Status::OK();
}

Status CheckControl(const FrameHeader& h) {
  if (h.payload_bytes >= kMaxControlPayloadBytes) {
    return Invalid("control payload of " + Num(h.payload_bytes) + " bytes exceeds the limit of " +
                   Num(kMaxControlPayloadBytes));
  }
  if (h.offset != 0 || h.total_bytes != 0) return Invalid("control frame with non-zero fields");
  return Status::OK();
}

}  // namespace

void EncodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]) {
  Put<uint32_t>(out + kMagicAt, header.magic);
  Put<uint16_t>(out + kVersionAt, header.version);
  out[kKindAt] = static_cast<uint8_t>(header.kind);
  out[kFlagsAt] = header.flags;
  Put<uint32_t>(out + kPayloadAt, header.payload_bytes);
  Put<uint32_t>(out + kReservedAt, 0);
  Put<uint64_t>(out + kTagAt, header.tag);
  Put<uint64_t>(out + kOffsetAt, header.offset);
  Put<uint64_t>(out + kTotalAt, header.total_bytes);
}

Status DecodeFrameHeader(const uint8_t in[kFrameHeaderBytes], FrameHeader* out) {
  FrameHeader h;
  h.magic = Get<uint32_t>(in + kMagicAt);
  if (h.magic != kFrameMagic) {
    char text[64];
    std::snprintf(text, sizeof(text), "bad magic 0x%08x (not a herring peer?)", h.magic);
    return Invalid(text);
  }
  h.version = Get<uint16_t>(in + kVersionAt);
  if (h.version != kWireVersion) {
    return Invalid("wire version " + Num(h.version) + ", expected " + Num(kWireVersion) +
                   " (mixed hvd_herring versions?)");
  }
  uint8_t kind = in[kKindAt];
  h.flags = in[kFlagsAt];
  uint32_t reserved = Get<uint32_t>(in + kReservedAt);
  if (h.flags != 0 || reserved != 0) return Invalid("reserved header bits are set");
  h.payload_bytes = Get<uint32_t>(in + kPayloadAt);
  h.tag = Get<uint64_t>(in + kTagAt);
  h.offset = Get<uint64_t>(in + kOffsetAt);
  h.total_bytes = Get<uint64_t>(in + kTotalAt);

  Status s;
  switch (kind) {
    case static_cast<uint8_t>(FrameKind::kHello): s = CheckHandshake(h, "hello", kNonceBytes); break;
    case static_cast<uint8_t>(FrameKind::kHelloAck):
      s = CheckHandshake(h, "hello-ack", kNonceBytes + kProofBytes);
      break;
    case static_cast<uint8_t>(FrameKind::kHelloProof): s = CheckHandshake(h, "hello-proof", kProofBytes); break;
    case static_cast<uint8_t>(FrameKind::kData): s = CheckData(h); break;
    case static_cast<uint8_t>(FrameKind::kControl): s = CheckControl(h); break;
    case static_cast<uint8_t>(FrameKind::kPing): s = CheckEmpty(h, "ping", false); break;
    case static_cast<uint8_t>(FrameKind::kGoodbye): s = CheckEmpty(h, "goodbye", false); break;
    default: return Invalid("unknown frame kind " + Num(kind));
  }
  if (!s.ok()) return s;
  h.kind = static_cast<FrameKind>(kind);
  *out = h;
  return Status::OK();
}

}  // namespace herring
