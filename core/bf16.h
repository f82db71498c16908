// Horizon: bfloat16 <-> float32 conversion, the same code on the host and the CUDA device.
// f32 -> bf16 rounds to nearest, ties to even; NaN stays NaN (quiet bit forced so truncation
// cannot turn a NaN payload into Inf); +-Inf and +-0 are preserved exactly.
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace hz {

struct bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2, "bf16 is stored as its 16 bits");

HZ_HD uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = f32_as_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep sign, force quiet bit
  }
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;  // round to nearest even; Inf stays Inf (low bits are zero)
  return static_cast<uint16_t>(u >> 16);
}

HZ_HD float bf16_bits_to_f32(uint16_t b) { return bits_as_f32(static_cast<uint32_t>(b) << 16); }

// double -> bf16 in one rounding: when the float rounding of s lands exactly on a bf16 tie, nudge
// it one float ulp towards s so the tie is broken the way s itself would break it.
HZ_HD uint16_t f64_to_bf16_bits(double s) {
  const float f = static_cast<float>(s);
  uint32_t u = f32_as_bits(f);
  const bool finite = (u & 0x7f800000u) != 0x7f800000u;
  if ((u & 0xffffu) == 0x8000u && static_cast<double>(f) != s && finite) {
    const double as = s < 0 ? -s : s, af = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
    u += as > af ? 1 : static_cast<uint32_t>(-1);
  }
  return f32_to_bf16_bits(bits_as_f32(u));
}

}  // namespace hz
