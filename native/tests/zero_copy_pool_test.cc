// Tests of ZeroCopyPool (allocation, reuse, pages given back) and PeerPools (another process maps
// the pool through /proc and both see each other's writes; a stale announcement is refused).
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>
#include "transport/zero_copy_pool.h"

using namespace herring;

namespace {

constexpr size_t kCapacity = 64 << 20;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(ZeroCopyPool, ZeroCopyPoolAllocatesWholePagesAndReusesFreedOnes) {
  ZeroCopyPool& pool = ZeroCopyPool::Instance(kCapacity);
  const size_t base = pool.bytes_in_use();
  uint8_t* first;
  {
    auto a = pool.Allocate(100);
    auto b = pool.Allocate(5000);
    EXPECT_EQ(pool.bytes_in_use(), base + 4096 + 8192);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 4096, 0u);
    uint64_t offset = 0;
    EXPECT_TRUE(pool.Locate(b.get(), 5000, &offset));
    EXPECT_EQ(pool.base() + offset, b.get());
    EXPECT_TRUE(!pool.Locate(b.get() - 1 - offset, 1, &offset));  // just below the pool
    int on_stack = 0;
    EXPECT_TRUE(!pool.Locate(&on_stack, sizeof on_stack, &offset));
    std::memset(a.get(), 0x5a, 100);
    first = a.get();
  }
  EXPECT_EQ(pool.bytes_in_use(), base);
  // The freed pages coalesced and come back first, zeroed (the holes were punched).
  auto c = pool.Allocate(3 * 4096);
  EXPECT_EQ(c.get(), first);
  EXPECT_EQ(c.get()[0], 0);
}

TEST(ZeroCopyPool, ZeroCopyPoolFullIsAClearError) {
  ZeroCopyPool& pool = ZeroCopyPool::Instance(kCapacity);
  std::string message;
  try {
    pool.Allocate(pool.id().capacity + 1);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_TRUE(Contains(message, "zero-copy memory is full"));
  EXPECT_TRUE(Contains(message, "HERRING_ZERO_COPY_BYTES"));
}

TEST(ZeroCopyPool, PeerPoolsMapAnotherProcessesPoolBothWays) {
  ZeroCopyPool& pool = ZeroCopyPool::Instance(kCapacity);
  auto shared = pool.Allocate(8192);
  uint64_t offset = 0;
  EXPECT_TRUE(pool.Locate(shared.get(), 8192, &offset));
  std::memset(shared.get(), 7, 8192);
  const ZeroCopyPoolId id = pool.id();
  pid_t child = fork();
  if (child == 0) {
    // The child inherited the parent's pool object; a changed nonce keeps it from being taken for
    // its own, so the parent's pool is mapped afresh through /proc, as another rank would.
    ZeroCopyPoolId parent = id;
    parent.nonce ^= 4;
    PeerPools peers;
    std::string why;
    uint8_t* base = peers.Map(parent, &why);
    int status = 0;
    if (base == nullptr) status = 10;
    else if (base == pool.base()) status = 11;  // must be a mapping of its own (not the inherited one)
    else if (base[offset] != 7 || base[offset + 8191] != 7) status = 12;
    else std::memset(base + offset, 9, 8192);
    ZeroCopyPoolId stale = parent;
    stale.inode ^= 1;
    stale.nonce ^= 1;  // another announcement, so not served from the cache
    if (status == 0 && (peers.Map(stale, &why) != nullptr || !Contains(why, "no longer"))) status = 13;
    ZeroCopyPoolId elsewhere = parent;
    elsewhere.nonce ^= 2;
    elsewhere.pid_namespace ^= 1;
    if (status == 0 && (peers.Map(elsewhere, &why) != nullptr || !Contains(why, "pid namespace"))) status = 14;
    _exit(status);
  }
  int status = -1;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(shared.get()[0], 9);
  EXPECT_EQ(shared.get()[8191], 9);
}
