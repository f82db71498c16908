// Horizon: a branch-free exp that the compiler vectorizes (std::exp on float is a scalar libm
// call, which dominates a tiled attention kernel). Cody-Waite range reduction x = n ln2 + r,
// |r| <= ln2/2, degree-7 Taylor polynomial (truncation < 5e-9 relative, below float epsilon),
// scaling by 2^n through the exponent bits. Inputs below -87.3 (including -inf) give exactly 0;
// inputs above 88.7 saturate to the largest representable range. Double uses std::exp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace hz::cpu {

inline float fast_exp(float x) {
  const bool under = x < -87.3f;
  float xc = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693145751953125f;
  r = r - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return under ? 0.0f : p * scale;
}
inline double fast_exp(double x) { return std::exp(x); }

}  // namespace hz::cpu
