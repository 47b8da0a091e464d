#include "transport/zero_copy_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "common/pid_namespace.h"

namespace herring {
namespace {

constexpr size_t kPage = 4096;

std::string SystemError(const std::string& what, int err) { return what + ": " + std::strerror(err); }

}  // namespace

std::shared_ptr<ZeroCopyPool> ZeroCopyPool::Create(size_t capacity) {
  return std::shared_ptr<ZeroCopyPool>(new ZeroCopyPool(capacity));
}

ZeroCopyPool& ZeroCopyMemory::GetOrCreate(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!owned_) {
    owned_ = ZeroCopyPool::Create(capacity);
    pool_.store(owned_.get(), std::memory_order_release);
  }
  return *owned_;
}

ZeroCopyPool::ZeroCopyPool(size_t capacity) {
  capacity = (capacity + kPage - 1) / kPage * kPage;
  if (capacity == 0) {
    throw Error(Status::InvalidArgument("zero-copy memory is off (HERRING_ZERO_COPY_BYTES=0)"));
  }
  int fd = memfd_create("herring-zero-copy", MFD_CLOEXEC);
  if (fd < 0) throw Error(Status::Internal(SystemError("zero-copy memory: memfd_create failed", errno)));
  // Sparse: pages exist only once a tensor touches them.
  if (ftruncate(fd, static_cast<off_t>(capacity)) != 0) {
    int err = errno;
    close(fd);
    throw Error(Status::Internal(SystemError("zero-copy memory: ftruncate to " + std::to_string(capacity) +
                                             " bytes (HERRING_ZERO_COPY_BYTES) failed", err)));
  }
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    throw Error(Status::Internal(SystemError("zero-copy memory: mmap of " + std::to_string(capacity) +
                                             " bytes (HERRING_ZERO_COPY_BYTES) failed", err)));
  }
  base_ = static_cast<uint8_t*>(p);
  std::random_device rd;
  id_.nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  id_.pid_namespace = OwnPidNamespace();
  id_.capacity = capacity;
  id_.pid = static_cast<int32_t>(getpid());
  id_.fd = fd;  // kept open for the peers' /proc/<pid>/fd/<fd>
  struct stat st;
  if (fstat(fd, &st) == 0) id_.inode = static_cast<uint64_t>(st.st_ino);
  free_[0] = capacity;
}

ZeroCopyPool::~ZeroCopyPool() {
  munmap(base_, id_.capacity);
  close(id_.fd);
}

std::shared_ptr<uint8_t> ZeroCopyPool::Allocate(size_t bytes) {
  const size_t rounded = std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
  uint64_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.begin();
    while (it != free_.end() && it->second < rounded) ++it;
    if (it == free_.end()) {
      throw Error(Status::Internal("zero-copy memory is full: " + std::to_string(in_use_ >> 20) + " MiB of " +
                                   std::to_string(id_.capacity >> 20) + " MiB in use, " +
                                   std::to_string(rounded >> 20) +
                                   " MiB more asked (raise HERRING_ZERO_COPY_BYTES)"));
    }
    offset = it->first;
    const uint64_t left = it->second - rounded;
    free_.erase(it);
    if (left) free_[offset + rounded] = left;
    in_use_ += rounded;
  }
  // The tensor keeps its pool: it may outlive every other owner (the Python front, the engines).
  return std::shared_ptr<uint8_t>(base_ + offset,
                                  [pool = shared_from_this(), offset, rounded](uint8_t*) { pool->Free(offset, rounded); });
}

void ZeroCopyPool::Free(uint64_t offset, size_t bytes) {
  // The pages go back to the system (and read as zeros if reused), in every process mapping them.
  fallocate(id_.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(bytes));
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ -= bytes;
  auto next = free_.lower_bound(offset);
  uint64_t begin = offset, length = bytes;
  if (next != free_.end() && next->first == offset + bytes) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      begin = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  free_[begin] = length;
}

bool ZeroCopyPool::Locate(const void* p, size_t bytes, uint64_t* offset) const {
  const auto* q = static_cast<const uint8_t*>(p);
  if (q < base_ || bytes > id_.capacity || static_cast<size_t>(q - base_) > id_.capacity - bytes) return false;
  *offset = static_cast<uint64_t>(q - base_);
  return true;
}

size_t ZeroCopyPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

PeerPools::~PeerPools() {
  for (auto& [key, m] : mapped_) munmap(m.base, m.bytes);
}

uint8_t* PeerPools::Map(const ZeroCopyPoolId& id, const ZeroCopyPool* own, std::string* why) {
  auto key = std::make_pair(id.pid, id.nonce);
  if (auto it = mapped_.find(key); it != mapped_.end()) return it->second.base;
  if (own && own->id().nonce == id.nonce) return own->base();
  if (id.pid_namespace == 0 || id.pid_namespace != OwnPidNamespace()) {
    *why = "process " + std::to_string(id.pid) + " is in another pid namespace";
    return nullptr;
  }
  const std::string path = "/proc/" + std::to_string(id.pid) + "/fd/" + std::to_string(id.fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *why = SystemError("cannot open " + path, errno);
    return nullptr;
  }
  // The descriptor number could have been reused for another file since the announcement.
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != id.inode ||
      static_cast<uint64_t>(st.st_size) != id.capacity) {
    close(fd);
    *why = path + " is no longer the zero-copy memory of process " + std::to_string(id.pid);
    return nullptr;
  }
  void* p = mmap(nullptr, id.capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  int err = errno;
  close(fd);  // the mapping keeps the memory
  if (p == MAP_FAILED) {
    *why = SystemError("cannot map " + path, err);
    return nullptr;
  }
  mapped_[key] = Mapping{static_cast<uint8_t*>(p), id.capacity};
  return static_cast<uint8_t*>(p);
}

}  // namespace herring
