// Horizon data: corpora tokenized by other frameworks, read without re-tokenizing.
//
// Formats (all little endian):
//   llm.c      karpathy/llm.c dev/data/data_common.py write_datafile: a header of 256 int32 —
//              header[0] magic, header[1] version, header[2] number of tokens — then the tokens:
//                magic 20240520, version 1: uint16 tokens (GPT-2 files)
//                magic 20240801, version 7: uint32 tokens (Llama 3 files)
//              The file size must be exactly 1024 + n_tokens * token size. llm.c's tokenizer
//              scripts put the document delimiter BEFORE each document (<|endoftext|> for GPT-2,
//              <|begin_of_text|> for Llama 3).
//   nanogpt    karpathy/nanoGPT data/*/prepare.py: raw uint16 tokens, no header (np.uint16
//              tofile); openwebtext's script puts <|endoftext|> AFTER each document.
//   auto       llm.c when the file starts with one of llm.c's magics, else nanogpt.
//
// Documents: the stream is cut at every delimiter id (the tokenizer's EOS and BOS), which is
// dropped; empty documents are dropped. Horizon's loader then separates documents with EOS as it
// does for text, so the same documents given as text or as token files give the same shards.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hz::data {

enum class TokenFormat { Auto, LlmC, NanoGpt };
// "auto" | "llmc" | "nanogpt"; anything else throws hz::ValueError listing them.
TokenFormat parse_token_format(const std::string& name);

constexpr int32_t kLlmcMagicGpt2 = 20240520;   // version 1, uint16 tokens
constexpr int32_t kLlmcMagicLlama3 = 20240801; // version 7, uint32 tokens
constexpr int64_t kLlmcHeaderInts = 256;

struct TokenFile {
  std::string path;
  std::string format;  // what was read: "llm.c GPT-2 (uint16)", "llm.c Llama 3 (uint32)", "nanoGPT (uint16)"
  std::vector<int32_t> tokens;
};

// Reads and checks one file. Throws hz::ValueError naming the file for: a missing file, a
// truncated header, a bad magic or version, a size that disagrees with the header (truncated or
// padded), an odd size for nanoGPT, and an id >= vocab_size (with its position), so a corpus
// made with another tokenizer is refused before training.
TokenFile read_token_file(const std::string& path, TokenFormat format, int64_t vocab_size);

// Cuts a token stream into documents at the delimiter ids (dropped); empty documents dropped.
std::vector<std::vector<int32_t>> split_documents(const std::vector<int32_t>& tokens,
                                                  const std::vector<int32_t>& delimiters);

}  // namespace hz::data
