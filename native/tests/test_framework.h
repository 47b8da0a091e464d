// A tiny test runner for the native core: each TEST registers itself; `herring_native_tests
// [substring]` runs the matching cases and exits non-zero on any failure. pytest drives it.
#pragma once

#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace herring_test {

struct TestCase {
  const char* name;
  std::function<void()> body;
};

std::vector<TestCase>& Registry();

// Printing for failure messages: anything streamable, and vectors of it.
template <typename T>
std::string Show(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
template <typename T>
std::string Show(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + Show(v[i]);
  return out + "]";
}
void RecordFailure(const char* file, int line, const std::string& what);

struct Registrar {
  Registrar(const char* name, std::function<void()> body) { Registry().push_back({name, std::move(body)}); }
};

}  // namespace herring_test

#define HT_CONCAT2(a, b) a##b
#define HT_CONCAT(a, b) HT_CONCAT2(a, b)
#define TEST(NAME)                                                                          \
  static void NAME();                                                                       \
  static ::herring_test::Registrar HT_CONCAT(registrar_, NAME)(#NAME, NAME);                \
  static void NAME()

#define EXPECT_TRUE(COND)                                                                   \
  do {                                                                                      \
    if (!(COND)) ::herring_test::RecordFailure(__FILE__, __LINE__, "expected: " #COND);     \
  } while (0)

#define EXPECT_EQ(A, B)                                                                     \
  do {                                                                                      \
    auto _a = (A);                                                                          \
    auto _b = (B);                                                                          \
    if (!(_a == _b)) {                                                                      \
      std::ostringstream _s;                                                                \
      _s << "expected " #A " == " #B ", got " << ::herring_test::Show(_a) << " vs "          \
         << ::herring_test::Show(_b);                                                       \
      ::herring_test::RecordFailure(__FILE__, __LINE__, _s.str());                          \
    }                                                                                       \
  } while (0)

#define ASSERT_TRUE(COND)                                                                   \
  do {                                                                                      \
    if (!(COND)) {                                                                          \
      ::herring_test::RecordFailure(__FILE__, __LINE__, "assertion failed: " #COND);        \
      return;                                                                               \
    }                                                                                       \
  } while (0)
