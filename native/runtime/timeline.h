// Timeline: a Chrome trace (chrome://tracing, Perfetto) of what the engine did, in Horovod's
// format (horovod/common/timeline.cc), so that Horovod's readers and users' scripts read it:
// every lane is a trace "process" named like Horovod's tensors (`allreduce.<name>`,
// `broadcast.<name>`...; pid 0 is the file's own metadata); a collective's lane holds
// NEGOTIATE_<OP> (picked up by a cycle -> every rank ready) and <OP> (execution) as begin/end
// pairs, and Horovod's CYCLE_START instant markers with HOROVOD_TIMELINE_MARK_CYCLES=1. As in
// Horovod's: inside a NEGOTIATE_<OP> span on the coordinator's (rank 0's) file, one ready marker
// per rank when the coordinator receives that rank's request (Horovod's NegotiateRankReady:
// {"ph": "X", "name": "<rank>", "ts", "pid", "dur": 0}; a straggler's marker comes last), and an
// operation's end carries its output's "dtype" and "shape" args (Horovod's Timeline::End). Herring's
// own detail stays beside them, named so that it cannot be mistaken for Horovod's: a QUEUE span
// before negotiation, the phases of a fused buffer on its own lane (`fused: <first> +N`, or the
// tensor's lane when it is alone), and a `negotiation` lane with one span per cycle.
//
// Written as it happens, as Horovod's writer does: every event is appended and the array closed
// with `]` at once (the next event overwrites that `]`), and flushed to the file, so the file is
// valid JSON while the job runs and after it is killed (kill -9 leaves every event written so far;
// an operation still running shows its begin without its end).
//
// Enabled by HOROVOD_TIMELINE=<path> or hvd.start_timeline(path); rank r writes <path> with
// ".rank<r>" before the extension (rank 0 writes <path> itself), or <path> with "{rank}" replaced.
// Timestamps come from the monotonic clock, which all processes of one host share, so the files
// of one host can be merged as they are (python -m hvd_herring.timeline merge ...).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace herring {

class Timeline {
 public:
  // Returns nullptr when path_template is empty (timeline off).
  static std::unique_ptr<Timeline> Open(const std::string& path_template, int rank, bool mark_cycles = false);
  static std::string PathFor(const std::string& path_template, int rank);
  static int64_t NowMicros();
  // NowMicros for a time already read from the same clock (std::chrono::steady_clock).
  static int64_t MicrosOf(std::chrono::steady_clock::time_point t);
  // Horovod's name of a collective's lane: "<op>.<name>" (op as horovod names it: allreduce...).
  static std::string TensorLane(const char* op_type_name, const std::string& name);
  // Horovod's event names: "ALLREDUCE", "NEGOTIATE_ALLREDUCE"...
  static std::string UpperName(const char* op_type_name);

  ~Timeline();

  // A complete span [start_us, end_us) on `lane` (ph "X").
  void Span(const std::string& lane, const std::string& phase, int64_t start_us, int64_t end_us,
            const std::string& detail = "");
  // A begin (ph "B") and its end (ph "E"); `end_args` is a JSON object's inside, e.g. "\"dtype\": \"float32\"".
  void Begin(const std::string& lane, const std::string& phase, const std::string& detail = "");
  void End(const std::string& lane, const std::string& end_args = "");
  // Horovod's negotiation span of a collective (NEGOTIATE_<OP> on its lane), as Horovod's
  // Timeline::NegotiateStart/NegotiateRankReady/NegotiateEnd write it. Start is a no-op while the
  // lane negotiates already (a rank's request may reach the coordinator before its own);
  // RankReady opens the span if needed (the first request the coordinator sees, as in Horovod's
  // IncrementTensorCount) and writes the rank's ready marker; End closes an open span only.
  void NegotiateStart(const char* op_type_name, const std::string& name);
  void NegotiateRankReady(const char* op_type_name, const std::string& name, int rank);
  void NegotiateEnd(const char* op_type_name, const std::string& name);
  // Horovod's args of an operation's end: "\"dtype\": \"float32\", \"shape\": \"[2, 3]\"" (its
  // output's; several tensors under one name: their shapes one after the other).
  static std::string TensorArgs(const char* dtype_name, const std::vector<std::vector<int64_t>>& shapes);
  // Horovod's CYCLE_START marker, written only with mark_cycles.
  void MarkCycleStart();
  bool mark_cycles() const { return mark_cycles_; }
  const std::string& path() const { return path_; }

 private:
  Timeline(std::FILE* f, std::string path, int rank, bool mark_cycles);
  int LaneId(const std::string& lane);   // called with mu_ held
  void Write(const std::string& event);  // called with mu_ held: appends, closes the array, flushes
  void WriteBegin(const std::string& lane, const std::string& phase, const std::string& detail);  // mu_ held
  void WriteEnd(const std::string& lane, const std::string& end_args);                           // mu_ held

  std::mutex mu_;
  std::FILE* file_;
  std::string path_;
  int rank_;
  bool mark_cycles_;
  bool first_ = true;
  std::map<std::string, int> lanes_;
  std::set<std::string> negotiating_;  // lanes whose NEGOTIATE_<OP> span is open
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

// An operation's begin on each of its lanes now, its end when it goes out of scope (also when the
// operation throws: the trace shows where it ended).
class TimelineOperation {
 public:
  TimelineOperation(Timeline* timeline, std::vector<std::string> lanes, const std::string& phase,
                    const std::string& detail = "")
      : timeline_(timeline), lanes_(timeline ? std::move(lanes) : std::vector<std::string>()) {
    for (const auto& l : lanes_) timeline_->Begin(l, phase, detail);
  }
  ~TimelineOperation() {
    for (size_t i = 0; i < lanes_.size(); ++i) {
      const std::string& own = i < lane_args_.size() ? lane_args_[i] : std::string();
      timeline_->End(lanes_[i], own.empty() || end_args_.empty() ? own + end_args_ : own + ", " + end_args_);
    }
  }
  // What every lane's end event says (a JSON object's inside), once it is known.
  void SetEndArgs(std::string args) { end_args_ = std::move(args); }
  // What lane i's end says before that (Horovod's dtype and shape of its tensor: TensorArgs).
  void SetLaneEndArgs(size_t i, std::string args) {
    if (lane_args_.size() <= i) lane_args_.resize(i + 1);
    lane_args_[i] = std::move(args);
  }

 private:
  Timeline* timeline_;
  std::vector<std::string> lanes_;
  std::vector<std::string> lane_args_;
  std::string end_args_;
};

}  // namespace herring
