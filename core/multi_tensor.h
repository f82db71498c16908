// Horizon: one kernel launch over many tensors. The optimizer updates every parameter of a model
// (GPT-2 small: 148 tensors) with a table of the tensors instead of one launch each: a batch of up to
// kTensors tensors travels as the kernel's argument (no upload, nothing to synchronise, the same in
// a captured CUDA graph), and block b of a launch updates chunk b - chunk_begin[t] of tensor t.
//
// The table and a block's work are host-and-device code: the CPU backend runs the same blocks over
// OpenMP, so the indexing a GPU runs is the one the CPU tests check.
#pragma once
#include <cstdint>
#include <vector>

#include "core/hd.h"
#include "core/math.h"

namespace hz::multi {

constexpr int kTensors = 40;       // per batch: the table stays under 4 KB of kernel arguments
constexpr int64_t kChunk = 16384;  // elements per block

// AdamW over up to kTensors parameters of one dtype T (f32 or f64), each with its group's lr and
// decay; p, g, m, v contiguous, g in T.
template <class T>
struct AdamWBatch {
  int count = 0;
  T* p[kTensors] = {};
  const T* g[kTensors] = {};
  T* m[kTensors] = {};
  T* v[kTensors] = {};
  int64_t n[kTensors] = {};
  double lr[kTensors] = {}, decay[kTensors] = {};
  int64_t chunk_begin[kTensors + 1] = {};  // tensor t owns blocks [chunk_begin[t], chunk_begin[t + 1])
  int64_t blocks() const { return chunk_begin[count]; }
};

// What block `block` of a batch updates: elements [lo, hi) of one tensor, with its group's lr and decay.
template <class T>
struct BlockWork {
  T* p;
  const T* g;
  T* m;
  T* v;
  int64_t lo, hi;
  math::AdamWCoef c;
};
template <class T>
HZ_HD BlockWork<T> block_work(const AdamWBatch<T>& b, const math::AdamWCoef& c, int64_t block) {
  int t = 0;
  while (t + 1 < b.count && block >= b.chunk_begin[t + 1]) ++t;
  const int64_t lo = (block - b.chunk_begin[t]) * kChunk;
  BlockWork<T> w{b.p[t], b.g[t], b.m[t], b.v[t], lo, lo + kChunk < b.n[t] ? lo + kChunk : b.n[t], c};
  w.c.lr = b.lr[t];
  w.c.decay = b.decay[t];
  return w;
}

// Block `block`'s share of a batch, split over `lanes` workers (a CUDA block's threads): lane l takes
// elements lo + l, lo + l + lanes, ... of its range. Every element of every tensor belongs to exactly
// one (block, lane), so the update is the per-element one, in any order. The CPU runs each block's
// range with unit stride (adamw_block_host: the same elements, a loop the compiler vectorises).
template <class T>
HZ_HD void adamw_block(const AdamWBatch<T>& b, const math::AdamWCoef& c, int64_t block, int64_t lane, int64_t lanes) {
  const BlockWork<T> w = block_work(b, c, block);
  for (int64_t i = w.lo + lane; i < w.hi; i += lanes) math::adamw_element(w.p[i], w.g[i], w.m[i], w.v[i], w.c);
}
template <class T>
inline void adamw_block_host(const AdamWBatch<T>& b, const math::AdamWCoef& c, int64_t block) {
  const BlockWork<T> w = block_work(b, c, block);
  for (int64_t i = w.lo; i < w.hi; ++i) math::adamw_element(w.p[i], w.g[i], w.m[i], w.v[i], w.c);
}

// One parameter's entry of a batch, as the backends receive it.
struct AdamWTensor {
  void* p;
  const void* g;
  void* m;
  void* v;
  int64_t n;
  double lr, decay;
};

static_assert(sizeof(AdamWBatch<double>) + sizeof(math::AdamWCoef) <= 4096, "a batch must fit the kernel's arguments");

// The batches of a list (empty tensors left out), in list order.
template <class T>
std::vector<AdamWBatch<T>> adamw_batches(const std::vector<AdamWTensor>& ts) {
  std::vector<AdamWBatch<T>> out;
  for (const AdamWTensor& e : ts) {
    if (e.n == 0) continue;
    if (out.empty() || out.back().count == kTensors) out.emplace_back();
    AdamWBatch<T>& b = out.back();
    const int k = b.count++;
    b.p[k] = static_cast<T*>(e.p);
    b.g[k] = static_cast<const T*>(e.g);
    b.m[k] = static_cast<T*>(e.m);
    b.v[k] = static_cast<T*>(e.v);
    b.n[k] = e.n;
    b.lr[k] = e.lr;
    b.decay[k] = e.decay;
    b.chunk_begin[k + 1] = b.chunk_begin[k] + (e.n + kChunk - 1) / kChunk;
  }
  return out;
}

}  // namespace hz::multi
