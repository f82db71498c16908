#include "core/rng.h"

#include "core/ops.h"
#include "core/philox.h"

namespace hz {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  const philox::Block b = philox::philox4x32_10(c[0], c[1], c[2], c[3], k[0], k[1]);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

uint32_t Generator::word(uint64_t index) const { return philox::word(seed_, stream_, offset_ + index); }

// Element i of a fill uses words (2i, 2i+1): the value depends only on (seed, stream, offset, i),
// computed by the tensor's device (core/philox.h is the same code on every device).
void Generator::normal_(Tensor& t, double mean, double stddev) {
  HZ_CHECK(is_floating(t.dtype()), DTypeError, "normal_ needs a floating tensor, got ",
           dtype_name(t.dtype()));
  ops::random_fill_(t, {RandomKind::Normal, seed_, stream_, offset_, mean, stddev});
  offset_ += philox::words_used(t.numel());
}

void Generator::uniform_(Tensor& t, double low, double high) {
  HZ_CHECK(is_floating(t.dtype()), DTypeError, "uniform_ needs a floating tensor, got ",
           dtype_name(t.dtype()));
  HZ_CHECK(low < high, ValueError, "uniform_: low (", low, ") must be below high (", high, ")");
  ops::random_fill_(t, {RandomKind::Uniform, seed_, stream_, offset_, low, high});
  offset_ += philox::words_used(t.numel());
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
