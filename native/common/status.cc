#include "common/status.h"

namespace herring {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kMismatch: return "Mismatch";
    case StatusCode::kTimeout: return "Timeout";
    case StatusCode::kPeerLost: return "PeerLost";
    case StatusCode::kShutdown: return "Shutdown";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace herring
