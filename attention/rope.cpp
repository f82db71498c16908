#include "attention/rope.h"

#include <cmath>

#include "core/cpu/loops.h"

namespace hz::attn {

RopeFreqs rope_frequencies(const PositionSpec& pos, int64_t D, int64_t T) {
  HZ_CHECK(D % 2 == 0, ValueError, "RoPE needs an even head_dim, got ", D);
  const int64_t half = D / 2;
  RopeFreqs f;
  f.inv_freq.assign(half, 0.0);
  if (pos.kind == PosKind::None || pos.kind == PosKind::Alibi) return f;  // identity rotation
  if (pos.kind == PosKind::PRope) {
    const int64_t keep = std::max<int64_t>(1, std::llround(pos.prope_fraction * half));
    for (int64_t m = 0; m < keep; ++m)
      f.inv_freq[m] = keep == 1 ? 1.0 : std::pow(pos.prope_base_eff, -static_cast<double>(m) / (keep - 1));
    return f;
  }
  double base = pos.rope_base;
  double s = pos.factor;
  const int64_t c_train = pos.original_context > 0 ? pos.original_context : T;
  if (pos.scaling == RopeScaling::DynamicNTK) {
    const double r = static_cast<double>(T) / c_train;
    s = r > 1.0 ? pos.factor * r - (pos.factor - 1.0) : 1.0;
  }
  if ((pos.scaling == RopeScaling::NTK || pos.scaling == RopeScaling::DynamicNTK) && s > 1.0)
    base = base * std::pow(s, static_cast<double>(D) / (D - 2));
  for (int64_t m = 0; m < half; ++m) f.inv_freq[m] = std::pow(base, -2.0 * m / D);
  if (s <= 1.0) return f;
  if (pos.scaling == RopeScaling::PI) {
    for (auto& w : f.inv_freq) w /= s;  // identical to dividing every position by s
  } else if (pos.scaling == RopeScaling::YaRN || pos.scaling == RopeScaling::Llama3) {
    const double two_pi = 6.283185307179586476925286766559;
    const bool llama3 = pos.scaling == RopeScaling::Llama3;
    const double alpha = llama3 ? pos.llama3_low_freq_factor : pos.yarn_alpha;
    const double beta = llama3 ? pos.llama3_high_freq_factor : pos.yarn_beta;
    std::vector<double> keep(half);  // share of the original frequency kept, per pair
    if (!llama3 && pos.yarn_ramp == YarnRamp::Index) {
      auto pair_of = [&](double rotations) {  // the (fractional) pair index making `rotations` over C
        return D * std::log(c_train / (rotations * two_pi)) / (2.0 * std::log(pos.rope_base));
      };
      double lo = pair_of(beta), hi = pair_of(alpha);
      if (pos.yarn_truncate) {
        lo = std::floor(lo);
        hi = std::ceil(hi);
      }
      lo = std::max(lo, 0.0);
      hi = std::min(hi, static_cast<double>(D - 1));
      if (lo == hi) hi += 0.001;
      for (int64_t m = 0; m < half; ++m) keep[m] = 1.0 - std::clamp((m - lo) / (hi - lo), 0.0, 1.0);
    } else {
      for (int64_t m = 0; m < half; ++m) {
        const double r = c_train * f.inv_freq[m] / two_pi;
        keep[m] = std::clamp((r - alpha) / (beta - alpha), 0.0, 1.0);
      }
    }
    for (int64_t m = 0; m < half; ++m) {
      const double w = f.inv_freq[m];
      f.inv_freq[m] = (1.0 - keep[m]) * w / s + keep[m] * w;
    }
    if (!llama3) f.mscale = pos.yarn_mscale > 0 ? pos.yarn_mscale : 0.1 * std::log(s) + 1.0;
  }
  return f;
}

Tensor rope_rotate(const Tensor& x_in, const Tensor& positions_in, const RopeFreqs& f, bool inverse) {
  HZ_CHECK(x_in.dim() == 4, ShapeError, "rope: x must be (B, H, T, D), got ", shape_str(x_in.shape()));
  const int64_t B = x_in.size(0), H = x_in.size(1), T = x_in.size(2), D = x_in.size(3), half = D / 2;
  HZ_CHECK(static_cast<int64_t>(f.inv_freq.size()) * 2 == D, ShapeError, "rope: table for head_dim ",
           f.inv_freq.size() * 2, " used on head_dim ", D);
  HZ_CHECK(positions_in.dim() == 1 && positions_in.size(0) == T, ShapeError,
           "rope: positions must be (T) = (", T, "), got ", shape_str(positions_in.shape()));
  const Tensor x = x_in.contiguous();
  const Tensor positions = positions_in.to(DType::I64).contiguous();
  const int64_t* pp = positions.data<int64_t>();
  // cos/sin table (T, D/2) in double, then applied in the tensor's dtype
  std::vector<double> cs(T * half), sn(T * half);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t m = 0; m < half; ++m) {
      const double a = static_cast<double>(pp[t]) * f.inv_freq[m];
      cs[t * half + m] = std::cos(a) * f.mscale;
      sn[t * half + m] = (inverse ? -std::sin(a) : std::sin(a)) * f.mscale;
    }
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  cpu::dispatch_float(x.dtype(), [&](auto tag) {
    using T_ = decltype(tag);
    const T_* xp = x.data<T_>();
    T_* op = out.data<T_>();
#pragma omp parallel for schedule(static) if (B * H * T * D > 32768)
    for (int64_t r = 0; r < B * H * T; ++r) {
      const int64_t t = r % T;
      const T_* xr = xp + r * D;
      T_* o = op + r * D;
      const double* c = cs.data() + t * half;
      const double* s = sn.data() + t * half;
      for (int64_t m = 0; m < half; ++m) {
        const T_ x1 = xr[m], x2 = xr[m + half];
        const T_ cm = static_cast<T_>(c[m]), sm = static_cast<T_>(s[m]);
        o[m] = x1 * cm - x2 * sm;
        o[m + half] = x1 * sm + x2 * cm;
      }
    }
  });
  return out;
}

ag::Variable apply_rope(const ag::Variable& x, const Tensor& positions, const RopeFreqs& f) {
  return ag::make_result(rope_rotate(x.value(), positions, f, false), {x}, "rope", [&] {
    Tensor pos = positions;
    RopeFreqs fr = f;
    // the rotation is orthogonal (times mscale): its adjoint is the inverse-angle rotation
    return [=](const Tensor& g, ag::Grads& gr) { gr.set(0, rope_rotate(g, pos, fr, true)); };
  });
}

}  // namespace hz::attn
