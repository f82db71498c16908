// safetensors: files written by the safetensors library (tests/fixtures, scripts/fixtures/make_hf_fixtures.py)
// decode to the values the library stored; Horizon's files round-trip; f32 -> f16 / bf16 rounding
// equals torch's bit for bit; corrupt, truncated and inconsistent files are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "io/safetensors.h"
#include "tests/data/data_test_util.h"

namespace fs = std::filesystem;
using hz::DType;
using hz::Tensor;
using namespace hz::io;

namespace {

const std::string kFix = std::string(HZ_SOURCE_DIR) + "/tests/fixtures";

nlohmann::json read_json(const std::string& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

using hzdt::TempDir;  // a fresh directory under /tmp, removed afterwards

// A file with header `h` (as given, no padding) followed by `data`.
void write_raw(const std::string& path, const std::string& h, const std::string& data, int64_t claimed_len = -1) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : h.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << h << data;
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// Float lists are stored as Python repr strings (JSON has no inf).
std::vector<double> floats(const nlohmann::json& j) {
  std::vector<double> v;
  for (const auto& x : j) v.push_back(std::strtod(x.get<std::string>().c_str(), nullptr));  // stod refuses denormals
  return v;
}

}  // namespace

TEST(Safetensors, ReadsWhatTheLibraryWrote) {
  const SafetensorsFile f = SafetensorsFile::open(kFix + "/safetensors/dtypes.safetensors");
  const nlohmann::json ex = read_json(kFix + "/safetensors/dtypes.json");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const std::string writer = f.metadata().at("writer");  // the script's path when the fixtures were made
  EXPECT_EQ(writer.substr(writer.rfind('/') + 1), "make_hf_fixtures.py") << writer;
  ASSERT_EQ(f.entries().size(), 8u);

  const Tensor f32 = f.load("f32");
  EXPECT_EQ(f32.dtype(), DType::F32);
  EXPECT_EQ(f32.shape(), (hz::Shape{2, 3}));
  EXPECT_EQ(f32.to_vector(), floats(ex["f32"]));
  EXPECT_EQ(f.load("f64").to_vector(), floats(ex["f64"]));
  EXPECT_EQ(f.load("i64").to_vector(), ex["i64"].get<std::vector<double>>());
  const Tensor i32 = f.load("i32");
  EXPECT_EQ(i32.dtype(), DType::I32);
  EXPECT_EQ(i32.to_vector(), ex["i32"].get<std::vector<double>>());

  const Tensor f16 = f.load("f16");  // F16 loads as F32, exactly
  EXPECT_EQ(f16.dtype(), DType::F32);
  const auto want16 = floats(ex["f16_as_f32"]);
  ASSERT_EQ(static_cast<size_t>(f16.numel()), want16.size());
  for (size_t i = 0; i < want16.size(); ++i) EXPECT_EQ(f16.at_flat(i), want16[i]) << i;

  const Tensor bf = f.load("bf16");
  EXPECT_EQ(bf.dtype(), DType::BF16);
  const auto bits = ex["bf16_bits"].get<std::vector<uint16_t>>();
  for (size_t i = 0; i < bits.size(); ++i) EXPECT_EQ(bf.data<hz::bf16>()[i].bits, bits[i]) << i;

  EXPECT_EQ(f.load("empty").shape(), (hz::Shape{0, 4}));
  const Tensor sc = f.load("scalar");
  EXPECT_EQ(sc.dim(), 0);
  EXPECT_EQ(sc.item(), 2.5);
}

TEST(Safetensors, HalfPrecisionRoundsLikeTorch) {
  const nlohmann::json ex = read_json(kFix + "/safetensors/dtypes.json");
  const auto src = floats(ex["source_f32"]);
  const auto f16 = ex["f16_bits"].get<std::vector<uint16_t>>();
  const auto bf = ex["bf16_bits"].get<std::vector<uint16_t>>();
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(float_to_half(static_cast<float>(src[i])), f16[i]) << "value " << src[i];
    EXPECT_EQ(hz::f32_to_bf16_bits(static_cast<float>(src[i])), bf[i]) << "value " << src[i];
  }
  EXPECT_EQ(float_to_half(NAN), ex["nan_f16_bits"].get<uint16_t>());
  // every half value survives half -> float -> half; NaNs stay NaN
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(v)))) << h;
      continue;
    }
    ASSERT_EQ(float_to_half(v), h) << "half bits " << h;
  }
}

TEST(Safetensors, WritesWhatItReads) {
  TempDir d;
  const SafetensorsFile lib = SafetensorsFile::open(kFix + "/safetensors/dtypes.safetensors");
  std::map<std::string, Tensor> all;
  for (const auto& e : lib.entries()) all[e.name] = lib.load(e.name);
  all["view"] = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);  // a strided view
  save_safetensors(d.file("a.safetensors"), all, {{"format", "pt"}, {"k", "v"}});
  const SafetensorsFile f = SafetensorsFile::open(d.file("a.safetensors"));
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"k", "v"}}));
  EXPECT_EQ((8 + f.header_size()) % 8, 0u);  // data 8-byte aligned
  for (const auto& [name, t] : all) {
    const Tensor r = f.load(name);
    EXPECT_EQ(r.shape(), t.shape()) << name;
    EXPECT_EQ(r.dtype(), t.dtype()) << name;
    const Tensor tc = t.contiguous();
    ASSERT_EQ(std::memcmp(r.raw_data(), tc.raw_data(), t.numel() * hz::dtype_size(t.dtype())), 0) << name;
  }
  EXPECT_EQ(f.entry("f16").dtype, "F32");  // F16 was loaded as F32 and is written as F32

  // storing floats as f16 / bf16 gives torch's encodings
  const nlohmann::json ex = read_json(kFix + "/safetensors/dtypes.json");
  const auto src = floats(ex["source_f32"]);
  const Tensor s = Tensor::from_vector(src, {static_cast<int64_t>(src.size())});
  save_safetensors(d.file("h.safetensors"), {{"x", s}}, {}, StoreAs::F16);
  save_safetensors(d.file("b.safetensors"), {{"x", s}}, {}, StoreAs::BF16);
  const SafetensorsFile h = SafetensorsFile::open(d.file("h.safetensors")), b = SafetensorsFile::open(d.file("b.safetensors"));
  EXPECT_EQ(h.entry("x").dtype, "F16");
  EXPECT_EQ(b.entry("x").dtype, "BF16");
  const auto f16 = ex["f16_bits"].get<std::vector<uint16_t>>(), bf = ex["bf16_bits"].get<std::vector<uint16_t>>();
  for (size_t i = 0; i < src.size(); ++i) {
    uint16_t x, y;
    std::memcpy(&x, h.bytes("x") + 2 * i, 2);
    std::memcpy(&y, b.bytes("x") + 2 * i, 2);
    EXPECT_EQ(x, f16[i]) << i;
    EXPECT_EQ(y, bf[i]) << i;
  }
}

TEST(Safetensors, RefusesCorruptAndTruncatedFiles) {
  TempDir d;
  const std::string p = d.file("x.safetensors");
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})";
  write_raw(p, ok, std::string(12, '\0'));
  EXPECT_NO_THROW(SafetensorsFile::open(p));

  std::ofstream(p, std::ios::binary) << "abc";
  EXPECT_TRUE(has(error_of(p), "fewer than the 8-byte header length")) << error_of(p);
  write_raw(p, ok, "", 200000000);
  EXPECT_TRUE(has(error_of(p), "larger than the 100 MB")) << error_of(p);
  write_raw(p, ok, std::string(12, '\0'), ok.size() + 100);
  EXPECT_TRUE(has(error_of(p), "the file is truncated")) << error_of(p);
  write_raw(p, "[1,2]", "");
  EXPECT_TRUE(has(error_of(p), "does not start with '{'")) << error_of(p);
  write_raw(p, R"({"a":{"dtype":"F32")", "");
  EXPECT_TRUE(has(error_of(p), "not valid JSON")) << error_of(p);
  write_raw(p, R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_TRUE(has(error_of(p), "unknown dtype 'Q7'")) << error_of(p);
  write_raw(p, R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_TRUE(has(error_of(p), "non-negative integers")) << error_of(p);
  write_raw(p, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_TRUE(has(error_of(p), "hold 8 bytes but F32 [3] needs 12")) << error_of(p);
  write_raw(p, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(12, '\0'));
  EXPECT_TRUE(has(error_of(p), "which ends at byte 12: the file is truncated")) << error_of(p);
  write_raw(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::string(12, '\0'));
  EXPECT_TRUE(has(error_of(p), "overlaps tensor 'a'")) << error_of(p);
  write_raw(p, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
            std::string(12, '\0'));
  EXPECT_TRUE(has(error_of(p), "bytes [4, 8) of the data buffer belong to no tensor")) << error_of(p);
  write_raw(p, ok, std::string(16, '\0'));
  EXPECT_TRUE(has(error_of(p), "trailing bytes")) << error_of(p);
  write_raw(p, R"({"__metadata__":{"n":3},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_TRUE(has(error_of(p), "is not a string")) << error_of(p);
  write_raw(p, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", std::string(4, '\0'));
  EXPECT_TRUE(has(error_of(p), "end before they begin")) << error_of(p);

  // a known dtype Horizon does not compute with: validated, refused on load by name
  write_raw(p, R"({"q":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", std::string(4, '\0'));
  const SafetensorsFile q = SafetensorsFile::open(p);
  try {
    q.load("q");
    ADD_FAILURE() << "I8 loaded";
  } catch (const SafetensorsError& e) {
    EXPECT_TRUE(has(e.what(), "dtype I8, which Horizon does not load")) << e.what();
  }

  // the library's own file, cut short by one byte: caught by the offsets
  std::ifstream in(kFix + "/safetensors/dtypes.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 1);
  EXPECT_TRUE(has(error_of(p), "the file is truncated")) << error_of(p);
  // one flipped byte inside the header's JSON
  bytes[20] = '\x01';
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_NE(error_of(p), "(no error)");
}

TEST(Safetensors, ShardedDirectories) {
  TempDir d;
  std::map<std::string, Tensor> t;
  for (int i = 0; i < 5; ++i)
    t["w" + std::to_string(i)] = Tensor::full({10, 10}, 0.5 * i);  // 400 bytes each
  const auto files = save_safetensors_dir(d.file("m"), t, {{"format", "pt"}}, StoreAs::Native, 900);
  ASSERT_EQ(files.size(), 4u);  // 3 shards of <= 2 tensors + the index
  EXPECT_TRUE(fs::exists(d.file("m/model-00003-of-00003.safetensors")));
  const nlohmann::json index = read_json(d.file("m/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<int>(), 2000);
  EXPECT_EQ(index["metadata"].value("total_parameters", -1), 500);  // as transformers' save_pretrained writes it
  const SafetensorsSet s = SafetensorsSet::open_dir(d.file("m"));
  EXPECT_EQ(s.names().size(), 5u);
  for (const auto& [n, v] : t) EXPECT_EQ(s.load(n).to_vector(), v.to_vector()) << n;
  EXPECT_EQ(fs::path(s.file_of("w4")).filename(), "model-00003-of-00003.safetensors");

  EXPECT_THROW(save_safetensors_dir(d.file("m"), t, {}, StoreAs::Native, 900), SafetensorsError);  // not empty
  save_safetensors_dir(d.file("single"), t, {}, StoreAs::Native, 1 << 20);
  EXPECT_TRUE(fs::exists(d.file("single/model.safetensors")));
  EXPECT_EQ(SafetensorsSet::open_dir(d.file("single")).names().size(), 5u);

  // the library-written sharded fixture
  const SafetensorsSet smol = SafetensorsSet::open_dir(kFix + "/hf/smollm3");
  EXPECT_EQ(smol.files().size(), 4u);
  EXPECT_TRUE(smol.has("model.layers.3.self_attn.q_proj.weight"));

  auto err = [&](const std::string& dir) -> std::string {
    try {
      SafetensorsSet::open_dir(dir);
    } catch (const SafetensorsError& e) {
      return e.what();
    }
    return "(no error)";
  };
  auto edit_index = [&](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = index;
    f(j);
    std::ofstream(d.file("m/model.safetensors.index.json"), std::ios::trunc) << j.dump();
  };
  edit_index([](nlohmann::json& j) { j["weight_map"]["w9"] = "model-00001-of-00003.safetensors"; });
  EXPECT_TRUE(has(err(d.file("m")), "lists 'w9' in model-00001-of-00003.safetensors, but that shard has no such tensor")) << err(d.file("m"));
  edit_index([](nlohmann::json& j) { j["weight_map"].erase("w1"); });
  EXPECT_TRUE(has(err(d.file("m")), "holds 'w1', which the index does not list")) << err(d.file("m"));
  edit_index([](nlohmann::json&) {});
  const std::string shard2 = d.file("m/model-00002-of-00003.safetensors");
  const SafetensorsFile old2 = SafetensorsFile::open(shard2);
  save_safetensors(shard2, {{"w1", t["w1"]}, {"w2", t["w2"]}, {"w3", t["w3"]}});  // w1 also in shard 1
  EXPECT_TRUE(has(err(d.file("m")), "holds 'w1', which the index places in model-00001-of-00003.safetensors")) << err(d.file("m"));
  save_safetensors(shard2, {{"w2", t["w2"]}, {"w3", t["w3"]}});
  EXPECT_EQ(err(d.file("m")), "(no error)");
  edit_index([](nlohmann::json& j) { j["weight_map"]["w0"] = "../model-00001-of-00003.safetensors"; });
  EXPECT_TRUE(has(err(d.file("m")), "not a plain file name")) << err(d.file("m"));
  edit_index([](nlohmann::json&) {});
  fs::remove(d.file("m/model-00002-of-00003.safetensors"));
  EXPECT_TRUE(has(err(d.file("m")), "shard 'model-00002-of-00003.safetensors'")) << err(d.file("m"));
  EXPECT_TRUE(has(err(d.file("m")), "is missing")) << err(d.file("m"));

  fs::create_directories(d.file("pt"));
  std::ofstream(d.file("pt/pytorch_model.bin")) << "x";
  EXPECT_TRUE(has(err(d.file("pt")), "pytorch_model.bin")) << err(d.file("pt"));
  EXPECT_TRUE(has(err(d.file("nope")), "not a directory")) << err(d.file("nope"));
}

TEST(Safetensors, ByteSizes) {
  EXPECT_EQ(parse_byte_size("5GB"), 5000000000ull);
  EXPECT_EQ(parse_byte_size("500MB"), 500000000ull);
  EXPECT_EQ(parse_byte_size("64kb"), 64000ull);
  EXPECT_EQ(parse_byte_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("1000"), 1000ull);
  EXPECT_THROW(parse_byte_size("5XB"), hz::ValueError);
  EXPECT_THROW(parse_byte_size("GB"), hz::ValueError);
}
