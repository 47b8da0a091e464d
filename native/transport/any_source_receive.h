// AnySourceReceive: a receive that takes the first message to arrive from any of several peers
// (TcpTransport::RecvAny; torch.distributed's recv without a source, gloo's recvAnysource).
//
// Each candidate peer has its own tag (the point-to-point layer numbers the messages of every
// (peer, tag) so that one peer's messages are matched in the order it sent them). The receive is
// matched by the candidate message that arrived first: one already buffered (the earliest to
// arrive, if several), or else the first whose first chunk arrives after the receive was posted.
// From then on it is an ordinary receive of that (peer, tag).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "transport/completion.h"

namespace herring {

struct AnySourceCandidate {
  int peer = -1;
  uint64_t tag = 0;
};

struct AnySourceReceive {
  // Finished as a Recv's completion is: OK once every byte is in the buffer, or the error (a size
  // mismatch, an abort, every candidate gone).
  CompletionPtr done = std::make_shared<Completion>();
  // The peer whose message it took; set before `done` finishes, -1 until then (and after a
  // failure that happened before a match).
  std::atomic<int> source{-1};
  // Called once, on whichever thread settles the match (the caller's, or the transport's I/O
  // thread), with no transport lock held: with the peer when a message was taken, or with -1 when
  // the receive failed before any was (then before `done` finishes). May post further transfers;
  // must not wait.
  std::function<void(int peer)> on_settled;
};

using AnySourceReceivePtr = std::shared_ptr<AnySourceReceive>;

}  // namespace herring
