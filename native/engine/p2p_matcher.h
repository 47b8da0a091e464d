// P2pMatcher: the point-to-point transfers of torch.distributed (send, recv, recv from any source)
// on the mesh, matched as MPI and gloo match them, outside the negotiation cycles.
//
// Tags. A transfer's wire tag is [sequence: 28 bits][unit 0xfffe: 16 bits][user tag: 20 bits]
// (the unit below R2SP's 0xffff in MakeTagBase's layout, which no cycle hands out). The sequence
// numbers the messages of one (peer, user tag, direction), so that several in flight never share
// a wire tag and both ends count them in the same order: one sender's messages are received in
// the order it sent them (MPI's non-overtaking rule).
//
// Any source. A receive without a source is posted to the transport with one candidate per peer,
// each with the next sequence expected from that peer, and takes the first message to arrive
// (one already buffered included). Until it is matched nobody knows whose sequence it consumes,
// so the receives of the same user tag posted after it (from any source or a named one) wait
// here, in posting order, and are posted once it is settled: as in MPI, a receive posted earlier
// is matched first. Receives of other tags, and sends, never wait.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "transport/any_source_receive.h"
#include "transport/completion.h"
#include "transport/tcp_transport.h"

namespace herring {

class P2pMatcher {
 public:
  static constexpr uint32_t kMaxUserTag = (1u << 20) - 1;
  static uint64_t WireTag(uint64_t sequence, uint32_t user_tag);

  explicit P2pMatcher(TcpTransport* transport) : transport_(transport) {}

  CompletionPtr Send(int peer, uint32_t tag, const void* data, size_t bytes);
  CompletionPtr Recv(int peer, uint32_t tag, void* data, size_t bytes);
  // From whichever of `peers` (other ranks) sends first with `tag`; the result names it.
  AnySourceReceivePtr RecvAny(const std::vector<int>& peers, uint32_t tag, void* data, size_t bytes);

 private:
  // A receive waiting behind an unsettled receive from any source of the same tag.
  struct Waiting {
    int peer = -1;             // -1: from any of `peers`
    std::vector<int> peers;
    void* data = nullptr;
    size_t bytes = 0;
    CompletionPtr done;        // a named receive's (its transfer's outcome is forwarded to it)
    AnySourceReceivePtr any;   // a receive from any source
  };
  // What to hand the transport once mu_ is released.
  struct Post {
    int peer = -1;
    uint64_t wire_tag = 0;
    std::vector<AnySourceCandidate> candidates;
    Waiting what;
  };

  // A receive `w` of `tag`: posted now, or queued behind the tag's unsettled receive from any
  // source.
  void PostOrWait(uint32_t tag, Waiting w);
  // mu_ held: the transfer `w` becomes (sequences assigned; a receive from any source becomes
  // the tag's unsettled one).
  Post PrepareLocked(uint32_t tag, Waiting w);
  void Submit(uint32_t tag, Post post);  // mu_ released
  // The receive from any source of `tag` was settled (matched from `peer`, or failed: -1).
  void Settled(uint32_t tag, int peer);

  TcpTransport* transport_;
  std::mutex mu_;
  std::map<std::pair<int, uint32_t>, uint64_t> sent_;      // (peer, tag): messages sent so far
  std::map<std::pair<int, uint32_t>, uint64_t> received_;  // (peer, tag): receives posted so far
  std::map<uint32_t, std::deque<Waiting>> waiting_;        // tag: behind its unsettled any-source receive
};

}  // namespace herring
