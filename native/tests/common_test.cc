#include "common/deadline.h"
#include "common/dtype.h"
#include "common/knobs.h"
#include "common/status.h"
#include "tests/test_framework.h"

using namespace herring;

TEST(KnobsDefaultsParse) {
  Config c = Config::FromEnvironment({});
  EXPECT_EQ(c.fusion_threshold_bytes, 134217728);
  EXPECT_EQ(c.cache_capacity, 1024);
  EXPECT_TRUE(c.allreduce == AllreduceAlgorithm::kHerring);
}

TEST(KnobsRejectGarbageNamingTheKnob) {
  bool threw = false;
  try {
    Config::FromEnvironment({{"HOROVOD_CACHE_CAPACITY", "lots"}});
  } catch (const Error& e) {
    threw = true;
    EXPECT_TRUE(std::string(e.what()).find("HOROVOD_CACHE_CAPACITY='lots'") != std::string::npos);
  }
  EXPECT_TRUE(threw);
}

TEST(KnobsFingerprintCoversMustMatchOnly) {
  Config a = Config::FromEnvironment({{"HOROVOD_CYCLE_TIME", "5"}});
  Config b = Config::FromEnvironment({});
  EXPECT_EQ(a.MustMatchFingerprint(), b.MustMatchFingerprint());
  Config d = Config::FromEnvironment({{"HERRING_ALLREDUCE", "ring"}});
  EXPECT_TRUE(d.MustMatchFingerprint() != b.MustMatchFingerprint());
}

TEST(DeadlineExpires) {
  Deadline d = Deadline::After(std::chrono::milliseconds(0));
  EXPECT_TRUE(d.Expired());
  EXPECT_TRUE(!Deadline::Never().Expired());
}

TEST(DataTypeSizes) {
  EXPECT_EQ(ElementSize(DataType::kBFloat16), size_t(2));
  EXPECT_EQ(ElementSize(DataType::kFloat64), size_t(8));
  EXPECT_TRUE(!IsValidDataType(42));
}
