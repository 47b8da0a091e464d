// OperationManager: per collective, an ordered list of implementations; the first one enabled
// for the request runs (Horovod's design). The allreduce list starts with the algorithm chosen by
// HERRING_ALLREDUCE and falls back to the others.
#pragma once

#include <memory>
#include <vector>

#include "runtime/collective.h"
#include "ops/direct_collectives.h"
#include "ops/herring/herring_allreduce.h"

namespace herring {

class OperationManager {
 public:
  explicit OperationManager(const Config& config);

  // Returns the name of the implementation that ran.
  const char* Allreduce(ExecContext& ctx, AllreduceBatch& batch);
  // A dedicated server's part of an allreduce the members run with the herring implementation.
  void ServeAllreduce(ExecContext& ctx, const AllreduceBatch& batch);
  const char* Run(OpType type, ExecContext& ctx, const Response& response, const TensorIO& io, OpResult* result);

 private:
  std::vector<std::unique_ptr<AllreduceImpl>> allreduce_;
  HerringAllreduce* herring_ = nullptr;  // owned by allreduce_
  std::vector<std::unique_ptr<CollectiveImpl>> allgather_, broadcast_, alltoall_, reducescatter_;
};

}  // namespace herring
