#include "ops/shm_staging.h"

#include <algorithm>

#include <vector>

#include "kernels/reduce.h"

namespace herring {

bool OneStepFits(const ExecContext& ctx, size_t bytes) {
  return ctx.set.arena && ctx.set.hosts.size() == 1 && static_cast<int64_t>(bytes) <= ctx.config.small_message_bytes &&
         bytes <= SubSlotStride(ctx.set.arena->slot_bytes());
}

int64_t OneStepAllreduceBytes(int64_t small_message_bytes, const ShmArena* arena) {
  return arena != nullptr && arena->SomeMemberWithoutACore() ? std::min(small_message_bytes, kOversubscribedOneStepBytes)
                                                             : small_message_bytes;
}

OneStepStaging::OneStepStaging(ExecContext& ctx) : ctx_(ctx), arena_(*ctx.set.arena), seq_(++ctx.set.arena_sequence) {
  if (seq_ > kPipelineDepth) {
    ThrowIfArenaFailed(arena_.WaitAll(kSliceDone, seq_ - kPipelineDepth, ctx_.StepDeadline()),
                       "shared-memory slot reuse");
  }
}

uint8_t* OneStepStaging::at(int local_index) {
  return arena_.slot(local_index) + (seq_ % kPipelineDepth) * SubSlotStride(arena_.slot_bytes());
}

void OneStepStaging::Publish() { arena_.Publish(kInputReady, seq_); }

void OneStepStaging::AwaitEveryone() {
  ThrowIfArenaFailed(arena_.WaitAll(kInputReady, seq_, ctx_.StepDeadline()), "staging in shared memory");
}

void OneStepStaging::AwaitMember(int local_index) {
  ThrowIfArenaFailed(arena_.WaitFor(kInputReady, local_index, seq_, ctx_.StepDeadline()), "staging in shared memory");
}

void OneStepStaging::Release() {
  arena_.Publish(kSliceDone, seq_);
  arena_.Publish(kConsumed, seq_);  // the shared result area was not used
}

void ReduceHostInOneStep(ExecContext& ctx, const AllreduceBatch& batch, uint8_t* sum) {
  const int64_t total = batch.total_count();
  const int local_size = static_cast<int>(ctx.set.local_members().size());
  if (ctx.faults) ctx.faults->At("gather", &ctx.net);
  if (batch.posted_inputs.size() == static_cast<size_t>(local_size)) {
    // Every member's input came with the bit vectors: nothing to stage or wait for. No member
    // numbers a staged buffer, so the sub-slots stay in step.
    if (ctx.faults) ctx.faults->At("shm", &ctx.net);
    ReduceInto(sum, batch.posted_inputs.data(), local_size, total, batch.dtype, batch.op);
    ctx.counters.inputs_with_bits++;
    return;
  }
  OneStepStaging staged(ctx);  // numbered like the pipeline's chunks: they share the sub-slots
  batch.GatherInputs(0, total, staged.mine(), batch.prescale);
  staged.Publish();
  if (ctx.faults) ctx.faults->At("shm", &ctx.net);
  staged.AwaitEveryone();
  std::vector<const void*> srcs(local_size);
  for (int i = 0; i < local_size; ++i) srcs[i] = staged.of(i);
  ReduceInto(sum, srcs.data(), local_size, total, batch.dtype, batch.op);
  staged.Release();
}

void ScatterWholeResult(ExecContext& ctx, const AllreduceBatch& batch, const uint8_t* result) {
  batch.ScatterOutputs(0, batch.total_count(), result, batch.postscale);
  if (ctx.faults && !batch.entries.empty()) {
    ctx.faults->At("scatter", &ctx.net, batch.entries[0].output, batch.entries[0].count ? 1 : 0);
  }
}

}  // namespace herring
