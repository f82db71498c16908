#include "core/rng.h"

#include <cmath>

namespace hz {

static inline void mulhilo32(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;  // multipliers
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;  // Weyl key increments
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k[0] += W0;
      k[1] += W1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(M0, c[0], hi0, lo0);
    mulhilo32(M1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

uint32_t Generator::word(uint64_t index) const {
  const uint64_t w = offset_ + index;
  const uint64_t block = w >> 2;
  const auto r = philox4x32_10(
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
       static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)},
      {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
  return r[w & 3];
}

namespace {
// Element i of a fill uses words (2i, 2i+1): the value depends only on (seed, stream, offset, i).
template <class F>
Tensor fill_pairs(const Generator& g, int64_t n, F&& f) {
  Tensor tmp = Tensor::empty({n}, DType::F64);
  double* out = tmp.data<double>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    // both words of a pair sit in the same Philox block when offset is even: compute once
    out[i] = f(g.word(2 * i), g.word(2 * i + 1));
  }
  return tmp;
}
uint64_t words_used(int64_t n) { return (static_cast<uint64_t>(2 * n) + 3) / 4 * 4; }
}  // namespace

void Generator::normal_(Tensor& t, double mean, double stddev) {
  HZ_CHECK(is_floating(t.dtype()), DTypeError, "normal_ needs a floating tensor, got ",
           dtype_name(t.dtype()));
  const double two_pi = 6.283185307179586476925286766559;
  Tensor v = fill_pairs(*this, t.numel(), [&](uint32_t a, uint32_t b) {
    const double u1 = (static_cast<double>(a) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
    const double u2 = static_cast<double>(b) * (1.0 / 4294967296.0);          // [0, 1)
    return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
  });
  offset_ += words_used(t.numel());
  t.copy_(v.to(t.dtype()).view(t.shape()).to(t.device()));
}

void Generator::uniform_(Tensor& t, double low, double high) {
  HZ_CHECK(is_floating(t.dtype()), DTypeError, "uniform_ needs a floating tensor, got ",
           dtype_name(t.dtype()));
  HZ_CHECK(low < high, ValueError, "uniform_: low (", low, ") must be below high (", high, ")");
  const bool f32 = t.dtype() != DType::F64;
  Tensor v = fill_pairs(*this, t.numel(), [&](uint32_t a, uint32_t b) {
    const double u = static_cast<double>((static_cast<uint64_t>(a) << 21) | (b >> 11)) *
                     (1.0 / 9007199254740992.0);  // [0, 1), 53 bits
    double x = low + (high - low) * u;
    if (f32 && static_cast<float>(x) >= static_cast<float>(high))
      x = std::nextafter(static_cast<float>(high), static_cast<float>(low));
    return x;
  });
  offset_ += words_used(t.numel());
  t.copy_(v.to(t.dtype()).view(t.shape()).to(t.device()));
}

Tensor Generator::normal(const Shape& shape, double mean, double stddev, DType dtype, Device dev) {
  Tensor t = Tensor::empty(shape, dtype, dev);
  normal_(t, mean, stddev);
  return t;
}
Tensor Generator::uniform(const Shape& shape, double low, double high, DType dtype, Device dev) {
  Tensor t = Tensor::empty(shape, dtype, dev);
  uniform_(t, low, high);
  return t;
}

}  // namespace hz
