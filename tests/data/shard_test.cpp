// Horizon data tests: the token-shard format.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/shard.h"
#include "tests/data/data_test_util.h"

namespace {

using Docs = std::vector<std::vector<int32_t>>;

uint64_t le(const std::string& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

void expect_round_trip(const Docs& docs, int want_bpt) {
  hzdt::TempDir dir;
  const std::string path = dir.file("x.shard");
  hz::data::write_shard(path, docs);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto s = hz::data::Shard::open(path);
  EXPECT_EQ(s->path(), path);
  EXPECT_EQ(s->bytes_per_token(), want_bpt);
  ASSERT_EQ(s->n_docs(), static_cast<int64_t>(docs.size()));
  int64_t total = 0, k = 0;
  ASSERT_EQ(s->doc_offsets().size(), docs.size() + 1);
  for (size_t d = 0; d < docs.size(); ++d) {
    EXPECT_EQ(s->doc_offsets()[d], total);
    EXPECT_EQ(s->doc(static_cast<int64_t>(d)), docs[d]) << "doc " << d;
    for (int32_t id : docs[d]) EXPECT_EQ(s->token(k++), id);
    total += static_cast<int64_t>(docs[d].size());
  }
  EXPECT_EQ(s->doc_offsets().back(), total);
  EXPECT_EQ(s->n_tokens(), total);

  // the bytes follow the documented layout
  const std::string b = hzdt::read_bytes(path);
  const uint64_t n_docs = docs.size();
  ASSERT_EQ(b.size(), 40 + 8 * (n_docs + 1) + static_cast<uint64_t>(want_bpt) * total);
  EXPECT_EQ(b.substr(0, 8), "HZSHARD1");
  EXPECT_EQ(le(b, 8, 4), 1u);
  EXPECT_EQ(le(b, 12, 4), static_cast<uint64_t>(want_bpt));
  EXPECT_EQ(le(b, 16, 8), static_cast<uint64_t>(total));
  EXPECT_EQ(le(b, 24, 8), n_docs);
  EXPECT_EQ(le(b, 32, 8), hz::data::fnv1a64(b.data() + 40, b.size() - 40));
  const size_t tok0 = 40 + 8 * (n_docs + 1);
  if (total > 0) {
    EXPECT_EQ(le(b, tok0, want_bpt), static_cast<uint64_t>(s->token(0)));
  }
}

TEST(Shard, Fnv1a64PublishedVectors) {
  // FNV test vectors (Fowler/Noll/Vo reference test suite, FNV-1a 64-bit)
  EXPECT_EQ(hz::data::fnv1a64("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(hz::data::fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(hz::data::fnv1a64("foobar", 6), 0x85944171f73967e8ull);
  // chaining equals hashing the concatenation
  EXPECT_EQ(hz::data::fnv1a64("bar", 3, hz::data::fnv1a64("foo", 3)), 0x85944171f73967e8ull);
}

TEST(Shard, RoundTripTwoByteIds) {
  expect_round_trip({{1, 2, 3}, {}, {65535, 0, 257}, {42}}, 2);
}

TEST(Shard, RoundTripFourByteIds) {
  expect_round_trip({{65536, 1}, {2147483647, 0, 70000}, {}}, 4);
}

TEST(Shard, RoundTripEmptyAndLarge) {
  expect_round_trip({}, 2);
  std::vector<int32_t> big(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int32_t>((i * 7919) % 259);
  expect_round_trip({big, {5}}, 2);
}

TEST(Shard, FlippedByteIsRefusedWithChecksum) {
  hzdt::TempDir dir;
  const std::string path = dir.file("c.shard");
  hz::data::write_shard(path, {{10, 20, 30, 40}, {50}});
  std::string b = hzdt::read_bytes(path);
  b[b.size() - 3] ^= 0x01;  // a token byte
  hzdt::write_bytes(path, b);
  const std::string msg = hzdt::error_message<hz::ValueError>([&] { hz::data::Shard::open(path); });
  EXPECT_NE(msg.find("checksum mismatch: file is corrupted"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(Shard, TruncatedFileIsRefusedNamingPathAndSizes) {
  hzdt::TempDir dir;
  const std::string path = dir.file("t.shard");
  hz::data::write_shard(path, {{1, 2, 3, 4, 5, 6}});
  const std::string b = hzdt::read_bytes(path);
  const size_t full = b.size();  // 40 + 16 + 12 = 68
  ASSERT_EQ(full, 68u);
  hzdt::write_bytes(path, b.substr(0, full - 5));
  std::string msg = hzdt::error_message<hz::ValueError>([&] { hz::data::Shard::open(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 68 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got 63 bytes"), std::string::npos) << msg;
  // shorter than the header
  hzdt::write_bytes(path, b.substr(0, 20));
  msg = hzdt::error_message<hz::ValueError>([&] { hz::data::Shard::open(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(Shard, ForeignMissingAndInvalidInputsAreRefused) {
  hzdt::TempDir dir;
  const std::string path = dir.file("f.shard");
  hz::data::write_shard(path, {{1}});
  std::string b = hzdt::read_bytes(path);
  b[0] = 'X';
  hzdt::write_bytes(path, b);
  std::string msg = hzdt::error_message<hz::ValueError>([&] { hz::data::Shard::open(path); });
  EXPECT_NE(msg.find("HZSHARD1"), std::string::npos) << msg;
  msg = hzdt::error_message<hz::ValueError>([&] { hz::data::Shard::open(dir.file("missing.shard")); });
  EXPECT_NE(msg.find("missing.shard"), std::string::npos) << msg;
  EXPECT_THROW(hz::data::write_shard(dir.file("neg.shard"), {{1, -2}}), hz::ValueError);
  EXPECT_FALSE(std::filesystem::exists(dir.file("neg.shard")));
  hz::data::write_shard(path, {{1, 2}});
  auto s = hz::data::Shard::open(path);
  EXPECT_THROW(s->token(2), hz::ValueError);
  EXPECT_THROW(s->doc(1), hz::ValueError);
}

}  // namespace
