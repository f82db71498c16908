#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/bf16.h"
#include "core/file.h"
#include "core/json_guard.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; port safetensors.cpp first");

namespace hz::io {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr uint64_t kMaxHeader = 100000000;  // the safetensors library's limit
constexpr uint64_t kMaxIndex = 64ull << 20;   // model.safetensors.index.json (real ones: < 1 MB)

struct DtypeInfo {
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
                                 {"I16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2}, {"U32", 4},
                                 {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};

std::string errno_text() { return std::strerror(errno); }

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError(path + ": " + what);
}

std::string dtype_list() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : " ") + std::string(d.name);
  return s;
}

// The file's dtype name of a Horizon dtype as stored under `store`.
std::string stored_dtype(DType t, StoreAs store) {
  if (is_floating(t) && store != StoreAs::Native) {
    switch (store) {
      case StoreAs::F32: return "F32";
      case StoreAs::BF16: return "BF16";
      case StoreAs::F16: return "F16";
      default: break;
    }
  }
  switch (t) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    default: break;
  }
  throw DTypeError(std::string("safetensors: no safetensors dtype for ") + dtype_name(t));
}

// The bytes of `t` (CPU, contiguous) as the file stores them.
std::vector<unsigned char> encode(const Tensor& t_in, const std::string& dtype) {
  const Tensor t = t_in.to(Device::cpu()).contiguous();
  const int64_t n = t.numel();
  std::vector<unsigned char> out(static_cast<size_t>(n) * safetensors_itemsize(dtype));
  if ((dtype == "F32" && t.dtype() == DType::F32) || (dtype == "F64" && t.dtype() == DType::F64) ||
      (dtype == "BF16" && t.dtype() == DType::BF16) || (dtype == "I64" && t.dtype() == DType::I64) ||
      (dtype == "I32" && t.dtype() == DType::I32)) {
    if (!out.empty()) std::memcpy(out.data(), t.raw_data(), out.size());
    return out;
  }
  if (dtype == "F32") {
    const Tensor f = t.to(DType::F32);
    if (!out.empty()) std::memcpy(out.data(), f.raw_data(), out.size());
    return out;
  }
  if (dtype == "BF16") {
    const Tensor f = t.to(DType::BF16);  // round to nearest even
    if (!out.empty()) std::memcpy(out.data(), f.raw_data(), out.size());
    return out;
  }
  if (dtype == "F16") {
    const Tensor f = t.to(DType::F32);  // f64 -> f32 -> f16: f32 keeps more bits than f16 needs
    const float* p = f.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = float_to_half(p[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
  }
  throw DTypeError("safetensors: cannot store " + std::string(dtype_name(t.dtype())) + " as " + dtype);
}

void write_file_atomic(const std::string& path, const std::string& header,
                       const std::vector<std::vector<unsigned char>>& blobs) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot create " + tmp + ": " + errno_text() + "; check the directory and its permissions");
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, b, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const std::string e = errno_text();
        ::close(fd);
        std::remove(tmp.c_str());
        fail(path, "write failed: " + e + "; check free disk space");
      }
      b += w;
      n -= static_cast<size_t>(w);
    }
  };
  unsigned char len[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  put(len, 8);
  put(header.data(), header.size());
  for (const auto& b : blobs) put(b.data(), b.size());
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::remove(tmp.c_str());
    fail(path, "could not flush the file: " + errno_text());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(path, "cannot rename " + tmp + " over it: " + errno_text());
  }
}

}  // namespace

// ---- half precision --------------------------------------------------------------------------
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    std::memcpy(&u, &v, 4);
    u |= sign;
  } else if (e == 31) {
    u = sign | 0x7f800000u | (m << 13);
  } else {
    u = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // Inf or NaN (NaN keeps the top payload bits and stays quiet)
    if (a == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (a < 0x38800000u) {                        // below 2^-14: a half subnormal (or zero)
    if (a <= 0x33000000u) return sign;          // <= 2^-25 rounds to zero (the tie goes to even 0)
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24: units of 2^-24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = (a >> 13) - (112u << 10);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

size_t safetensors_itemsize(const std::string& dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.name) return d.size;
  return 0;
}

// ---- reading ----------------------------------------------------------------------------------
struct SafetensorsFile::Mapping {
  void* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base) ::munmap(base, size);
  }
  const unsigned char* data() const { return static_cast<const unsigned char*>(base); }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  std::string why;
  const int fd = open_input(path, why);  // a regular file only (core/file.h)
  if (fd < 0) fail(path, why);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string e = errno_text();
    ::close(fd);
    fail(path, "cannot stat: " + e);
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  f.map_ = std::make_shared<Mapping>();
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string e = errno_text();
      ::close(fd);
      fail(path, "cannot memory-map the file: " + e);
    }
    f.map_->base = p;
    f.map_->size = size;
  }
  ::close(fd);
  if (size < 8)
    fail(path, "the file holds " + std::to_string(size) +
                   " bytes, fewer than the 8-byte header length: it is truncated or not a safetensors file");
  const unsigned char* b = f.map_->data();
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(b[i]) << (8 * i);
  if (n > kMaxHeader)
    fail(path, "header length " + std::to_string(n) +
                   " is larger than the 100 MB safetensors allows: the file is corrupt or not a safetensors file");
  if (n > size - 8)
    fail(path, "the header claims " + std::to_string(n) + " bytes but only " + std::to_string(size - 8) +
                   " follow the length field: the file is truncated (re-download or re-save it)");
  if (n == 0 || b[8] != '{')
    fail(path, "the header does not start with '{': not a safetensors file (or a corrupt one)");
  f.header_size_ = n;
  const std::string_view header_text(reinterpret_cast<const char*>(b + 8), n);
  if (const std::string deep = json_depth_problem(header_text); !deep.empty()) fail(path, "the header: " + deep);
  json h;
  try {
    h = json::parse(header_text.begin(), header_text.end());
  } catch (const json::exception& e) {
    fail(path, std::string("the header is not valid JSON (") + e.what() + "): the file is corrupt");
  }
  if (!h.is_object()) fail(path, "the header must be a JSON object of tensors");
  const uint64_t data_len = size - 8 - n;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(path, "__metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(path, "__metadata__ value of '" + m.key() + "' is not a string (the format allows only strings)");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object()) fail(path, where + ": expected an object {dtype, shape, data_offsets}");
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail(path, where + ": missing or non-string 'dtype'");
    if (!v.contains("shape") || !v["shape"].is_array()) fail(path, where + ": missing or non-list 'shape'");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      fail(path, where + ": 'data_offsets' must be a list [begin, end]");
    TensorEntry e;
    e.name = name;
    e.dtype = v["dtype"].get<std::string>();
    const size_t item = safetensors_itemsize(e.dtype);
    if (item == 0) fail(path, where + ": unknown dtype '" + e.dtype + "' (the format knows " + dtype_list() + ")");
    uint64_t numel = 1;
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail(path, where + ": shape entries must be non-negative integers, got " + d.dump());
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, dim, &numel))
        fail(path, where + ": shape " + v["shape"].dump() + " overflows");
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    for (const json& o : v["data_offsets"])
      if (!o.is_number_unsigned()) fail(path, where + ": data_offsets must be non-negative integers, got " + o.dump());
    e.begin = v["data_offsets"][0].get<uint64_t>();
    e.end = v["data_offsets"][1].get<uint64_t>();
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(item), &nbytes)) fail(path, where + ": size overflows");
    if (e.end < e.begin) fail(path, where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] end before they begin");
    if (e.end - e.begin != nbytes)
      fail(path, where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] hold " +
                     std::to_string(e.end - e.begin) + " bytes but " + e.dtype + " " + v["shape"].dump() + " needs " +
                     std::to_string(nbytes));
    if (e.end > data_len)
      fail(path, where + ": needs bytes up to " + std::to_string(e.end) + " of the data buffer, which ends at byte " +
                     std::to_string(data_len) + ": the file is truncated (re-download or re-save it)");
    f.entries_.push_back(std::move(e));
  }
  // The tensors must tile the buffer: no overlap, no hole.
  std::vector<const TensorEntry*> by_offset;
  for (const auto& e : f.entries_) by_offset.push_back(&e);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  const TensorEntry* prev = nullptr;
  for (const TensorEntry* e : by_offset) {
    if (e->begin < at)
      fail(path, "tensor '" + e->name + "' (bytes [" + std::to_string(e->begin) + ", " + std::to_string(e->end) +
                     ")) overlaps tensor '" + prev->name + "' (ending at byte " + std::to_string(at) + "): the header is corrupt");
    if (e->begin > at)
      fail(path, "bytes [" + std::to_string(at) + ", " + std::to_string(e->begin) + ") of the data buffer belong to no tensor (before '" +
                     e->name + "'): the header is corrupt");
    at = e->end;
    prev = e;
  }
  if (at != data_len)
    fail(path, "the data buffer holds " + std::to_string(data_len) + " bytes but the tensors cover " + std::to_string(at) +
                   ": trailing bytes belong to no tensor (corrupt, or a file appended to)");
  std::sort(f.entries_.begin(), f.entries_.end(), [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
  return f;
}

namespace {
const TensorEntry* find_entry(const std::vector<TensorEntry>& entries, const std::string& name) {
  auto it = std::lower_bound(entries.begin(), entries.end(), name,
                             [](const TensorEntry& e, const std::string& n) { return e.name < n; });
  return it != entries.end() && it->name == name ? &*it : nullptr;
}
}  // namespace

bool SafetensorsFile::has(const std::string& name) const { return find_entry(entries_, name) != nullptr; }

const TensorEntry& SafetensorsFile::entry(const std::string& name) const {
  const TensorEntry* e = find_entry(entries_, name);
  if (!e) fail(path_, "no tensor named '" + name + "'");
  return *e;
}

const unsigned char* SafetensorsFile::bytes(const std::string& name) const {
  return map_->data() + 8 + header_size_ + entry(name).begin;
}

Tensor SafetensorsFile::load(const std::string& name) const {
  const TensorEntry& e = entry(name);
  const unsigned char* src = bytes(name);
  const int64_t n = e.numel();
  auto raw = [&](DType dt) {
    Tensor t = Tensor::empty(e.shape, dt);
    if (n > 0) std::memcpy(t.raw_data(), src, e.end - e.begin);
    return t;
  };
  if (e.dtype == "F32") return raw(DType::F32);
  if (e.dtype == "F64") return raw(DType::F64);
  if (e.dtype == "BF16") return raw(DType::BF16);
  if (e.dtype == "I64") return raw(DType::I64);
  if (e.dtype == "I32") return raw(DType::I32);
  if (e.dtype == "F16") {
    Tensor t = Tensor::empty(e.shape, DType::F32);
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      p[i] = half_to_float(h);
    }
    return t;
  }
  fail(path_, "tensor '" + name + "' has dtype " + e.dtype +
                  ", which Horizon does not load (it reads F64, F32, F16, BF16, I64 and I32)");
}

// ---- directories and shards -------------------------------------------------------------------
SafetensorsSet SafetensorsSet::open_dir(const std::string& dir) {
  SafetensorsSet s;
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) throw SafetensorsError(dir + ": not a directory");
  const fs::path single = d / "model.safetensors", index = d / "model.safetensors.index.json";
  if (fs::exists(single, ec)) {
    s.files_.push_back(SafetensorsFile::open(single.string()));
    for (const auto& e : s.files_[0].entries()) s.where_[e.name] = 0;
    return s;
  }
  if (!fs::exists(index, ec)) {
    if (fs::exists(d / "pytorch_model.bin", ec) || fs::exists(d / "pytorch_model.bin.index.json", ec))
      throw SafetensorsError(dir + ": holds only pytorch_model.bin (a pickle, which Horizon does not execute); convert it "
                                   "with transformers: AutoModelForCausalLM.from_pretrained(dir).save_pretrained(out_dir) "
                                   "writes safetensors");
    throw SafetensorsError(dir + ": no model.safetensors and no model.safetensors.index.json");
  }
  const std::string ipath = index.string();
  json j;
  {
    std::string text;
    if (const std::string why = read_file_capped(ipath, kMaxIndex, text); !why.empty())
      throw SafetensorsError(ipath + ": " + why);
    if (const std::string deep = json_depth_problem(text); !deep.empty()) throw SafetensorsError(ipath + ": " + deep);
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      throw SafetensorsError(ipath + ": not valid JSON (" + e.what() + ")");
    }
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw SafetensorsError(ipath + ": expected an object with a 'weight_map' {tensor: shard file}");
  std::map<std::string, std::string> weight_map;
  std::map<std::string, size_t> file_index;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) throw SafetensorsError(ipath + ": weight_map['" + it.key() + "'] is not a file name");
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos || file == "." || file == "..")
      throw SafetensorsError(ipath + ": weight_map['" + it.key() + "'] = '" + file +
                             "' is not a plain file name next to the index (refused: shards must sit in the same directory)");
    weight_map[it.key()] = file;
    if (!file_index.count(file)) {
      const fs::path p = d / file;
      if (!fs::exists(p, ec))
        throw SafetensorsError(ipath + ": shard '" + file + "' (holding '" + it.key() + "') is missing from " + dir);
      file_index[file] = s.files_.size();
      s.files_.push_back(SafetensorsFile::open(p.string()));
    }
  }
  if (weight_map.empty()) throw SafetensorsError(ipath + ": the weight_map is empty");
  for (const auto& [name, file] : weight_map) {
    const size_t k = file_index.at(file);
    if (!s.files_[k].has(name))
      throw SafetensorsError(ipath + ": lists '" + name + "' in " + file + ", but that shard has no such tensor");
    s.where_[name] = k;
  }
  for (const auto& [file, k] : file_index)
    for (const auto& e : s.files_[k].entries()) {
      auto it = weight_map.find(e.name);
      if (it == weight_map.end())
        throw SafetensorsError((d / file).string() + ": holds '" + e.name + "', which the index does not list");
      if (it->second != file)
        throw SafetensorsError((d / file).string() + ": holds '" + e.name + "', which the index places in " + it->second +
                               " (a tensor in two shards)");
    }
  return s;
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  for (const auto& [n, k] : where_) out.push_back(n);
  return out;
}

const TensorEntry& SafetensorsSet::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw SafetensorsError("no tensor named '" + name + "' in the checkpoint");
  return files_[it->second].entry(name);
}

Tensor SafetensorsSet::load(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw SafetensorsError("no tensor named '" + name + "' in the checkpoint");
  return files_[it->second].load(name);
}

const unsigned char* SafetensorsSet::bytes(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw SafetensorsError("no tensor named '" + name + "' in the checkpoint");
  return files_[it->second].bytes(name);
}

const std::string& SafetensorsSet::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw SafetensorsError("no tensor named '" + name + "' in the checkpoint");
  return files_[it->second].path();
}

std::vector<std::string> SafetensorsSet::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f.path());
  return out;
}

std::map<std::string, std::string> SafetensorsSet::metadata() const {
  return files_.empty() ? std::map<std::string, std::string>{} : files_[0].metadata();
}

// ---- writing ----------------------------------------------------------------------------------
StoreAs parse_store_as(const std::string& s) {
  if (s == "native") return StoreAs::Native;
  if (s == "f32") return StoreAs::F32;
  if (s == "bf16") return StoreAs::BF16;
  if (s == "f16") return StoreAs::F16;
  throw ValueError("unknown storage dtype '" + s + "'; expected one of: native f32 bf16 f16");
}

namespace {
struct Encoded {
  std::string name, dtype;
  Shape shape;
  std::vector<unsigned char> bytes;
};

std::vector<Encoded> encode_all(const std::map<std::string, Tensor>& tensors, StoreAs store) {
  std::vector<Encoded> out;
  for (const auto& [name, t] : tensors) {
    HZ_CHECK(!name.empty() && name != "__metadata__", ValueError, "safetensors: invalid tensor name '", name, "'");
    HZ_CHECK(t.defined(), ValueError, "safetensors: tensor '", name, "' is undefined");
    Encoded e;
    e.name = name;
    e.dtype = stored_dtype(t.dtype(), store);
    e.shape = t.shape();
    e.bytes = encode(t, e.dtype);
    out.push_back(std::move(e));
  }
  return out;
}

void write_encoded(const std::string& path, const std::vector<const Encoded*>& items,
                   const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  uint64_t at = 0;
  std::vector<std::vector<unsigned char>> blobs;
  for (const Encoded* e : items) {
    h[e->name] = {{"dtype", e->dtype}, {"shape", e->shape}, {"data_offsets", {at, at + e->bytes.size()}}};
    at += e->bytes.size();
    blobs.push_back(e->bytes);
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  write_file_atomic(path, header, blobs);
}
}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata, StoreAs store) {
  const std::vector<Encoded> enc = encode_all(tensors, store);
  std::vector<const Encoded*> items;
  for (const auto& e : enc) items.push_back(&e);
  write_encoded(path, items, metadata);
}

std::vector<std::string> save_safetensors_dir(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                                              const std::map<std::string, std::string>& metadata, StoreAs store,
                                              uint64_t max_shard_bytes) {
  HZ_CHECK(max_shard_bytes > 0, ValueError, "safetensors: max_shard_bytes must be positive");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) throw SafetensorsError(dir + ": cannot create the directory");
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind("model", 0) == 0 && n.find(".safetensors") != std::string::npos)
      throw SafetensorsError(dir + ": already holds " + n + "; write into an empty directory (a stale shard would be read "
                                   "together with the new ones)");
  }
  const std::vector<Encoded> enc = encode_all(tensors, store);
  uint64_t total = 0;
  for (const auto& e : enc) total += e.bytes.size();
  std::vector<std::vector<const Encoded*>> shards(1);
  uint64_t in_shard = 0;
  for (const auto& e : enc) {
    if (!shards.back().empty() && in_shard + e.bytes.size() > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&e);
    in_shard += e.bytes.size();
  }
  std::vector<std::string> written;
  if (shards.size() == 1) {
    const std::string p = (fs::path(dir) / "model.safetensors").string();
    write_encoded(p, shards[0], metadata);
    written.push_back(p);
    return written;
  }
  // as transformers' save_pretrained writes it (json.dumps(index, indent=2, sort_keys=True) + "\n"):
  // metadata.total_parameters (the stored tensors' elements: the model's parameters, the tied head
  // not stored) and total_size (their bytes), weight_map in name order
  uint64_t params = 0;
  for (const auto& e : enc) params += static_cast<uint64_t>(shape_numel(e.shape));
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_parameters", params}, {"total_size", total}};
  nlohmann::ordered_json wm = nlohmann::ordered_json::object();
  const size_t n = shards.size();
  for (size_t k = 0; k < n; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n);
    const std::string p = (fs::path(dir) / name).string();
    write_encoded(p, shards[k], metadata);
    written.push_back(p);
    for (const Encoded* e : shards[k]) wm[e->name] = name;
  }
  index["weight_map"] = wm;
  const std::string ip = (fs::path(dir) / "model.safetensors.index.json").string();
  hz::write_file_atomic(ip, index.dump(2) + "\n");  // core/file.h; the shards are whole before the index names them
  written.push_back(ip);
  return written;
}

uint64_t parse_byte_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  HZ_CHECK(i > 0 && i <= 18, ValueError, "size '", s, "' must start with a whole number (e.g. 5GB, 500MB, 100KB)");
  const uint64_t v = std::stoull(s.substr(0, i));
  std::string unit = s.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::pair<const char*, uint64_t> units[] = {
      {"", 1},          {"B", 1},          {"KB", 1000ull},         {"MB", 1000000ull}, {"GB", 1000000000ull},
      {"KIB", 1024ull}, {"MIB", 1ull << 20}, {"GIB", 1ull << 30}};
  for (const auto& [u, m] : units)
    if (unit == u) return v * m;
  throw ValueError("size '" + s + "': unknown unit '" + s.substr(i) + "'; use B, KB, MB, GB (decimal) or KiB, MiB, GiB");
}

}  // namespace hz::io
