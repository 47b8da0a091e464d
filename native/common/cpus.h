// Which CPUs this process and its threads run on: what decides whether each local rank can have a
// core of its own (Engine::WaiterRuns), and how a rank's cycle leaves a core it shares with
// another rank of its host (ShmBitsExchange::MoveOffSharedCpu).
#pragma once

#include <vector>

namespace herring {

// The CPUs in this process's affinity mask (taskset, cgroup cpusets, a launcher's binding), at
// least 1; the machine's online CPUs where the mask cannot be read.
int CpusAvailable();

// The CPU the calling thread is running on, or -1 where the system cannot say.
int CurrentCpu();

// Moves the calling thread to a CPU of its affinity mask that is not in `taken`, then gives it
// its whole mask back: the thread stays where it was put until the scheduler moves it again, and
// nothing it starts later (threads, forked processes) inherits a narrower mask. Returns the CPU
// it moved to, or -1 when the mask has no CPU outside `taken` or cannot be changed.
int MoveCallingThreadOff(const std::vector<int>& taken);

}  // namespace herring
