// Horizon data: SentencePiece .model files (Llama 2, Mistral, T5 ...), run by libsentencepiece
// (Debian libsentencepiece-dev), so ids are the library's own.
// Limits: a .model file of at most 256 MiB is handed to the library; anything it refuses or
// throws on is a ValueError naming the file (issue 19: never an exit 3).
//
// - encode(text): SentencePiece's Encode with the model's own normalization; no BOS/EOS.
// - encode_with_specials(text): BOS first when the model has one (what Llama's tokenizer does).
// - decode(ids): SentencePiece's decoding (the dummy-prefix space removed, "▁" -> " ", unknown ->
//   " ⁇ "), except that byte pieces <0xXX> give their bytes even when a sequence stops inside a
//   character (the library would write U+FFFD); control tokens (BOS, EOS, PAD) are skipped.
// - decode_with_specials(ids): the same text with every control token written as its piece
//   ("<s>", "</s>") where it stands.
// - Roles: the model's bos_id / eos_id / pad_id; a missing EOS falls back to BOS, a missing BOS
//   or PAD to EOS; a model with neither BOS nor EOS is refused (Horizon separates documents with
//   EOS). Special tokens are the control pieces.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace hz::data {

// Throws hz::ValueError for a missing or unreadable model (SentencePiece's message included).
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path);

}  // namespace hz::data
