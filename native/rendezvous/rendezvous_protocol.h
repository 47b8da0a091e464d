// The rendezvous protocol: what the processes of a job tell each other before the mesh exists,
// written once for the two ways into a job. At init every launched process publishes a record
// (how to reach it, and the knobs that must agree) and reads everyone's; rank 0's record also
// hands out the job's id and, unless HERRING_SECRET was set, the secret every connection must
// prove. A dedicated server joining a running job (HERRING_ELASTIC_SLOTS) reads the same records
// and the world rank 0 keeps current in horovodrun's store, publishes its own record the same way,
// and has its knobs checked by rank 0 with the same comparison.
//
// rendezvous/ sits below runtime/ and engine/ and beside transport/: it speaks in plain data
// (addresses and ports, fingerprint strings), never in the engine's or the transport's types.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "rendezvous/launch_env.h"

namespace herring {

class HttpStore;

// Where the protocol lives in horovodrun's store: one scope, keys per init round (epoch) so that
// successive init/shutdown rounds of one process never read each other's records.
constexpr const char* kRendezvousScope = "herring";
constexpr const char* kCurrentEpochKey = "current";  // the epoch of the running job (elastic)
std::string RecordPrefix(int epoch);                 // "e<epoch>": records are "<prefix>.<rank>"
std::string RecordKey(int epoch, int rank);
std::string WorldKey(int epoch);                     // the running job's world (elastic)

// One rank's record: what the others need to reach it and to check it is compatible. job_id and
// secret_hex are rank 0's alone (empty elsewhere; secret_hex also when the secret was configured).
struct RankRecord {
  std::string hostname;
  std::string ip;
  uint16_t port = 0;
  std::string fingerprint;  // Config::MustMatchFingerprint(): "NAME=value;..."
  std::string job_id;       // hex
  std::string secret_hex;

  std::string Encode() const;
  // Throws Error(Internal) naming `rank` when the record cannot be read.
  static RankRecord Decode(const std::string& text, int rank);
};

// The knobs that change what goes on the wire must agree. Empty when `theirs` (rank
// `their_rank`'s) matches `reference` (rank `reference_rank`'s); otherwise the reason, naming the
// knob, both ranks and both values. A knob only one side has counts as differing.
std::string FingerprintDifference(const std::string& reference, int reference_rank, const std::string& theirs,
                                  int their_rank);
// Every record against rank 0's. Throws Error(InvalidArgument) with FingerprintDifference's reason.
void CheckFingerprints(const std::vector<RankRecord>& records);

// The job's identity: the token both ends of a connection present, and the secret they prove.
struct JobCredentials {
  uint64_t job_id = 0;
  std::string secret;
};
std::string JobIdHex(uint64_t job_id);
// Rank 0: draws the job id and, when `configured_secret` is empty, a secret; both go into
// `rank0`'s record. The secret is handed out through the rendezvous, which only the launched
// processes are told about.
JobCredentials IssueJobCredentials(const std::string& configured_secret, RankRecord* rank0);
// Everyone else: the job's credentials from rank 0's record (the configured secret wins; empty
// when neither has one). Throws Error(Internal) when rank 0's job id cannot be read.
JobCredentials JobCredentialsFrom(const RankRecord& rank0, const std::string& configured_secret);

// The IPv4 address to listen on and advertise: the interface's when one is named; loopback when
// the job runs on this machine alone; otherwise an error asking for HERRING_IFACE that starts
// with `placement` (what the launcher said about where the ranks are).
std::string AdvertisedAddress(const std::string& iface, bool all_on_this_host, const std::string& placement = "");

// Init: publishes `mine` and returns every launched process's record, by rank, checked (one per
// process, readable, fingerprints agreeing with rank 0's). `exchange` (the front end's, e.g. over
// mpi4py or torch's store) wins; otherwise horovodrun's store, or nothing for a job of one.
// per_host (HERRING_RENDEZVOUS=host): through horovodrun's store, one round per host
// (rendezvous/host_rendezvous.h) instead of every rank reading every record.
using RecordExchange = std::function<std::vector<std::string>(const std::string& mine)>;
std::vector<RankRecord> ExchangeRecords(const RankRecord& mine, const RecordExchange& exchange,
                                        const LaunchInfo& launch, int epoch, Deadline deadline,
                                        bool per_host = false);

// The running job as rank 0 keeps it in the store for servers that join (elastic): the workers,
// the next free rank, and the ranks taking part now.
struct WorldRecord {
  int workers = 0;
  int next_rank = 0;
  std::vector<int> active;

  std::string Encode() const;  // "<workers> <next free rank> <active ranks...>"
  static WorldRecord Decode(const std::string& text);  // throws Error(Internal)
};
// Rank 0: makes `epoch` the current one and `world` its world.
void PublishRunningJob(HttpStore& store, int epoch, const WorldRecord& world, Deadline deadline);

// What a joining server reads from the store: the current epoch, its world, and the records of
// every rank before the joiner's (retired ones included: their host names stay known).
struct RunningJob {
  int epoch = 0;
  WorldRecord world;
  std::vector<RankRecord> records;  // by rank, 0 .. world.next_rank - 1
};
RunningJob ReadRunningJob(HttpStore& store, Deadline deadline);

// The joiner's request to rank 0 (sent over the mesh once connected): its host and fingerprint.
struct JoinRequest {
  std::string hostname;
  std::string fingerprint;

  std::string Encode() const;
  static JoinRequest Decode(const std::string& text);
};

}  // namespace herring
