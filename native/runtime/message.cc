#include "runtime/message.h"

#include <sstream>

#include "runtime/wire.h"

namespace herring {

const char* OpTypeName(OpType t) {
  switch (t) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAlltoall: return "alltoall";
    case OpType::kReducescatter: return "reducescatter";
    case OpType::kBarrier: return "barrier";
    case OpType::kJoin: return "join";
    case OpType::kAddProcessSet: return "add_process_set";
    case OpType::kRemoveProcessSet: return "remove_process_set";
    case OpType::kLeave: return "leave";
  }
  return "invalid";
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

size_t TensorBytes(const RequestMeta& request) {
  int64_t n = 0;
  for (const auto& t : request.tensors) n += NumElements(t.shape);
  return static_cast<size_t>(n) * ElementSize(request.dtype);
}

size_t TensorBytes(const Response& response) {
  int64_t n = 0;
  for (const auto& shape : response.shapes) n += NumElements(shape);
  return static_cast<size_t>(n) * ElementSize(response.dtype);
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

namespace {

OpType ReadOpType(WireReader* r) {
  uint8_t v = r->U8();
  if (v >= kNumOpTypes) throw Error(Status::Internal("malformed message: op type " + std::to_string(v)));
  return static_cast<OpType>(v);
}
DataType ReadDataType(WireReader* r) {
  uint8_t v = r->U8();
  if (!IsValidDataType(v)) throw Error(Status::Internal("malformed message: dtype " + std::to_string(v)));
  return static_cast<DataType>(v);
}
ReduceOp ReadReduceOp(WireReader* r) {
  uint8_t v = r->U8();
  if (!IsValidReduceOp(v)) throw Error(Status::Internal("malformed message: reduce op " + std::to_string(v)));
  return static_cast<ReduceOp>(v);
}

}  // namespace

void EncodeRequest(const RequestMeta& q, WireWriter* w) {
  w->U8(static_cast<uint8_t>(q.type));
  w->Str(q.name);
  w->I32(q.process_set);
  w->I32(q.rank);
  w->U8(static_cast<uint8_t>(q.dtype));
  w->U8(static_cast<uint8_t>(q.reduce_op));
  w->F64(q.prescale);
  w->F64(q.postscale);
  w->I32(q.root);
  w->U32(static_cast<uint32_t>(q.tensors.size()));
  for (const auto& t : q.tensors) {
    w->I64s(t.shape);
    w->I64s(t.splits);
  }
  w->I32s(q.set_ranks);
  w->I32(q.set_id);
  w->U32(q.waited_ms);
}

RequestMeta DecodeRequest(WireReader* r) {
  RequestMeta q;
  q.type = ReadOpType(r);
  q.name = r->Str();
  q.process_set = r->I32();
  q.rank = r->I32();
  q.dtype = ReadDataType(r);
  q.reduce_op = ReadReduceOp(r);
  q.prescale = r->F64();
  q.postscale = r->F64();
  q.root = r->I32();
  uint32_t n = r->Count(8);
  q.tensors.resize(n);
  for (auto& t : q.tensors) {
    t.shape = r->I64s();
    t.splits = r->I64s();
  }
  q.set_ranks = r->I32s();
  q.set_id = r->I32();
  q.waited_ms = r->U32();
  return q;
}

void EncodeResponse(const Response& p, WireWriter* w) {
  w->U8(static_cast<uint8_t>(p.type));
  w->Str(p.name);
  w->I32(p.process_set);
  w->U8(static_cast<uint8_t>(p.dtype));
  w->U8(static_cast<uint8_t>(p.reduce_op));
  w->F64(p.prescale);
  w->F64(p.postscale);
  w->I32(p.root);
  w->U32(static_cast<uint32_t>(p.shapes.size()));
  for (const auto& s : p.shapes) w->I64s(s);
  w->U32(static_cast<uint32_t>(p.per_member.size()));
  for (const auto& s : p.per_member) w->I64s(s);
  w->I32s(p.joined);
  w->I32s(p.set_ranks);
  w->I32(p.set_id);
  w->Str(p.error);
}

Response DecodeResponse(WireReader* r) {
  Response p;
  p.type = ReadOpType(r);
  p.name = r->Str();
  p.process_set = r->I32();
  p.dtype = ReadDataType(r);
  p.reduce_op = ReadReduceOp(r);
  p.prescale = r->F64();
  p.postscale = r->F64();
  p.root = r->I32();
  p.shapes.resize(r->Count(4));
  for (auto& s : p.shapes) s = r->I64s();
  p.per_member.resize(r->Count(4));
  for (auto& s : p.per_member) s = r->I64s();
  p.joined = r->I32s();
  p.set_ranks = r->I32s();
  p.set_id = r->I32();
  p.error = r->Str();
  return p;
}

}  // namespace herring
