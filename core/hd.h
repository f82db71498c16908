// Horizon: HZ_HD marks functions compiled for both the host and the CUDA device (plain inline in a
// C++-only build), and bit casts that work on both.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HZ_HD __host__ __device__ __forceinline__
#else
#define HZ_HD inline
#endif

namespace hz {

HZ_HD uint32_t f32_as_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
HZ_HD float bits_as_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

}  // namespace hz
