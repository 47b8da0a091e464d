#include "transport/transport.h"

namespace herring {

std::string SizeMismatchText(int me, int peer, uint64_t tag, uint64_t expected, uint64_t sent) {
  return "rank " + std::to_string(me) + ": size mismatch receiving tag " + std::to_string(tag) + " from rank " +
         std::to_string(peer) + ": expected " + std::to_string(expected) + " bytes but rank " +
         std::to_string(peer) + " sent " + std::to_string(sent) + " bytes";
}

}  // namespace herring
