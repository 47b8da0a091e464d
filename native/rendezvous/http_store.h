// Client of horovodrun's rendezvous store: an HTTP key-value server inside the launcher.
// PUT /<scope>/<key> stores the body; GET /<scope>/<key> answers 200 with the body, or 404 until
// someone stored it (the server never blocks, so Get polls with backoff until its deadline).
// Keys must not contain '/'. The HTTP itself is cpp-httplib's; this class adds the store's
// protocol, retries with backoff and deadlines, and errors that name the store and the key.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/deadline.h"

namespace herring {

// The longest wait between two polls of a missing key when `pollers` ranks poll at once: 50 ms,
// or longer where that keeps the store (one Python process, a thread per request, beside the job's
// ranks on the launcher's host) under about 400 polls a second in all. Example: 256 ranks waiting
// for the world record poll every 640 ms rather than every 50 ms (5,120 requests a second).
std::chrono::milliseconds PollIntervalCap(int pollers);

class HttpStore {
 public:
  HttpStore(std::string addr, int port, std::string scope);

  // Throws Error (Timeout / PeerLost with the address) if the store cannot be reached in time.
  void Set(const std::string& key, const std::string& value, Deadline deadline);
  // Polls until the key exists, `pollers` ranks (this one included) polling the store at the same
  // time (PollIntervalCap). Throws Error(Timeout) naming the key at the deadline.
  std::string Get(const std::string& key, Deadline deadline, int pollers = 1);

  // Every rank stores `mine` under "<prefix>.<rank>" and reads everyone's; returns them by rank.
  std::vector<std::string> AllGather(const std::string& prefix, int rank, int size,
                                     const std::string& mine, Deadline deadline);

  // "<addr>:<port>/<scope>": which store this is (a job's store is unique while the job runs).
  std::string Where() const { return addr_ + ":" + std::to_string(port_) + "/" + scope_; }

 private:
  std::string addr_;
  int port_;
  std::string scope_;
};

}  // namespace herring
