// A small JSON reader for the configuration files knobs point at (HERRING_TOPOLOGY): the whole
// grammar of RFC 8259, values kept in document order (object members too), errors that say
// where (line:column) and what was expected. Not for bulk data: it builds a tree of small nodes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace herring {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  JsonValue() = default;
  static JsonValue Null() { return JsonValue(); }
  static JsonValue Bool(bool b);
  static JsonValue Number(double x);
  static JsonValue String(std::string s);
  static JsonValue Array(std::vector<JsonValue> items);
  static JsonValue Object(std::vector<std::pair<std::string, JsonValue>> members);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  bool as_bool() const { return bool_; }
  double as_number() const { return number_; }
  const std::string& as_string() const { return string_; }
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<std::pair<std::string, JsonValue>>& members() const { return members_; }
  // The member named `key` of an object, or null when absent (the first one if repeated).
  const JsonValue* Find(const std::string& key) const;

  static const char* KindName(Kind kind);

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

// Parses a whole document. Throws Error(InvalidArgument) "<what>:<line>:<column>: <problem>",
// where `what` names the source (a file path) for the message.
JsonValue ParseJson(const std::string& text, const std::string& what);

// Reads and parses a file; a missing or unreadable file is an InvalidArgument naming the path.
JsonValue ReadJsonFile(const std::string& path);

}  // namespace herring
