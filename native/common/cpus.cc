#include "common/cpus.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

namespace herring {

int CpusAvailable() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

int CurrentCpu() { return sched_getcpu(); }

int MoveCallingThreadOff(const std::vector<int>& taken) {
  // Pid 0 in the sched_*affinity calls is the calling thread, not the process.
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mask) || std::find(taken.begin(), taken.end(), cpu) != taken.end()) continue;
    cpu_set_t only;
    CPU_ZERO(&only);
    CPU_SET(cpu, &only);
    // The kernel migrates the running thread before the first call returns; the second cannot
    // move it, since its CPU is in the mask it restores.
    if (sched_setaffinity(0, sizeof(only), &only) != 0) return -1;
    sched_setaffinity(0, sizeof(mask), &mask);
    return cpu;
  }
  return -1;
}

}  // namespace herring
