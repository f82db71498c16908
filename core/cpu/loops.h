// Horizon: CPU loop helpers shared by the kernels: dtype dispatch and a strided N-operand loop
// that coalesces dimensions and hands contiguous-or-strided rows to a row function.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>

#include "core/bf16.h"
#include "core/kernel_util.h"
#include "core/tensor.h"

namespace hz::cpu {

using hz::dispatch_dtype;
using hz::dispatch_float;
using hz::dispatch_floating;
using hz::dispatch_index;
// historical name of dispatch_floating in the CPU kernels
template <class F>
void dispatch_all_float(DType dt, F&& f) {
  dispatch_floating(dt, std::forward<F>(f));
}

// Rows handed to the row function: n elements, operand k starts at base_k + off[k] and
// advances by inner[k] elements.
template <int N>
struct RowSpec {
  std::array<int64_t, N> off;
  std::array<int64_t, N> inner;
  int64_t n;
};

// Iterate over `shape` with per-operand element strides; calls row(RowSpec) for each
// innermost run. Dims that are contiguous for every operand are merged first. Rows are
// distributed over OpenMP threads when the work is large enough; each row is processed by one
// thread, so results never depend on the thread count.
template <int N, class RowFn>
void strided_rows(const Shape& shape, const std::array<const Shape*, N>& strides, RowFn&& row) {
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  if (numel == 0) return;
  const MergedDims<N> md = merge_dims<N>(shape, strides);
  std::vector<int64_t> cs = md.size;
  std::vector<std::array<int64_t, N>> cst = md.stride;
  if (cs.empty()) {  // a single element
    cs.push_back(1);
    cst.push_back({});
  }
  const int64_t inner_n = cs.back();
  const int64_t outer = numel / inner_n;
  const int64_t od = static_cast<int64_t>(cs.size()) - 1;
  // Long rows (e.g. a whole contiguous tensor coalesced into one) are cut into pieces so that
  // every thread gets work; the pieces are fixed, so results never depend on the thread count.
  constexpr int64_t kPiece = 16384;
  const int64_t pieces = inner_n > 2 * kPiece ? (inner_n + kPiece - 1) / kPiece : 1;
  const int64_t piece_len = pieces > 1 ? kPiece : inner_n;
  const int64_t tasks = outer * pieces;
#pragma omp parallel for schedule(static) if (numel > 32768 && tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t o = task / pieces, c = task % pieces;
    RowSpec<N> r;
    r.off.fill(0);
    int64_t rem = o;
    for (int64_t d = od - 1; d >= 0; --d) {
      const int64_t i = rem % cs[d];
      rem /= cs[d];
      for (int k = 0; k < N; ++k) r.off[k] += i * cst[d][k];
    }
    r.inner = cst.back();
    for (int k = 0; k < N; ++k) r.off[k] += c * piece_len * r.inner[k];
    r.n = std::min(piece_len, inner_n - c * piece_len);
    row(r);
  }
}

}  // namespace hz::cpu
