#include "runtime/fault_injector.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "common/status.h"
#include "transport/transport.h"

namespace herring {
namespace {

const char* const kActions[] = {"kill", "stop", "exit", "reset", "corrupt", "delay"};
const char* const kPhases[] = {"negotiate", "gather", "shm", "push", "serve", "pull", "scatter"};

template <size_t N>
bool OneOf(const std::string& v, const char* const (&options)[N]) {
  for (const char* o : options) {
    if (v == o) return true;
  }
  return false;
}

}  // namespace

FaultInjector::FaultInjector(const std::string& spec, int rank) {
  if (spec.empty()) return;
  std::vector<std::string> f;
  std::stringstream s(spec);
  std::string part;
  while (std::getline(s, part, ':')) f.push_back(part);
  auto bad = [&](const std::string& why) {
    throw Error(Status::InvalidArgument("HERRING_FAULT='" + spec + "': " + why +
                                        " (expected action:phase:rank[:occurrence])"));
  };
  if (f.size() < 3 || f.size() > 4) bad("wrong number of fields");
  if (!OneOf(f[0], kActions)) bad("unknown action '" + f[0] + "'");
  if (!OneOf(f[1], kPhases)) bad("unknown phase '" + f[1] + "'");
  int target;
  try {
    target = std::stoi(f[2]);
    if (f.size() == 4) occurrence_ = std::stoi(f[3]);
  } catch (...) {
    bad("rank and occurrence must be integers");
  }
  if (occurrence_ < 1) bad("occurrence counts from 1");
  action_ = f[0];
  phase_ = f[1];
  armed_ = target == rank;
}

void FaultInjector::At(const char* phase, Transport* net, void* result, size_t result_bytes) {
  if (!armed_ || phase_ != phase) return;
  ++seen_;
  if (action_ == "delay") {
    // Every time from the occurrence on: the window it widens (a peer's orderly departure while
    // this rank is late, say) opens in whichever cycle brings the event.
    if (seen_ < occurrence_) return;
    if (seen_ == occurrence_) {
      HLOG(Warning) << "HERRING_FAULT: delay at " << phase_ << " from occurrence " << occurrence_;
    }
    std::this_thread::sleep_for(kDelay);
    return;
  }
  if (seen_ != occurrence_) return;
  HLOG(Warning) << "HERRING_FAULT: " << action_ << " at " << phase_ << " (occurrence " << occurrence_ << ")";
  if (action_ == "kill") {
    raise(SIGKILL);
  } else if (action_ == "stop") {
    raise(SIGSTOP);
  } else if (action_ == "exit") {
    _exit(3);
  } else if (action_ == "reset") {
    if (net) net->ResetConnections();
  } else if (action_ == "corrupt" && result && result_bytes) {
    static_cast<unsigned char*>(result)[0] ^= 0x01;
  }
}

}  // namespace herring
