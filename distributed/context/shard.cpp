// Horizon: context parallelism's share of a batch (see shard.h).
#include "distributed/context/shard.h"

namespace hz::dist {

data::Batch shard_batch(const data::Batch& b, const ZigzagLayout& L) {
  data::Batch out;
  out.tokens = local_rows(b.tokens, 1, L);
  out.targets = local_rows(b.targets, 1, L);
  if (b.weights.defined()) out.weights = local_rows(b.weights, 1, L);
  out.cu_seqlens = b.cu_seqlens;
  return out;
}

std::vector<double> gather_shares(const Tensor& mine, Communicator& group, const ZigzagLayout& L) {
  const int N = L.n;
  const int64_t Tl = L.local_len(), Tmax = L.max_local_len(), B = mine.numel() / Tl;
  HZ_CHECK(mine.numel() == B * Tl, ShapeError, "context parallel: ", mine.numel(), " values are no whole rows of ", Tl);
  // padded to the longest share, gathered in rank order
  Tensor padded = Tensor::zeros({B, Tmax}, DType::F64);
  padded.narrow(1, 0, Tl).copy_(mine.to(DType::F64).to(Device::cpu()).reshape({B, Tl}));
  Tensor all = Tensor::empty({N, B, Tmax}, DType::F64);
  group.all_gather_into(padded, all);
  const double* g = all.data<double>();
  std::vector<double> v(static_cast<size_t>(B * L.T));
  for (int q = 0; q < N; ++q) {
    const std::vector<int64_t> pos = L.positions_of(q);
    for (int64_t i = 0; i < B; ++i)
      for (size_t j = 0; j < pos.size(); ++j) v[i * L.T + pos[j]] = g[(q * B + i) * Tmax + j];
  }
  return v;
}

}  // namespace hz::dist
