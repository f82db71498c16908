// Horizon data: tokenizers.
//
// A Tokenizer maps text to token ids in [0, vocab_size()) and back. make_tokenizer(spec) builds
// one from a recipe's data.tokenizer:
//
//   "byte"                 ByteTokenizer: ids 0..255 are the raw bytes of the text (any bytes:
//                          UTF-8 is not validated, "\0" is an ordinary byte), BOS = 256, EOS = 257,
//                          PAD = 258, vocab 259.
//   PATH ending in .json   a Hugging Face tokenizer.json with a BPE model (GPT-2, Llama 3, Qwen2,
//                          SmolLM, Mistral layouts ...): data/hf_tokenizer.h says which pipeline
//                          components are read; any other component is refused with its name.
//   PATH ending in .model  a SentencePiece model, run by libsentencepiece (data/sp_tokenizer.h).
//
// Semantics shared by every tokenizer (the rest of Horizon relies on them):
// - encode(text) never adds special tokens: no BOS/EOS around the text. Special tokens written
//   literally in the text ARE recognised, as the reference libraries do ("<|endoftext|>" in a
//   GPT-2 text is the id 50256); the byte tokenizer recognises none.
// - encode_with_specials(text) is encode(text) wrapped the way the file's post-processor wraps a
//   single sequence (Llama 3: <|begin_of_text|> first; GPT-2: nothing; RoBERTa: <s> ... </s>);
//   SentencePiece models and the byte tokenizer put BOS first (the Llama convention).
// - decode(ids) skips special tokens; decode_with_specials(ids) writes them out as their text.
//   Both return the exact bytes the ids stand for: a prefix of a token sequence may end inside a
//   UTF-8 character (the Python libraries would show U+FFFD there), so streamed pieces concatenate
//   to the right text. An id outside [0, vocab_size()) or without a token throws hz::ValueError.
// - Text given to the Hugging Face and SentencePiece tokenizers must be valid UTF-8 (they work on
//   Unicode); invalid bytes throw hz::ValueError giving the byte offset.
// - bos(), eos(), pad() are always valid ids. EOS is the document separator: the loader puts one
//   after every document. When a file has no distinct BOS / PAD they fall back to EOS, so for
//   GPT-2 (whose only special token is <|endoftext|>) bos() == eos() == pad() == 50256, the way
//   GPT-2 was trained (documents separated by <|endoftext|>). How the roles are found in a
//   tokenizer.json is described in data/hf_tokenizer.h.
// - All const methods are thread-safe; encoding caches per thread.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace hz::data {

class Tokenizer {
 public:
  virtual ~Tokenizer();
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::vector<int32_t> encode_with_specials(const std::string& text) const = 0;
  // Specials are skipped; an id outside [0, vocab_size()) throws hz::ValueError.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual std::string decode_with_specials(const std::vector<int32_t>& ids) const = 0;
  // max id + 1: the rows a model's embedding needs (a file may leave holes in its id range)
  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos() const = 0;
  virtual int32_t eos() const = 0;
  virtual int32_t pad() const = 0;
  // The token's string as the vocabulary stores it ("Ġthe" in byte-level BPE, "▁the" in
  // SentencePiece, the single byte for the byte tokenizer, "<|endoftext|>" for a special).
  // Throws hz::ValueError for an id without a token.
  virtual std::string id_to_token(int32_t id) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  virtual std::vector<int32_t> special_ids() const = 0;  // ascending
  virtual std::string name() const = 0;  // the spec make_tokenizer() was given
  // What the ids mean: "byte", or the kind and a hash of the file's bytes; equal fingerprints mean
  // equal token ids for every text (used to key prepared data and to check runs).
  virtual std::string fingerprint() const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int32_t kPad = 258;
  static constexpr int64_t kVocab = 259;

  std::vector<int32_t> encode(const std::string& text) const override;
  std::vector<int32_t> encode_with_specials(const std::string& text) const override;  // BOS first
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string decode_with_specials(const std::vector<int32_t>& ids) const override;  // <|bos|> <|eos|> <|pad|>
  int64_t vocab_size() const override { return kVocab; }
  int32_t bos() const override { return kBos; }
  int32_t eos() const override { return kEos; }
  int32_t pad() const override { return kPad; }
  std::string id_to_token(int32_t id) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  bool is_special(int32_t id) const override { return id >= kBos && id < kVocab; }
  std::vector<int32_t> special_ids() const override { return {kBos, kEos, kPad}; }
  std::string name() const override { return "byte"; }
  std::string fingerprint() const override { return "byte"; }
};

// Kinds make_tokenizer() knows, in the order error messages list them.
const std::vector<std::string>& tokenizer_names();
// "byte" -> ByteTokenizer; "*.json" -> tokenizer.json; "*.model" -> SentencePiece. Anything else,
// a missing file or a malformed one throws hz::ValueError saying what is accepted.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

// encode() of texts 0..n-1 (text_at(i) gives text i), in parallel over the texts with OpenMP
// (dynamic schedule); the result does not depend on the number of threads. `progress` (optional)
// is called from the calling thread with the texts and bytes done so far, about once a second.
struct EncodeProgress {
  int64_t texts_done = 0, bytes_done = 0;
};
// Thrown by encode_batch when a text cannot be encoded: which text, and why.
struct EncodeBatchError : ValueError {
  EncodeBatchError(int64_t index, const std::string& cause)
      : ValueError("text " + std::to_string(index) + ": " + cause), index(index), cause(cause) {}
  int64_t index;
  std::string cause;
};
std::vector<std::vector<int32_t>> encode_batch(const Tokenizer& tok, int64_t n,
                                               const std::function<const std::string&(int64_t)>& text_at,
                                               const std::function<void(const EncodeProgress&)>& progress = {});

// A short identifier for file names: [A-Za-z0-9_.-] only ("byte", "tokenizer-3f2a9c1e").
std::string tokenizer_tag(const Tokenizer& tok);

// FNV-1a 64 of a file's bytes as 16 hex digits; throws hz::ValueError when it cannot be read.
std::string file_fingerprint(const std::string& path);

}  // namespace hz::data
