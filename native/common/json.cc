#include "common/json.h"

#include <fstream>
#include <sstream>

#include "common/status.h"

namespace herring {

Json ParseJson(const std::string& text, const std::string& what) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line L, column C: ...":
    // keep the part a user needs.
    std::string message = e.what();
    const auto start = message.find("parse error");
    throw Error(Status::InvalidArgument(what + ": " + (start == std::string::npos ? message : message.substr(start))));
  }
}

Json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(Status::InvalidArgument("cannot read " + path));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseJson(text.str(), path);
}

}  // namespace herring
