// Horizon data: tokenizers.
//
// A Tokenizer maps text to token ids in [0, vocab_size()) and back. Three special ids exist in
// every vocabulary: BOS (begin of sequence), EOS (end of sequence; the loader puts one after each
// document) and PAD. encode() never adds specials; decode() skips them.
//
// ByteTokenizer ("byte"): ids 0..255 are the raw bytes of the text (any bytes: UTF-8 is not
// validated, "\0" is an ordinary byte), BOS = 256, EOS = 257, PAD = 258, vocab 259. A BPE
// tokenizer may join later behind the same interface (make_tokenizer is the one place to add it).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hz::data {

class Tokenizer {
 public:
  virtual ~Tokenizer();
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Specials are skipped; an id outside [0, vocab_size()) throws hz::ValueError.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos() const = 0;
  virtual int32_t eos() const = 0;
  virtual int32_t pad() const = 0;
  virtual std::string name() const = 0;  // the name make_tokenizer() accepts
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int32_t kPad = 258;
  static constexpr int64_t kVocab = 259;

  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return kVocab; }
  int32_t bos() const override { return kBos; }
  int32_t eos() const override { return kEos; }
  int32_t pad() const override { return kPad; }
  std::string name() const override { return "byte"; }
};

// Names make_tokenizer() knows, in the order error messages list them.
const std::vector<std::string>& tokenizer_names();
// "byte" -> ByteTokenizer; an unknown name throws hz::ValueError listing the known ones.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

}  // namespace hz::data
