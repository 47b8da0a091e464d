// JSON for the configuration files knobs point at (HERRING_TOPOLOGY), through nlohmann-json, the
// library the C++ field trusts for it. Objects keep their members in document order, and errors
// name the file and say where (line and column) and what was expected.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace herring {

using Json = nlohmann::ordered_json;

// Parses a whole document. Throws Error(InvalidArgument) "<what>: <where and what went wrong>",
// `what` naming the source (a file path) for the message.
Json ParseJson(const std::string& text, const std::string& what);

// Reads and parses a file; a missing or unreadable file is an InvalidArgument naming the path.
Json ReadJsonFile(const std::string& path);

}  // namespace herring
