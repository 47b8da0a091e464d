// Who am I in the job: rank, size and host layout as the launcher describes them. horovodrun
// (gloo mode) sets HOROVOD_RANK & co. and runs an HTTP rendezvous store; mpirun (Open MPI) sets
// OMPI_COMM_WORLD_*; torchrun (and any torch.distributed env:// launch) sets RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE and MASTER_ADDR/PORT; with none, the process is a job of one.
#pragma once

#include <map>
#include <string>

namespace herring {

enum class Launcher { kSingle, kHorovodrun, kMpirun, kTorchrun };
const char* LauncherName(Launcher l);

struct LaunchInfo {
  Launcher launcher = Launcher::kSingle;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  // Index of this host among the hosts, and their number. horovodrun gives them; under mpirun and
  // torchrun they are -1 here and the engine derives them from the hostnames the ranks exchange.
  int cross_rank = 0;
  int cross_size = 1;
  std::string hostname;  // HOROVOD_HOSTNAME, else gethostname()
  std::string rendezvous_addr;  // horovodrun's HTTP store
  int rendezvous_port = 0;
  std::string iface;            // HOROVOD_GLOO_IFACE
};

// Throws Error(InvalidArgument) naming the variable when a value is missing, not an integer, or
// inconsistent (rank >= size, local_rank >= local_size...).
LaunchInfo DetectLaunch(const std::map<std::string, std::string>& env);
LaunchInfo DetectLaunchFromProcessEnvironment();

}  // namespace herring
