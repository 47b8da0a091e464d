#include "common/json_reader.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/status.h"

namespace herring {

JsonValue JsonValue::Bool(bool b) {
  JsonValue v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}

JsonValue JsonValue::Number(double x) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.number_ = x;
  return v;
}

JsonValue JsonValue::String(std::string s) {
  JsonValue v;
  v.kind_ = Kind::kString;
  v.string_ = std::move(s);
  return v;
}

JsonValue JsonValue::Array(std::vector<JsonValue> items) {
  JsonValue v;
  v.kind_ = Kind::kArray;
  v.items_ = std::move(items);
  return v;
}

JsonValue JsonValue::Object(std::vector<std::pair<std::string, JsonValue>> members) {
  JsonValue v;
  v.kind_ = Kind::kObject;
  v.members_ = std::move(members);
  return v;
}

const JsonValue* JsonValue::Find(const std::string& key) const {
  for (const auto& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

const char* JsonValue::KindName(Kind kind) {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kBool: return "a boolean";
    case Kind::kNumber: return "a number";
    case Kind::kString: return "a string";
    case Kind::kArray: return "an array";
    case Kind::kObject: return "an object";
  }
  return "?";
}

namespace {

// Deep enough for any configuration file, shallow enough that a hostile file cannot exhaust the
// stack through recursion.
constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  JsonValue Document() {
    SkipSpace();
    JsonValue v = Value(0);
    SkipSpace();
    if (pos_ != s_.size()) Fail("unexpected text after the document");
    return v;
  }

 private:
  [[noreturn]] void Fail(const std::string& problem) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error(Status::InvalidArgument(what_ + ":" + std::to_string(line) + ":" + std::to_string(col) +
                                        ": " + problem));
  }

  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  bool Literal(const char* word) {
    size_t n = std::strlen(word);
    if (s_.compare(pos_, n, word) == 0) {
      pos_ += n;
      return true;
    }
    return false;
  }

  JsonValue Value(int depth) {
    if (depth > kMaxDepth) Fail("nested more than " + std::to_string(kMaxDepth) + " levels deep");
    if (pos_ >= s_.size()) Fail("expected a value, found the end of the text");
    char c = s_[pos_];
    if (c == '{') return ObjectValue(depth);
    if (c == '[') return ArrayValue(depth);
    if (c == '"') return JsonValue::String(StringValue());
    if (c == '-' || (c >= '0' && c <= '9')) return NumberValue();
    if (Literal("true")) return JsonValue::Bool(true);
    if (Literal("false")) return JsonValue::Bool(false);
    if (Literal("null")) return JsonValue::Null();
    Fail(std::string("expected a value, found '") + c + "'");
  }

  JsonValue ObjectValue(int depth) {
    ++pos_;  // '{'
    std::vector<std::pair<std::string, JsonValue>> members;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return JsonValue::Object(std::move(members));
    }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') Fail("expected a member name in double quotes");
      std::string key = StringValue();
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') Fail("expected ':' after the member name \"" + key + "\"");
      ++pos_;
      SkipSpace();
      members.emplace_back(std::move(key), Value(depth + 1));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return JsonValue::Object(std::move(members));
      }
      Fail("expected ',' or '}' in an object");
    }
  }

  JsonValue ArrayValue(int depth) {
    ++pos_;  // '['
    std::vector<JsonValue> items;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return JsonValue::Array(std::move(items));
    }
    while (true) {
      SkipSpace();
      items.push_back(Value(depth + 1));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return JsonValue::Array(std::move(items));
      }
      Fail("expected ',' or ']' in an array");
    }
  }

  unsigned Hex4() {
    if (pos_ + 4 > s_.size()) Fail("a \\u escape needs four hexadecimal digits");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else Fail("a \\u escape needs four hexadecimal digits");
    }
    return v;
  }

  static void AppendUtf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string StringValue() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) Fail("a string is not closed");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        Fail("a control character inside a string must be escaped");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) Fail("a string is not closed");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = Hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            if (!Literal("\\u")) Fail("a high surrogate must be followed by a low one");
            unsigned lo = Hex4();
            if (lo < 0xDC00 || lo >= 0xE000) Fail("a high surrogate must be followed by a low one");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          AppendUtf8(out, cp);
          break;
        }
        default:
          --pos_;
          Fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  JsonValue NumberValue() {
    size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      Fail("expected digits in a number");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) Fail("expected digits after the decimal point");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) Fail("expected digits in the exponent");
    }
    std::string text = s_.substr(start, pos_ - start);
    errno = 0;
    double x = std::strtod(text.c_str(), nullptr);
    if (errno == ERANGE && (x > 1 || x < -1)) {
      pos_ = start;
      Fail("number " + text + " is out of range");
    }
    return JsonValue::Number(x);
  }

  const std::string& s_;
  const std::string& what_;
  size_t pos_ = 0;
};

}  // namespace

JsonValue ParseJson(const std::string& text, const std::string& what) {
  return Parser(text, what).Document();
}

JsonValue ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(Status::InvalidArgument("cannot read " + path + ": " + std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(Status::InvalidArgument("cannot read " + path + ": " + std::strerror(errno)));
  return ParseJson(text.str(), path);
}

}  // namespace herring
