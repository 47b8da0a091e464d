#include "common/deadline.h"
#include "common/dtype.h"
#include "common/knobs.h"
#include "common/status.h"
#include <gtest/gtest.h>

using namespace herring;

TEST(Common, KnobsDefaultsParse) {
  Config c = Config::FromEnvironment({});
  EXPECT_EQ(c.fusion_threshold_bytes, 134217728);
  EXPECT_EQ(c.cache_capacity, 1024);
  EXPECT_TRUE(c.allreduce == AllreduceAlgorithm::kHerring);
}

TEST(Common, HerringKnobsRejectGarbageNamingTheKnob) {
  bool threw = false;
  try {
    Config::FromEnvironment({{"HERRING_TCP_STREAMS", "lots"}});
  } catch (const Error& e) {
    threw = true;
    EXPECT_TRUE(std::string(e.what()).find("HERRING_TCP_STREAMS='lots'") != std::string::npos);
  }
  EXPECT_TRUE(threw);
}

// What Horovod's launchers export reads: horovod.run()'s HOROVOD_CYCLE_TIME='(None,)' and
// HOROVOD_CACHE_CAPACITY='(None,)' as Horovod reads them (0), integers written as floats
// (horovodrun's config file), flags as integers; below a HOROVOD_* knob's minimum is the minimum.
TEST(Common, HorovodKnobsReadWhatHorovodsLaunchersExport) {
  Config c = Config::FromEnvironment({{"HOROVOD_CYCLE_TIME", "(None,)"}, {"HOROVOD_CACHE_CAPACITY", "(None,)"},
                                      {"HOROVOD_FUSION_THRESHOLD", "524288.0"},
                                      {"HOROVOD_DYNAMIC_PROCESS_SETS", "0"},
                                      {"HOROVOD_STALL_CHECK_DISABLE", "2"}});
  EXPECT_EQ(c.cycle_time_ms, 0.0);
  EXPECT_EQ(c.cache_capacity, 0);
  EXPECT_EQ(c.fusion_threshold_bytes, 524288);
  EXPECT_FALSE(c.dynamic_process_sets);
  EXPECT_TRUE(c.stall_check_disabled);
  Config n = Config::FromEnvironment({{"HOROVOD_FUSION_THRESHOLD", "-5"}, {"HOROVOD_CYCLE_TIME", " 2.5 "},
                                      {"HOROVOD_DYNAMIC_PROCESS_SETS", "true"}});
  EXPECT_EQ(n.fusion_threshold_bytes, 0);
  EXPECT_EQ(n.cycle_time_ms, 2.5);
  EXPECT_TRUE(n.dynamic_process_sets);
}

// Horovod's core would read these as 0 or as their numeric prefix (strtol/strtod), silently; we
// refuse them, naming the knob, the value and what was expected.
TEST(Common, HorovodKnobsRejectMalformedValuesNamingTheKnob) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"HOROVOD_FUSION_THRESHOLD", "abc"}, {"HOROVOD_FUSION_THRESHOLD", "64MB"}, {"HOROVOD_FUSION_THRESHOLD", "1.5"},
      {"HOROVOD_CYCLE_TIME", "fast"},      {"HOROVOD_CYCLE_TIME", "5ms"},        {"HOROVOD_CYCLE_TIME", "nan"},
      {"HOROVOD_CACHE_CAPACITY", "lots"},  {"HOROVOD_STALL_CHECK_TIME_SECONDS", "1m"},
      {"HOROVOD_DYNAMIC_PROCESS_SETS", "yes"}, {"HOROVOD_AUTOTUNE", "on"}};
  for (const auto& [name, value] : bad) {
    std::string message;
    try {
      Config::FromEnvironment({{name, value}});
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(name + "='" + value + "' is not valid: expected "), std::string::npos)
        << name << "=" << value << ": " << (message.empty() ? "accepted" : message);
  }
  std::string message;
  try {
    Config::FromEnvironment({{"HOROVOD_FUSION_THRESHOLD", "abc"}});
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("expected an integer number of bytes >= 0"), std::string::npos) << message;
}

TEST(Common, KnobsFingerprintCoversMustMatchOnly) {
  Config a = Config::FromEnvironment({{"HOROVOD_CYCLE_TIME", "5"}});
  Config b = Config::FromEnvironment({});
  EXPECT_EQ(a.MustMatchFingerprint(), b.MustMatchFingerprint());
  Config d = Config::FromEnvironment({{"HERRING_ALLREDUCE", "ring"}});
  EXPECT_TRUE(d.MustMatchFingerprint() != b.MustMatchFingerprint());
}

TEST(Common, DeadlineExpires) {
  Deadline d = Deadline::After(std::chrono::milliseconds(0));
  EXPECT_TRUE(d.Expired());
  EXPECT_TRUE(!Deadline::Never().Expired());
}

TEST(Common, DataTypeSizes) {
  EXPECT_EQ(ElementSize(DataType::kBFloat16), size_t(2));
  EXPECT_EQ(ElementSize(DataType::kFloat64), size_t(8));
  EXPECT_TRUE(!IsValidDataType(42));
}

#include "common/crypto.h"

TEST(Common, CryptoSha256StandardVectors) {
  Digest d = Sha256("abc", 3);
  EXPECT_EQ(ToHex(d.data(), 32), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  d = Sha256("", 0);
  EXPECT_EQ(ToHex(d.data(), 32), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  d = Sha256(two_blocks.data(), two_blocks.size());
  EXPECT_EQ(ToHex(d.data(), 32), std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
}

TEST(Common, CryptoHmacSha256Rfc4231) {
  // RFC 4231 test cases 1 and 2.
  Digest d = HmacSha256(std::string(20, '\x0b'), "Hi There");
  EXPECT_EQ(ToHex(d.data(), 32), std::string("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
  d = HmacSha256("Jefe", "what do ya want for nothing?");
  EXPECT_EQ(ToHex(d.data(), 32), std::string("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
  // Test case 6: a key longer than the block is hashed first.
  d = HmacSha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First");
  EXPECT_EQ(ToHex(d.data(), 32), std::string("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
  Digest a = HmacSha256("k", "m"), b = HmacSha256("k", "m"), c = HmacSha256("k2", "m");
  EXPECT_TRUE(DigestsEqual(a.data(), b.data(), 32));
  EXPECT_TRUE(!DigestsEqual(a.data(), c.data(), 32));
  EXPECT_EQ(RandomBytes(32).size(), size_t(32));
}
