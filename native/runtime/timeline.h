// Timeline: a Chrome trace (chrome://tracing, Perfetto) of what the engine did, per rank, per
// tensor: how long each collective waited in the queue, in negotiation, and the phases of its
// execution (gather into the fusion buffer, shared-memory reduce, push/pull to the server shards,
// scatter back). Enabled by HOROVOD_TIMELINE=<path>; rank r writes <path> with ".rank<r>" before
// the extension (rank 0 writes <path> itself), or <path> with "{rank}" replaced.
//
// Timestamps come from the monotonic clock, which all processes of one host share, so the files
// of one host can be merged as they are (python -m hvd_herring.timeline merge ...).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace herring {

class Timeline {
 public:
  // Returns nullptr when path_template is empty (timeline off).
  static std::unique_ptr<Timeline> Open(const std::string& path_template, int rank);
  static std::string PathFor(const std::string& path_template, int rank);
  static int64_t NowMicros();

  ~Timeline();  // closes the JSON array: the file is valid JSON once the engine shut down

  // A span [start_us, end_us) on the lane of `lane` (a tensor name, or "cycle").
  void Span(const std::string& lane, const char* phase, int64_t start_us, int64_t end_us,
            const std::string& detail = "");
  void Instant(const std::string& lane, const char* what, const std::string& detail = "");
  const std::string& path() const { return path_; }

 private:
  Timeline(std::FILE* f, std::string path, int rank);
  int LaneId(const std::string& lane);  // called with mu_ held
  void Write(const std::string& event);  // called with mu_ held

  std::mutex mu_;
  std::FILE* file_;
  std::string path_;
  int rank_;
  bool first_ = true;
  std::map<std::string, int> lanes_;
};

// Measures one phase and records it when it goes out of scope (nothing when timeline is null).
class TimelinePhase {
 public:
  TimelinePhase(Timeline* timeline, const std::string& lane, const char* phase, std::string detail = "")
      : timeline_(timeline), lane_(timeline ? lane : std::string()), phase_(phase), detail_(std::move(detail)),
        start_(timeline ? Timeline::NowMicros() : 0) {}
  ~TimelinePhase() {
    if (timeline_) timeline_->Span(lane_, phase_, start_, Timeline::NowMicros(), detail_);
  }

 private:
  Timeline* timeline_;
  std::string lane_;
  const char* phase_;
  std::string detail_;
  int64_t start_;
};

}  // namespace herring
