// Which pid namespace this process lives in: a pid names the same process only inside one
// namespace (processes in different containers may still share /dev/shm).
#pragma once

#include <cstdint>
#include <string>

namespace herring {

// Identifies this process's pid namespace (device and inode of /proc/self/ns/pid); 0 when unknown.
uint64_t OwnPidNamespace();

// Names this process among every process of every machine and boot: the kernel's boot id, the pid
// namespace, the pid and the process's start time. A fork has another identity. Read afresh on
// every call (nothing cached, so a forked child never answers with its parent's identity).
std::string ProcessIdentity();

}  // namespace herring
