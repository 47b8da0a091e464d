// The connection handshake's cryptography: both ends of every connection prove they hold the
// job's secret (HMAC-SHA256 over a fresh nonce) without sending it. The primitives come from
// OpenSSL's libcrypto, the implementation the field trusts and audits; this file only adapts them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace herring {

using Digest = std::array<uint8_t, 32>;

Digest Sha256(const void* data, size_t bytes);
Digest HmacSha256(const std::string& key, const std::string& message);
// Compares in time independent of where the first difference is (CRYPTO_memcmp).
bool DigestsEqual(const uint8_t* a, const uint8_t* b, size_t bytes);
std::string ToHex(const uint8_t* data, size_t bytes);
// Random bytes from the kernel's CSPRNG (getrandom). Throws Error if none can be had.
std::string RandomBytes(size_t bytes);

}  // namespace herring
