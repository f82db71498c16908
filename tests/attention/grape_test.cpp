// GRAPE's additive form (arXiv 2512.07805) in the fused op, and the two exact special cases the
// paper names, in float64: ALiBi (the rate a fixed slope per head) and FoX (the path-integral form
// b(i, j) = sum_{j < m <= i} psi_m with a query-independent integrand psi_m = log f_m).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attention/fused.h"
#include "attention/reference.h"
#include "autograd/functions.h"
#include "core/error.h"
#include "core/rng.h"

using namespace hz;
using namespace hz::attn;

namespace {

std::vector<double> grad_of(const ag::Variable& x) { return x.grad().to_vector(); }

void expect_near(const std::vector<double>& a, const std::vector<double>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << what << " element " << i;
}

// Two attentions (output, then q, k, v after backward) agree to float64 rounding: out to 1e-13,
// dq, dk, dv to 1e-12.
struct Attended {
  const ag::Variable &out, &q, &k, &v;
};
void expect_same_attention(const Attended& x, const Attended& ref) {
  expect_near(x.out.value().to_vector(), ref.out.value().to_vector(), 1e-13, "out");
  expect_near(grad_of(x.q), grad_of(ref.q), 1e-12, "dq");
  expect_near(grad_of(x.k), grad_of(ref.k), 1e-12, "dk");
  expect_near(grad_of(x.v), grad_of(ref.v), 1e-12, "dv");
}

}  // namespace

// dist_k = slope_h on every key (and, separately, dist_q = slope_h on every row) is ALiBi: the same
// output and the same gradients of q, k, v as the op's own slopes, under a window, GQA and Tq < Tk.
TEST(GrapeAdditive, ConstantRatesAreAlibi) {
  const int64_t B = 2, H = 4, Hkv = 2, Tq = 9, Tk = 13, D = 6;
  Generator g(41);
  const Tensor q = g.normal({B, H, Tq, D}, 0, 1, DType::F64), k = g.normal({B, Hkv, Tk, D}, 0, 1, DType::F64),
               v = g.normal({B, Hkv, Tk, D}, 0, 1, DType::F64), gout = g.normal({B, H, Tq, D}, 0, 1, DType::F64);
  const std::vector<double> slopes = alibi_slopes(H);
  AttnConfig alibi;
  alibi.window = {0, 5, 0, 3};
  alibi.block_q = 4;
  alibi.block_k = 3;
  AttnConfig plain = alibi;
  alibi.alibi_slope = slopes;
  ag::Variable qa(q.clone(), true), ka(k.clone(), true), va(v.clone(), true);
  ag::Variable oa = fused_attention(qa, ka, va, alibi).out;
  oa.backward(gout);
  for (const bool on_keys : {true, false}) {
    const int64_t T = on_keys ? Tk : Tq;
    std::vector<double> r(B * H * T);
    for (int64_t i = 0; i < B * H * T; ++i) r[i] = slopes[(i / T) % H];
    ag::Variable qb(q.clone(), true), kb(k.clone(), true), vb(v.clone(), true);
    ag::Variable rate(Tensor::from_vector(r, {B, H, T}, DType::F64), true);
    AttnTerms t;
    (on_keys ? t.dist_k : t.dist_q) = rate;
    ag::Variable ob = fused_attention(qb, kb, vb, plain, t).out;
    ob.backward(gout);
    expect_same_attention({ob, qb, kb, vb}, {oa, qa, ka, va});
    // and the twin agrees on the rate's gradient
    ag::Variable rate_r(rate.value().clone(), true);
    AttnTerms tr;
    (on_keys ? tr.dist_k : tr.dist_q) = rate_r;
    reference_attention(ag::Variable(q), ag::Variable(k), ag::Variable(v), plain, tr).backward(gout);
    expect_near(grad_of(rate), grad_of(rate_r), 1e-11, on_keys ? "ddist_k" : "ddist_q");
  }
}

// FoX is GRAPE's path-integral additive form with a query-independent integrand: the bias
// b(i, j) = sum_{j < m <= i} psi_m, summed here by an explicit loop per (i, j) (O(T^3)), added to the
// logits of a composed softmax attention, equals the fused op's FoX term for forget = psi.
TEST(GrapeAdditive, FoxIsThePathIntegralForm) {
  const int64_t B = 1, H = 2, T = 10, D = 5;
  Generator g(43);
  const Tensor q = g.normal({B, H, T, D}, 0, 1, DType::F64), k = g.normal({B, H, T, D}, 0, 1, DType::F64),
               v = g.normal({B, H, T, D}, 0, 1, DType::F64), gout = g.normal({B, H, T, D}, 0, 1, DType::F64);
  const Tensor psi = g.uniform({B, H, T}, -1.0, 0.0, DType::F64);  // log f_m <= 0
  const std::vector<double> ps = psi.to_vector();
  std::vector<double> bias(B * H * T * T, -std::numeric_limits<double>::infinity());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double b = 0.0;
        for (int64_t m = j + 1; m <= i; ++m) b += ps[h * T + m];  // the path from key j to query i
        bias[(h * T + i) * T + j] = b;
      }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  ag::Variable qr(q.clone(), true), kr(k.clone(), true), vr(v.clone(), true);
  const ag::Variable logits = ag::add(ag::matmul(qr, kr, false, true, scale),
                                      ag::Variable(Tensor::from_vector(bias, {B, H, T, T}, DType::F64)));
  ag::Variable orf = ag::matmul(ag::softmax(logits, -1), vr);
  orf.backward(gout);
  AttnConfig cfg;
  cfg.window = {0, 0};
  cfg.block_q = 3;
  cfg.block_k = 4;
  ag::Variable qf(q.clone(), true), kf(k.clone(), true), vf(v.clone(), true);
  AttnTerms t;
  t.forget = ag::Variable(psi);
  ag::Variable of = fused_attention(qf, kf, vf, cfg, t).out;
  of.backward(gout);
  expect_same_attention({of, qf, kf, vf}, {orf, qr, kr, vr});
}

TEST(GrapeAdditive, RefusesRatesOfTheWrongShape) {
  ag::Variable x(Tensor::zeros({1, 2, 6, 4}, DType::F64));
  AttnConfig cfg;
  cfg.window = {0, 0};
  AttnTerms t;
  t.dist_k = ag::Variable(Tensor::zeros({1, 2, 5}, DType::F64));  // Tk is 6
  EXPECT_THROW(fused_attention(x, x, x, cfg, t), ShapeError);
  t.dist_k = ag::Variable();
  t.dist_q = ag::Variable(Tensor::zeros({1, 1, 6}, DType::F64));  // H is 2
  EXPECT_THROW(fused_attention(x, x, x, cfg, t), ShapeError);
}

TEST(GrapeAdditive, SpecRefusesAlibiTwice) {
  AttentionSpec s;
  s.pos.kind = PosKind::Alibi;
  s.additive = AdditiveKind::Alibi;
  try {
    s.validate(4, 4, 8, 16);
    FAIL() << "pos alibi with additive alibi was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("additive"), std::string::npos) << e.what();
  }
  s.pos.kind = PosKind::Rope;  // ALiBi beside RoPE
  EXPECT_NO_THROW(s.validate(4, 4, 8, 16));
  EXPECT_EQ(make_attn_config(s, 4, 16).alibi_slope, alibi_slopes(4));
  EXPECT_EQ(parse_additive("query_key"), AdditiveKind::QueryKey);
  EXPECT_THROW(parse_additive("keys"), ValueError);
}
