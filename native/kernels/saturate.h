// Conversion of a double to an integer type as every integer scaling does (ScaleInto, the exact
// integer Average): truncation toward zero like static_cast<T>(v), defined for every v.
#pragma once

#include <limits>

namespace herring {

// Out-of-range values saturate (static_cast would be undefined there) and NaN becomes 0.
template <typename T>
T TruncateSaturating(double v) {
  // -2^(bits-1) (or 0) and 2^(bits-1) (or 2^bits) are exact in double for every integer type.
  constexpr double kLowest = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double kAboveMax =
      2.0 * static_cast<double>(T(1) << (std::numeric_limits<T>::digits - 1));
  if (v != v) return 0;
  if (v >= kAboveMax) return std::numeric_limits<T>::max();
  if (v <= kLowest) return std::numeric_limits<T>::min();
  return static_cast<T>(v);
}

}  // namespace herring
