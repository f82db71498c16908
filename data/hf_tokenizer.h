// Horizon data: Hugging Face tokenizer.json files with a BPE model.
//
// Encoding follows the `tokenizers` library (tokenizers/src/tokenizer/mod.rs) step by step, so ids
// equal the library's for every text (tests/data/hf_tokenizer_test.cpp checks held-out and random
// texts against ids the library produced):
//   1. added tokens with "normalized": false are found in the raw text (leftmost-longest; honouring
//      single_word, lstrip, rstrip) and become their ids;
//   2. every other stretch is normalized, then added tokens with "normalized": true are found in it
//      (matched in their normalized form);
//   3. the remaining stretches are pre-tokenized into words, which the BPE model (data/bpe.h)
//      turns into ids.
//
// Components read (data/hf_pipeline.h; anything else is refused with an error naming the component
// and the file):
//   normalizer     NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Replace (String or Regex), Prepend,
//                  Strip, StripAccents, Sequence
//   pre_tokenizer  ByteLevel (add_prefix_space, use_regex: GPT-2's regex), Split (String or Regex
//                  pattern, behavior Removed | Isolated | MergedWithPrevious | MergedWithNext |
//                  Contiguous, invert), Digits, Punctuation, WhitespaceSplit, Metaspace, Sequence.
//                  ByteLevel must be the last step (it maps bytes to GPT-2's characters).
//   model          BPE: vocab, merges as "a b" strings or ["a", "b"] pairs, unk_token, fuse_unk,
//                  byte_fallback, ignore_merges, continuing_subword_prefix, end_of_word_suffix;
//                  dropout must be null or 0 (encoding must be deterministic)
//   post_processor ByteLevel, TemplateProcessing (the "single" template), RobertaProcessing,
//                  BertProcessing, Sequence: they only decide encode_with_specials()
//   decoder        ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder, Sequence
//                  (null: tokens joined by spaces, as the library does)
//   truncation, padding   ignored: Horizon packs documents itself.
// Regexes run on PCRE2 (data/regex.h); the ids of added tokens are assigned the way the library
// assigns them on load (the model's id when the content is in the vocabulary, else the next free
// id after the model's vocabulary), which is what the "id" fields of a consistent file say.
//
// Known differences from the library (none on the fixtures nor on 20,000 random texts per layout,
// scripts/fixtures/gen_tokenizer_fixtures.py --fuzz):
// - Unicode versions: the regexes run on Debian 12's PCRE2 (Unicode 14 properties) and the
//   normalizers on utf8proc (Unicode 15), while the library's Oniguruma knows Unicode 16 and its
//   NFC / NFKC, StripAccents and Punctuation use Unicode 9-era tables. Text with characters
//   assigned since then (CJK Extension H, newer scripts; combining marks from Unicode 10 on in
//   non-canonical order) may be split or normalized differently.
// - decode keeps the bytes where the library writes U+FFFD (data/tokenizer.h), and an added token
//   outside the model's vocabulary decodes to its text, where the library's ByteLevel decoder
//   turns Latin-1 characters into single bytes ("café" -> "caf\xE9" -> "caf\uFFFD").
//
// Special-token roles. A tokenizer.json does not say which token is BOS, EOS or PAD; transformers
// keeps that in tokenizer_config.json. Horizon takes each role from, in order:
//   1. bos_token / eos_token / pad_token of tokenizer_config.json in the same directory, when the
//      file is named tokenizer.json (a string or {"content": ...}; a name that is not a token is
//      an error);
//   2. a special token with a well-known name: EOS <|endoftext|>, <|end_of_text|>, </s>, <eos>,
//      <|im_end|>, <|eot_id|>, [SEP]; BOS <|begin_of_text|>, <s>, <bos>, <|startoftext|>, [CLS];
//      PAD <pad>, <|pad|>, [PAD], <|finetune_right_pad_id|>;
//   3. EOS: the post-processor's last added token, else the only special token, else BOS;
//      BOS: the post-processor's first added token, else EOS; PAD: EOS.
// A file where no EOS can be found (no special tokens at all) is refused: Horizon needs a document
// separator. GPT-2's tokenizer.json thus gives bos = eos = pad = <|endoftext|>.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace hz::data {

// Throws hz::ValueError for a missing file, invalid JSON, a component Horizon does not read (named
// with the file), or an inconsistent vocabulary / merges.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path);

}  // namespace hz::data
