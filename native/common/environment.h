// The process environment as a map: what knobs (common/knobs.h) and launcher variables
// (rendezvous/launch_env.h) are read from. Readers take a map rather than calling getenv so that
// tests, and an engine given its own environment, see exactly the variables they were handed.
#pragma once

#include <map>
#include <string>

namespace herring {

using Environment = std::map<std::string, std::string>;

// A copy of this process's environment, taken now.
Environment ProcessEnvironment();
// `env` when it is not empty, else the process environment (an empty map means "not given").
Environment GivenOrProcessEnvironment(const Environment& env);

}  // namespace herring
