#include "attention/rope.h"

#include <algorithm>
#include <cmath>

#include "core/ops.h"

namespace hz::attn {

std::vector<bool> rotating_pairs(const PositionSpec& pos, int64_t half) {
  std::vector<bool> on(half, pos.rope_pairs.empty());
  if (!pos.rope_pairs.empty()) {
    for (int64_t m : pos.rope_pairs) {
      HZ_CHECK(m >= 0 && m < half, ValueError, "rope_pairs lists pair ", m, "; there are ", half);
      on[m] = true;
    }
    return on;
  }
  const int64_t keep = std::llround(pos.rope_fraction * half);
  if (keep >= half) return on;
  std::fill(on.begin(), on.end(), false);
  for (int64_t k = 0; k < keep; ++k) {
    switch (pos.rope_select) {
      case RopeSelect::High: on[k] = true; break;
      case RopeSelect::Low: on[half - 1 - k] = true; break;
      default: on[(k * half) / keep] = true; break;  // evenly spread, starting at the fastest
    }
  }
  return on;
}

namespace {
RopeFreqs all_frequencies(const PositionSpec& pos, int64_t D, int64_t T);
}

RopeFreqs rope_frequencies(const PositionSpec& pos, int64_t D, int64_t T) {
  RopeFreqs f = all_frequencies(pos, D, T);
  if (pos.partial()) {
    const std::vector<bool> on = rotating_pairs(pos, D / 2);
    for (int64_t m = 0; m < D / 2; ++m)
      if (!on[m]) f.inv_freq[m] = 0.0;
  }
  if (!pos.rope_freq_factors.empty()) {  // per-pair factors, after every scaling
    HZ_CHECK(static_cast<int64_t>(pos.rope_freq_factors.size()) == D / 2, ValueError, "rope_freq_factors has ",
             pos.rope_freq_factors.size(), " values for ", D / 2, " frequency pairs");
    for (int64_t m = 0; m < D / 2; ++m) f.inv_freq[m] *= pos.rope_freq_factors[m];
  }
  return f;
}

namespace {

RopeFreqs all_frequencies(const PositionSpec& pos, int64_t D, int64_t T) {
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
  if (pos.scaling == RopeScaling::LongRoPE) {  // the long factors past C_train, else the short ones
    const std::vector<double>& lambda = T > c_train ? pos.longrope_long_factors : pos.longrope_short_factors;
    HZ_CHECK(lambda.empty() || static_cast<int64_t>(lambda.size()) == half, ValueError, "longrope: ", lambda.size(),
             " rescale factors for ", half, " frequency pairs");
    for (size_t m = 0; m < lambda.size(); ++m) f.inv_freq[m] /= lambda[m];
    if (s > 1.0) f.mscale = pos.yarn_mscale > 0 ? pos.yarn_mscale : std::sqrt(1.0 + std::log(s) / std::log(c_train));
    return f;
  }
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

}  // namespace

Tensor rope_rotate(const Tensor& x, const Tensor& positions, const RopeFreqs& f, bool inverse) {
  HZ_CHECK(x.dim() == 4, ShapeError, "rope: x must be (B, H, T, D), got ", shape_str(x.shape()));
  RotaryParams p;
  p.inv_freq = f.inv_freq;
  p.mscale = f.mscale;
  p.inverse = inverse;
  return ops::rotary(x, positions.device() == x.device() ? positions : positions.to(x.device()), p);
}

ag::Variable apply_rope(const ag::Variable& x, const Tensor& positions, const RopeFreqs& f) {
  return ag::make_result(rope_rotate(x.value(), positions, f, false), {x}, "rope", [&] {
    Tensor pos = positions;
    RopeFreqs fr = f;
    // the rotation is orthogonal (times mscale): its adjoint is the inverse-angle rotation
    return [=](const Tensor& g, ag::Grads& gr) { gr.set(0, rope_rotate(g, pos, fr, true)); };
  });
}

DType angle_dtype(const Tensor& x) {
  return x.device().is_cpu() || x.dtype() == DType::F64 ? DType::F64 : DType::F32;
}

ag::Variable rotate_by_angles(const ag::Variable& x, const ag::Variable& angles, double mscale, bool inverse) {
  const Tensor y = ops::rotate_angles(x.value(), angles.value(), mscale, inverse);
  return ag::make_result(y, {x, angles}, "rotate_by_angles", [&] {
    const Tensor yk = y, a = angles.value();
    return [=](const Tensor& g, ag::Grads& gr) {
      // orthogonal (times mscale): the adjoint in x is the rotation by the opposite angle
      if (gr.needs(0)) gr.set(0, ops::rotate_angles(g, a, mscale, !inverse));
      if (gr.needs(1)) gr.set(1, ops::rotate_angles_grad(yk, g, a, inverse));
    };
  });
}

}  // namespace hz::attn
