// HERRING_VERIFY=1: after a collective whose result must be identical on every member, the
// members exchange a hash of it and fail the job, naming who differs, if they do not agree. None
// of the peer stacks checks this; it catches memory corruption, a bad NIC or a bug before a
// silently wrong gradient is applied.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/collective.h"

namespace herring {

// Sub-tag reserved for the verification exchange in every execution's tag space.
constexpr uint64_t kVerifySubTag = (1ull << ExecContext::kSubTagBits) - 1;

// Throws Error(Internal) naming the collective and the ranks whose hash differs from rank
// (member) 0's.
void VerifyIdenticalOnMembers(ExecContext& ctx, uint64_t hash, const std::string& what);

}  // namespace herring
