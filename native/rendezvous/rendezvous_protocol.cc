#include "rendezvous/rendezvous_protocol.h"

#include <map>
#include <random>
#include <set>
#include <sstream>

#include "common/crypto.h"
#include "common/status.h"
#include "rendezvous/host_rendezvous.h"
#include "rendezvous/http_store.h"
#include "rendezvous/net_interfaces.h"

namespace herring {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  std::string line;
  while (std::getline(s, line)) out.push_back(line);
  return out;
}

std::map<std::string, std::string> ParseFingerprint(const std::string& f) {
  std::map<std::string, std::string> kv;
  std::stringstream s(f);
  std::string item;
  while (std::getline(s, item, ';')) {
    auto eq = item.find('=');
    if (eq != std::string::npos) kv[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return kv;
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

}  // namespace

std::string RecordPrefix(int epoch) { return "e" + std::to_string(epoch); }
std::string RecordKey(int epoch, int rank) { return RecordPrefix(epoch) + "." + std::to_string(rank); }
std::string WorldKey(int epoch) { return RecordPrefix(epoch) + ".world"; }

std::string RankRecord::Encode() const {
  return hostname + "\n" + ip + "\n" + std::to_string(port) + "\n" + fingerprint + "\n" + job_id + "\n" + secret_hex;
}

RankRecord RankRecord::Decode(const std::string& text, int rank) {
  std::vector<std::string> f = Lines(text);
  while (f.size() < 6) f.push_back("");
  RankRecord r;
  r.hostname = f[0];
  r.ip = f[1];
  r.fingerprint = f[3];
  r.job_id = f[4];
  r.secret_hex = f[5];
  try {
    r.port = static_cast<uint16_t>(std::stoi(f[2]));
  } catch (...) {
    throw Error(Status::Internal("rank " + std::to_string(rank) + " published an unreadable rendezvous record"));
  }
  return r;
}

std::string FingerprintDifference(const std::string& reference, int reference_rank, const std::string& theirs,
                                  int their_rank) {
  auto ours = ParseFingerprint(reference);
  auto others = ParseFingerprint(theirs);
  std::set<std::string> knobs;
  for (const auto& kv : ours) knobs.insert(kv.first);
  for (const auto& kv : others) knobs.insert(kv.first);
  for (const auto& knob : knobs) {
    const std::string& a = ours[knob];
    const std::string& b = others[knob];
    if (a != b) {
      return knob + " differs between ranks: rank " + std::to_string(reference_rank) + " has '" + a + "', rank " +
             std::to_string(their_rank) + " has '" + b + "'; set it the same on every rank";
    }
  }
  return "";
}

void CheckFingerprints(const std::vector<RankRecord>& records) {
  for (size_t r = 1; r < records.size(); ++r) {
    std::string why = FingerprintDifference(records[0].fingerprint, 0, records[r].fingerprint, static_cast<int>(r));
    if (!why.empty()) throw Error(Status::InvalidArgument(why));
  }
}

std::string JobIdHex(uint64_t job_id) {
  std::ostringstream s;
  s << std::hex << job_id;
  return s.str();
}

JobCredentials IssueJobCredentials(const std::string& configured_secret, RankRecord* rank0) {
  JobCredentials c;
  std::random_device rd;
  c.job_id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  rank0->job_id = JobIdHex(c.job_id);
  c.secret = configured_secret;
  if (c.secret.empty()) {
    c.secret = RandomBytes(32);
    rank0->secret_hex = ToHex(reinterpret_cast<const uint8_t*>(c.secret.data()), c.secret.size());
  }
  return c;
}

JobCredentials JobCredentialsFrom(const RankRecord& rank0, const std::string& configured_secret) {
  JobCredentials c;
  try {
    c.job_id = std::stoull(rank0.job_id, nullptr, 16);
    c.secret = !configured_secret.empty() ? configured_secret : FromHex(rank0.secret_hex);
  } catch (const std::logic_error&) {  // std::stoull / std::stoi on text that is not hex
    throw Error(Status::Internal("rank 0 published an unreadable job id or secret in its rendezvous record"));
  }
  return c;
}

std::string AdvertisedAddress(const std::string& iface, bool all_on_this_host, const std::string& placement) {
  if (!iface.empty()) return InterfaceAddress(iface);
  if (all_on_this_host) return "127.0.0.1";
  // The launcher's numbers say only that the ranks are not all known to share this host: Spark's
  // local-cluster executors and TorchDistributor(local_mode=False) make each rank a node of its
  // own on one machine, so the message must not claim several hosts.
  throw Error(Status::InvalidArgument(
      (placement.empty() ? std::string("the launcher does not place every rank on this host")
                         : placement) +
      ", so the ranks cannot meet on 127.0.0.1: set HERRING_IFACE to the network interface they share "
      "(lo when every rank runs on this machine, e.g. eth0 across machines)"));
}

std::vector<RankRecord> ExchangeRecords(const RankRecord& mine, const RecordExchange& exchange,
                                        const LaunchInfo& launch, int epoch, Deadline deadline, bool per_host) {
  std::vector<std::string> texts;
  if (exchange) {
    texts = exchange(mine.Encode());
  } else if (launch.launcher == Launcher::kHorovodrun) {
    HttpStore store(launch.rendezvous_addr, launch.rendezvous_port, kRendezvousScope);
    if (per_host && CanGroupByHost(launch)) {
      texts = HostGroupedAllGather(store, RecordPrefix(epoch), launch, mine.Encode(), deadline);
    } else {
      texts = store.AllGather(RecordPrefix(epoch), launch.rank, launch.size, mine.Encode(), deadline);
    }
  } else if (launch.size == 1) {
    texts = {mine.Encode()};
  } else {
    throw Error(Status::InvalidArgument(std::string("launched by ") + LauncherName(launch.launcher) +
                                        " with no way to exchange endpoints (mpirun needs mpi4py)"));
  }
  if (static_cast<int>(texts.size()) != launch.size) {
    throw Error(Status::Internal("rendezvous returned " + std::to_string(texts.size()) + " records for " +
                                 std::to_string(launch.size) + " processes"));
  }
  std::vector<RankRecord> records;
  for (int r = 0; r < launch.size; ++r) records.push_back(RankRecord::Decode(texts[r], r));
  CheckFingerprints(records);
  return records;
}

std::string WorldRecord::Encode() const {
  std::string text = std::to_string(workers) + " " + std::to_string(next_rank);
  for (int r : active) text += " " + std::to_string(r);
  return text;
}

WorldRecord WorldRecord::Decode(const std::string& text) {
  std::vector<std::string> fields;
  {
    std::stringstream s(text);
    std::string f;
    while (s >> f) fields.push_back(f);
  }
  if (fields.size() < 3) throw Error(Status::Internal("unreadable world record in the rendezvous store"));
  WorldRecord w;
  try {
    w.workers = std::stoi(fields[0]);
    w.next_rank = std::stoi(fields[1]);
    for (size_t i = 2; i < fields.size(); ++i) w.active.push_back(std::stoi(fields[i]));
  } catch (const std::logic_error&) {
    throw Error(Status::Internal("unreadable world record in the rendezvous store"));
  }
  return w;
}

void PublishRunningJob(HttpStore& store, int epoch, const WorldRecord& world, Deadline deadline) {
  store.Set(kCurrentEpochKey, std::to_string(epoch), deadline);
  store.Set(WorldKey(epoch), world.Encode(), deadline);
}

RunningJob ReadRunningJob(HttpStore& store, Deadline deadline) {
  RunningJob job;
  const std::string current = store.Get(kCurrentEpochKey, deadline);
  try {
    job.epoch = std::stoi(current);
  } catch (const std::logic_error&) {
    throw Error(Status::Internal("unreadable current epoch '" + current + "' in the rendezvous store"));
  }
  job.world = WorldRecord::Decode(store.Get(WorldKey(job.epoch), deadline));
  for (int r = 0; r < job.world.next_rank; ++r) {
    job.records.push_back(RankRecord::Decode(store.Get(RecordKey(job.epoch, r), deadline), r));
  }
  return job;
}

std::string JoinRequest::Encode() const { return hostname + "\n" + fingerprint; }

JoinRequest JoinRequest::Decode(const std::string& text) {
  auto lines = Lines(text);
  JoinRequest j;
  j.hostname = lines.empty() ? "" : lines[0];
  j.fingerprint = lines.size() > 1 ? lines[1] : "";
  return j;
}

}  // namespace herring
