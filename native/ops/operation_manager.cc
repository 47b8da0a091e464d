#include "ops/operation_manager.h"

#include "ops/herring_allreduce.h"
#include "ops/ring_allreduce.h"

namespace herring {

OperationManager::OperationManager(const Config& config) {
  allreduce_.push_back(std::make_unique<LocalAllreduce>());
  if (config.allreduce == AllreduceAlgorithm::kRing) {
    allreduce_.push_back(std::make_unique<RingAllreduce>());
    allreduce_.push_back(std::make_unique<HerringAllreduce>());
  } else {
    allreduce_.push_back(std::make_unique<HerringAllreduce>());
    allreduce_.push_back(std::make_unique<RingAllreduce>());
  }
  allgather_.push_back(std::make_unique<DirectAllgather>());
  broadcast_.push_back(std::make_unique<DirectBroadcast>());
  alltoall_.push_back(std::make_unique<DirectAlltoall>());
  reducescatter_.push_back(std::make_unique<DirectReducescatter>());
}

const char* OperationManager::Allreduce(ExecContext& ctx, AllreduceBatch& batch) {
  for (auto& impl : allreduce_) {
    if (impl->Enabled(ctx, batch)) {
      impl->Execute(ctx, batch);
      return impl->name();
    }
  }
  throw Error(Status::Internal("no allreduce implementation is enabled for '" + batch.label + "'"));
}

const char* OperationManager::Run(OpType type, ExecContext& ctx, const Response& response, const TensorIO& io,
                                  OpResult* result) {
  std::vector<std::unique_ptr<CollectiveImpl>>* list = nullptr;
  switch (type) {
    case OpType::kAllgather: list = &allgather_; break;
    case OpType::kBroadcast: list = &broadcast_; break;
    case OpType::kAlltoall: list = &alltoall_; break;
    case OpType::kReducescatter: list = &reducescatter_; break;
    default: throw Error(Status::Internal(std::string("no data movement for ") + OpTypeName(type)));
  }
  for (auto& impl : *list) {
    if (impl->Enabled(ctx, response)) {
      impl->Execute(ctx, response, io, result);
      return impl->name();
    }
  }
  throw Error(Status::Internal(std::string("no implementation is enabled for ") + OpTypeName(type)));
}

}  // namespace herring
