// Minimal leveled logging to stderr, prefixed with the rank. Level from HOROVOD_LOG_LEVEL.
#pragma once

#include <sstream>
#include <string>

namespace herring {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarning, kError, kFatal };

LogLevel ParseLogLevel(const std::string& text);
void SetLogLevel(LogLevel level);
LogLevel CurrentLogLevel();
void SetLogRank(int rank);  // -1 before init
void LogMessage(LogLevel level, const std::string& message);

class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine() { LogMessage(level_, stream_.str()); }
  template <typename T>
  LogLine& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace herring

#define HLOG(LEVEL)                                                                   \
  if (::herring::LogLevel::k##LEVEL < ::herring::CurrentLogLevel()) {                 \
  } else                                                                              \
    ::herring::LogLine(::herring::LogLevel::k##LEVEL)
