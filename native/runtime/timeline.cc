#include "runtime/timeline.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>

#include "common/status.h"

namespace herring {
namespace {

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

// Microseconds since the epoch at the monotonic clock's zero: Horovod's pid-0 metadata gives the
// wall time of ts 0 (start_time_since_epoch_in_micros), so readers can place events in time.
int64_t EpochMicrosAtMonotonicZero() {
  using namespace std::chrono;
  const int64_t wall = duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
  return wall - Timeline::NowMicros();
}

}  // namespace

std::string Timeline::PathFor(const std::string& path_template, int rank) {
  std::string p = path_template;
  auto brace = p.find("{rank}");
  if (brace != std::string::npos) return p.replace(brace, 6, std::to_string(rank));
  if (rank == 0) return p;
  auto slash = p.find_last_of('/');
  auto dot = p.find_last_of('.');
  std::string suffix = ".rank" + std::to_string(rank);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return p + suffix;
  return p.substr(0, dot) + suffix + p.substr(dot);
}

std::string Timeline::TensorLane(const char* op_type_name, const std::string& name) {
  return std::string(op_type_name) + "." + name;
}

std::string Timeline::UpperName(const char* op_type_name) {
  std::string s(op_type_name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

std::unique_ptr<Timeline> Timeline::Open(const std::string& path_template, int rank, bool mark_cycles) {
  if (path_template.empty()) return nullptr;
  std::string path = PathFor(path_template, rank);
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error(Status::InvalidArgument("HOROVOD_TIMELINE: cannot write " + path));
  // One event is one write(2): the buffer holds a whole event, flushed at its end.
  std::setvbuf(f, nullptr, _IOFBF, 1 << 16);
  return std::unique_ptr<Timeline>(new Timeline(f, path, rank, mark_cycles));
}

int64_t Timeline::NowMicros() { return MicrosOf(std::chrono::steady_clock::now()); }

int64_t Timeline::MicrosOf(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

Timeline::Timeline(std::FILE* f, std::string path, int rank, bool mark_cycles)
    : file_(f), path_(std::move(path)), rank_(rank), mark_cycles_(mark_cycles) {
  std::lock_guard<std::mutex> lock(mu_);
  Write("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": \"rank " +
        std::to_string(rank_) + "\", \"start_time_since_epoch_in_micros\": " +
        std::to_string(EpochMicrosAtMonotonicZero()) + "}}");
  Write("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"sort_index\": 0}}");
}

Timeline::~Timeline() {
  std::lock_guard<std::mutex> lock(mu_);
  std::fclose(file_);  // every event was flushed as it was written: the file is complete JSON already
}

int Timeline::LaneId(const std::string& lane) {
  auto it = lanes_.find(lane);
  if (it != lanes_.end()) return it->second;
  int id = static_cast<int>(lanes_.size()) + 1;  // pid 0 is the file's metadata, as in Horovod's
  lanes_[lane] = id;
  Write("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(id) + ", \"args\": {\"name\": \"" +
        JsonEscape(lane) + "\"}}");
  Write("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + std::to_string(id) +
        ", \"args\": {\"sort_index\": " + std::to_string(id) + "}}");
  return id;
}

void Timeline::Write(const std::string& event) {
  // The file always ends with "]": overwrite it, append the event and close the array again.
  if (first_) {
    std::fputs("[\n", file_);
  } else {
    std::fseek(file_, -1, SEEK_END);
    std::fputs(",\n", file_);
  }
  first_ = false;
  std::fputs(event.c_str(), file_);
  std::fputs("]", file_);
  std::fflush(file_);
}

void Timeline::Span(const std::string& lane, const std::string& phase, int64_t start_us, int64_t end_us,
                    const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  int pid = LaneId(lane);
  std::string e = "{\"ph\": \"X\", \"name\": \"" + phase + "\", \"cat\": \"herring\", \"ts\": " +
                  std::to_string(start_us) + ", \"dur\": " + std::to_string(std::max<int64_t>(0, end_us - start_us)) +
                  ", \"pid\": " + std::to_string(pid);
  if (!detail.empty()) e += ", \"args\": {\"detail\": \"" + JsonEscape(detail) + "\"}";
  Write(e + "}");
}

void Timeline::Begin(const std::string& lane, const std::string& phase, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  WriteBegin(lane, phase, detail);
}

void Timeline::WriteBegin(const std::string& lane, const std::string& phase, const std::string& detail) {
  int pid = LaneId(lane);
  std::string e = "{\"ph\": \"B\", \"name\": \"" + phase + "\", \"ts\": " + std::to_string(NowMicros()) +
                  ", \"pid\": " + std::to_string(pid);
  if (!detail.empty()) e += ", \"args\": {\"detail\": \"" + JsonEscape(detail) + "\"}";
  Write(e + "}");
}

void Timeline::End(const std::string& lane, const std::string& end_args) {
  std::lock_guard<std::mutex> lock(mu_);
  WriteEnd(lane, end_args);
}

void Timeline::WriteEnd(const std::string& lane, const std::string& end_args) {
  int pid = LaneId(lane);
  std::string e = "{\"ph\": \"E\", \"ts\": " + std::to_string(NowMicros()) + ", \"pid\": " + std::to_string(pid);
  if (!end_args.empty()) e += ", \"args\": {" + end_args + "}";
  Write(e + "}");
}

void Timeline::NegotiateStart(const char* op_type_name, const std::string& name) {
  const std::string lane = TensorLane(op_type_name, name);
  std::lock_guard<std::mutex> lock(mu_);
  if (!negotiating_.insert(lane).second) return;
  WriteBegin(lane, "NEGOTIATE_" + UpperName(op_type_name), "");
}

void Timeline::NegotiateRankReady(const char* op_type_name, const std::string& name, int rank) {
  const std::string lane = TensorLane(op_type_name, name);
  std::lock_guard<std::mutex> lock(mu_);
  if (negotiating_.insert(lane).second) WriteBegin(lane, "NEGOTIATE_" + UpperName(op_type_name), "");
  // Horovod's marker exactly: a zero-length complete event named by the rank, without "cat".
  Write("{\"ph\": \"X\", \"name\": \"" + std::to_string(rank) + "\", \"ts\": " + std::to_string(NowMicros()) +
        ", \"pid\": " + std::to_string(LaneId(lane)) + ", \"dur\": 0}");
}

void Timeline::NegotiateEnd(const char* op_type_name, const std::string& name) {
  const std::string lane = TensorLane(op_type_name, name);
  std::lock_guard<std::mutex> lock(mu_);
  if (negotiating_.erase(lane) == 0) return;
  WriteEnd(lane, "");
}

std::string Timeline::TensorArgs(const char* dtype_name, const std::vector<std::vector<int64_t>>& shapes) {
  std::string shape;
  for (const auto& s : shapes) {
    if (!shape.empty()) shape += ", ";
    shape += "[";
    for (size_t i = 0; i < s.size(); ++i) shape += (i ? ", " : "") + std::to_string(s[i]);
    shape += "]";
  }
  return std::string("\"dtype\": \"") + dtype_name + "\", \"shape\": \"" + shape + "\"";
}

void Timeline::MarkCycleStart() {
  if (!mark_cycles_) return;
  std::lock_guard<std::mutex> lock(mu_);
  Write("{\"ph\": \"i\", \"name\": \"CYCLE_START\", \"ts\": " + std::to_string(NowMicros()) + ", \"s\": \"g\"}");
}

}  // namespace herring
