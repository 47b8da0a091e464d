// Pieces of op registrations shared by every herring collective, written once.
#pragma once

// Element types the engine moves (Horovod's list, which has uint16 for its gathers, broadcast and
// alltoall, plus bfloat16). bool is accepted only where the engine allows it (Min/Max,
// gathers, broadcast); elsewhere the engine rejects it with a message naming the tensor.
#define HERRING_TF_TYPES "T: {uint8, int8, uint16, int16, int32, int64, float16, bfloat16, float32, float64, bool}"

// Appended to every herring REGISTER_OP chain: the reference to the engine slot of the Python
// front that built the op (engine/engine_slot.h; read by EngineRef, tf_adapter.h). The defaults
// name no slot: such a kernel reports that Horovod is not initialized.
#define HERRING_ENGINE_ATTRS             \
  .Attr("engine_slot: int = 0")          \
      .Attr("engine_owner: string = ''")

// Appended to a REGISTER_OP chain of a collective: the engine reference, the process set and the naming attributes CollectiveKernel
// reads (see tf_adapter.h). Collectives are stateful: never constant-folded, deduplicated or
// pruned differently on different ranks.
#define HERRING_COLLECTIVE_ATTRS                  \
  HERRING_ENGINE_ATTRS                           \
      .Attr("process_set_id: int = 0")           \
      .Attr("tensor_name: string = ''")          \
      .Attr("auto_name: bool = false")           \
      .Attr("ignore_name_scope: bool = false")   \
      .SetIsStateful()
