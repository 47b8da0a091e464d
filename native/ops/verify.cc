#include "ops/verify.h"

#include <sstream>
#include <vector>

namespace herring {

void VerifyIdenticalOnMembers(ExecContext& ctx, uint64_t hash, const std::string& what) {
  const int n = ctx.n();
  if (n == 1) return;
  std::vector<uint64_t> theirs(n, 0);
  theirs[ctx.me()] = hash;
  std::vector<CompletionPtr> transfers;
  for (int m = 0; m < n; ++m) {
    if (m == ctx.me()) continue;
    transfers.push_back(ctx.net.Send(ctx.member_rank(m), ctx.Tag(kVerifySubTag), &hash, sizeof hash));
    transfers.push_back(ctx.net.Recv(ctx.member_rank(m), ctx.Tag(kVerifySubTag), &theirs[m], sizeof hash));
  }
  WaitTransfers(transfers, ctx, "HERRING_VERIFY exchange for " + what);
  std::vector<int> differ;
  for (int m = 0; m < n; ++m) {
    if (theirs[m] != theirs[0]) differ.push_back(ctx.member_rank(m));
  }
  if (differ.empty()) return;
  std::ostringstream s;
  s << "HERRING_VERIFY: the results of " << what << " differ between ranks: rank " << ctx.member_rank(0)
    << " has hash " << std::hex << theirs[0] << std::dec << ", rank" << (differ.size() > 1 ? "s " : " ");
  for (size_t i = 0; i < differ.size(); ++i) s << (i ? ", " : "") << differ[i];
  s << (differ.size() > 1 ? " have" : " has") << " another";
  throw Error(Status::Internal(s.str()));
}

}  // namespace herring
