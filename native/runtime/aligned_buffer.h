// AlignedBuffer: engine-owned memory for outputs and scratch, 64-byte aligned because TensorFlow
// rejects misaligned buffers handed to it and vector loads like it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace herring {

class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes) : bytes_(bytes) {
    size_t rounded = ((bytes + 63) / 64) * 64;
    data_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded ? rounded : 64));
    if (!data_) throw std::bad_alloc();
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  uint8_t* data_;
  size_t bytes_;
};

// A scratch buffer that grows on demand and keeps its memory between uses.
class ScratchBuffer {
 public:
  uint8_t* Get(size_t bytes) {
    if (!buf_ || buf_->size() < bytes) buf_ = std::make_unique<AlignedBuffer>(bytes);
    return buf_->data();
  }

 private:
  std::unique_ptr<AlignedBuffer> buf_;
};

}  // namespace herring
