// The decoders that see bytes from the network, numbered for the fuzz target and the seed corpus:
// the first byte of a fuzz input picks the decoder (modulo kNumWireDecoders), the rest is what
// that decoder is given. Shared by wire_decoders_fuzzer.cc and make_seed_corpus.cc so a seed is
// always routed to the decoder its bytes were encoded for.
#pragma once

#include <cstdint>

namespace herring_fuzz {

enum WireDecoder : uint8_t {
  kFrameHeader = 0,    // transport/frame.h DecodeFrameHeader (the first 40 bytes)
  kBits = 1,           // runtime/control_messages.h DecodeBits
  kCycle = 2,          // DecodeCycle (kBegin) and CycleOf (every control message)
  kContribution = 3,   // DecodeContribution (kContribute: bit vector + shard samples + host sums)
  kResult = 4,         // DecodeResult (kResult: AND of the bits + partition map updates + membership changes + total)
  kUncached = 5,       // DecodeUncached (kUncached: RequestMeta list + stale positions)
  kResponses = 6,      // DecodeResponses (kResponses: Response list + evictions)
  kRequest = 7,        // runtime/message.h DecodeRequest through a WireReader, alone
  kResponse = 8,       // DecodeResponse through a WireReader, alone
  kR2spSession = 9,    // DecodeR2spSession (kR2spSessionMessage: a server's ranges of an R2SP session)
  kR2spEnd = 10,       // DecodeR2spEnd (kR2spEndMessage)
  kAwaited = 11,       // DecodeAwaited (kBlockedReport: what a rank is blocked on)
  kMissingRanksQuery = 12,  // DecodeMissingQuery (kMissingQuery: who has not submitted this collective?)
  kMissingRanksAnswer = 13, // DecodeMissingAnswer (kMissingAnswer: those ranks, or "not known")
  kNumWireDecoders = 14,
};

}  // namespace herring_fuzz
