// Horizon: bfloat16 <-> float32 conversion.
// f32 -> bf16 rounds to nearest, ties to even; NaN stays NaN (quiet bit forced so truncation
// cannot turn a NaN payload into Inf); +-Inf and +-0 are preserved exactly.
#pragma once
#include <cstdint>
#include <cstring>

namespace hz {

struct bf16 {
  uint16_t bits = 0;
};

inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep sign, force quiet bit
  }
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;  // round to nearest even; Inf stays Inf (low bits are zero)
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace hz
