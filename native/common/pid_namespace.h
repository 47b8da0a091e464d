// Which pid namespace this process lives in: a pid names the same process only inside one
// namespace (processes in different containers may still share /dev/shm).
#pragma once

#include <cstdint>

namespace herring {

// Identifies this process's pid namespace (device and inode of /proc/self/ns/pid); 0 when unknown.
uint64_t OwnPidNamespace();

}  // namespace herring
