#include "rendezvous/launch_env.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "common/environment.h"
#include "common/status.h"

namespace herring {

namespace {

// Reads launcher variables from an environment map; every error names the variable, its value
// and the launcher that was expected to set it, because that is what a user has to fix.
class LaunchEnvReader {
 public:
  LaunchEnvReader(const std::map<std::string, std::string>& env, const char* launcher)
      : env_(env), launcher_(launcher) {}

  std::string Optional(const std::string& name) const {
    auto it = env_.find(name);
    return it == env_.end() ? std::string() : it->second;
  }

  std::string Required(const std::string& name) const {
    auto it = env_.find(name);
    if (it == env_.end() || it->second.empty()) {
      throw Error(Status::InvalidArgument(name + " is not set, but " + launcher_ +
                                          " sets it for every process; the launch environment "
                                          "is incomplete"));
    }
    return it->second;
  }

  // A decimal integer in [min_value, max_value]; no sign tricks, spaces or trailing garbage.
  int Int(const std::string& name, long min_value, long max_value) const {
    std::string text = Required(name);
    errno = 0;
    char* end = nullptr;
    long value = std::strtol(text.c_str(), &end, 10);
    bool parsed = std::isdigit(static_cast<unsigned char>(text[0])) && *end == '\0' && errno == 0;
    if (!parsed || value < min_value || value > max_value) {
      Bad(name, text,
          "an integer in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
    }
    return static_cast<int>(value);
  }

  // A launcher's (rank, size) pair: `size_name` at least 1 and, where `whole_name` is given, at
  // most that variable's `whole`; `rank_name` in [0, size).
  void RankAndSize(const std::string& rank_name, const std::string& size_name, int* rank, int* size,
                   const std::string& whole_name = std::string(), int whole = INT_MAX) const {
    *size = Int(size_name, 1, INT_MAX);
    if (!whole_name.empty()) RequireAtMost(size_name, *size, whole_name, whole);
    *rank = Int(rank_name, 0, INT_MAX);
    RequireIndexBelow(rank_name, *rank, size_name, *size);
  }

 private:
  // `index_name` must lie in [0, `count_name`): a rank beyond the size means the launcher and the
  // process disagree about the job, and continuing would hang every other rank.
  void RequireIndexBelow(const std::string& index_name, int index, const std::string& count_name,
                         int count) const {
    if (index >= count) {
      Bad(index_name, std::to_string(index), "less than " + count_name + "=" +
                                                 std::to_string(count));
    }
  }

  void RequireAtMost(const std::string& part_name, int part, const std::string& whole_name,
                     int whole) const {
    if (part > whole) {
      Bad(part_name, std::to_string(part), "at most " + whole_name + "=" + std::to_string(whole));
    }
  }

  [[noreturn]] void Bad(const std::string& name, const std::string& value,
                        const std::string& want) const {
    throw Error(Status::InvalidArgument(name + "='" + value + "' (set by " + launcher_ +
                                        ") is not valid: expected " + want));
  }

  const std::map<std::string, std::string>& env_;
  const char* launcher_;
};

std::string LocalHostname() {
  char buffer[HOST_NAME_MAX + 1] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) {
    throw Error(Status::Internal(std::string("gethostname() failed: ") + std::strerror(errno) +
                                 "; set HOROVOD_HOSTNAME"));
  }
  return buffer;
}

// HOROVOD_HOSTNAME wins so that a user can make ranks of one host agree on its name.
std::string HostnameOf(const LaunchEnvReader& r) {
  std::string name = r.Optional("HOROVOD_HOSTNAME");
  return name.empty() ? LocalHostname() : name;
}

LaunchInfo FromHorovodrun(const std::map<std::string, std::string>& env) {
  LaunchEnvReader r(env, "horovodrun");
  LaunchInfo info;
  info.launcher = Launcher::kHorovodrun;
  r.RankAndSize("HOROVOD_RANK", "HOROVOD_SIZE", &info.rank, &info.size);
  r.RankAndSize("HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", &info.local_rank, &info.local_size, "HOROVOD_SIZE",
                info.size);
  r.RankAndSize("HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", &info.cross_rank, &info.cross_size, "HOROVOD_SIZE",
                info.size);
  info.hostname = r.Required("HOROVOD_HOSTNAME");
  info.rendezvous_addr = r.Required("HOROVOD_GLOO_RENDEZVOUS_ADDR");
  info.rendezvous_port = r.Int("HOROVOD_GLOO_RENDEZVOUS_PORT", 1, 65535);
  // Unused by the engine, but horovodrun always sets them: their absence means something other
  // than `horovodrun --gloo` produced a partial HOROVOD_* environment.
  r.Required("HOROVOD_CONTROLLER");
  r.Required("HOROVOD_CPU_OPERATIONS");
  info.iface = r.Optional("HOROVOD_GLOO_IFACE");
  return info;
}

// mpirun and torchrun say nothing about hosts beyond the local ones, so cross_rank/cross_size stay
// -1 until the engine derives them from the hostnames the ranks exchange.
void HostsFromHostnames(const LaunchEnvReader& r, LaunchInfo* info) {
  info->cross_rank = -1;
  info->cross_size = -1;
  info->hostname = HostnameOf(r);
}

LaunchInfo FromMpirun(const std::map<std::string, std::string>& env) {
  LaunchEnvReader r(env, "mpirun (Open MPI)");
  LaunchInfo info;
  info.launcher = Launcher::kMpirun;
  r.RankAndSize("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", &info.rank, &info.size);
  r.RankAndSize("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", &info.local_rank, &info.local_size,
                "OMPI_COMM_WORLD_SIZE", info.size);
  HostsFromHostnames(r, &info);
  info.iface = r.Optional("HOROVOD_GLOO_IFACE");
  return info;
}

// torchrun (or a hand-made env:// launch): the endpoints travel through torch's Store, which the
// Python side hands to the engine as its exchange function. LOCAL_RANK / LOCAL_WORLD_SIZE are
// torchrun's; a hand-made launch may leave them out, and then the engine learns the host layout
// from the hostnames alone (a job whose ranks all run here when MASTER_ADDR is this machine).
LaunchInfo FromTorchrun(const std::map<std::string, std::string>& env) {
  LaunchEnvReader r(env, "torchrun");
  LaunchInfo info;
  info.launcher = Launcher::kTorchrun;
  r.RankAndSize("RANK", "WORLD_SIZE", &info.rank, &info.size);
  if (!r.Optional("LOCAL_WORLD_SIZE").empty()) {
    r.RankAndSize("LOCAL_RANK", "LOCAL_WORLD_SIZE", &info.local_rank, &info.local_size, "WORLD_SIZE", info.size);
  } else {
    const std::string master = r.Optional("MASTER_ADDR");
    const bool here = master.empty() || master == "localhost" || master.rfind("127.", 0) == 0;
    info.local_size = here ? info.size : 1;
    info.local_rank = here ? info.rank : 0;
  }
  HostsFromHostnames(r, &info);
  info.iface = r.Optional("HOROVOD_GLOO_IFACE");
  return info;
}

LaunchInfo Single(const std::map<std::string, std::string>& env) {
  LaunchEnvReader r(env, "the user");
  LaunchInfo info;
  info.hostname = HostnameOf(r);
  info.iface = r.Optional("HOROVOD_GLOO_IFACE");
  return info;
}

}  // namespace

const char* LauncherName(Launcher l) {
  switch (l) {
    case Launcher::kSingle: return "single process";
    case Launcher::kHorovodrun: return "horovodrun";
    case Launcher::kMpirun: return "mpirun";
    case Launcher::kTorchrun: return "torchrun";
  }
  return "unknown launcher";
}

LaunchInfo DetectLaunch(const std::map<std::string, std::string>& env) {
  if (env.count("HOROVOD_RANK")) return FromHorovodrun(env);
  if (env.count("OMPI_COMM_WORLD_RANK")) return FromMpirun(env);
  // torch.distributed's env:// variables; after the two launchers above, whose own variables win
  // (a script may set RANK itself under horovodrun).
  if (env.count("RANK") && env.count("WORLD_SIZE")) return FromTorchrun(env);
  return Single(env);
}

LaunchInfo DetectLaunchFromProcessEnvironment() {
  return DetectLaunch(ProcessEnvironment());
}

}  // namespace herring
