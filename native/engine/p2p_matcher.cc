#include "engine/p2p_matcher.h"

#include "runtime/collective.h"

namespace herring {
namespace {

constexpr uint64_t kP2pUnit = 0xfffe;
static_assert(P2pMatcher::kMaxUserTag == (1u << ExecContext::kSubTagBits) - 1, "user tags fill the sub-tag bits");

}  // namespace

uint64_t P2pMatcher::WireTag(uint64_t sequence, uint32_t tag) {
  return ((sequence & 0xfffffffull) << 36) | (kP2pUnit << ExecContext::kSubTagBits) | tag;
}

CompletionPtr P2pMatcher::Send(int peer, uint32_t tag, const void* data, size_t bytes) {
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sequence = sent_[{peer, tag}]++;
  }
  return transport_->Send(peer, WireTag(sequence, tag), data, bytes);
}

CompletionPtr P2pMatcher::Recv(int peer, uint32_t tag, void* data, size_t bytes) {
  Waiting w;
  w.peer = peer;
  w.data = data;
  w.bytes = bytes;
  w.done = std::make_shared<Completion>();
  CompletionPtr done = w.done;
  PostOrWait(tag, std::move(w));
  return done;
}

AnySourceReceivePtr P2pMatcher::RecvAny(const std::vector<int>& peers, uint32_t tag, void* data, size_t bytes) {
  Waiting w;
  w.peers = peers;
  w.data = data;
  w.bytes = bytes;
  w.any = std::make_shared<AnySourceReceive>();
  AnySourceReceivePtr receive = w.any;
  receive->on_settled = [this, tag](int peer) { Settled(tag, peer); };
  PostOrWait(tag, std::move(w));
  return receive;
}

void P2pMatcher::PostOrWait(uint32_t tag, Waiting w) {
  Post post;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto queue = waiting_.find(tag);
    if (queue != waiting_.end()) {
      queue->second.push_back(std::move(w));  // behind a receive from any source
      return;
    }
    post = PrepareLocked(tag, std::move(w));
  }
  Submit(tag, std::move(post));
}

P2pMatcher::Post P2pMatcher::PrepareLocked(uint32_t tag, Waiting w) {
  Post post;
  if (w.any) {
    for (int peer : w.peers) {
      auto it = received_.find({peer, tag});
      post.candidates.push_back({peer, WireTag(it == received_.end() ? 0 : it->second, tag)});
    }
    waiting_[tag];  // from now on, later receives of this tag wait until it is settled
  } else {
    post.peer = w.peer;
    post.wire_tag = WireTag(received_[{w.peer, tag}]++, tag);
  }
  post.what = std::move(w);
  return post;
}

void P2pMatcher::Submit(uint32_t tag, Post post) {
  Waiting& w = post.what;
  if (w.any) {
    // May settle at once (a message already here), which calls Settled on this thread.
    transport_->RecvAny(post.candidates, w.data, w.bytes, w.any);
    return;
  }
  CompletionPtr outer = w.done;
  transport_->Recv(post.peer, post.wire_tag, w.data, w.bytes)->OnFinish([outer](const Status& s) { outer->Finish(s); });
}

void P2pMatcher::Settled(uint32_t tag, int peer) {
  std::vector<Post> posts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (peer >= 0) received_[{peer, tag}]++;
    auto queue = waiting_.find(tag);
    if (queue == waiting_.end()) return;  // cannot happen: the settled receive had made it
    std::deque<Waiting> behind = std::move(queue->second);
    waiting_.erase(queue);
    // In posting order: named receives take their sequence now; the next receive from any
    // source becomes the unsettled one, and what is behind it keeps waiting.
    while (!behind.empty()) {
      Waiting w = std::move(behind.front());
      behind.pop_front();
      const bool any = static_cast<bool>(w.any);
      posts.push_back(PrepareLocked(tag, std::move(w)));
      if (any) {
        waiting_[tag] = std::move(behind);
        break;
      }
    }
  }
  for (auto& post : posts) Submit(tag, std::move(post));
}

}  // namespace herring
