#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>

#include "common/status.h"

namespace herring {

Digest Sha256(const void* data, size_t bytes) {
  Digest d{};
  unsigned int length = 0;
  if (EVP_Digest(data, bytes, d.data(), &length, EVP_sha256(), nullptr) != 1 || length != d.size()) {
    throw Error(Status::Internal("OpenSSL SHA-256 failed"));
  }
  return d;
}

Digest HmacSha256(const std::string& key, const std::string& message) {
  Digest d{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const uint8_t*>(message.data()),
           message.size(), d.data(), &length) == nullptr ||
      length != d.size()) {
    throw Error(Status::Internal("OpenSSL HMAC-SHA256 failed"));
  }
  return d;
}

bool DigestsEqual(const uint8_t* a, const uint8_t* b, size_t bytes) { return CRYPTO_memcmp(a, b, bytes) == 0; }

std::string ToHex(const uint8_t* data, size_t bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < bytes; ++i) {
    s += digits[data[i] >> 4];
    s += digits[data[i] & 15];
  }
  return s;
}

std::string RandomBytes(size_t bytes) {
  std::string out(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(&out[got], bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(Status::Internal("getrandom failed"));
    }
    got += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace herring
