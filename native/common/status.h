// Status: the outcome of an operation that can fail in an expected way (bad input, a lost peer,
// a deadline). Errors carry a message meant for the user: it names the rank, the tensor and what
// differed, because that message is what reaches the training script.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace herring {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad input from the caller (shape, dtype, root, splits...)
  kMismatch,          // ranks disagree about a collective (name, shape, dtype, op)
  kTimeout,           // a deadline passed
  kPeerLost,          // a rank or server went away (connection closed, no heartbeat)
  kShutdown,          // the engine was shut down while the operation was pending
  kAborted,           // the job failed elsewhere; the reason is in the message
  kInternal,          // a bug or an unexpected system error
};

const char* StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status Mismatch(std::string m) { return {StatusCode::kMismatch, std::move(m)}; }
  static Status Timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status PeerLost(std::string m) { return {StatusCode::kPeerLost, std::move(m)}; }
  static Status Shutdown(std::string m) { return {StatusCode::kShutdown, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Thrown inside the core where unwinding is the clearest way out; converted back to a Status at
// the boundary (background loop, bindings).
class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.message()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw Error(s);
}

}  // namespace herring
