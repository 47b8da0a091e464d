// Element types the engine moves and reduces. The numeric values are part of the wire format and
// are exported to Python through the bindings (the only place Python learns them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace herring {

enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt16 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kFloat16 = 5,
  kBFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBool = 9,
  kUInt16 = 10,  // appended: the values above are on the wire
};
constexpr int kNumDataTypes = 11;

bool IsValidDataType(int value);
size_t ElementSize(DataType t);
const char* DataTypeName(DataType t);
bool IsFloatingPoint(DataType t);

}  // namespace herring
