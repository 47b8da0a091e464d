#include "ops/operation_manager.h"

#include "ops/adasum_allreduce.h"
#include "ops/halving_doubling_allreduce.h"
#include "ops/herring/herring_allreduce.h"
#include "ops/ring_allreduce.h"

namespace herring {

OperationManager::OperationManager(const Config& config) {
  auto herring = std::make_unique<HerringAllreduce>();
  herring_ = herring.get();
  allreduce_.push_back(std::make_unique<LocalAllreduce>());
  allreduce_.push_back(std::make_unique<AdasumAllreduce>());  // op=Adasum only: not an elementwise sum
  if ((config.allreduce == AllreduceAlgorithm::kHalvingDoubling ||
       config.allreduce == AllreduceAlgorithm::kHalvingDoublingTopo) && config.dedicated_servers == 0) {
    allreduce_.push_back(MakeHalvingDoublingAllreduce(config));  // herring and ring stay as fallbacks
  }
  // With dedicated servers only the herring implementation can use them: it must run first.
  if (config.allreduce == AllreduceAlgorithm::kRing && config.dedicated_servers == 0) {
    allreduce_.push_back(std::make_unique<RingAllreduce>());
    allreduce_.push_back(std::move(herring));
  } else {
    allreduce_.push_back(std::move(herring));
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

void OperationManager::ServeAllreduce(ExecContext& ctx, const AllreduceBatch& batch) {
  herring_->ServeAsDedicatedServer(ctx, batch);
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
