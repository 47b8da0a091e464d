// How many CPUs this process may run on: what decides whether each local rank can have a core of
// its own (Engine::WaiterRuns).
#pragma once

namespace herring {

// The CPUs in this process's affinity mask (taskset, cgroup cpusets, a launcher's binding), at
// least 1; the machine's online CPUs where the mask cannot be read.
int CpusAvailable();

}  // namespace herring
