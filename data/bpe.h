// Horizon data: the BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}).
//
// A word (one pre-token) becomes a sequence of symbols, one per character: the character's id in
// the vocabulary (with continuing_subword_prefix before every character but the first and
// end_of_word_suffix after the last, when the file sets them). A character outside the vocabulary
// becomes its UTF-8 bytes as "<0xXX>" tokens when byte_fallback is set and they all exist, else
// the unk token (consecutive unknowns fused into one when fuse_unk), else it is dropped. Then
// merges are applied by rank: repeatedly, the adjacent pair with the lowest rank (the merge's
// index in the file; the leftmost on ties) is replaced by the merged token. With ignore_merges, a
// word that is itself in the vocabulary is that one token. This is the library's algorithm
// (tokenizers/src/models/bpe/word.rs) step for step, including its priority queue of (rank,
// position) and its test that a queued pair still yields the same merged id.
//
// Byte-level words: the ByteLevel pre-tokenizer maps each byte b of a pre-token to the character
// byte_to_codepoint()[b] (data/unicode.h). encode_word(word, byte_level=true) takes the raw bytes
// and looks the 256 mapped characters up once at construction, so no mapped string is built
// unless a rare path needs it (ignore_merges, a byte whose character is missing, prefix/suffix).
//
// Results are cached per word in a per-thread cache (no locks; bounded size), so encoding a
// corpus mostly costs one hash lookup per pre-token. encode_word is thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hz::data {

struct BpeConfig {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::optional<std::string> unk_token, continuing_subword_prefix, end_of_word_suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
};

class BpeModel {
 public:
  // Throws hz::ValueError naming `where` when a merge or the unk token is not in the vocabulary.
  BpeModel(BpeConfig cfg, const std::string& where);
  ~BpeModel();
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one word. byte_level: `word` holds raw bytes that the model sees as the
  // ByteLevel characters; otherwise `word` is UTF-8 text (valid).
  void encode_word(std::string_view word, bool byte_level, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr when no token has this id
  int64_t size() const { return static_cast<int64_t>(vocab_.size()); }  // entries, as the library counts
  int32_t max_id() const { return static_cast<int32_t>(vocab_r_.size()) - 1; }

 private:
  struct PairMap;
  void encode_uncached(std::string_view word, bool byte_level, std::vector<int32_t>& out) const;
  void merge_symbols(std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> vocab_r_;  // id -> token ("" with has_id_ false for holes)
  std::vector<char> has_id_;
  std::unique_ptr<PairMap> merges_;
  std::optional<std::string> unk_, prefix_, suffix_;
  bool fuse_unk_, byte_fallback_, ignore_merges_;
  int32_t byte_ids_[256];     // id of the ByteLevel character of each byte (-1: not in the vocabulary)
  int32_t fallback_ids_[256]; // id of "<0xXX>" (-1: absent)
  bool fast_bytes_ = false;   // every byte has an id and there is no prefix / suffix
  uint64_t cache_id_;         // this model's key in the per-thread caches
};

}  // namespace hz::data
