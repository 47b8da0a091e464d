// The wire format between two processes of a job: every byte on every stream belongs to a frame
// (a fixed 40-byte little-endian header, then payload_bytes of payload). The decoder is the first
// code to see bytes from the network, so it validates everything before anything is allocated.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace herring {

constexpr uint32_t kFrameMagic = 0x48524E47;  // "HRNG"
constexpr uint16_t kWireVersion = 2;
constexpr size_t kFrameHeaderBytes = 40;
// Upper bounds that a decoded header must respect (a stranger's absurd length is rejected
// before anything is allocated).
constexpr uint64_t kMaxControlPayloadBytes = 64ull << 20;
constexpr uint64_t kMaxMessageBytes = 1ull << 40;
// Handshake payloads: a fresh random nonce per side and an HMAC-SHA256 proof per side.
constexpr uint32_t kNonceBytes = 32;
constexpr uint32_t kProofBytes = 32;
// One data chunk (the sender splits messages into TransportOptions::chunk_bytes pieces).
constexpr uint64_t kMaxChunkBytes = 256ull << 20;

enum class FrameKind : uint8_t {
  kHello = 1,       // first frame of a connection: tag = job token, offset = (rank << 16) | stream,
                    // payload = the dialer's nonce
  kHelloAck = 2,    // acceptor's answer: same fields, payload = its nonce + its proof of the secret
  kHelloProof = 7,  // dialer's proof of the secret; only then does the acceptor admit it
  kData = 3,      // one chunk of a bulk message: tag, offset of the chunk, total_bytes of the message
  kControl = 4,   // one whole control message: tag = message type
  kPing = 5,      // liveness when a connection is otherwise idle; no payload
  kGoodbye = 6,   // orderly close: the peer shut down, it did not crash
};

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kWireVersion;
  FrameKind kind = FrameKind::kPing;
  uint8_t flags = 0;
  uint32_t payload_bytes = 0;  // bytes of payload after this header
  uint64_t tag = 0;
  uint64_t offset = 0;
  uint64_t total_bytes = 0;
};

void EncodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]);
// Checks magic, version, kind, and that sizes are consistent (a data chunk lies inside its
// message, a control payload is under kMaxControlPayloadBytes, a ping has no payload...).
Status DecodeFrameHeader(const uint8_t in[kFrameHeaderBytes], FrameHeader* out);

}  // namespace herring
