#include "data/shard.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include <unistd.h>

#include "core/error.h"
#include "core/file.h"

namespace hz::data {

namespace {

void put_le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

void write_shard(const std::string& path, const std::vector<std::vector<int32_t>>& docs) {
  int32_t max_id = 0;
  uint64_t n_tokens = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    for (size_t i = 0; i < docs[d].size(); ++i) {
      const int32_t id = docs[d][i];
      HZ_CHECK(id >= 0, ValueError, "write_shard('", path, "'): document ", d, " has a negative token id ",
               id, " at position ", i, "; shards store ids in [0, 2^31)");
      if (id > max_id) max_id = id;
    }
    n_tokens += docs[d].size();
  }
  const int bpt = max_id < 65536 ? 2 : 4;

  // payload = offsets + tokens; the header's checksum covers exactly these bytes
  std::vector<uint8_t> payload;
  payload.reserve(8 * (docs.size() + 1) + bpt * n_tokens);
  uint64_t off = 0;
  put_le(payload, 0, 8);
  for (const auto& doc : docs) {
    off += doc.size();
    put_le(payload, off, 8);
  }
  for (const auto& doc : docs)
    for (int32_t id : doc) put_le(payload, static_cast<uint32_t>(id), bpt);

  std::vector<uint8_t> header;
  header.insert(header.end(), kShardMagic, kShardMagic + 8);
  put_le(header, kShardVersion, 4);
  put_le(header, static_cast<uint32_t>(bpt), 4);
  put_le(header, n_tokens, 8);
  put_le(header, docs.size(), 8);
  put_le(header, fnv1a64(payload.data(), payload.size()), 8);

  auto bytes = [](const std::vector<uint8_t>& v) { return std::string_view(reinterpret_cast<const char*>(v.data()), v.size()); };
  write_file_atomic(path, {bytes(header), bytes(payload)});
}

std::shared_ptr<const Shard> Shard::open(const std::string& path) {
  std::string why;
  const int fd = open_input(path, why);  // a regular file only (core/file.h)
  HZ_CHECK(fd >= 0, ValueError, "cannot open token shard '", path, "': ", why,
           "; create it with `horizon data prepare` (or data::prepare_corpus)");
  FILE* f = ::fdopen(fd, "rb");
  if (!f) ::close(fd);
  HZ_CHECK(f != nullptr, Error, "cannot read token shard '", path, "': ", std::strerror(errno));
  std::vector<uint8_t> bytes;
  {
    uint8_t buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
    const bool err = std::ferror(f) != 0;
    std::fclose(f);
    HZ_CHECK(!err, Error, "error while reading token shard '", path, "'");
  }
  const uint64_t size = bytes.size();
  HZ_CHECK(size >= static_cast<uint64_t>(kShardHeaderBytes), ValueError, "token shard '", path,
           "' is truncated: expected at least ", kShardHeaderBytes, " bytes of header, got ", size,
           " bytes; re-create it with `horizon data prepare`");
  HZ_CHECK(std::memcmp(bytes.data(), kShardMagic, 8) == 0, ValueError, "'", path,
           "' is not a Horizon token shard (magic is not HZSHARD1)");
  const uint64_t version = get_le(&bytes[8], 4);
  HZ_CHECK(version == kShardVersion, ValueError, "token shard '", path, "' has format version ", version,
           " but this build reads version ", kShardVersion, "; re-create it with `horizon data prepare`");
  const uint64_t bpt = get_le(&bytes[12], 4);
  HZ_CHECK(bpt == 2 || bpt == 4, ValueError, "token shard '", path, "' has bytes_per_token = ", bpt,
           " (must be 2 or 4): the header is corrupted");
  const uint64_t n_tokens = get_le(&bytes[16], 8);
  const uint64_t n_docs = get_le(&bytes[24], 8);
  const uint64_t checksum = get_le(&bytes[32], 8);
  // Guard the size arithmetic: counts that cannot fit in any file are a corrupted header.
  const uint64_t big = std::numeric_limits<uint64_t>::max() / 16;
  HZ_CHECK(n_tokens < big && n_docs < big, ValueError, "token shard '", path,
           "' has an impossible header (n_tokens = ", n_tokens, ", n_docs = ", n_docs, "): the file is corrupted");
  const uint64_t expected = kShardHeaderBytes + 8 * (n_docs + 1) + bpt * n_tokens;
  HZ_CHECK(size == expected, ValueError, "token shard '", path, "' is ",
           size < expected ? "truncated" : "longer than its header says", ": expected ", expected,
           " bytes (", n_docs, " documents, ", n_tokens, " tokens of ", bpt, " bytes), got ", size,
           " bytes; re-create it with `horizon data prepare`");
  const uint64_t got = fnv1a64(bytes.data() + kShardHeaderBytes, size - kShardHeaderBytes);
  HZ_CHECK(got == checksum, ValueError, "token shard '", path,
           "': checksum mismatch: file is corrupted (header says ", checksum, ", payload hashes to ", got,
           "); re-create it with `horizon data prepare`");

  std::shared_ptr<Shard> s(new Shard());
  s->path_ = path;
  s->bytes_per_token_ = static_cast<int>(bpt);
  s->offsets_.resize(n_docs + 1);
  const uint8_t* p = bytes.data() + kShardHeaderBytes;
  for (uint64_t d = 0; d <= n_docs; ++d) {
    const uint64_t o = get_le(p + 8 * d, 8);
    HZ_CHECK(o <= n_tokens && (d == 0 ? o == 0 : o >= static_cast<uint64_t>(s->offsets_[d - 1])),
             ValueError, "token shard '", path, "' has an invalid document offset table at entry ", d,
             ": the file is corrupted");
    s->offsets_[d] = static_cast<int64_t>(o);
  }
  HZ_CHECK(static_cast<uint64_t>(s->offsets_[n_docs]) == n_tokens, ValueError, "token shard '", path,
           "': the last document offset (", s->offsets_[n_docs], ") is not n_tokens (", n_tokens,
           "): the file is corrupted");
  p += 8 * (n_docs + 1);
  s->tokens_.resize(n_tokens);
  for (uint64_t i = 0; i < n_tokens; ++i) {
    const uint64_t v = get_le(p + bpt * i, static_cast<int>(bpt));
    HZ_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()), ValueError, "token shard '",
             path, "' holds token id ", v, " at ", i, ", above 2^31 - 1: the file is corrupted");
    s->tokens_[i] = static_cast<int32_t>(v);
  }
  return s;
}

int32_t Shard::token(int64_t i) const {
  HZ_CHECK(i >= 0 && i < n_tokens(), ValueError, "token index ", i, " is out of range [0, ", n_tokens(),
           ") for shard '", path_, "'");
  return tokens_[static_cast<size_t>(i)];
}

std::vector<int32_t> Shard::doc(int64_t d) const {
  HZ_CHECK(d >= 0 && d < n_docs(), ValueError, "document index ", d, " is out of range [0, ", n_docs(),
           ") for shard '", path_, "'");
  return std::vector<int32_t>(tokens_.begin() + offsets_[d], tokens_.begin() + offsets_[d + 1]);
}

}  // namespace hz::data
