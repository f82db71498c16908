// Horizon: a linear probe of absolute position. For each layer's hidden states (layer 0: the
// embeddings; layer l: the output of block l) a ridge regression predicts the token's position
// 0..L-1 from the d_model features of sequences of the validation split. A seeded 20% of the
// positions are held out from every sequence; the probe is fitted on the rest (features
// standardised on them, the ridge penalty chosen among 10^-4..10^3 x rows on a further 20% of the
// fitting positions, then refitted on all of them) and R^2 is reported on the held-out
// positions: 1 = position is linearly decodable, 0 = no better than the mean.
#pragma once
#include "core/file.h"
#include <cstdint>
#include <string>
#include <vector>

#include "nn/transformer.h"

namespace hz::data {
class Shard;
}

namespace hz::eval {

struct ProbeResult {
  int64_t layer = 0;
  double r2_heldout = 0, r2_fit = 0;
  double lambda = 0;  // chosen ridge penalty
};

// `sequences` sequences of length L from the validation shard. Throws ValueError when the shard
// holds fewer.
std::vector<ProbeResult> position_probe(const nn::Transformer& m, const data::Shard& val, int64_t L, int64_t sequences,
                                        uint64_t seed, int64_t train_len);

// The same from given hidden states: feats[layer] is (N, C) row-major with N = sequences * L
// (sequence-major), the target of row n is n % L.
std::vector<ProbeResult> fit_position_probes(const std::vector<std::vector<double>>& feats, int64_t C, int64_t L,
                                             uint64_t seed);

std::string probe_table(const std::vector<ProbeResult>& r);
FileSet probe_files(const std::vector<ProbeResult>& r);  // probes.csv
void write_probes(const std::vector<ProbeResult>& r, const std::string& dir);

}  // namespace hz::eval
