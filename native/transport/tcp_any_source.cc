// TcpTransport's receives from any source (transport/any_source_receive.h): a receive matched by
// the first message to arrive from any of its candidate (peer, tag) keys. Kept apart from the
// ordinary receive path, which it joins as soon as it is matched: from then on it is the posted
// receive of that key (an InMessage in kUser mode, or the copy-out of a buffered message).
//
// State (under mu_): any_waits_ maps every candidate key of a waiting receive to it. A data
// chunk whose key has no entry in in_ asks BindAnySourceLocked first (tcp_io_loop.cc), so the
// earliest message to arrive after the receive was posted takes it; messages that arrived before
// are looked for at post time, the earliest first (InMessage::arrival). Callbacks run with mu_
// released (RunSettledAnySource).
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "transport/tcp_transport_impl.h"

namespace herring {

void TcpTransport::RecvAny(const std::vector<AnySourceCandidate>& candidates, void* data, size_t bytes,
                           const AnySourceReceivePtr& receive) {
  impl_->RecvAny(candidates, data, bytes, receive);
}

void TcpTransport::Impl::RecvAny(const std::vector<AnySourceCandidate>& candidates, void* data, size_t bytes,
                                 const AnySourceReceivePtr& receive) {
  std::shared_ptr<InMessage> ready;  // a complete buffered message to copy out
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto settle = [&](int peer, Status status) {
      any_settled_.push_back({receive, peer, std::move(status)});
      any_settled_waiting_.store(true);
    };
    Status refuse = RefusalLocked("Recv");
    if (!refuse.ok()) {
      // the transport takes no transfer now
    } else if (candidates.empty()) {
      refuse = Status::InvalidArgument(RankText(opts_.rank) + ": a receive from any source with no candidate rank");
    }
    for (const auto& c : candidates) {
      if (!refuse.ok()) break;
      if (c.peer < 0 || c.peer >= static_cast<int>(peers_.size()) || c.peer == opts_.rank) {
        refuse = Status::InvalidArgument(RankText(opts_.rank) + ": a receive from any source cannot name rank " +
                                         std::to_string(c.peer));
      } else if (any_waits_.count(MessageKey{c.peer, c.tag})) {
        refuse = Status::InvalidArgument(RankText(opts_.rank) + ": a receive of tag " + std::to_string(c.tag) +
                                         " from rank " + std::to_string(c.peer) + " is already posted");
      }
    }
    if (!refuse.ok()) {
      settle(-1, refuse);
    } else {
      // A message that arrived before the receive: the earliest of them.
      std::shared_ptr<InMessage> first;
      for (const auto& c : candidates) {
        auto it = in_.find(MessageKey{c.peer, c.tag});
        if (it == in_.end()) continue;
        const auto& m = it->second;
        if (m->recv || m->mode != InMessage::Mode::kTemp) continue;  // taken, or failed
        if (!first || m->arrival < first->arrival) first = m;
      }
      if (first) {
        receive->source = first->key.peer;
        if (first->total != bytes) {
          // As Recv: the ranks disagree about the transfer; the message is dropped.
          if (first->complete) {
            in_.erase(first->key);
          } else {
            first->mode = InMessage::Mode::kDiscard;
          }
          settle(first->key.peer, Status::InvalidArgument(MismatchText(first->key, bytes, first->total)));
        } else {
          if (first->complete) {
            in_.erase(first->key);
            ready = first;
          } else {
            first->recv = receive->done;  // still arriving: the I/O thread copies it out at the end
            first->user = static_cast<uint8_t*>(data);
            first->user_bytes = bytes;
          }
          settle(first->key.peer, Status::OK());
        }
      } else {
        auto wait = std::make_shared<AnySourceWait>();
        wait->receive = receive;
        wait->data = data;
        wait->bytes = bytes;
        Status gone;  // why the last candidate dropped was dropped
        for (const auto& c : candidates) {
          const Peer& p = *peers_[c.peer];
          if (p.vacant) continue;
          if (!p.status.ok()) {
            if (p.status.code() != StatusCode::kShutdown) {
              refuse = p.status;  // a lost peer fails the job; its receives fail at once
              break;
            }
            gone = p.status;
            continue;
          }
          wait->keys.push_back(MessageKey{c.peer, c.tag});
        }
        if (refuse.ok() && wait->keys.empty()) {
          refuse = Status::Shutdown(RankText(opts_.rank) + ": a receive from any source has no candidate rank " +
                                    "left to send" + (gone.ok() ? std::string() : " (" + gone.message() + ")"));
        }
        if (!refuse.ok()) {
          settle(-1, refuse);
        } else {
          for (const auto& key : wait->keys) any_waits_[key] = wait;
        }
      }
    }
  }
  RunSettledAnySource();
  if (ready) {
    if (bytes > 0) std::memcpy(data, ready->temp.get(), bytes);
    receive->done->Finish(Status::OK());
  }
}

std::shared_ptr<InMessage> TcpTransport::Impl::BindAnySourceLocked(const MessageKey& key) {
  auto it = any_waits_.find(key);
  if (it == any_waits_.end()) return nullptr;
  std::shared_ptr<AnySourceWait> wait = it->second;
  for (const auto& k : wait->keys) any_waits_.erase(k);
  auto m = std::make_shared<InMessage>();
  m->key = key;
  m->mode = InMessage::Mode::kUser;
  m->recv = wait->receive->done;
  m->user = static_cast<uint8_t*>(wait->data);
  m->user_bytes = wait->bytes;
  wait->receive->source = key.peer;
  any_settled_.push_back({wait->receive, key.peer, Status::OK()});
  any_settled_waiting_.store(true);
  return m;
}

void TcpTransport::Impl::FailAnySourceLocked(const Status& status, int only_peer) {
  std::vector<std::shared_ptr<AnySourceWait>> waits;
  std::unordered_set<AnySourceWait*> seen;
  for (const auto& kv : any_waits_) {
    if (seen.insert(kv.second.get()).second) waits.push_back(kv.second);
  }
  for (const auto& wait : waits) {
    auto& keys = wait->keys;
    const auto of_peer = [&](const MessageKey& k) { return k.peer == only_peer; };
    if (only_peer >= 0 && std::none_of(keys.begin(), keys.end(), of_peer)) continue;
    Status why = status;
    if (only_peer >= 0 && status.code() == StatusCode::kShutdown) {
      // A goodbye: that peer will send nothing more, the others still may.
      for (const auto& k : keys) {
        if (k.peer == only_peer) any_waits_.erase(k);
      }
      keys.erase(std::remove_if(keys.begin(), keys.end(), of_peer), keys.end());
      if (!keys.empty()) continue;
      why = Status::Shutdown(RankText(opts_.rank) + ": a receive from any source has no candidate rank left to send (" +
                             status.message() + ")");
    }
    for (const auto& k : keys) any_waits_.erase(k);
    keys.clear();
    any_settled_.push_back({wait->receive, -1, why});
    any_settled_waiting_.store(true);
  }
}

void TcpTransport::Impl::RunSettledAnySource() {
  if (!any_settled_waiting_.load()) return;
  std::vector<AnySourceSettled> settled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    settled.swap(any_settled_);
    any_settled_waiting_.store(false);
  }
  for (auto& s : settled) {
    // Reported before a failure finishes the receive: whoever waits on it sees the report done.
    if (s.receive->on_settled) s.receive->on_settled(s.peer);
    if (!s.status.ok()) s.receive->done->Finish(s.status);
  }
}

}  // namespace herring
