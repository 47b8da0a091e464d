// A fast 64-bit hash of a byte range (word-wise multiply-xorshift, ~memory speed). For detecting
// accidental differences between ranks' results (HERRING_VERIFY), not an adversary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace herring {

inline uint64_t HashBytes(const void* data, size_t bytes, uint64_t seed = 0x9E3779B97F4A7C15ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed ^ (bytes * 0xff51afd7ed558ccdull);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ (w * 0x87c37b91114253d5ull)) * 0x4cf5ad432745937full;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, bytes - i);
  h = (h ^ (tail * 0x87c37b91114253d5ull)) * 0x4cf5ad432745937full;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

}  // namespace herring
