#include <cstring>

#include "tests/test_framework.h"

namespace herring_test {

static int g_failures = 0;

std::vector<TestCase>& Registry() {
  static std::vector<TestCase> r;
  return r;
}

void RecordFailure(const char* file, int line, const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "  FAILED %s:%d: %s\n", file, line, what.c_str());
}

}  // namespace herring_test

int main(int argc, char** argv) {
  using namespace herring_test;
  const char* filter = argc > 1 ? argv[1] : "";
  int ran = 0, failed_cases = 0;
  for (auto& t : Registry()) {
    if (std::strstr(t.name, filter) == nullptr) continue;
    int before = g_failures;
    std::fprintf(stderr, "[ RUN  ] %s\n", t.name);
    try {
      t.body();
    } catch (const std::exception& e) {
      RecordFailure(__FILE__, __LINE__, std::string("uncaught exception: ") + e.what());
    }
    ++ran;
    bool ok = g_failures == before;
    if (!ok) ++failed_cases;
    std::fprintf(stderr, "[ %s ] %s\n", ok ? " OK " : "FAIL", t.name);
  }
  std::fprintf(stderr, "%d cases, %d failed\n", ran, failed_cases);
  if (ran == 0) {
    std::fprintf(stderr, "no test matched '%s'\n", filter);
    return 2;
  }
  return failed_cases == 0 ? 0 : 1;
}
