// hz_fuzz: a seeded mutation fuzzer over every file format a user feeds Horizon (issue 19).
//
// One target per parser; each starts from seed files (the fixtures under tests/, or files built
// here for formats without fixtures), applies a few mutations (bit flips, byte insert/delete,
// splices between seeds, numbers replaced by boundary values such as 0, -1, 2^31-1, 2^32, 1e308,
// NaN, and deep bracket nesting), writes the input to a temporary file and calls the real loading
// function on it in a forked child with an address-space cap (RLIMIT_AS) and a time budget. An
// input passes when it is read or refused with an hz::Error (the CLI's exit 1). Anything else is
// a failure: a signal (crash), std::bad_alloc or another exception type (exit 3), a hang, or the
// memory cap. Failing inputs are printed and, with --save DIR, kept as DIR/<target>/<hash>.bin.
// Before the mutations, every target is also given what is not a file in the input's place (a FIFO,
// a directory, /dev/zero through a symbolic link, a Unix socket): each must be refused at once, with a
// message naming the file ("not_a_file" in the summary).
//
//   hz_fuzz [--iterations N] [--seed S] [--target NAME] [--seconds T] [--save DIR] [--replay DIR]
//           [--list] [--selftest]
// --iterations: inputs per target (default 300); --seconds: run until T seconds have passed
// (iterations then ignored); --replay DIR: first run every DIR/<target>/* file as it is (the
// committed regression inputs under tests/fuzz/crashes/). Exit status: 0 when every input passed.
//
// Built with -DHZ_LIBFUZZER (clang -fsanitize=fuzzer), this file instead defines
// LLVMFuzzerTestOneInput for the target named by HZ_FUZZ_TARGET (no fork: libFuzzer catches crashes).
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "core/error.h"
#include "core/hash.h"
#include "core/tensor.h"
#include "data/corpus.h"
#include "data/shard.h"
#include "data/token_files.h"
#include "data/tokenizer.h"
#include "distributed/rendezvous.h"
#include "hf/hf.h"
#include "io/safetensors.h"
#include "study/report.h"
#include "train/checkpoint.h"
#include "train/recipe.h"

namespace fs = std::filesystem;

namespace {

using Bytes = std::string;

Bytes read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
void write_bytes(const std::string& p, const Bytes& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

// ---- targets ------------------------------------------------------------------------------------
using Mutator = std::function<Bytes(const Bytes& in, const std::vector<Bytes>& seeds, Rng& r)>;

struct Target {
  std::string name;
  std::string file;                    // the name the input is written under, in a fresh directory
  std::vector<Bytes> seeds;
  std::function<void(const std::string& dir)> prepare;  // other files of the directory (may be empty)
  std::function<void(const std::string& path)> load;    // the real loading function
  size_t n_mutable = 0;  // mutate only the first n seeds (0: all); the others are only read as they are
  Mutator mutator{};     // structure-aware mutation (nullptr: the byte-level mutate below)
  bool must_refuse = false;  // every mutated input is wrong: reading one is a failure
  bool from_file = true;     // Horizon reads it from a file (not_a_file puts a FIFO etc. in its place);
                             // false: the bytes come from elsewhere (a socket) and only the file is the fuzzer's
};

std::string src(const std::string& rel) { return std::string(HZ_SOURCE_DIR) + "/" + rel; }

std::vector<Bytes> seeds_of(const std::vector<std::string>& rels) {
  std::vector<Bytes> out;
  for (const auto& r : rels)
    if (fs::exists(src(r))) out.push_back(read_bytes(src(r)));
  return out;
}

// A small checkpoint, written once into `dir`, as the HDF5 seed.
Bytes checkpoint_seed(const std::string& dir) {
  hz::train::CheckpointData c;
  c.step = 7;
  c.tokens_seen = 1234;
  hz::Tensor w = hz::Tensor::empty({2, 3}, hz::DType::F32);
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = 0.5f * static_cast<float>(i);
  hz::Tensor b = hz::Tensor::empty({3}, hz::DType::I64);
  for (int i = 0; i < 3; ++i) b.data<int64_t>()[i] = i;
  c.model["layers.0.w"] = w;
  c.optimizer["adamw/layers.0.w/exp_avg"] = b;
  c.counters["data.position"] = 42;
  c.meta["recipe"] = "model:\n  d_model: 8\n";
  const std::string p = dir + "/seed.h5";
  hz::train::save_checkpoint(p, c);
  return read_bytes(p);
}

// A token shard of three documents (data/shard.h).
Bytes shard_seed(const std::string& dir) {
  const std::string p = dir + "/seed_shard.bin";
  hz::data::write_shard(p, {{1, 2, 3}, {70000, 5}, {}});
  return read_bytes(p);
}

// model.safetensors.index.json for the llama fixture stored as one shard.
Bytes index_seed() {
  const auto f = hz::io::SafetensorsFile::open(src("tests/fixtures/hf/llama/model.safetensors"));
  nlohmann::json j;
  j["metadata"] = {{"total_size", 0}};
  for (const auto& e : f.entries()) j["weight_map"][e.name] = "model-00001-of-00001.safetensors";
  return j.dump(1);
}

// The same checkpoint as written before issue 19: variable-length string attributes and meta
// datasets (old files must still be read, and a damaged one refused, never crash).
Bytes old_checkpoint_seed(const std::string& dir) {
  hz::train::CheckpointData c;
  c.step = 7;
  c.tokens_seen = 1234;
  hz::Tensor w = hz::Tensor::empty({2, 3}, hz::DType::F32);
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = 0.25f * static_cast<float>(i);
  c.model["layers.0.w"] = w;
  c.meta["recipe"] = "model:\n  d_model: 8\n";
  const std::string p = dir + "/seed_vl.h5";
  const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t vl = H5Tcopy(H5T_C_S1);
  H5Tset_size(vl, H5T_VARIABLE);
  H5Tset_cset(vl, H5T_CSET_UTF8);
  const hid_t scalar = H5Screate(H5S_SCALAR);
  auto attr_str = [&](hid_t o, const char* name, const std::string& v) {
    const char* q = v.c_str();
    const hid_t a = H5Acreate2(o, name, vl, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, vl, &q);
    H5Aclose(a);
  };
  auto attr_int = [&](hid_t o, const char* name, hid_t type, const void* v) {
    const hid_t a = H5Acreate2(o, name, type, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type == H5T_STD_U64LE ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64, v);
    H5Aclose(a);
  };
  const hid_t model = H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[2] = {2, 3};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t ds = H5Dcreate2(model, "layers.0.w", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w.data<float>());
  attr_str(ds, "key", "layers.0.w");
  attr_str(ds, "dtype", "f32");
  H5Dclose(ds);
  H5Sclose(space);
  H5Gclose(model);
  H5Gclose(H5Gcreate2(f, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  H5Gclose(H5Gcreate2(f, "counters", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  const hid_t meta = H5Gcreate2(f, "meta", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t md = H5Dcreate2(meta, "recipe", vl, scalar, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const char* rv = c.meta["recipe"].c_str();
  H5Dwrite(md, vl, H5S_ALL, H5S_ALL, H5P_DEFAULT, &rv);
  attr_str(md, "key", "recipe");
  H5Dclose(md);
  H5Gclose(meta);
  const int64_t fv = hz::train::kCheckpointFormatVersion;
  attr_int(f, "format_version", H5T_STD_I64LE, &fv);
  attr_int(f, "step", H5T_STD_I64LE, &c.step);
  attr_int(f, "tokens_seen", H5T_STD_I64LE, &c.tokens_seen);
  const uint64_t sum = hz::train::checkpoint_checksum(c);
  attr_int(f, "checksum", H5T_STD_U64LE, &sum);
  H5Sclose(scalar);
  H5Tclose(vl);
  H5Fclose(f);
  return read_bytes(p);
}

Bytes llmc_seed(int32_t magic, int32_t version, int width, int n) {
  Bytes b(1024 + static_cast<size_t>(n) * width, '\0');
  auto put = [&](size_t at, uint32_t v, int w) {
    for (int i = 0; i < w; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(0, static_cast<uint32_t>(magic), 4);
  put(4, static_cast<uint32_t>(version), 4);
  put(8, static_cast<uint32_t>(n), 4);
  for (int i = 0; i < n; ++i) put(1024 + static_cast<size_t>(i) * width, static_cast<uint32_t>((i * 37) % 250), width);
  return b;
}

Bytes mutate(const Bytes& in, const std::vector<Bytes>& seeds, Rng& r);

// ---- structure-aware mutators (issue 36) ----------------------------------------------------------
// Byte flips mostly make a file unparseable; these keep it well-formed and make its content wrong:
// a sealed checkpoint's HDF5 bytes mutated and the checksum recomputed (as a crafted file would be),
// one JSON or YAML value replaced by an edge value, a key removed, a list entry repeated.

// The checksum block save_checkpoint writes (train/checkpoint.h): magic, file size, FNV-1a 64 of [512, size).
void reseal(Bytes& b) {
  if (b.size() < 512) b.resize(512, '\0');
  std::memcpy(&b[0], "HZSUM001", 8);
  const uint64_t size = b.size(), sum = hz::fnv1a64(b.data() + 512, b.size() - 512);
  for (int i = 0; i < 8; ++i) b[8 + i] = static_cast<char>((size >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) b[16 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
}
Bytes sealed_mutation(const Bytes& in, const std::vector<Bytes>& seeds, Rng& r) {
  Bytes head = in.substr(0, 512), body = in.size() > 512 ? in.substr(512) : Bytes();
  std::vector<Bytes> bodies;
  for (const Bytes& s : seeds) bodies.push_back(s.size() > 512 ? s.substr(512) : Bytes());
  Bytes out = head + mutate(body, bodies, r);
  reseal(out);
  return out;
}

nlohmann::json edge_json(Rng& r) {
  using json = nlohmann::json;
  switch (r.below(16)) {
    case 0: return 0;
    case 1: return -1;
    case 2: return 2147483648ll;
    case 3: return std::numeric_limits<int64_t>::max();
    case 4: return std::numeric_limits<int64_t>::min();
    case 5: return std::numeric_limits<uint64_t>::max();
    case 6: return 1e308;
    case 7: return -0.0;
    case 8: return 0.5;
    case 9: return "";
    case 10: return json(nullptr);
    case 11: return true;
    case 12: return json::array();
    case 13: return json::object();
    case 14: return std::string(70000, 'a');
    default: return json::array({json::array({json::array({1})})});
  }
}
// Every value's JSON pointer (depth-limited walk).
void pointers(const nlohmann::json& j, const nlohmann::json::json_pointer& at, std::vector<nlohmann::json::json_pointer>& out,
              int depth) {
  out.push_back(at);
  if (depth > 12) return;
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) pointers(it.value(), at / it.key(), out, depth + 1);
  else if (j.is_array())
    for (size_t i = 0; i < j.size() && i < 4096; ++i) pointers(j[i], at / i, out, depth + 1);
}
void mutate_json(nlohmann::json& j, Rng& r) {
  const int n_ops = 1 + static_cast<int>(r.below(3));
  for (int op = 0; op < n_ops; ++op) {
    std::vector<nlohmann::json::json_pointer> ps;  // afresh each time: the last op may have moved things
    pointers(j, nlohmann::json::json_pointer(), ps, 0);
    const auto p = ps[r.below(ps.size())];
    nlohmann::json& v = j.at(p);
    switch (r.below(5)) {
      case 0:
      case 1: v = edge_json(r); break;
      case 2:  // a number nudged, or a string made one
        if (v.is_number_integer())  // wrapping: the edge values are the point
          v = static_cast<int64_t>(static_cast<uint64_t>(v.get<int64_t>()) +
                                   (r.below(2) ? 1 : static_cast<uint64_t>(-1)) * (1 + r.below(3)));
        else v = r.below(2) ? nlohmann::json(ps.size()) : nlohmann::json("F32");
        break;
      case 3:  // a key removed or a list entry dropped
        if (!p.empty()) {
          nlohmann::json& parent = j.at(p.parent_pointer());
          if (parent.is_object()) parent.erase(p.back());
          else if (parent.is_array() && !parent.empty()) parent.erase(parent.begin() + static_cast<long>(r.below(parent.size())));
        }
        break;
      default: {  // a list entry repeated, or a value copied from elsewhere
        if (v.is_array() && !v.empty()) {
          v.push_back(nlohmann::json(v[r.below(v.size())]));
        } else {
          nlohmann::json copy = j.at(ps[r.below(ps.size())]);
          j.at(p) = std::move(copy);
        }
        break;
      }
    }
  }
}
Bytes json_mutation(const Bytes& in, const std::vector<Bytes>&, Rng& r) {
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return in;
  mutate_json(j, r);
  return j.dump();
}
// safetensors: 8-byte little-endian header length, JSON header, data; the header is mutated as JSON
// and the length rewritten to match (the data stays).
Bytes safetensors_mutation(const Bytes& in, const std::vector<Bytes>&, Rng& r) {
  if (in.size() < 8) return in;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  if (n > in.size() - 8) return in;
  nlohmann::json j = nlohmann::json::parse(in.substr(8, n), nullptr, false);
  if (j.is_discarded()) return in;
  mutate_json(j, r);
  const Bytes h = j.dump();
  Bytes out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + in.substr(8 + n);
}
// YAML: one scalar replaced by an edge value, or a mapping entry removed.
void yaml_scalars(YAML::Node n, std::vector<YAML::Node>& out, int depth) {
  if (depth > 16) return;
  if (n.IsScalar()) out.push_back(n);
  else if (n.IsMap())
    for (auto it = n.begin(); it != n.end(); ++it) yaml_scalars(it->second, out, depth + 1);
  else if (n.IsSequence())
    for (auto it = n.begin(); it != n.end(); ++it) yaml_scalars(*it, out, depth + 1);
}
Bytes yaml_mutation(const Bytes& in, const std::vector<Bytes>&, Rng& r) {
  static const char* const kScalars[] = {"0", "-1", "1", "2147483648", "4294967296", "9223372036854775807",
                                         "9223372036854775808", "-9223372036854775809", "18446744073709551616",
                                         "1e308", "1e400", "-1e400", ".inf", "-.inf", ".nan", "nan", "1e-320",
                                         "0.5", "-0", "~", "null", "true", "yes", "0x10", "1e3", "''", "[]",
                                         "{}", "[1, 2]", "a string", "\xff\xfe"};
  YAML::Node root;
  try {
    root = YAML::Load(in);
  } catch (const YAML::Exception&) {
    return in;
  }
  std::vector<YAML::Node> scalars;
  yaml_scalars(root, scalars, 0);
  if (scalars.empty()) return in;
  const int n_ops = 1 + static_cast<int>(r.below(2));
  for (int op = 0; op < n_ops; ++op) {
    YAML::Node v = scalars[r.below(scalars.size())];
    const std::string e = kScalars[r.below(sizeof kScalars / sizeof *kScalars)];
    try {
      v = YAML::Load(e);
    } catch (const YAML::Exception&) {
      v = e;
    }
  }
  YAML::Emitter out;
  out << root;
  Bytes b = out.c_str();
  if (r.below(8) == 0) b += r.below(2) ? "\n---\nrun: {seed: 1}\n" : "\n...\njunk: [\n";  // a second document
  return b + "\n";
}

// Weight finiteness: one element of one float tensor made NaN or +-Inf; the loader must refuse it.
Bytes nonfinite_checkpoint(const Bytes& in, const std::vector<Bytes>&, Rng& r, const std::string& work) {
  const std::string p = work + "/nonfinite_seed.h5";
  write_bytes(p, in);
  hz::train::CheckpointData c = hz::train::load_checkpoint(p);
  std::vector<std::string> keys;
  for (const auto& [k, t] : c.model) keys.push_back(k);
  if (keys.empty()) return in;
  hz::Tensor& t = c.model[keys[r.below(keys.size())]];
  const double bad[] = {std::nan(""), INFINITY, -INFINITY};
  t.set({static_cast<int64_t>(r.below(static_cast<size_t>(t.shape()[0]))), 0}, bad[r.below(3)]);
  hz::train::save_checkpoint(p, c);
  return read_bytes(p);
}
Bytes nonfinite_safetensors(const Bytes& in, const std::vector<Bytes>&, Rng& r) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  const nlohmann::json h = nlohmann::json::parse(in.substr(8, n));
  std::vector<std::pair<std::string, nlohmann::json>> floats;
  for (auto it = h.begin(); it != h.end(); ++it)
    if (it.key() != "__metadata__" && (it.value()["dtype"] == "F32" || it.value()["dtype"] == "BF16"))
      floats.emplace_back(it.key(), it.value());
  Bytes out = in;
  const auto& e = floats[r.below(floats.size())].second;
  const uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
  const bool f32 = e["dtype"] == "F32";
  const size_t width = f32 ? 4 : 2, count = (end - begin) / width;
  const size_t at = 8 + n + begin + width * r.below(count);
  static const uint32_t f32_bad[] = {0x7fc00000u, 0x7f800000u, 0xff800000u};
  const uint32_t v = f32_bad[r.below(3)] >> (f32 ? 0 : 16);
  for (size_t k = 0; k < width; ++k) out[at + k] = static_cast<char>((v >> (8 * k)) & 0xff);
  return out;
}

// Sealed checkpoints holding what Horizon never writes: a variable-length string attribute (the
// global heap), an external link, a chunked dataset.
Bytes crafted_checkpoint_seed(const std::string& dir, int kind) {
  const std::string p = dir + "/crafted_" + std::to_string(kind) + ".h5";
  const hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  H5Pset_userblock(fcpl, 512);
  const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  H5Pclose(fcpl);
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t model = H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[2] = {2, 3};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (kind == 2) {
    const hsize_t chunk[2] = {1, 3};
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_deflate(dcpl, 4);
  }
  const hid_t ds = H5Dcreate2(model, "layers.0.w", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  const float w[6] = {0, 0.5f, 1, 1.5f, 2, 2.5f};
  H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w);
  if (kind == 0) {
    const hid_t vl = H5Tcopy(H5T_C_S1);
    H5Tset_size(vl, H5T_VARIABLE);
    const char* q = "layers.0.w";
    const hid_t a = H5Acreate2(ds, "key", vl, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, vl, &q);
    H5Aclose(a);
    H5Tclose(vl);
  }
  if (kind == 1) H5Lcreate_external("/etc/hostname", "/x", model, "layers.1.w", H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Gclose(model);
  for (const char* g : {"optimizer", "counters", "meta"}) H5Gclose(H5Gcreate2(f, g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  const int64_t fv = hz::train::kCheckpointFormatVersion, step = 7, zero = 0;
  auto attr = [&](const char* name, const int64_t* v) {
    const hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, v);
    H5Aclose(a);
  };
  attr("format_version", &fv);
  attr("step", &step);
  attr("tokens_seen", &zero);
  attr("checksum", &zero);
  H5Sclose(scalar);
  H5Fclose(f);
  hz::train::seal_checkpoint_file(p);
  return read_bytes(p);
}

std::vector<Target> make_targets(const std::string& work) {
  std::vector<Target> t;
  t.push_back({"tokenizer_json", "tokenizer.json",
               seeds_of({"tests/data/fixtures/tokenizers/gpt2_style/tokenizer.json",
                         "tests/data/fixtures/tokenizers/llama3_style/tokenizer.json",
                         "tests/data/fixtures/tokenizers/roberta_style/tokenizer.json",
                         "tests/data/fixtures/tokenizers/metaspace_style/tokenizer.json",
                         "tests/data/fixtures/tokenizers/clip_style/tokenizer.json",
                         "tests/data/fixtures/tokenizers/qwen2_style/tokenizer.json",
                         "tests/data/fixtures/tokenizers/llama2_style/tokenizer.json"}),
               nullptr, [](const std::string& p) {
                 const auto tok = hz::data::make_tokenizer(p);
                 (void)tok->decode(tok->encode("Hello, world! 123 \xc3\xa9t\xc3\xa9"));
               }});
  t.push_back({"sentencepiece", "tokenizer.model",
               seeds_of({"tests/data/fixtures/tokenizers/spm_bpe.model", "tests/data/fixtures/tokenizers/spm_unigram.model"}),
               nullptr, [](const std::string& p) {
                 const auto tok = hz::data::make_tokenizer(p);
                 (void)tok->decode(tok->encode("Hello, world! 123"));
               }});
  t.push_back({"safetensors", "model.safetensors",
               seeds_of({"tests/fixtures/hf/llama/model.safetensors", "tests/fixtures/hf/qwen2/model.safetensors"}),
               [](const std::string& dir) { fs::copy_file(src("tests/fixtures/hf/llama/config.json"), dir + "/config.json"); },
               [](const std::string& p) {
                 const auto f = hz::io::SafetensorsFile::open(p);
                 for (const auto& e : f.entries())
                   if (e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16") (void)f.load(e.name);
                 (void)hz::hf::import_dir(fs::path(p).parent_path().string());
               }});
  t.push_back({"config_json", "config.json",
               seeds_of({"tests/fixtures/hf/llama/config.json", "tests/fixtures/hf/qwen2/config.json",
                         "tests/fixtures/hf/mistral/config.json", "tests/fixtures/hf/smollm3/config.json",
                         "tests/fixtures/hf/rope_yarn/config.json", "tests/fixtures/hf/rope_llama3/config.json",
                         "tests/fixtures/hf/rope_dynamic/config.json", "tests/fixtures/hf/rope_linear/config.json",
                         // HorizonForCausalLM exports (convert to-hf): layer_kinds, pattern, overrides
                         "tests/fixtures/hf_configs/horizon_pretrain_fox.json",
                         "tests/fixtures/hf_configs/horizon_pretrain_llama4_nope.json",
                         "tests/fixtures/hf_configs/horizon_drope_recalibrate.json"}),
               [](const std::string& dir) {
                 fs::copy_file(src("tests/fixtures/hf/llama/model.safetensors"), dir + "/model.safetensors");
               },
               [](const std::string& p) { (void)hz::hf::import_dir(fs::path(p).parent_path().string()); }});
  t.push_back({"recipe_yaml", "recipe.yaml",
               seeds_of({"recipes/quickstart.yaml", "recipes/pretrain_rope.yaml", "recipes/pretrain_swan.yaml",
                         "recipes/drope_in_run.yaml", "recipes/passkey_finetune.yaml",
                         "recipes/study/retrieval_base.yaml"}),  // its layer kinds: additive among them
               nullptr, [](const std::string& p) { (void)hz::train::load_recipe(p); }});
  // The old layout (no whole-file checksum, variable-length strings) is refused before libhdf5 reads it.
  auto load_ckpt = [](const std::string& p) { (void)hz::train::load_checkpoint(p); };
  t.push_back({"hdf5_checkpoint", "step_7.h5", {checkpoint_seed(work), old_checkpoint_seed(work)}, nullptr, load_ckpt});
  // Well-formed, sealed, wrong: the HDF5 bytes mutated and the checksum recomputed, as anyone can.
  t.push_back({"hdf5_sealed", "step_7.h5",
               {checkpoint_seed(work), crafted_checkpoint_seed(work, 0), crafted_checkpoint_seed(work, 1),
                crafted_checkpoint_seed(work, 2)},
               nullptr, load_ckpt, 0, sealed_mutation});
  t.push_back({"weights_nonfinite_h5", "step_7.h5", {checkpoint_seed(work)}, nullptr, load_ckpt, 0,
               [work](const Bytes& in, const std::vector<Bytes>& s, Rng& r) { return nonfinite_checkpoint(in, s, r, work); },
               true});
  t.push_back({"token_file", "tokens.bin",
               {llmc_seed(hz::data::kLlmcMagicGpt2, 1, 2, 300), llmc_seed(hz::data::kLlmcMagicLlama3, 7, 4, 200),
                Bytes(600, '\x01')},
               nullptr, [](const std::string& p) {
                 const auto tf = hz::data::read_token_file(p, hz::data::TokenFormat::Auto, 50257);
                 (void)hz::data::split_documents(tf.tokens, {0, 1});
               }});
  for (const auto& s : seeds_of({"tests/data/fixtures/corpus/gpt2_style.llmc.bin", "tests/data/fixtures/corpus/llama3_style.llmc.bin"}))
    t.back().seeds.push_back(s);
  t.push_back({"jsonl", "docs.jsonl", seeds_of({"tests/data/fixtures/corpus/docs.jsonl"}), nullptr,
               [](const std::string& p) { (void)hz::data::load_jsonl({p}, "text"); }});
  // What a connection to the TCP rendezvous' rank 0 sends first (distributed/rendezvous.h), read as
  // rank 0 reads it: every prefix as it arrives, for a few world sizes. Rank 0 drops what it refuses.
  const auto words = [](std::initializer_list<uint32_t> ws) {
    Bytes b;
    for (uint32_t v : ws) b.append(reinterpret_cast<const char*>(&v), 4);
    return b;
  };
  t.push_back({"rendezvous_hello", "hello.bin",
               {words({0x56525a48, 2, 4, 1}) + "abcdefghijklmnop", words({0x56525a48, 2, 2, 1}) + "./09AZaz./09AZaz",
                words({0x56525a48, 1, 4, 1}), Bytes("GET / HTTP/1.1\r\n\r\n")},
               nullptr, [](const std::string& p) {
                 const Bytes b = read_bytes(p);
                 std::string why = "an incomplete hello";
                 bool valid = false;  // for one of the world sizes (a hello claims one)
                 for (int size : {2, 4, 1 << 20}) {
                   hz::dist::Hello h;
                   auto st = hz::dist::HelloState::NeedMore;
                   for (size_t n = 0; n <= b.size() && st == hz::dist::HelloState::NeedMore; ++n)
                     st = hz::dist::read_hello(reinterpret_cast<const unsigned char*>(b.data()), n, size, h, why);
                   if (st != hz::dist::HelloState::Valid) continue;
                   if (h.rank < 1 || h.rank >= static_cast<uint32_t>(size) || h.nonce.size() != 16)
                     std::abort();  // a hello rank 0 would accept must name a rank it can place
                   valid = true;
                 }
                 if (!valid) throw hz::ValueError(why);
               }});
  t.back().from_file = false;  // rank 0 reads it from a connection
  t.push_back({"token_shard", "train.bin", {shard_seed(work)}, nullptr, [](const std::string& p) {
                 const auto s = hz::data::Shard::open(p);
                 if (s->n_docs() > 0) (void)s->doc(0);
               }});
  // a sharded directory's index (weight_map), next to the llama fixture as its one shard
  t.push_back({"safetensors_index", "model.safetensors.index.json", {index_seed()},
               [](const std::string& dir) {
                 fs::copy_file(src("tests/fixtures/hf/llama/config.json"), dir + "/config.json");
                 fs::copy_file(src("tests/fixtures/hf/llama/model.safetensors"), dir + "/model-00001-of-00001.safetensors");
               },
               [](const std::string& p) { (void)hz::io::SafetensorsSet::open_dir(fs::path(p).parent_path().string()); }});
  // horizon report's inputs: a run directory's eval.json, metrics.jsonl, needles.csv and
  // retrieval_heads.csv, each mutated in a directory holding the others and a config.yaml. The input is read (study::read_run_results:
  // refused naming the file) and, when read, reported (study::make_report without plots; metrics.jsonl
  // read only).
  {
    const Bytes config = "model: {d_model: 16, n_layers: 1, n_heads: 2}\ndata: {seq_len: 32}\n";
    const Bytes eval_json =
        "{\"train_length\": 32, \"lengths\": [{\"length\": 32, \"loss\": 3.25, \"ppl\": 25.79, \"last256_loss\": 3.3, "
        "\"tokens\": 124, \"drope_c\": 0, \"swan_a\": 0}, {\"length\": 64, \"loss\": 3.5, \"ppl\": 33.1, \"last256_loss\": "
        "3.6, \"tokens\": 252, \"drope_c\": 0, \"swan_a\": 0}], \"nll_length\": 64}\n";
    const Bytes metrics = "{\"step\": 1, \"loss\": 5.5, \"lr\": 1e-3, \"grad_norm\": 2.5, \"tokens\": 128, \"tok_per_s\": 1e4}\n"
                          "{\"step\": 2, \"eval\": {\"32\": {\"loss\": 3.25, \"ppl\": 25.79}}, \"eval_mem_peak\": 1}\n"
                          "{\"step\": 2, \"loss\": 4.25, \"lr\": 1e-3, \"grad_norm\": 1.5, \"tokens\": 256, \"tok_per_s\": 1e4}\n";
    const Bytes needles = "task,length,depth,samples,correct,accuracy,score\npasskey,32,0.5,4,4,1.0000,1.0000\n"
                          "passkey,64,0.5,4,1,0.2500,0.5000\nniah_multikey_1,32,0,2,1,0.5000,0.5000\n";
    const Bytes heads = "step,task,length,layer,layer_kind,head,window,score,needle_mass,opportunities\n"
                        "10,passkey,32,0,global,0,0,0.500000,0.400000,4\n10,passkey,32,0,global,1,0,0.000000,0.100000,4\n"
                        "20,passkey,32,0,windowed,0,8,0.750000,0.600000,8\n20,passkey,32,0,windowed,1,8,0.125000,0.200000,8\n";
    auto files = [=](const std::string& except) {
      return [=](const std::string& dir) {
        write_bytes(dir + "/config.yaml", config);
        if (except != "eval.json") write_bytes(dir + "/eval.json", eval_json);
        if (except != "metrics.jsonl") write_bytes(dir + "/metrics.jsonl", metrics);
        if (except != "needles.csv") write_bytes(dir + "/needles.csv", needles);
        if (except != "retrieval_heads.csv") write_bytes(dir + "/retrieval_heads.csv", heads);
      };
    };
    auto read = [](const std::string& p) { (void)hz::study::read_run_results(fs::path(p).parent_path().string()); };
    auto report = [](const std::string& p) {
      const std::string dir = fs::path(p).parent_path().string();
      (void)hz::study::read_run_results(dir);
      hz::study::ReportOptions o;
      o.out_dir = dir + "/report";
      o.plots = false;
      o.oa_T = 8, o.oa_heads = 2, o.oa_layers = 1, o.oa_trials = 1;
      (void)hz::study::make_report({dir}, o);
    };
    t.push_back({"report_eval_json", "eval.json", {eval_json}, files("eval.json"), report});
    // most mutated metrics lines are read (a line that is not JSON is skipped): read only, the report's
    // cost (~30 ms an input) spent where the values decide the tables (lengths, needles)
    t.push_back({"report_metrics_jsonl", "metrics.jsonl", {metrics}, files("metrics.jsonl"), read});
    t.push_back({"report_needles_csv", "needles.csv", {needles}, files("needles.csv"), report});
    t.push_back({"report_retrieval_heads_csv", "retrieval_heads.csv", {heads}, files("retrieval_heads.csv"), report});
    Target x = t[t.size() - 4];
    x.name = "report_eval_json_struct";
    x.mutator = json_mutation;
    t.push_back(std::move(x));
  }
  // structure-aware twins of the text and header formats (same seeds and loaders, values mutated)
  for (const char* name : {"tokenizer_json", "safetensors", "config_json", "recipe_yaml"}) {
    Target x = *std::find_if(t.begin(), t.end(), [&](const Target& y) { return y.name == name; });
    x.name += "_struct";
    x.mutator = x.file == "recipe.yaml" ? Mutator(yaml_mutation)
                : x.file == "model.safetensors" ? Mutator(safetensors_mutation)
                                                : Mutator(json_mutation);
    t.push_back(std::move(x));
  }
  {
    Target x = *std::find_if(t.begin(), t.end(), [](const Target& y) { return y.name == "safetensors"; });
    x.name = "weights_nonfinite_st";
    x.seeds.resize(1);  // the llama fixture, whose config.json the directory gets
    x.mutator = nonfinite_safetensors;
    x.must_refuse = true;
    t.push_back(std::move(x));
  }
  return t;
}

// ---- mutator ------------------------------------------------------------------------------------

const char* const kNumbers[] = {"0",          "-1",         "1",          "2147483647", "2147483648", "-2147483648",
                                "4294967295", "4294967296", "4294967301", "9223372036854775807",
                                "18446744073709551615",     "18446744073709551616",   "1e308",     "-1e308",
                                "1e309",      "NaN",        "-0",         "300000000",  "2e9",       "65536",
                                "1e-320",     "0.5",        "null",       "true",       "\"\"",      "[]",
                                "{}",         "-9223372036854775808"};

Bytes mutate(const Bytes& in, const std::vector<Bytes>& seeds, Rng& r) {
  Bytes b = in;
  const int n_ops = 1 + static_cast<int>(r.below(4));
  for (int op = 0; op < n_ops; ++op) {
    switch (r.below(9)) {
      case 0:
      case 1:  // bit flips
        if (!b.empty())
          for (int k = 0, m = 1 + static_cast<int>(r.below(4)); k < m; ++k)
            b[r.below(b.size())] ^= static_cast<char>(1u << r.below(8));
        break;
      case 2:  // random byte overwrite (one or a few, a boundary byte value)
        if (!b.empty()) {
          static const unsigned char vals[] = {0x00, 0xff, 0x7f, 0x80, 0x01, '"', '\\', '[', '{', ']', '}', ':', ','};
          b[r.below(b.size())] = static_cast<char>(r.below(2) ? vals[r.below(sizeof vals)] : r.below(256));
        }
        break;
      case 3: {  // insert bytes
        const size_t at = r.below(b.size() + 1);
        Bytes ins(1 + r.below(8), '\0');
        for (char& c : ins) c = static_cast<char>(r.below(256));
        b.insert(at, ins);
        break;
      }
      case 4:  // delete a range
        if (!b.empty()) {
          const size_t at = r.below(b.size());
          b.erase(at, 1 + r.below(std::min<size_t>(64, b.size() - at)));
        }
        break;
      case 5: {  // splice: a piece of another seed
        const Bytes& o = seeds[r.below(seeds.size())];
        if (!o.empty()) {
          const size_t from = r.below(o.size()), len = 1 + r.below(std::min<size_t>(256, o.size() - from));
          const size_t at = r.below(b.size() + 1);
          if (r.below(2)) b.insert(at, o.substr(from, len));
          else b.replace(at, std::min(len, b.size() - at), o.substr(from, len));
        }
        break;
      }
      case 6:
      case 7: {  // replace a number (text formats) or a little-endian word (binary formats)
        std::vector<size_t> starts;
        for (size_t i = 0; i < b.size(); ++i)
          if ((b[i] >= '0' && b[i] <= '9') && (i == 0 || !(b[i - 1] >= '0' && b[i - 1] <= '9') ))
            starts.push_back(i);
        if (!starts.empty() && r.below(3) != 0) {
          const size_t at = starts[r.below(starts.size())];
          size_t end = at;
          while (end < b.size() && ((b[end] >= '0' && b[end] <= '9') || b[end] == '.' || b[end] == 'e' || b[end] == '-'))
            ++end;
          b.replace(at, end - at, kNumbers[r.below(sizeof kNumbers / sizeof *kNumbers)]);
        } else if (b.size() >= 8) {
          static const uint64_t words[] = {0, ~0ull, 0x7fffffffull, 0x80000000ull, 0xffffffffull, 0x100000000ull,
                                           1ull << 40, 0x7fffffffffffffffull, 1, 2, 255, 65535};
          const size_t at = r.below(b.size() - 7);
          const uint64_t w = words[r.below(sizeof words / sizeof *words)];
          const int width = r.below(2) ? 4 : 8;
          for (int k = 0; k < width; ++k) b[at + k] = static_cast<char>((w >> (8 * k)) & 0xff);
        }
        break;
      }
      case 8: {  // deep nesting
        const size_t depth = r.below(3) == 0 ? 100000 : 10 + r.below(200);
        const size_t at = r.below(b.size() + 1);
        const bool obj = r.below(2);
        Bytes open, close;
        for (size_t k = 0; k < depth; ++k) open += obj ? "{\"a\":" : "[";
        for (size_t k = 0; k < depth; ++k) close += obj ? "}" : "]";
        b.insert(at, open + "1" + close);
        break;
      }
    }
  }
  return b;
}

// ---- running one input --------------------------------------------------------------------------
enum class Outcome { Read, Refused, RefusedUnnamed, Failed };

constexpr rlim_t kMemCap = 3ull << 30;  // address space of a child (the process itself needs ~1 GB)
constexpr unsigned kTimeBudget = 20;    // seconds per input (a hang fails)

// Runs target.load(path) in a forked child; `why` says what failed.
Outcome run_one(const Target& t, const std::string& path, std::string& why, unsigned budget = kTimeBudget) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    why = "fork failed";
    return Outcome::Failed;
  }
  if (pid == 0) {
    // AddressSanitizer reserves terabytes of address space for its shadow memory, so an address-space
    // cap only breaks it; under ASan an oversized allocation is caught by the sanitizer instead
    // (scripts/gpu/sanitize.sh sets allocator_may_return_null=1: it surfaces as std::bad_alloc, a failure).
#if !defined(__SANITIZE_ADDRESS__)
    rlimit lim{kMemCap, kMemCap};
    setrlimit(RLIMIT_AS, &lim);
#endif
    alarm(budget);
    int code = 0;
    try {
      t.load(path);
      code = 0;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "std::bad_alloc\n");
      code = 3;
    } catch (const hz::Error& e) {
      // a refusal passes; one whose message does not name the file is counted (not failed)
      const std::string dir = fs::path(path).parent_path().string();
      code = std::strstr(e.what(), dir.c_str()) ? 10 : 11;
      const char* verbose = std::getenv("HZ_FUZZ_VERBOSE");  // 1: refusals not naming the file, 2: every refusal
      if (verbose && (code == 11 || std::string(verbose) == "2")) std::fprintf(stderr, "refusal: %.300s\n", e.what());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s (not an hz::Error): %.300s\n", typeid(e).name(), e.what());
      code = 4;
    } catch (...) {
      code = 5;
    }
    std::fflush(nullptr);
    _exit(code);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    why = sig == SIGALRM ? "hang (over " + std::to_string(budget) + " s)" : std::string("signal ") + strsignal(sig);
    return Outcome::Failed;
  }
  const int code = WEXITSTATUS(status);
  if (code == 0) return Outcome::Read;
  if (code == 10) return Outcome::Refused;
  if (code == 11) return Outcome::RefusedUnnamed;
  why = code == 3 ? "std::bad_alloc" : code == 4 ? "exception other than hz::Error" : "exit " + std::to_string(code);
  return Outcome::Failed;
}

struct Stats {
  int64_t run = 0, read = 0, refused = 0, unnamed = 0, failed = 0;
};

bool run_input(const Target& t, const Bytes& input, const std::string& work, const std::string& save, Stats& st,
               const std::string& label) {
  const std::string dir = work + "/case";
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (t.prepare) t.prepare(dir);
  const std::string path = dir + "/" + t.file;
  write_bytes(path, input);
  std::string why;
  Outcome o = run_one(t, path, why);
  if (o == Outcome::Read && t.must_refuse && label.rfind("seed", 0) != 0) {
    why = "read, but every input of this target is wrong and must be refused";
    o = Outcome::Failed;
  }
  ++st.run;
  if (o == Outcome::Read) ++st.read;
  if (o == Outcome::Refused || o == Outcome::RefusedUnnamed) ++st.refused;
  if (o == Outcome::RefusedUnnamed) ++st.unnamed;
  if (o != Outcome::Failed) return true;
  ++st.failed;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hz::fnv1a64(input.data(), input.size())));
  std::string kept;
  if (!save.empty()) {
    const std::string d = save + "/" + t.name;
    fs::create_directories(d);
    kept = d + "/" + hex + ".bin";
    if (!fs::exists(kept)) write_bytes(kept, input);
  }
  std::printf("FAIL %s %s: %s%s\n", t.name.c_str(), label.c_str(), why.c_str(), kept.empty() ? "" : (" -> " + kept).c_str());
  return false;
}

// What is not a file, in the input's place: each must be refused at once (a FIFO used to keep readers
// waiting for a writer for ever, /dev/zero to read without end), naming the file.
constexpr unsigned kNotAFileBudget = 5;  // seconds: a refusal takes milliseconds

bool run_not_a_file(const Target& t, const std::string& work, Stats& st) {
  bool all = true;
  for (const char* kind : {"fifo", "directory", "device", "socket"}) {
    const std::string dir = work + "/case";
    fs::remove_all(dir);
    fs::create_directories(dir);
    if (t.prepare) t.prepare(dir);
    const std::string path = dir + "/" + t.file;
    const std::string k = kind;
    int sock = -1;
    bool made = false;
    if (k == "fifo") made = mkfifo(path.c_str(), 0600) == 0;
    if (k == "directory") made = fs::create_directory(path);
    if (k == "device") {
      std::error_code ec;
      fs::create_symlink("/dev/zero", path, ec);
      made = !ec;
    }
    if (k == "socket" && path.size() < sizeof(sockaddr_un::sun_path)) {
      sock = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
      made = sock >= 0 && bind(sock, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(sock, 1) == 0;
    }
    if (!made) {
      if (sock >= 0) close(sock);
      if (k == "socket") continue;  // a path too long for a socket address: not this machine's to test
      std::printf("FAIL %s not_a_file %s: cannot make it\n", t.name.c_str(), kind);
      all = false;
      continue;
    }
    std::string why;
    const Outcome o = run_one(t, path, why, kNotAFileBudget);
    if (sock >= 0) close(sock);
    ++st.run;
    if (o == Outcome::Refused) {
      ++st.refused;
      continue;
    }
    ++st.failed;
    all = false;
    if (o == Outcome::Read) why = "read as if it were the file";
    if (o == Outcome::RefusedUnnamed) why = "refused without naming the file";
    std::printf("FAIL %s not_a_file %s: %s\n", t.name.c_str(), kind, why.c_str());
  }
  return all;
}

}  // namespace

#ifdef HZ_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string work = [] {
    char tmpl[] = "/tmp/hz_libfuzzer_XXXXXX";
    return std::string(mkdtemp(tmpl));
  }();
  static const std::vector<Target> targets = make_targets(work);
  static const Target* t = [] {
    const char* want = std::getenv("HZ_FUZZ_TARGET");
    for (const auto& x : targets)
      if (want && x.name == want) return &x;
    return &targets.front();
  }();
  const std::string dir = work + "/case";
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (t->prepare) t->prepare(dir);
  write_bytes(dir + "/" + t->file, Bytes(reinterpret_cast<const char*>(data), size));
  try {
    t->load(dir + "/" + t->file);
  } catch (const hz::Error&) {
  }
  return 0;  // anything else escapes and libFuzzer reports it
}
#else
// --selftest: the harness itself must see each kind of failure (and pass a refusal).
int selftest(const std::string& work) {
  struct Case {
    const char* name;
    bool should_pass;
    std::function<void(const std::string&)> load;
  };
  const std::vector<Case> cases{
      {"refusal", true, [](const std::string&) { throw hz::ValueError("refused"); }},
      {"read", true, [](const std::string&) {}},
      {"segfault", false, [](const std::string&) { raise(SIGSEGV); }},
      {"abort", false, [](const std::string&) { std::abort(); }},
      {"bad_alloc", false, [](const std::string&) { throw std::bad_alloc(); }},
      {"runtime_error", false, [](const std::string&) { throw std::runtime_error("not an hz::Error"); }},
      {"memory cap", false, [](const std::string&) {
         std::vector<std::unique_ptr<char[]>> hog;
         for (int i = 0; i < 64; ++i) hog.emplace_back(new char[size_t{1} << 27]);
       }},
  };
  int bad = 0;
  for (const Case& c : cases) {
#if defined(__SANITIZE_ADDRESS__)
    if (std::string(c.name) == "memory cap") {  // no address-space cap under ASan (see run_input)
      std::printf("SELFTEST memory cap: not checked under AddressSanitizer\n");
      continue;
    }
#endif
    Target t{std::string("selftest_") + c.name, "input.bin", {"x"}, nullptr, c.load};
    Stats st;
    const bool passed = run_input(t, "x", work, "", st, "selftest");
    if (passed != c.should_pass) {
      std::printf("SELFTEST %s: the harness %s it\n", c.name, passed ? "passed" : "failed");
      ++bad;
    }
  }
  std::printf("hz_fuzz selftest: %s\n", bad ? "BROKEN" : "every failure kind detected");
  return bad ? 1 : 0;
}

int main(int argc, char** argv) {
  int64_t iterations = 300;
  uint64_t seed = 1;
  double seconds = 0;
  std::string only, save, replay;
  bool list = false, self = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    // a number or a usage error (std::stod would end the program with an uncaught exception)
    auto number = [&](const std::string& v) -> double {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !std::isfinite(x) || x < 0) {
        std::fprintf(stderr, "%s takes a non-negative number, got '%s'\n", a.c_str(), v.c_str());
        std::exit(2);
      }
      return x;
    };
    if (a == "--iterations") iterations = static_cast<int64_t>(number(val()));
    else if (a == "--seed") {
      const std::string v = val();
      char* end = nullptr;
      seed = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || v[0] == '-') {
        std::fprintf(stderr, "--seed takes a whole non-negative number, got '%s'\n", v.c_str());
        std::exit(2);
      }
    }
    else if (a == "--target") only = val();
    else if (a == "--seconds") seconds = number(val());
    else if (a == "--save") save = val();
    else if (a == "--replay") replay = val();
    else if (a == "--list") list = true;
    else if (a == "--selftest") self = true;
    else {
      std::fprintf(stderr,
                   "usage: hz_fuzz [--iterations N] [--seed S] [--target NAME] [--seconds T] [--save DIR] "
                   "[--replay DIR] [--list]\n");
      return 2;
    }
  }
  char tmpl[] = "/tmp/hz_fuzz_XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("mkdtemp");
    return 2;
  }
  const std::string work = tmpl;
  if (self) {
    const int rc = selftest(work);
    fs::remove_all(work);
    return rc;
  }
  const std::vector<Target> targets = make_targets(work);
  if (list) {
    for (const auto& t : targets) std::printf("%s (%zu seeds)\n", t.name.c_str(), t.seeds.size());
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  int64_t failures = 0;
  std::vector<Stats> stats(targets.size());
  // 1. what is not a file in each input's place, the regression inputs, then the seeds themselves
  Stats not_a_file;
  for (size_t k = 0; k < targets.size(); ++k) {
    const Target& t = targets[k];
    if (!only.empty() && t.name != only) continue;
    if (t.from_file) failures += !run_not_a_file(t, work, not_a_file);
  }
  for (size_t k = 0; k < targets.size(); ++k) {
    const Target& t = targets[k];
    if (!only.empty() && t.name != only) continue;
    if (t.seeds.empty()) {
      std::printf("FAIL %s: no seed files found under %s\n", t.name.c_str(), HZ_SOURCE_DIR);
      ++failures;
      continue;
    }
    if (!replay.empty() && fs::is_directory(replay + "/" + t.name)) {
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(replay + "/" + t.name)) files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) failures += !run_input(t, read_bytes(f), work, "", stats[k], f);
    }
    for (size_t s = 0; s < t.seeds.size(); ++s)
      failures += !run_input(t, t.seeds[s], work, save, stats[k], "seed " + std::to_string(s));
  }
  // 2. mutations, round robin over the targets
  Rng rng{seed * 0x9E3779B97F4A7C15ull + 1};
  for (int64_t it = 0;; ++it) {
    if (seconds > 0 ? elapsed() >= seconds : it >= iterations) break;
    for (size_t k = 0; k < targets.size(); ++k) {
      const Target& t = targets[k];
      if ((!only.empty() && t.name != only) || t.seeds.empty()) continue;
      const size_t n = t.n_mutable ? std::min(t.n_mutable, t.seeds.size()) : t.seeds.size();
      const Bytes& seed = t.seeds[rng.below(n)];
      const Bytes input = t.mutator ? t.mutator(seed, t.seeds, rng) : mutate(seed, t.seeds, rng);
      failures += !run_input(t, input, work, save, stats[k], "iteration " + std::to_string(it));
    }
  }
  int64_t total = 0;
  for (size_t k = 0; k < targets.size(); ++k) {
    if (!stats[k].run) continue;
    total += stats[k].run;
    std::printf("%-16s %6lld inputs: %6lld read, %6lld refused (%lld not naming the file), %lld failed\n",
                targets[k].name.c_str(), static_cast<long long>(stats[k].run), static_cast<long long>(stats[k].read),
                static_cast<long long>(stats[k].refused), static_cast<long long>(stats[k].unnamed),
                static_cast<long long>(stats[k].failed));
  }
  if (not_a_file.run) {
    total += not_a_file.run;
    std::printf("%-16s %6lld inputs: %6lld refused, %lld failed\n", "not_a_file", static_cast<long long>(not_a_file.run),
                static_cast<long long>(not_a_file.refused), static_cast<long long>(not_a_file.failed));
  }
  std::printf("hz_fuzz: %lld inputs in %.1f s, %lld failed (seed %llu)\n", static_cast<long long>(total), elapsed(),
              static_cast<long long>(failures), static_cast<unsigned long long>(seed));
  fs::remove_all(work);
  return failures == 0 ? 0 : 1;
}
#endif
