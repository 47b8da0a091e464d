// Scalar float16 / bfloat16 <-> float32 conversions on raw bit patterns, written to give exactly
// the bits the F16C instructions give (round to nearest even, NaNs quieted with their payload's
// top bits kept), so that the portable and the F16C kernels agree bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

namespace herring {
namespace half_float {

inline uint32_t FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Exact: every float16 value is a float32 value. A signalling NaN comes back quiet, as
// vcvtph2ps returns it.
inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return BitsToFloat(sign | 0x7F800000u | quiet | (mantissa << 13));
  }
  if (exponent != 0) return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return BitsToFloat(sign);
  // Subnormal half: shift the leading one up to the implicit-bit position, lowering the exponent.
  uint32_t float_exponent = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  return BitsToFloat(sign | (float_exponent << 23) | ((mantissa & 0x3FFu) << 13));
}

// Shifts `significand` right by `shift` (1..31) rounding to nearest, ties to even.
inline uint32_t ShiftRightRoundingToEven(uint32_t significand, uint32_t shift) {
  const uint32_t kept = significand >> shift;
  const uint32_t remainder = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  const bool round_up = remainder > halfway || (remainder == halfway && (kept & 1u) != 0);
  return kept + (round_up ? 1u : 0u);
}

inline uint16_t FloatToHalfBits(float f) {
  const uint32_t bits = FloatBits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {  // NaN: keep the payload's top bits, force the quiet bit
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  // 65520 is halfway between the largest half (65504) and 2^16: it and above round to infinity.
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (magnitude >= 0x38800000u) {  // normal half (>= 2^-14)
    // Rebias the exponent (127 -> 15) and round away 13 mantissa bits; a carry out of the
    // mantissa correctly bumps the exponent.
    const uint32_t rebiased = magnitude - (112u << 23);
    return static_cast<uint16_t>(sign | ShiftRightRoundingToEven(rebiased, 13));
  }
  // Subnormal half (or zero): the result counts units of 2^-24. A float with exponent field e
  // and 24-bit significand m has the value m * 2^(e - 150) = m * 2^(e - 126) units.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to zero
  const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  return static_cast<uint16_t>(sign | ShiftRightRoundingToEven(significand, 126 - exponent));
}

inline float BFloat16BitsToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t bits = FloatBits(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    // Truncating could turn a NaN whose payload sits in the low half into infinity.
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

}  // namespace half_float
}  // namespace herring
