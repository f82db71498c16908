#include "data/token_files.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include <unistd.h>

#include "core/error.h"
#include "core/file.h"

namespace hz::data {

TokenFormat parse_token_format(const std::string& name) {
  if (name == "auto") return TokenFormat::Auto;
  if (name == "llmc") return TokenFormat::LlmC;
  if (name == "nanogpt") return TokenFormat::NanoGpt;
  throw ValueError("token format '" + name + "' is not one of: auto llmc nanogpt");
}

namespace {

std::vector<uint8_t> read_all(const std::string& path) {
  std::string why;
  const int fd = open_input(path, why);  // a regular file only (core/file.h)
  HZ_CHECK(fd >= 0, ValueError, "cannot open token file '", path, "': ", why);
  FILE* f = ::fdopen(fd, "rb");
  if (!f) ::close(fd);
  HZ_CHECK(f != nullptr, Error, "cannot read token file '", path, "': ", std::strerror(errno));
  std::vector<uint8_t> bytes;
  if (std::fseek(f, 0, SEEK_END) == 0) {
    const long n = std::ftell(f);
    try {
      if (n > 0) bytes.reserve(static_cast<size_t>(n));
    } catch (const std::bad_alloc&) {
      std::fclose(f);
      throw Error(detail::concat_msg("token file '", path, "' holds ", n,
                                     " bytes, more than this process can hold in memory; split it into smaller files"));
    }
    std::fseek(f, 0, SEEK_SET);
  }
  uint8_t buf[1 << 16];
  size_t n;
  try {
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  } catch (const std::bad_alloc&) {  // the file is read whole: say which one did not fit
    std::fclose(f);
    throw Error(detail::concat_msg("token file '", path, "': not enough memory to read it (", bytes.size(),
                                   " bytes read so far); split it into smaller files"));
  }
  const int read_errno = errno;
  const bool err = std::ferror(f) != 0;
  std::fclose(f);
  HZ_CHECK(!err, Error, "error while reading token file '", path, "': ", std::strerror(read_errno));
  return bytes;
}

int32_t le32(const uint8_t* p) {
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

TokenFile read_token_file(const std::string& path, TokenFormat format, int64_t vocab_size) {
  const std::vector<uint8_t> bytes = read_all(path);
  TokenFile tf;
  tf.path = path;
  const int32_t first = bytes.size() >= 4 ? le32(bytes.data()) : 0;
  const bool llmc_magic = first == kLlmcMagicGpt2 || first == kLlmcMagicLlama3;
  if (format == TokenFormat::Auto) format = llmc_magic ? TokenFormat::LlmC : TokenFormat::NanoGpt;

  size_t offset = 0, width = 2;
  uint64_t count = 0;
  if (format == TokenFormat::LlmC) {
    const size_t header = kLlmcHeaderInts * 4;
    HZ_CHECK(bytes.size() >= header, ValueError, "llm.c token file '", path, "' is truncated: its header needs ", header,
             " bytes, the file has ", bytes.size());
    const int32_t version = le32(bytes.data() + 4), n = le32(bytes.data() + 8);
    if (first == kLlmcMagicGpt2) {
      HZ_CHECK(version == 1, ValueError, "llm.c token file '", path, "': magic 20240520 (GPT-2) with version ", version,
               "; llm.c writes version 1 (uint16 tokens) with this magic");
      tf.format = "llm.c GPT-2 (uint16)";
    } else if (first == kLlmcMagicLlama3) {
      HZ_CHECK(version == 7, ValueError, "llm.c token file '", path, "': magic 20240801 (Llama 3) with version ", version,
               "; llm.c writes version 7 (uint32 tokens) with this magic");
      tf.format = "llm.c Llama 3 (uint32)";
      width = 4;
    } else {
      throw ValueError(detail::concat_msg("'", path, "' is not an llm.c token file: bad magic ", first,
                                          " (expected 20240520 for GPT-2 uint16 files or 20240801 for Llama 3 uint32 "
                                          "files); for raw nanoGPT files set data.token_format=nanogpt"));
    }
    HZ_CHECK(n >= 0, ValueError, "llm.c token file '", path, "': negative token count ", n, " in the header");
    count = static_cast<uint64_t>(n);
    offset = header;
    const uint64_t expected = header + count * width;
    HZ_CHECK(bytes.size() == expected, ValueError, "llm.c token file '", path, "' is ",
             bytes.size() < expected ? "truncated" : "longer than its header says", ": the header promises ", count,
             " tokens of ", width, " bytes (", expected, " bytes in all), the file has ", bytes.size(), " bytes");
  } else {
    HZ_CHECK(bytes.size() % 2 == 0, ValueError, "nanoGPT token file '", path, "' has an odd size (", bytes.size(),
             " bytes): it is not a whole number of uint16 tokens (truncated?)");
    count = bytes.size() / 2;
    tf.format = "nanoGPT (uint16)";
  }
  tf.tokens.resize(count);
  const uint8_t* p = bytes.data() + offset;
  for (uint64_t i = 0; i < count; ++i) {
    const uint32_t v = width == 2 ? static_cast<uint32_t>(p[2 * i]) | static_cast<uint32_t>(p[2 * i + 1]) << 8
                                  : static_cast<uint32_t>(le32(p + 4 * i));
    HZ_CHECK(static_cast<int64_t>(v) < vocab_size, ValueError, "token file '", path, "' (", tf.format, ") holds id ", v,
             " at token ", i, ", outside the tokenizer's vocabulary [0, ", vocab_size,
             "): was it made with another tokenizer? Set data.tokenizer to the one that wrote it");
    tf.tokens[i] = static_cast<int32_t>(v);
  }
  return tf;
}

std::vector<std::vector<int32_t>> split_documents(const std::vector<int32_t>& tokens,
                                                  const std::vector<int32_t>& delimiters) {
  std::vector<std::vector<int32_t>> docs;
  std::vector<int32_t> cur;
  for (int32_t t : tokens) {
    if (std::find(delimiters.begin(), delimiters.end(), t) != delimiters.end()) {
      if (!cur.empty()) docs.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(t);
    }
  }
  if (!cur.empty()) docs.push_back(std::move(cur));
  return docs;
}

}  // namespace hz::data
