#include "attention/lampe.h"

#include <cmath>
#include <limits>

#include "autograd/functions.h"

namespace hz::attn {

double lampe_mapping_length(const LampeConfig& c, int64_t l) {
  return c.L / (1.0 + std::exp(-(c.a * static_cast<double>(l) + c.b)));
}

namespace {
struct Geometry {
  double rho;
  int64_t M;
};
Geometry geometry(const LampeConfig& c, int64_t l) {
  const double m = lampe_mapping_length(c, l);
  const double span = static_cast<double>(l - c.s_local - c.s_sink);
  Geometry g;
  g.rho = span > 0 ? std::min(1.0, std::max(0.0, (m - c.s_local - c.s_sink) / span)) : 1.0;
  g.M = static_cast<int64_t>(std::floor(m)) + 1;
  return g;
}
int64_t floor_mul(int64_t x, double rho) { return static_cast<int64_t>(std::floor(static_cast<double>(x) * rho)); }
}  // namespace

int64_t lampe_relative_position(const LampeConfig& c, int64_t l, int64_t p, int64_t j) {
  const Geometry g = geometry(c, l);
  const int64_t t = p - j;
  if (t < c.s_local) return t;
  if (j < c.s_sink) return std::min(p, g.M) - j;
  return c.s_local + floor_mul(p - c.s_local, g.rho) - floor_mul(j, g.rho);
}

AttnOutput lampe_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                           const RopeFreqs& freqs, const LampeConfig& cfg, AttnConfig base) {
  const int64_t H = q.size(1), Tq = q.size(2), Tk = k.size(2);
  HZ_CHECK(cfg.s_local >= 1 && cfg.s_sink >= 0, ValueError, "lampe: need s_local >= 1 and s_sink >= 0");
  HZ_CHECK(cfg.L > 0, ValueError, "lampe: the mapping scale L must be positive (about 3/4 of the training length)");
  for (int64_t w : base.window)
    HZ_CHECK(w == 0, ValueError, "lampe: the base config must be causal (unbounded windows)");
  base.window.assign(H, 0);
  const int64_t off = base.q_offset < 0 ? Tk - Tq : base.q_offset;
  base.q_offset = off;
  const Geometry g = geometry(cfg, cfg.length > 0 ? cfg.length : Tk);
  std::vector<double> qpos_local(Tq), qpos_mid(Tq), qpos_sink(Tq), kpos_mid(Tk);
  for (int64_t i = 0; i < Tq; ++i) {
    const int64_t p = off + i;
    qpos_local[i] = static_cast<double>(p);
    qpos_mid[i] = static_cast<double>(cfg.s_local + floor_mul(p - cfg.s_local, g.rho));
    qpos_sink[i] = static_cast<double>(std::min(p, g.M));
  }
  for (int64_t j = 0; j < Tk; ++j) kpos_mid[j] = static_cast<double>(floor_mul(j, g.rho));
  const Tensor kpos_plain = Tensor::arange(0, Tk);
  auto ids = [](const std::vector<double>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::I64); };

  struct Region {
    AttnConfig cfg;
    Tensor qpos, kpos;
  };
  std::vector<Region> regions;
  Region local{base, ids(qpos_local), kpos_plain};
  local.cfg.window.assign(H, cfg.s_local);
  regions.push_back(local);
  if (cfg.s_sink > 0) {
    Region sink{base, ids(qpos_sink), kpos_plain};
    sink.cfg.key_end = std::min(cfg.s_sink, Tk);
    sink.cfg.min_distance = cfg.s_local;
    regions.push_back(sink);
  }
  Region mid{base, ids(qpos_mid), ids(kpos_mid)};
  mid.cfg.key_begin = cfg.s_sink;
  mid.cfg.min_distance = cfg.s_local;
  regions.push_back(mid);

  std::vector<AttnOutput> outs;
  for (const Region& r : regions)
    outs.push_back(fused_attention(apply_rope(q, r.qpos, freqs), apply_rope(k, r.kpos, freqs), v, r.cfg));
  // exact merge: lse = log sum_r exp(lse_r), O = sum_r O_r exp(lse_r - lse). Device ops only, so
  // CUDA tensors stay on the GPU; lse is f32 for bf16 inputs, the weights take the output's dtype.
  const Device dev = outs[0].lse.device();
  const DType ldt = outs[0].lse.dtype(), odt = outs[0].out.dtype();
  const Shape ls = outs[0].lse.shape();
  Tensor lse_max = outs[0].lse;
  for (size_t r = 1; r < outs.size(); ++r) lse_max = ops::binary(BinaryOp::Maximum, lse_max, outs[r].lse);
  // rows with no visible key anywhere have lse_max = -inf: shift them by the lowest finite value
  // instead (every exp(lse_r - shift) is then exp(-inf) = 0, and the merged lse stays -inf)
  const Tensor shift =
      ops::binary(BinaryOp::Maximum, lse_max, Tensor::full({}, -std::numeric_limits<float>::max(), ldt, dev));
  Tensor total = Tensor::zeros(ls, ldt, dev);
  std::vector<Tensor> w;
  for (const auto& o : outs) {
    Tensor e = ops::unary(UnaryOp::Exp, ops::sub(o.lse, shift));
    w.push_back(e);
    ops::add_(total, e);
  }
  AttnOutput res;
  const Tensor inv = ops::div(Tensor::ones(ls, ldt, dev),
                              ops::binary(BinaryOp::Maximum, total, Tensor::full({}, std::numeric_limits<float>::min(), ldt, dev)));
  ag::Variable merged;
  for (size_t r = 0; r < outs.size(); ++r) {
    const ag::Variable wr(ops::mul(w[r], inv).unsqueeze(-1).to(odt));  // (B, H, Tq, 1), constant
    ag::Variable term = ag::mul(outs[r].out, wr);
    merged = merged.defined() ? ag::add(merged, term) : term;
  }
  res.out = merged;
  res.lse = ops::add(shift, ops::unary(UnaryOp::Log, total));
  return res;
}

}  // namespace hz::attn
