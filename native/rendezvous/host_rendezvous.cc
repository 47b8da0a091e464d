#include "rendezvous/host_rendezvous.h"

#include <algorithm>
#include <stdexcept>

#include "common/status.h"

namespace herring {
namespace {

std::string HostKeyPart(const std::string& hostname) {
  std::string s = hostname;
  std::replace(s.begin(), s.end(), '/', '_');  // the store's keys must not contain '/'
  return s;
}

}  // namespace

bool CanGroupByHost(const LaunchInfo& launch) {
  return launch.launcher == Launcher::kHorovodrun && !launch.hostname.empty() && launch.local_size >= 1 &&
         launch.local_rank >= 0 && launch.local_rank < launch.local_size && launch.cross_size >= 1 &&
         launch.cross_rank >= 0 && launch.cross_rank < launch.cross_size;
}

std::string PackRecords(const std::vector<std::pair<int, std::string>>& records) {
  std::string out;
  for (const auto& [rank, text] : records) out += std::to_string(rank) + " " + std::to_string(text.size()) + "\n" + text;
  return out;
}

std::vector<std::pair<int, std::string>> UnpackRecords(const std::string& text) {
  std::vector<std::pair<int, std::string>> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t space = text.find(' ', pos), newline = text.find('\n', pos);
    if (space == std::string::npos || newline == std::string::npos || space > newline) {
      throw Error(Status::Internal("unreadable host record in the rendezvous store"));
    }
    int rank;
    size_t bytes;
    try {
      rank = std::stoi(text.substr(pos, space - pos));
      bytes = static_cast<size_t>(std::stoull(text.substr(space + 1, newline - space - 1)));
    } catch (const std::logic_error&) {
      throw Error(Status::Internal("unreadable host record in the rendezvous store"));
    }
    if (newline + 1 + bytes > text.size()) throw Error(Status::Internal("truncated host record in the rendezvous store"));
    out.push_back({rank, text.substr(newline + 1, bytes)});
    pos = newline + 1 + bytes;
  }
  return out;
}

std::vector<std::string> HostGroupedAllGather(HttpStore& store, const std::string& prefix, const LaunchInfo& launch,
                                              const std::string& mine, Deadline deadline) {
  const std::string host = prefix + ".n" + HostKeyPart(launch.hostname);
  store.Set(host + ".l" + std::to_string(launch.local_rank), PackRecords({{launch.rank, mine}}), deadline);
  if (launch.local_rank == 0) {
    // This host's leader: its host's records as one.
    std::vector<std::pair<int, std::string>> local;
    for (int l = 0; l < launch.local_size; ++l) {
      for (auto& rec : UnpackRecords(store.Get(host + ".l" + std::to_string(l), deadline))) local.push_back(std::move(rec));
    }
    store.Set(prefix + ".h" + std::to_string(launch.cross_rank), PackRecords(local), deadline);
    if (launch.cross_rank == 0) {
      // Host 0's leader: the world, by rank.
      std::vector<std::string> world(launch.size);
      std::vector<bool> seen(launch.size, false);
      for (int h = 0; h < launch.cross_size; ++h) {
        for (auto& [rank, text] : UnpackRecords(store.Get(prefix + ".h" + std::to_string(h), deadline))) {
          if (rank < 0 || rank >= launch.size || seen[rank]) {
            throw Error(Status::Internal("host " + std::to_string(h) + " reported rank " + std::to_string(rank) +
                                         " twice or outside a job of " + std::to_string(launch.size)));
          }
          seen[rank] = true;
          world[rank] = std::move(text);
        }
      }
      std::string missing;
      for (int r = 0; r < launch.size; ++r) {
        if (!seen[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      if (!missing.empty()) {
        throw Error(Status::Internal("the " + std::to_string(launch.cross_size) +
                                     " hosts' records miss ranks " + missing +
                                     " (HOROVOD_LOCAL_SIZE / HOROVOD_CROSS_SIZE inconsistent?)"));
      }
      std::vector<std::pair<int, std::string>> all;
      for (int r = 0; r < launch.size; ++r) all.push_back({r, world[r]});
      store.Set(prefix + ".all", PackRecords(all), deadline);
    }
  }
  std::vector<std::string> out(launch.size);
  // Every rank of the job waits for this one record at once.
  auto all = UnpackRecords(store.Get(prefix + ".all", deadline, launch.size));
  if (static_cast<int>(all.size()) != launch.size) {
    throw Error(Status::Internal("the world record holds " + std::to_string(all.size()) + " records for " +
                                 std::to_string(launch.size) + " ranks"));
  }
  for (auto& [rank, text] : all) out.at(rank) = std::move(text);
  return out;
}

}  // namespace herring
