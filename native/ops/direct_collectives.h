// The collectives other than allreduce, each exchanging data directly between the members
// (every member talks to every other member once): allgather, broadcast, alltoall and
// reducescatter. Outputs whose size only negotiation knows are allocated here, 64-byte aligned.
#pragma once

#include <vector>

#include "runtime/aligned_buffer.h"
#include "runtime/handle_table.h"
#include "runtime/message.h"
#include "runtime/collective.h"

namespace herring {

// Per tensor of the collective: where this rank's input is, and where its output goes (for
// broadcast: the caller's buffer; for the others the implementation allocates).
struct TensorIO {
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
};

class CollectiveImpl {
 public:
  virtual ~CollectiveImpl() = default;
  virtual const char* name() const = 0;
  virtual bool Enabled(const ExecContext& ctx, const Response& response) const = 0;
  virtual void Execute(ExecContext& ctx, const Response& response, const TensorIO& io, OpResult* result) = 0;
};

// Exchanging directly between the members serves every request: always enabled.
class DirectCollective : public CollectiveImpl {
 public:
  bool Enabled(const ExecContext&, const Response&) const override { return true; }
};

class DirectAllgather : public DirectCollective {
 public:
  const char* name() const override { return "direct-allgather"; }
  void Execute(ExecContext& ctx, const Response& response, const TensorIO& io, OpResult* result) override;
};

class DirectBroadcast : public DirectCollective {
 public:
  const char* name() const override { return "direct-broadcast"; }
  void Execute(ExecContext& ctx, const Response& response, const TensorIO& io, OpResult* result) override;
};

class DirectAlltoall : public DirectCollective {
 public:
  const char* name() const override { return "direct-alltoall"; }
  void Execute(ExecContext& ctx, const Response& response, const TensorIO& io, OpResult* result) override;
};

class DirectReducescatter : public DirectCollective {
 public:
  const char* name() const override { return "direct-reducescatter"; }
  void Execute(ExecContext& ctx, const Response& response, const TensorIO& io, OpResult* result) override;

 private:
  ScratchBuffer staging_;
  ScratchBuffer outgoing_;
};

// Rows of a reducescatter output on each member: dim0 / n each, the first dim0 % n members one
// more (Horovod's rule).
std::vector<int64_t> ReducescatterRows(int64_t dim0, int members);

}  // namespace herring
