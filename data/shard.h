// Horizon data: token shards.
//
// A shard holds tokenized documents in one binary file. Layout (all integers little endian):
//
//   offset  size               field
//   0       8                  magic "HZSHARD1"
//   8       4                  u32 version = 1
//   12      4                  u32 bytes_per_token: 2 when every id < 65536, else 4
//   16      8                  u64 n_tokens
//   24      8                  u64 n_docs
//   32      8                  u64 payload_checksum: FNV-1a 64 over every byte after the header
//   40      8 * (n_docs + 1)   u64 doc_offsets: document d is tokens [doc_offsets[d], doc_offsets[d+1]);
//                              doc_offsets[0] = 0, non-decreasing, doc_offsets[n_docs] = n_tokens
//   ...     bpt * n_tokens     the token ids (u16 or u32), documents back to back, no separators
//
// The file size is therefore exactly 40 + 8 (n_docs + 1) + bytes_per_token * n_tokens.
// Writers write "<path>.tmp" and rename it (core/file.h), so a shard is complete or absent.
#pragma once
#include "core/hash.h"
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hz::data {

using hz::fnv1a64;  // core/hash.h

constexpr char kShardMagic[8] = {'H', 'Z', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr uint32_t kShardVersion = 1;
constexpr int64_t kShardHeaderBytes = 40;


// Writes the documents as one shard (ids must be >= 0). Throws hz::ValueError for a negative id
// and hz::Error when the file cannot be written.
void write_shard(const std::string& path, const std::vector<std::vector<int32_t>>& docs);

// A shard loaded into memory and verified (magic, version, size, checksum, offsets). Immutable:
// share it between loaders with the shared_ptr that open() returns.
class Shard {
 public:
  // Throws hz::ValueError naming the path for a missing, foreign, truncated (expected vs actual
  // size) or corrupted ("checksum mismatch: file is corrupted") file.
  static std::shared_ptr<const Shard> open(const std::string& path);

  int64_t n_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t n_docs() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  const std::vector<int64_t>& doc_offsets() const { return offsets_; }  // n_docs + 1 entries
  int32_t token(int64_t i) const;                                       // bounds-checked
  std::vector<int32_t> doc(int64_t d) const;                            // bounds-checked copy
  const std::vector<int32_t>& tokens() const { return tokens_; }       // all tokens, in order
  int bytes_per_token() const { return bytes_per_token_; }
  const std::string& path() const { return path_; }

 private:
  Shard() = default;
  std::string path_;
  int bytes_per_token_ = 2;
  std::vector<int64_t> offsets_;
  std::vector<int32_t> tokens_;
};

}  // namespace hz::data
