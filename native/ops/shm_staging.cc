#include "ops/shm_staging.h"

namespace herring {

bool OneStepFits(const ExecContext& ctx, size_t bytes) {
  return ctx.set.arena && ctx.set.hosts.size() == 1 && static_cast<int64_t>(bytes) <= ctx.config.small_message_bytes &&
         bytes <= SubSlotStride(ctx.set.arena->slot_bytes());
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

}  // namespace herring
