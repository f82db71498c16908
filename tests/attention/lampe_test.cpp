// LaMPE: region decomposition + log-sum-exp merge against a materialised computation of the same
// relative-position matrix; identity when nothing needs squeezing; monotone mapping.
#include <gtest/gtest.h>

#include <cmath>

#include "attention/lampe.h"
#include "core/rng.h"

using namespace hz;
using namespace hz::attn;

namespace {

// softmax_j( rot(q_i, R_ij) . k_j / sqrt(D) ) v_j over j <= p_i, R from the mapping.
std::vector<double> materialised(const Tensor& q, const Tensor& k, const Tensor& v, const RopeFreqs& f,
                                 const LampeConfig& c) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  std::vector<double> out(B * H * Tq * D, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t p = Tk - Tq + i, hk = h / (H / Hkv);
        std::vector<double> logit(p + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= p; ++j) {
          const double r = static_cast<double>(lampe_relative_position(c, Tk, p, j));
          double s = 0;
          for (int64_t m = 0; m < D / 2; ++m) {
            const double a = r * f.inv_freq[m], cs = std::cos(a), sn = std::sin(a);
            const double x1 = q.at({b, h, i, m}), x2 = q.at({b, h, i, m + D / 2});
            s += (x1 * cs - x2 * sn) * k.at({b, hk, j, m}) + (x1 * sn + x2 * cs) * k.at({b, hk, j, m + D / 2});
          }
          logit[j] = s / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, logit[j]);
        }
        double z = 0;
        for (auto& x : logit) z += (x = std::exp(x - mx));
        for (int64_t j = 0; j <= p; ++j)
          for (int64_t d = 0; d < D; ++d) out[((b * H + h) * Tq + i) * D + d] += logit[j] / z * v.at({b, hk, j, d});
      }
  return out;
}

LampeConfig small_cfg() {
  LampeConfig c;
  c.L = 8;
  c.a = 0;
  c.b = 10;  // m ~= 8 for every length
  c.s_local = 3;
  c.s_sink = 2;
  return c;
}

}  // namespace

TEST(Lampe, MatchesMaterialisedRelativePositions) {
  Generator g(21);
  PositionSpec ps;
  ps.rope_base = 100;
  const RopeFreqs f = rope_frequencies(ps, 8, 20);
  for (int64_t Tq : {20, 6}) {
    const Tensor q = g.normal({1, 4, Tq, 8}, 0, 1, DType::F64), k = g.normal({1, 2, 20, 8}, 0, 1, DType::F64),
                 v = g.normal({1, 2, 20, 8}, 0, 1, DType::F64);
    AttnConfig base;
    base.block_q = 4;
    base.block_k = 3;
    const AttnOutput o = lampe_attention(ag::Variable(q), ag::Variable(k), ag::Variable(v), f, small_cfg(), base);
    const std::vector<double> want = materialised(q, k, v, f, small_cfg()), got = o.out.value().to_vector();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << "Tq " << Tq << " element " << i;
  }
}

TEST(Lampe, IdentityWhenTheInputFitsTheMappedRange) {
  Generator g(22);
  const RopeFreqs f = rope_frequencies(PositionSpec{}, 8, 16);
  LampeConfig c = small_cfg();
  c.L = 100;  // m ~= 100 > l = 16
  const Tensor q = g.normal({1, 2, 16, 8}, 0, 1, DType::F64), k = g.normal({1, 2, 16, 8}, 0, 1, DType::F64),
               v = g.normal({1, 2, 16, 8}, 0, 1, DType::F64);
  const AttnOutput o = lampe_attention(ag::Variable(q), ag::Variable(k), ag::Variable(v), f, c);
  const Tensor pos = Tensor::arange(0, 16);
  AttnConfig causal;
  causal.window = {0, 0};
  const AttnOutput r = fused_attention(apply_rope(ag::Variable(q), pos, f), apply_rope(ag::Variable(k), pos, f),
                                       ag::Variable(v), causal);
  const auto a = o.out.value().to_vector(), b = r.out.value().to_vector();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-12);
  const auto la = o.lse.to_vector(), lb = r.lse.to_vector();
  for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-12);
  for (int64_t p = 0; p < 16; ++p)
    for (int64_t j = 0; j <= p; ++j) EXPECT_EQ(lampe_relative_position(c, 16, p, j), p - j);
}

TEST(Lampe, MappingIsMonotoneAndBounded) {
  // farther keys never get smaller relative positions (the LaMPE paper, appendix C)
  for (const LampeConfig& c : {small_cfg(), LampeConfig{3072, 1e-4, 0.0, 512, 200}}) {
    for (int64_t l : {20, 100, 4096, 16384}) {
      const double m = lampe_mapping_length(c, l);
      for (int64_t p : {l / 3, l - 1}) {
        int64_t prev = lampe_relative_position(c, l, p, p);
        EXPECT_EQ(prev, 0);
        for (int64_t j = p - 1; j >= 0; --j) {
          const int64_t r = lampe_relative_position(c, l, p, j);
          ASSERT_GE(r, prev) << "l " << l << " p " << p << " j " << j;
          prev = r;
        }
        if (l > m && p > m) {
          EXPECT_LE(prev, static_cast<int64_t>(std::floor(m)) + 1);  // squeezed into the mapped range
        }
      }
    }
  }
}
