// Horizon: context parallelism's layout, one sequence of T tokens split over the N ranks of a
// group (zigzag, balanced for causal work): the sequence is cut into 2N chunks,
//     chunk c = positions [floor(c T / 2N), floor((c + 1) T / 2N))      (T need not divide),
// and rank r of the group holds chunks r and 2N-1-r: its local tokens are chunk r followed by
// chunk 2N-1-r. Under causal attention chunk c costs about c + 1/2 chunk-squares, so every rank
// does about N chunk-squares. Every position-dependent quantity uses the global position (RoPE
// angles, windows, SCOPE scopes, scale-invariant t, LogN's n, SWAN's row, ALiBi distances,
// document bounds): the fused op's q_offset and key_position place each chunk where it sits.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hz::dist {

struct ZigzagLayout {
  int64_t T = 0;  // the whole sequence
  int n = 1;      // ranks in the group
  int rank = 0;   // this rank in the group

  ZigzagLayout() = default;
  ZigzagLayout(int64_t T, int n, int rank);  // checks 1 <= n, 0 <= rank < n, 2n <= T
  int64_t chunk_begin(int64_t c) const { return c * T / (2 * n); }
  int64_t chunk_end(int64_t c) const { return (c + 1) * T / (2 * n); }
  int64_t chunk_len(int64_t c) const { return chunk_end(c) - chunk_begin(c); }
  int64_t min_chunk() const;  // the shortest chunk
  // the chunks rank q holds, in local order
  std::array<int64_t, 2> chunks_of(int q) const { return {q, 2 * n - 1 - q}; }
  std::array<int64_t, 2> chunks() const { return chunks_of(rank); }
  int64_t local_len_of(int q) const;
  int64_t local_len() const { return local_len_of(rank); }
  int64_t max_local_len() const;
  // the global position of each local token, in local order (local_len() values)
  std::vector<int64_t> positions_of(int q) const;
  std::vector<int64_t> positions() const { return positions_of(rank); }
  int owner(int64_t chunk) const { return chunk < n ? static_cast<int>(chunk) : static_cast<int>(2 * n - 1 - chunk); }
  ZigzagLayout of_rank(int q) const { return ZigzagLayout(T, n, q); }
};

// The rows of t along `dim` (of size L.T, global order) that this rank holds, in local order.
Tensor local_rows(const Tensor& t, int64_t dim, const ZigzagLayout& L);

}  // namespace hz::dist
