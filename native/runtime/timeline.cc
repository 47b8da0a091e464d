#include "runtime/timeline.h"

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

std::unique_ptr<Timeline> Timeline::Open(const std::string& path_template, int rank) {
  if (path_template.empty()) return nullptr;
  std::string path = PathFor(path_template, rank);
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error(Status::InvalidArgument("HOROVOD_TIMELINE: cannot write " + path));
  return std::unique_ptr<Timeline>(new Timeline(f, path, rank));
}

int64_t Timeline::NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Timeline::Timeline(std::FILE* f, std::string path, int rank) : file_(f), path_(std::move(path)), rank_(rank) {
  std::fputs("[\n", file_);
  std::lock_guard<std::mutex> lock(mu_);
  Write("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(rank_) +
        ", \"args\": {\"name\": \"rank " + std::to_string(rank_) + "\"}}");
}

Timeline::~Timeline() {
  std::lock_guard<std::mutex> lock(mu_);
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

int Timeline::LaneId(const std::string& lane) {
  auto it = lanes_.find(lane);
  if (it != lanes_.end()) return it->second;
  int id = static_cast<int>(lanes_.size()) + 1;
  lanes_[lane] = id;
  Write("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(rank_) + ", \"tid\": " +
        std::to_string(id) + ", \"args\": {\"name\": \"" + JsonEscape(lane) + "\"}}");
  return id;
}

void Timeline::Write(const std::string& event) {
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(event.c_str(), file_);
}

void Timeline::Span(const std::string& lane, const char* phase, int64_t start_us, int64_t end_us,
                    const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  int tid = LaneId(lane);
  std::string e = "{\"name\": \"" + std::string(phase) + "\", \"cat\": \"herring\", \"ph\": \"X\", \"pid\": " +
                  std::to_string(rank_) + ", \"tid\": " + std::to_string(tid) + ", \"ts\": " +
                  std::to_string(start_us) + ", \"dur\": " + std::to_string(std::max<int64_t>(0, end_us - start_us));
  if (!detail.empty()) e += ", \"args\": {\"detail\": \"" + JsonEscape(detail) + "\"}";
  Write(e + "}");
}

void Timeline::Instant(const std::string& lane, const char* what, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  int tid = LaneId(lane);
  std::string e = "{\"name\": \"" + std::string(what) + "\", \"cat\": \"herring\", \"ph\": \"i\", \"s\": \"t\", \"pid\": " +
                  std::to_string(rank_) + ", \"tid\": " + std::to_string(tid) + ", \"ts\": " +
                  std::to_string(NowMicros());
  if (!detail.empty()) e += ", \"args\": {\"detail\": \"" + JsonEscape(detail) + "\"}";
  Write(e + "}");
}

}  // namespace herring
