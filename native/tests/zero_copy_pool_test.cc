// Tests of ZeroCopyPool (allocation, reuse, pages given back, tensors keeping their pool),
// ZeroCopyMemory (the owner's lazily created pool) and PeerPools (another process maps
// the pool through /proc and both see each other's writes; a stale announcement is refused).
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include "transport/zero_copy_pool.h"

using namespace herring;

namespace {

constexpr size_t kCapacity = 64 << 20;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(ZeroCopyPool, ZeroCopyPoolAllocatesWholePagesAndReusesFreedOnes) {
  std::shared_ptr<ZeroCopyPool> owned = ZeroCopyPool::Create(kCapacity);
  ZeroCopyPool& pool = *owned;
  const size_t base = pool.bytes_in_use();
  EXPECT_EQ(base, 0u);
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
  std::shared_ptr<ZeroCopyPool> pool = ZeroCopyPool::Create(kCapacity);
  std::string message;
  try {
    pool->Allocate(pool->id().capacity + 1);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_TRUE(Contains(message, "zero-copy memory is full"));
  EXPECT_TRUE(Contains(message, "HERRING_ZERO_COPY_BYTES"));
}

TEST(ZeroCopyPool, PoolsAreIndependentAndTensorsKeepTheirPool) {
  std::shared_ptr<ZeroCopyPool> a = ZeroCopyPool::Create(kCapacity);
  std::shared_ptr<ZeroCopyPool> b = ZeroCopyPool::Create(kCapacity);
  EXPECT_NE(a->id().nonce, b->id().nonce);
  EXPECT_NE(a->base(), b->base());
  std::shared_ptr<uint8_t> tensor = a->Allocate(4096);
  uint64_t offset = 0;
  EXPECT_TRUE(a->Locate(tensor.get(), 4096, &offset));
  EXPECT_FALSE(b->Locate(tensor.get(), 4096, &offset));
  EXPECT_EQ(b->bytes_in_use(), 0u);
  // The last other owner goes (an elastic reset dropping an engine, the front going away): the
  // tensor still holds its memory, and frees it into its pool when it goes itself.
  std::weak_ptr<ZeroCopyPool> watch = a;
  a.reset();
  ASSERT_FALSE(watch.expired());
  std::memset(tensor.get(), 3, 4096);
  EXPECT_EQ(watch.lock()->bytes_in_use(), 4096u);
  tensor.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(ZeroCopyPool, ZeroCopyMemoryCreatesItsPoolOnceOnFirstUse) {
  ZeroCopyMemory memory;
  EXPECT_EQ(memory.pool(), nullptr);
  std::string message;
  try {
    memory.GetOrCreate(0);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_TRUE(Contains(message, "HERRING_ZERO_COPY_BYTES=0"));
  EXPECT_EQ(memory.pool(), nullptr);  // a failed creation leaves it empty
  ZeroCopyPool& pool = memory.GetOrCreate(kCapacity);
  EXPECT_EQ(memory.pool(), &pool);
  EXPECT_EQ(&memory.GetOrCreate(2 * kCapacity), &pool);  // the capacity counts only the first time
  EXPECT_EQ(pool.id().capacity, kCapacity);
  ZeroCopyMemory other;
  EXPECT_NE(&other.GetOrCreate(kCapacity), &pool);  // two owners, two pools: nothing process-wide
}

TEST(ZeroCopyPool, PeerPoolsMapAnotherProcessesPoolBothWays) {
  std::shared_ptr<ZeroCopyPool> owned = ZeroCopyPool::Create(kCapacity);
  ZeroCopyPool& pool = *owned;
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
    if (peers.Map(id, &pool, &why) != pool.base()) _exit(15);  // its own pool is served as is
    uint8_t* base = peers.Map(parent, &pool, &why);
    int status = 0;
    if (base == nullptr) status = 10;
    else if (base == pool.base()) status = 11;  // must be a mapping of its own (not the inherited one)
    else if (base[offset] != 7 || base[offset + 8191] != 7) status = 12;
    else std::memset(base + offset, 9, 8192);
    ZeroCopyPoolId stale = parent;
    stale.inode ^= 1;
    stale.nonce ^= 1;  // another announcement, so not served from the cache
    if (status == 0 && (peers.Map(stale, &pool, &why) != nullptr || !Contains(why, "no longer"))) status = 13;
    ZeroCopyPoolId elsewhere = parent;
    elsewhere.nonce ^= 2;
    elsewhere.pid_namespace ^= 1;
    if (status == 0 && (peers.Map(elsewhere, &pool, &why) != nullptr || !Contains(why, "pid namespace"))) status = 14;
    _exit(status);
  }
  int status = -1;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(shared.get()[0], 9);
  EXPECT_EQ(shared.get()[8191], 9);
}
