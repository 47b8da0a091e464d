// WireWriter / WireReader: the little-endian encoding of negotiation messages. The reader checks
// every length against what is left, so a corrupt or hostile message is an error, never an
// out-of-bounds read or a giant allocation.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/status.h"

namespace herring {

class WireWriter {
 public:
  void U8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, sizeof v); }
  void I32(int32_t v) { Raw(&v, sizeof v); }
  void U64(uint64_t v) { Raw(&v, sizeof v); }
  void I64(int64_t v) { Raw(&v, sizeof v); }
  void F64(double v) { Raw(&v, sizeof v); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    buf_.append(s);
  }
  void I64s(const std::vector<int64_t>& v) {
    U32(static_cast<uint32_t>(v.size()));
    for (auto x : v) I64(x);
  }
  void I32s(const std::vector<int32_t>& v) {
    U32(static_cast<uint32_t>(v.size()));
    for (auto x : v) I32(x);
  }
  void U64s(const std::vector<uint64_t>& v) {
    U32(static_cast<uint32_t>(v.size()));
    for (auto x : v) U64(x);
  }
  std::string Take() { return std::move(buf_); }

 private:
  void Raw(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string buf_;
};

class WireReader {
 public:
  WireReader(const std::string& data, const char* what) : data_(data), what_(what) {}

  uint8_t U8() { uint8_t v; Raw(&v, 1); return v; }
  uint32_t U32() { uint32_t v; Raw(&v, sizeof v); return v; }
  int32_t I32() { int32_t v; Raw(&v, sizeof v); return v; }
  uint64_t U64() { uint64_t v; Raw(&v, sizeof v); return v; }
  int64_t I64() { int64_t v; Raw(&v, sizeof v); return v; }
  double F64() { double v; Raw(&v, sizeof v); return v; }
  std::string Str() {
    uint32_t n = Count(1);
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<int64_t> I64s() { return Vec<int64_t>(); }
  std::vector<int32_t> I32s() { return Vec<int32_t>(); }
  std::vector<uint64_t> U64s() { return Vec<uint64_t>(); }
  // A count of items of `item_bytes` each that must fit in what is left of the message.
  uint32_t Count(size_t item_bytes) {
    uint32_t n = U32();
    if (item_bytes > 0 && n > (data_.size() - pos_) / item_bytes) Fail("count exceeds message");
    return n;
  }
  bool AtEnd() const { return pos_ == data_.size(); }
  void ExpectEnd() {
    if (!AtEnd()) Fail("trailing bytes");
  }

 private:
  template <typename T>
  std::vector<T> Vec() {
    uint32_t n = Count(sizeof(T));
    std::vector<T> v(n);
    if (n) Raw(v.data(), n * sizeof(T));
    return v;
  }
  void Raw(void* p, size_t n) {
    if (n > data_.size() - pos_) Fail("truncated");
    std::memcpy(p, data_.data() + pos_, n);
    pos_ += n;
  }
  [[noreturn]] void Fail(const char* why) {
    throw Error(Status::Internal(std::string("malformed ") + what_ + " message: " + why));
  }

  const std::string& data_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace herring
