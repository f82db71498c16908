// Horizon: FNV-1a 64, the one hash of the project (checkpoint and shard checksums, corpus and
// tokenizer fingerprints, the RNG stream of a named parameter, the ranks' parameter checksum).
//
//   h = offset; for each byte b: h = (h ^ b) * 0x100000001b3
//
// Two offset bases are in use, both kept for what depends on them:
//   kFnvOffset     0xcbf29ce484222325 (14695981039346656037), the standard one: checkpoint and
//                  shard checksums and fingerprints (files written by every earlier version);
//   kFnvOffsetInit 1469598103934665603, the standard decimal with its last digit lost, with which
//                  parameter initialisation (nn::name_stream) and the ranks' parameter checksum
//                  were written: every initialisation, and so every golden loss, checkpoint and
//                  recipe result, depends on it, so it is not "corrected".
#pragma once
#include <cstddef>
#include <cstdint>

namespace hz {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvOffsetInit = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

// Continues hash h over n bytes (h = kFnvOffset starts one).
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * kFnvPrime;
  return h;
}

}  // namespace hz
