#include "data/tokenizer.h"

#include "core/error.h"

namespace hz::data {

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    HZ_CHECK(id >= 0 && id < kVocab, ValueError, "byte tokenizer: id ", id, " at position ", i,
             " is outside the vocabulary [0, ", kVocab, "); were these ids made by another tokenizer?");
    if (id < 256) out.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  return out;
}

const std::vector<std::string>& tokenizer_names() {
  static const std::vector<std::string> names{"byte"};
  return names;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  std::string known;
  for (const auto& n : tokenizer_names()) known += (known.empty() ? "" : ", ") + n;
  throw ValueError(detail::concat_msg("unknown tokenizer '", name, "'; known tokenizers: ", known));
}

}  // namespace hz::data
