#include "engine/control_messages.h"

#include <cstring>

#include "engine/wire.h"

namespace herring {

std::string EncodeBits(uint64_t cycle, const std::vector<uint64_t>& bits) {
  WireWriter w;
  w.U64(cycle);
  w.U64s(bits);
  return w.Take();
}

std::vector<uint64_t> DecodeBits(const std::string& payload, uint64_t* cycle) {
  WireReader r(payload, "bit vector");
  *cycle = r.U64();
  auto bits = r.U64s();
  r.ExpectEnd();
  return bits;
}

std::string EncodeCycle(uint64_t cycle) {
  WireWriter w;
  w.U64(cycle);
  return w.Take();
}

uint64_t DecodeCycle(const std::string& payload) {
  WireReader r(payload, "cycle");
  uint64_t c = r.U64();
  r.ExpectEnd();
  return c;
}

std::string EncodeUncached(uint64_t cycle, const std::vector<RequestMeta>& requests,
                           const std::vector<uint32_t>& stale) {
  WireWriter w;
  w.U64(cycle);
  w.U32(static_cast<uint32_t>(requests.size()));
  for (const auto& q : requests) EncodeRequest(q, &w);
  w.U32(static_cast<uint32_t>(stale.size()));
  for (auto p : stale) w.U32(p);
  return w.Take();
}

void DecodeUncached(const std::string& payload, uint64_t* cycle, std::vector<RequestMeta>* requests,
                    std::vector<uint32_t>* stale) {
  WireReader r(payload, "uncached requests");
  *cycle = r.U64();
  uint32_t n = r.Count(16);
  for (uint32_t i = 0; i < n; ++i) requests->push_back(DecodeRequest(&r));
  uint32_t s = r.Count(4);
  for (uint32_t i = 0; i < s; ++i) stale->push_back(r.U32());
  r.ExpectEnd();
}

std::string EncodeResponses(uint64_t cycle, const std::vector<Response>& responses,
                            const std::vector<uint32_t>& evict) {
  WireWriter w;
  w.U64(cycle);
  w.U32(static_cast<uint32_t>(responses.size()));
  for (const auto& p : responses) EncodeResponse(p, &w);
  w.U32(static_cast<uint32_t>(evict.size()));
  for (auto p : evict) w.U32(p);
  return w.Take();
}

void DecodeResponses(const std::string& payload, uint64_t* cycle, std::vector<Response>* responses,
                     std::vector<uint32_t>* evict) {
  WireReader r(payload, "responses");
  *cycle = r.U64();
  uint32_t n = r.Count(16);
  for (uint32_t i = 0; i < n; ++i) responses->push_back(DecodeResponse(&r));
  uint32_t s = r.Count(4);
  for (uint32_t i = 0; i < s; ++i) evict->push_back(r.U32());
  r.ExpectEnd();
}

uint64_t CycleOf(const std::string& payload) {
  uint64_t c = 0;
  if (payload.size() >= sizeof c) std::memcpy(&c, payload.data(), sizeof c);
  return c;
}

}  // namespace herring
