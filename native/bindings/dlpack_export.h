// Hands engine-allocated outputs to frameworks without a copy, as DLPack capsules
// (torch.utils.dlpack.from_dlpack, tf.experimental.dlpack.from_dlpack). The capsule owns a
// reference to the buffer until the framework's tensor is freed.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "common/dtype.h"
#include "runtime/aligned_buffer.h"

namespace herring {

pybind11::capsule ExportDLPack(std::shared_ptr<AlignedBuffer> buffer, const std::vector<int64_t>& shape,
                               DataType dtype);
// The same for any memory kept alive by `memory` (its aliasing pointer is the data).
pybind11::capsule ExportDLPack(std::shared_ptr<uint8_t> memory, const std::vector<int64_t>& shape, DataType dtype);

}  // namespace herring
