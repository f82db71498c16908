// Horizon: counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
//
// Every value is a pure function of (seed, stream, offset + element index), so results do not
// depend on the number of threads, ranks or the device. A Generator hands out disjoint ranges of
// the counter space: each fill advances `offset` by the number of 32-bit words it consumed
// (rounded up to a multiple of 4). State = (seed, stream, offset): three integers, checkpointable.
#pragma once
#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace hz {

// One Philox4x32-10 block: counter (4 words) under key (2 words) -> 4 random words.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t stream = 0) : seed_(seed), stream_(stream) {}
  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  uint64_t offset() const { return offset_; }  // in 32-bit words
  void set_offset(uint64_t o) { offset_ = o; }

  // The i-th 32-bit word of this generator's sequence from word `offset` (no state change).
  uint32_t word(uint64_t index) const;

  // Fill a floating tensor on any device (the device computes the same numbers) and advance the offset.
  void normal_(Tensor& t, double mean = 0.0, double stddev = 1.0);
  void uniform_(Tensor& t, double low = 0.0, double high = 1.0);
  Tensor normal(const Shape& shape, double mean = 0.0, double stddev = 1.0,
                DType dtype = DType::F32, Device dev = Device::cpu());
  Tensor uniform(const Shape& shape, double low = 0.0, double high = 1.0,
                 DType dtype = DType::F32, Device dev = Device::cpu());

 private:
  uint64_t seed_, stream_, offset_ = 0;
};

}  // namespace hz
