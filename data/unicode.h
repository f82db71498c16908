// Horizon data: UTF-8 and Unicode helpers for the tokenizers.
//
// Character properties and normalization forms come from utf8proc (Debian libutf8proc-dev); the
// predicates below reproduce the Rust standard-library / `regex` definitions the Hugging Face
// `tokenizers` library uses, so pipelines built on them split text where the library does.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hz::data::unicode {

constexpr size_t npos = std::string_view::npos;

// Byte offset of the first byte that does not belong to a well-formed UTF-8 sequence (RFC 3629:
// no overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence), or npos.
size_t invalid_utf8_offset(std::string_view s);

// The code point starting at s[i] (s must be valid UTF-8); i moves past it.
inline uint32_t next_codepoint(std::string_view s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[k])); };
  const uint32_t c = b(i);
  if (c < 0x80) { i += 1; return c; }
  if (c < 0xE0) { const uint32_t r = ((c & 0x1F) << 6) | (b(i + 1) & 0x3F); i += 2; return r; }
  if (c < 0xF0) {
    const uint32_t r = ((c & 0x0F) << 12) | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
    i += 3;
    return r;
  }
  const uint32_t r = ((c & 0x07) << 18) | ((b(i + 1) & 0x3F) << 12) | ((b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
  i += 4;
  return r;
}
// Bytes of the UTF-8 sequence whose first byte is `lead` (lead must start a valid sequence).
inline size_t sequence_length(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }
// The code point that ends just before s[i] (i > 0, s valid UTF-8).
uint32_t prev_codepoint(std::string_view s, size_t i);
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's byte-to-unicode table (openai/gpt-2 encoder.py bytes_to_unicode): the printable bytes
// '!'..'~', 0xA1..0xAC, 0xAE..0xFF map to themselves, the other 68 bytes to U+0100.. in order.
const std::array<uint32_t, 256>& byte_to_codepoint();
int codepoint_to_byte(uint32_t cp);  // the inverse; -1 for a code point outside the table

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view s, NormalForm form);  // s valid UTF-8
// Rust's char::to_lowercase on every character (full mapping: U+0130 becomes "i\u0307").
std::string lowercase(std::string_view s);

bool is_whitespace(uint32_t cp);    // Rust char::is_whitespace (the White_Space property)
bool is_numeric(uint32_t cp);       // Rust char::is_numeric (categories Nd, Nl, No)
bool is_punctuation(uint32_t cp);   // tokenizers' is_punc: ASCII punctuation or categories P*
bool is_word_char(uint32_t cp);     // the `regex` crate's Unicode \w (letters, marks, Nd, Nl, Pc, ZWJ/ZWNJ)
bool is_combining_mark(uint32_t cp);  // categories Mn, Mc, Me

}  // namespace hz::data::unicode
