#include "ops/direct_collectives.h"

#include <algorithm>
#include <cstring>

#include "kernels/integer_average.h"
#include "kernels/reduce.h"
#include "ops/shm_staging.h"

namespace herring {
namespace {

int64_t RowElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::shared_ptr<AlignedBuffer> Allocate(OpResult* result, std::vector<int64_t> shape, DataType dtype) {
  auto buf = std::make_shared<AlignedBuffer>(NumElements(shape) * ElementSize(dtype));
  result->outputs.push_back(buf);
  result->output_shapes.push_back(std::move(shape));
  return buf;
}

// Tags: sub = tensor * 2^10 + step, ample for groups of up to 1024 tensors.
uint64_t TensorTag(const ExecContext& ctx, size_t tensor, int step) {
  return ctx.Tag((static_cast<uint64_t>(tensor) << 10) | static_cast<uint64_t>(step));
}

}  // namespace

std::vector<int64_t> ReducescatterRows(int64_t dim0, int members) {
  std::vector<int64_t> rows(members, dim0 / members);
  for (int m = 0; m < dim0 % members; ++m) rows[m]++;
  return rows;
}

namespace {

// Bytes that member m contributes to an allgather (all tensors of the response).
int64_t AllgatherBytes(const Response& r, int m) {
  int64_t bytes = 0;
  for (size_t t = 0; t < r.shapes.size(); ++t) bytes += r.per_member[t][m] * RowElements(r.shapes[t]) * ElementSize(r.dtype);
  return bytes;
}

bool AllgatherFitsOneStep(const ExecContext& ctx, const Response& r) {
  int64_t most = 0;
  for (int m = 0; m < ctx.n(); ++m) most = std::max(most, AllgatherBytes(r, m));
  return OneStepFits(ctx, static_cast<size_t>(most));
}

// One host, small: every member stages all its pieces in its sub-slot (tensor after tensor);
// everyone copies everyone's pieces out. Local index i is member i (one host).
void AllgatherInOneStep(ExecContext& ctx, const Response& r, const TensorIO& io, OpResult* result) {
  TimelinePhase phase(ctx.timeline, ctx.lane, "ONE_STEP_SHM_ALLGATHER");
  const size_t esz = ElementSize(r.dtype);
  const int n = ctx.n(), me = ctx.me();
  OneStepStaging staged(ctx);
  uint8_t* mine = staged.mine();
  for (size_t t = 0; t < r.shapes.size(); ++t) {
    const int64_t bytes = r.per_member[t][me] * RowElements(r.shapes[t]) * esz;
    if (bytes) std::memcpy(mine, io.inputs[t], bytes);
    mine += bytes;
  }
  staged.Publish();
  staged.AwaitEveryone();
  std::vector<const uint8_t*> from(n);
  for (int m = 0; m < n; ++m) from[m] = staged.of(m);
  for (size_t t = 0; t < r.shapes.size(); ++t) {
    const int64_t row_bytes = RowElements(r.shapes[t]) * esz;
    std::vector<int64_t> shape = r.shapes[t];
    shape[0] = 0;
    for (int m = 0; m < n; ++m) shape[0] += r.per_member[t][m];
    uint8_t* out = Allocate(result, shape, r.dtype)->data();
    for (int m = 0; m < n; ++m) {
      const int64_t bytes = r.per_member[t][m] * row_bytes;
      if (bytes) std::memcpy(out, from[m], bytes);
      out += bytes;
      from[m] += bytes;
    }
  }
  staged.Release();
  ctx.counters.one_step_allgathers++;
}

}  // namespace

void DirectAllgather::Execute(ExecContext& ctx, const Response& r, const TensorIO& io, OpResult* result) {
  if (AllgatherFitsOneStep(ctx, r)) return AllgatherInOneStep(ctx, r, io, result);
  const size_t esz = ElementSize(r.dtype);
  const int n = ctx.n(), me = ctx.me();
  std::vector<CompletionPtr> transfers;
  for (size_t t = 0; t < r.shapes.size(); ++t) {
    const int64_t row_bytes = RowElements(r.shapes[t]) * esz;
    std::vector<int64_t> shape = r.shapes[t];
    int64_t rows = 0;
    std::vector<int64_t> offset(n);
    for (int m = 0; m < n; ++m) {
      offset[m] = rows;
      rows += r.per_member[t][m];
    }
    shape[0] = rows;
    uint8_t* out = Allocate(result, shape, r.dtype)->data();
    const int64_t my_bytes = r.per_member[t][me] * row_bytes;
    if (my_bytes) std::memcpy(out + offset[me] * row_bytes, io.inputs[t], my_bytes);
    for (int m = 0; m < n; ++m) {
      if (m == me) continue;
      transfers.push_back(ctx.net.Send(ctx.member_rank(m), TensorTag(ctx, t, 0), io.inputs[t], my_bytes));
      transfers.push_back(ctx.net.Recv(ctx.member_rank(m), TensorTag(ctx, t, 0), out + offset[m] * row_bytes,
                                       r.per_member[t][m] * row_bytes));
    }
  }
  WaitTransfers(transfers, ctx, "allgather of '" + r.name + "'");
}

namespace {

// One host, small: the root stages its tensors in its sub-slot; the others copy them out.
void BroadcastInOneStep(ExecContext& ctx, const Response& r, const TensorIO& io, int root_member) {
  TimelinePhase phase(ctx.timeline, ctx.lane, "ONE_STEP_SHM_BROADCAST");
  const size_t esz = ElementSize(r.dtype);
  OneStepStaging staged(ctx);
  const bool root = ctx.me() == root_member;
  uint8_t* at = staged.mine();
  for (size_t t = 0; root && t < r.shapes.size(); ++t) {
    const size_t bytes = NumElements(r.shapes[t]) * esz;
    if (io.outputs[t] != io.inputs[t] && bytes) std::memcpy(io.outputs[t], io.inputs[t], bytes);
    if (bytes) std::memcpy(at, io.inputs[t], bytes);
    at += bytes;
  }
  staged.Publish();  // everyone: later buffers wait for every member's count
  if (!root) {
    staged.AwaitMember(root_member);
    const uint8_t* from = staged.of(root_member);
    for (size_t t = 0; t < r.shapes.size(); ++t) {
      const size_t bytes = NumElements(r.shapes[t]) * esz;
      if (bytes) std::memcpy(io.outputs[t], from, bytes);
      from += bytes;
    }
  }
  staged.Release();
  ctx.counters.one_step_broadcasts++;
}

}  // namespace

void DirectBroadcast::Execute(ExecContext& ctx, const Response& r, const TensorIO& io, OpResult* result) {
  const size_t esz = ElementSize(r.dtype);
  const int root_member = ctx.set.member_index(r.root);
  size_t total = 0;
  for (const auto& shape : r.shapes) total += NumElements(shape) * esz;
  if (OneStepFits(ctx, total)) return BroadcastInOneStep(ctx, r, io, root_member);
  std::vector<CompletionPtr> transfers;
  for (size_t t = 0; t < r.shapes.size(); ++t) {
    const size_t bytes = NumElements(r.shapes[t]) * esz;
    if (ctx.me() == root_member) {
      if (io.outputs[t] != io.inputs[t] && bytes) std::memcpy(io.outputs[t], io.inputs[t], bytes);
      for (int m = 0; m < ctx.n(); ++m) {
        if (m != root_member) transfers.push_back(ctx.net.Send(ctx.member_rank(m), TensorTag(ctx, t, 0), io.inputs[t], bytes));
      }
    } else {
      transfers.push_back(ctx.net.Recv(r.root, TensorTag(ctx, t, 0), io.outputs[t], bytes));
    }
  }
  WaitTransfers(transfers, ctx, "broadcast of '" + r.name + "' from rank " + std::to_string(r.root));
}

void DirectAlltoall::Execute(ExecContext& ctx, const Response& r, const TensorIO& io, OpResult* result) {
  const size_t esz = ElementSize(r.dtype);
  const int n = ctx.n(), me = ctx.me();
  std::vector<CompletionPtr> transfers;
  for (size_t t = 0; t < r.shapes.size(); ++t) {
    const int64_t row_bytes = RowElements(r.shapes[t]) * esz;
    const auto& send_splits = r.per_member[me];
    std::vector<int64_t> shape = r.shapes[t];
    std::vector<int64_t> recv_splits(n), recv_offset(n), send_offset(n);
    int64_t rows = 0, sent = 0;
    for (int m = 0; m < n; ++m) {
      recv_splits[m] = r.per_member[m][me];
      recv_offset[m] = rows;
      rows += recv_splits[m];
      send_offset[m] = sent;
      sent += send_splits[m];
    }
    shape[0] = rows;
    uint8_t* out = Allocate(result, shape, r.dtype)->data();
    const uint8_t* in = static_cast<const uint8_t*>(io.inputs[t]);
    if (send_splits[me]) std::memcpy(out + recv_offset[me] * row_bytes, in + send_offset[me] * row_bytes, send_splits[me] * row_bytes);
    for (int m = 0; m < n; ++m) {
      if (m == me) continue;
      transfers.push_back(ctx.net.Send(ctx.member_rank(m), TensorTag(ctx, t, 0), in + send_offset[m] * row_bytes,
                                       send_splits[m] * row_bytes));
      transfers.push_back(ctx.net.Recv(ctx.member_rank(m), TensorTag(ctx, t, 0), out + recv_offset[m] * row_bytes,
                                       recv_splits[m] * row_bytes));
    }
    result->received_splits = recv_splits;
  }
  WaitTransfers(transfers, ctx, "alltoall of '" + r.name + "'");
}

void DirectReducescatter::Execute(ExecContext& ctx, const Response& r, const TensorIO& io, OpResult* result) {
  const size_t esz = ElementSize(r.dtype);
  const int n = ctx.n(), me = ctx.me();
  for (size_t t = 0; t < r.shapes.size(); ++t) {
    const int64_t row_elems = RowElements(r.shapes[t]);
    const auto rows = ReducescatterRows(r.shapes[t][0], n);
    std::vector<int64_t> first_row(n);
    for (int m = 1; m < n; ++m) first_row[m] = first_row[m - 1] + rows[m - 1];
    const int64_t total = r.shapes[t][0] * row_elems;
    // Everyone's input, prescaled, then sent block by block; my own block stays.
    uint8_t* scaled = outgoing_.Get(total * esz);
    ScaleInto(scaled, io.inputs[t], total, r.dtype, r.prescale);
    const int64_t my_elems = rows[me] * row_elems;
    uint8_t* staging = staging_.Get(std::max<int64_t>(1, n * my_elems) * esz);
    std::vector<CompletionPtr> transfers;
    for (int m = 0; m < n; ++m) {
      uint8_t* slot = staging + m * my_elems * esz;
      if (m == me) {
        std::memcpy(slot, scaled + first_row[me] * row_elems * esz, my_elems * esz);
        continue;
      }
      transfers.push_back(ctx.net.Send(ctx.member_rank(m), TensorTag(ctx, t, 0),
                                       scaled + first_row[m] * row_elems * esz, rows[m] * row_elems * esz));
      transfers.push_back(ctx.net.Recv(ctx.member_rank(m), TensorTag(ctx, t, 0), slot, my_elems * esz));
    }
    WaitTransfers(transfers, ctx, "reducescatter of '" + r.name + "'");
    std::vector<int64_t> shape = r.shapes[t];
    shape[0] = rows[me];
    uint8_t* out = Allocate(result, shape, r.dtype)->data();
    if (my_elems) {
      std::vector<const void*> srcs(n);
      for (int m = 0; m < n; ++m) srcs[m] = staging + m * my_elems * esz;
      if (IsIntegerAverage(r.dtype, r.reduce_op)) {  // exact: no Sum that wraps in the dtype
        AverageInto(out, srcs.data(), n, my_elems, r.dtype, r.postscale);
      } else {
        ReduceInto(out, srcs.data(), n, my_elems, r.dtype, ExecutedOp(r.reduce_op));
        ScaleInto(out, out, my_elems, r.dtype, ExecutedPostscale(r.reduce_op, r.postscale, n));
      }
    }
  }
}

}  // namespace herring
