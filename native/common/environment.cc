#include "common/environment.h"

extern char** environ;

namespace herring {

Environment ProcessEnvironment() {
  Environment env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

Environment GivenOrProcessEnvironment(const Environment& env) { return env.empty() ? ProcessEnvironment() : env; }

}  // namespace herring
