// Horizon: context parallelism's zigzag layout (see layout.h).
#include "distributed/context/layout.h"

#include <algorithm>

#include "core/error.h"

namespace hz::dist {

ZigzagLayout::ZigzagLayout(int64_t T_, int n_, int rank_) : T(T_), n(n_), rank(rank_) {
  HZ_CHECK(n >= 1 && rank >= 0 && rank < n, ValueError, "context parallel: rank ", rank, " of a group of ", n);
  HZ_CHECK(T >= 2 * n, ValueError, "context parallel: a sequence of ", T, " tokens cannot be cut into ", 2 * n,
           " chunks (parallel.context=", n, " needs data.seq_len >= ", 2 * n, ")");
}

int64_t ZigzagLayout::min_chunk() const {
  int64_t m = T;
  for (int64_t c = 0; c < 2 * n; ++c) m = std::min(m, chunk_len(c));
  return m;
}

int64_t ZigzagLayout::local_len_of(int q) const {
  const auto c = chunks_of(q);
  return chunk_len(c[0]) + chunk_len(c[1]);
}

int64_t ZigzagLayout::max_local_len() const {
  int64_t m = 0;
  for (int q = 0; q < n; ++q) m = std::max(m, local_len_of(q));
  return m;
}

std::vector<int64_t> ZigzagLayout::positions_of(int q) const {
  std::vector<int64_t> p;
  for (int64_t c : chunks_of(q))
    for (int64_t t = chunk_begin(c); t < chunk_end(c); ++t) p.push_back(t);
  return p;
}

Tensor local_rows(const Tensor& t, int64_t dim, const ZigzagLayout& L) {
  HZ_CHECK(dim >= 0 && dim < t.dim() && t.size(dim) == L.T, ShapeError, "context parallel: ", shape_str(t.shape()),
           " has no dimension ", dim, " of the sequence's ", L.T, " positions");
  Shape shape = t.shape();
  shape[dim] = L.local_len();
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  int64_t off = 0;
  for (int64_t c : L.chunks()) {
    out.narrow(dim, off, L.chunk_len(c)).copy_(t.narrow(dim, L.chunk_begin(c), L.chunk_len(c)));
    off += L.chunk_len(c);
  }
  return out;
}

}  // namespace hz::dist
