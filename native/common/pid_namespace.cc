#include "common/pid_namespace.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace herring {

uint64_t OwnPidNamespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return (static_cast<uint64_t>(st.st_dev) << 32) ^ static_cast<uint64_t>(st.st_ino);
}

std::string ProcessIdentity() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  // Field 22 of /proc/self/stat (start time, in clock ticks after boot); the command name
  // (field 2) may hold spaces and parentheses, so count from the last ')'.
  std::string start_time;
  {
    std::ifstream f("/proc/self/stat");
    std::stringstream text;
    text << f.rdbuf();
    const std::string stat = text.str();
    const size_t close = stat.rfind(')');
    if (close != std::string::npos) {
      std::istringstream fields(stat.substr(close + 1));
      std::string field;
      for (int i = 3; i <= 22 && fields >> field; ++i) {
        if (i == 22) start_time = field;
      }
    }
  }
  std::ostringstream id;
  id << boot_id << '/' << std::hex << OwnPidNamespace() << std::dec << '/' << getpid() << '/' << start_time;
  return id.str();
}

}  // namespace herring
