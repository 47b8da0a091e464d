// Pieces of op registrations shared by every herring collective, written once.
#pragma once

// Element types the engine moves (Horovod's list, which has uint16 for its gathers, broadcast and
// alltoall, plus bfloat16). bool is accepted only where the engine allows it (Min/Max,
// gathers, broadcast); elsewhere the engine rejects it with a message naming the tensor.
#define HERRING_TF_TYPES "T: {uint8, int8, uint16, int16, int32, int64, float16, bfloat16, float32, float64, bool}"

// Appended to a REGISTER_OP chain: the process set and the naming attributes CollectiveKernel
// reads (see tf_adapter.h). Collectives are stateful: never constant-folded, deduplicated or
// pruned differently on different ranks.
#define HERRING_COLLECTIVE_ATTRS                  \
  .Attr("process_set_id: int = 0")               \
      .Attr("tensor_name: string = ''")          \
      .Attr("auto_name: bool = false")           \
      .Attr("ignore_name_scope: bool = false")   \
      .SetIsStateful()
