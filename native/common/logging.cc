#include "common/logging.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace herring {
namespace {

LogLevel LevelFromEnvironment() {
  const char* v = std::getenv("HOROVOD_LOG_LEVEL");
  return v ? ParseLogLevel(v) : LogLevel::kWarning;
}

std::atomic<int>& LevelStorage() {
  static std::atomic<int> level(static_cast<int>(LevelFromEnvironment()));
  return level;
}

std::atomic<int> g_rank(-1);

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "TRACE";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kFatal: return "FATAL";
  }
  return "?";
}

}  // namespace

LogLevel ParseLogLevel(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), ::toupper);
  if (t == "TRACE") return LogLevel::kTrace;
  if (t == "DEBUG") return LogLevel::kDebug;
  if (t == "INFO") return LogLevel::kInfo;
  if (t == "ERROR") return LogLevel::kError;
  if (t == "FATAL") return LogLevel::kFatal;
  return LogLevel::kWarning;
}

void SetLogLevel(LogLevel level) { LevelStorage().store(static_cast<int>(level)); }
LogLevel CurrentLogLevel() { return static_cast<LogLevel>(LevelStorage().load(std::memory_order_relaxed)); }
void SetLogRank(int rank) { g_rank.store(rank); }

void LogMessage(LogLevel level, const std::string& message) {
  int rank = g_rank.load();
  // One fprintf per line so lines from several threads do not interleave.
  if (rank >= 0) {
    std::fprintf(stderr, "[herring %s rank %d] %s\n", LevelName(level), rank, message.c_str());
  } else {
    std::fprintf(stderr, "[herring %s] %s\n", LevelName(level), message.c_str());
  }
}

}  // namespace herring
