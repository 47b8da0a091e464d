// Zero-copy memory: tensors that the other ranks of this host can read and write where they are.
//
// Staging through the shared-memory arena costs each rank (5 - 1/N)·S bytes of memory traffic per
// allreduce of S bytes (copy in, reduce, copy out; (5 + 1/N)·S with a prescale, docs/zero_copy.md);
// the least any local allreduce can move is 2·S (read every input once, write every output once).
// Getting there needs the ranks to reach each other's tensors in place. Cross-memory attach
// (process_vm_readv) copies through the kernel at a third of memcpy's rate on this kind of
// machine, so herring instead gives out tensor memory that its peers map: one memfd per process,
// sparse, mapped by the other local ranks through /proc/<pid>/fd/<fd> (same user; no name in
// /dev/shm, so nothing can be left behind).
//
// ZeroCopyPool is a memfd and a first-fit allocator over it; allocations are whole pages so that
// freeing one gives its memory back (hole punching). PeerPools maps the pools of the other local
// ranks on first use and keeps them mapped.
//
// Ownership (no process-wide singleton): ZeroCopyMemory is this process's zero-copy memory as its
// owner holds it. The Python front (hvd_herring.basics) owns one; the first zero_copy_empty creates
// the pool in it. Every allocation holds a reference to its pool, so the pool lives as long as the
// front or any tensor allocated from it, whichever is longer (tensors outlive engines across
// elastic resets). The front hands the same ZeroCopyMemory to every engine it creates
// (EngineOptions::zero_copy), and algorithms find the pool through ExecContext::zero_copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

namespace herring {

// What a peer needs to map a pool (written into the arena's notice area, so plain data).
struct ZeroCopyPoolId {
  uint64_t nonce = 0;          // random per pool: a recycled pid cannot pass for its predecessor
  uint64_t pid_namespace = 0;  // /proc/<pid> only means the same process inside one pid namespace
  uint64_t capacity = 0;
  uint64_t inode = 0;          // of the memfd: checked after opening /proc/<pid>/fd/<fd>
  int32_t pid = 0;
  int32_t fd = -1;
};

class ZeroCopyPool : public std::enable_shared_from_this<ZeroCopyPool> {
 public:
  // A pool of `capacity` bytes of address space (pages are only used as tensors are allocated).
  // Throws Error if the memfd cannot be created, or InvalidArgument for a capacity of 0.
  static std::shared_ptr<ZeroCopyPool> Create(size_t capacity);

  // `bytes` (rounded up to whole pages) of zeroed memory; freed when the returned owner goes,
  // which keeps the pool alive until then.
  // Throws Error (ResourceExhausted-like Internal) naming the capacity knob when full.
  std::shared_ptr<uint8_t> Allocate(size_t bytes);
  // True when [p, p + bytes) lies inside this pool; *offset is p's offset in it.
  bool Locate(const void* p, size_t bytes, uint64_t* offset) const;
  const ZeroCopyPoolId& id() const { return id_; }
  uint8_t* base() const { return base_; }
  size_t bytes_in_use() const;

  ~ZeroCopyPool();
  ZeroCopyPool(const ZeroCopyPool&) = delete;
  ZeroCopyPool& operator=(const ZeroCopyPool&) = delete;

 private:
  explicit ZeroCopyPool(size_t capacity);
  void Free(uint64_t offset, size_t bytes);

  ZeroCopyPoolId id_;
  uint8_t* base_ = nullptr;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes, coalesced
  size_t in_use_ = 0;
};

// This process's zero-copy memory as one owner holds it (see the top of this file): empty until
// the first GetOrCreate, then that pool for good.
class ZeroCopyMemory {
 public:
  // The pool, created now with `capacity` bytes if there is none yet (`capacity` is ignored
  // afterwards). Throws what ZeroCopyPool::Create throws, and then stays empty.
  ZeroCopyPool& GetOrCreate(size_t capacity);
  // The pool, or null before the first allocation; any thread (the engine asks on every large
  // local allreduce). Valid as long as this object.
  ZeroCopyPool* pool() const { return pool_.load(std::memory_order_acquire); }

 private:
  std::mutex mu_;
  std::shared_ptr<ZeroCopyPool> owned_;  // guarded by mu_
  std::atomic<ZeroCopyPool*> pool_{nullptr};
};

// The pools of the other ranks on this host, mapped on first use, unmapped on destruction.
class PeerPools {
 public:
  PeerPools() = default;
  ~PeerPools();
  PeerPools(const PeerPools&) = delete;
  PeerPools& operator=(const PeerPools&) = delete;

  // Base address of the pool `id` in this process (`own`, this process's pool or null, is served
  // as is). Returns null and sets *why when it cannot be mapped (another pid namespace,
  // permissions, the owner gone).
  uint8_t* Map(const ZeroCopyPoolId& id, const ZeroCopyPool* own, std::string* why);

 private:
  struct Mapping {
    uint8_t* base;
    size_t bytes;
  };
  std::map<std::pair<int32_t, uint64_t>, Mapping> mapped_;  // (pid, nonce) -> mapping
};

}  // namespace herring
