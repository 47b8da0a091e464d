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

// An enumeration's byte, checked: `valid` says which values the enumeration has.
template <typename Enum>
Enum ReadEnum(WireReader* r, bool (*valid)(int), const char* what) {
  uint8_t v = r->U8();
  if (!valid(v)) throw Error(Status::Internal(std::string("malformed message: ") + what + " " + std::to_string(v)));
  return static_cast<Enum>(v);
}
bool IsValidOpType(int value) { return value >= 0 && value < kNumOpTypes; }

// What a request and its response both say of the collective (type, name, process set) and of
// the operation (dtype, reduce op, scale factors, root), each in the same order on the wire.
template <typename Message>
void EncodeCollective(const Message& m, WireWriter* w) {
  w->U8(static_cast<uint8_t>(m.type));
  w->Str(m.name);
  w->I32(m.process_set);
}
template <typename Message>
void DecodeCollective(WireReader* r, Message* m) {
  m->type = ReadEnum<OpType>(r, &IsValidOpType, "op type");
  m->name = r->Str();
  m->process_set = r->I32();
}
template <typename Message>
void EncodeOperation(const Message& m, WireWriter* w) {
  w->U8(static_cast<uint8_t>(m.dtype));
  w->U8(static_cast<uint8_t>(m.reduce_op));
  w->F64(m.prescale);
  w->F64(m.postscale);
  w->I32(m.root);
}
template <typename Message>
void DecodeOperation(WireReader* r, Message* m) {
  m->dtype = ReadEnum<DataType>(r, &IsValidDataType, "dtype");
  m->reduce_op = ReadEnum<ReduceOp>(r, &IsValidReduceOp, "reduce op");
  m->prescale = r->F64();
  m->postscale = r->F64();
  m->root = r->I32();
}

}  // namespace

void EncodeRequest(const RequestMeta& q, WireWriter* w) {
  EncodeCollective(q, w);
  w->I32(q.rank);
  EncodeOperation(q, w);
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
  DecodeCollective(r, &q);
  q.rank = r->I32();
  DecodeOperation(r, &q);
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
  EncodeCollective(p, w);
  EncodeOperation(p, w);
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
  DecodeCollective(r, &p);
  DecodeOperation(r, &p);
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
