// Horizon: the positions a training sequence's tokens carry when they are not their indices, the
// position-id schemes of length-extrapolation training (train.positions):
//   index       p_t = t (the default);
//   pose        PoSE (Zhu et al. 2024, "PoSE: Efficient Context Window Extension of LLMs via
//               Positional Skip-wise Training", arXiv 2309.10400): the T tokens are cut into N chunks
//               at N - 1 uniform random cut points; chunk i keeps its tokens' order and is shifted by a
//               skip u_i, u_0 ~ U{0, .., L - T}, u_i ~ U{u_(i-1), .., L - T}, so its positions are
//               st_i + u_i .. st_i + l_i - 1 + u_i (st_i its first index, l_i its length): the window
//               covers relative distances up to L - 1 with T tokens;
//   randomized  randomized positional encodings (Ruoss et al. 2023, "Randomized Positional Encodings
//               Boost Length Generalization of Transformers", arXiv 2305.16843): T distinct positions
//               drawn uniformly from [0, L) and sorted;
//   continuous  the same with real positions: T draws from the uniform distribution on [0, L), sorted
//               (float positions: RoPE rotates by angles between the integer ones).
// L = position_max (> T). Each row's positions are a function of (seed, micro-batch counter, row)
// only, drawn from counter-based Philox streams: the same run repeats them, a resume continues them,
// and no state needs saving. The attention masks keep reading indices (a window of W is W tokens);
// the positions reach the layers that rotate q and k (RoPE, p-RoPE).
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace hz::data {

enum class PositionScheme : uint8_t { Index, PoSE, Randomized, Continuous, Count };
const char* name(PositionScheme s);                     // index pose randomized continuous
PositionScheme parse_position_scheme(const std::string& s);  // ValueError listing the names

struct PositionOptions {
  PositionScheme scheme = PositionScheme::Index;
  int64_t max = 0;     // L: positions lie in [0, L); > T
  int64_t chunks = 2;  // PoSE's N, in [1, T]
};

// The (B, T) positions of a micro-batch (I64; F64 for continuous): rows row0 .. row0 + B - 1 of micro-batch `counter`
// (the run's count of micro-batches so far; row0 = this data-parallel rank's first row).
Tensor make_positions(const PositionOptions& o, int64_t B, int64_t T, uint64_t seed, int64_t counter, int64_t row0);

}  // namespace hz::data
