#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "core/file.h"
#include "core/hash.h"
#include "core/isolate.h"
#include "io/hdf5.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint checksums hash raw little-endian bytes; port checkpoint.cpp first");

namespace hz::train {

namespace fs = std::filesystem;
namespace h5 = io::h5;

namespace {

// ---- FNV-1a 64 --------------------------------------------------------------------------------
struct Fnv1a64 {
  uint64_t h = kFnvOffset;
  void bytes(const void* p, size_t n) { h = fnv1a64(p, n, h); }
  void u64(uint64_t v) {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(le, 8);
  }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
};

// Tensors as they are written: on the CPU, row-major contiguous.
using TensorMap = std::map<std::string, Tensor>;
TensorMap host_contiguous(const TensorMap& m) {
  TensorMap out;
  for (const auto& [k, t] : m) out.emplace(k, t.to(Device::cpu()).contiguous());
  return out;
}

uint64_t checksum_of(int64_t format_version, int64_t step, int64_t tokens_seen,
                     const TensorMap& model, const TensorMap& optimizer,
                     const std::map<std::string, int64_t>& counters,
                     const std::map<std::string, std::string>& meta) {
  Fnv1a64 f;
  f.str("horizon-checkpoint");
  f.u64(static_cast<uint64_t>(format_version));
  f.u64(static_cast<uint64_t>(step));
  f.u64(static_cast<uint64_t>(tokens_seen));
  const std::pair<const char*, const TensorMap*> sections[] = {{"model", &model},
                                                               {"optimizer", &optimizer}};
  for (const auto& [name, map] : sections) {
    f.str(name);
    f.u64(map->size());
    for (const auto& [key, t] : *map) {
      f.str(key);
      f.str(dtype_name(t.dtype()));
      f.u64(static_cast<uint64_t>(t.dim()));
      for (auto d : t.shape()) f.u64(static_cast<uint64_t>(d));
      const size_t nbytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
      f.u64(nbytes);
      if (nbytes) f.bytes(t.raw_data(), nbytes);
    }
  }
  f.str("counters");
  f.u64(counters.size());
  for (const auto& [k, v] : counters) {
    f.str(k);
    f.u64(static_cast<uint64_t>(v));
  }
  f.str("meta");
  f.u64(meta.size());
  for (const auto& [k, v] : meta) {
    f.str(k);
    f.str(v);
  }
  return f.h;
}

// ---- dtypes in the file -------------------------------------------------------------------------
DType dtype_from_file(const h5::Dataset& d) {
  if (d.has_attr("dtype")) {
    const std::string name = d.read_attr_string("dtype");
    for (int i = 0; i < static_cast<int>(DType::Count); ++i) {
      const auto t = static_cast<DType>(i);
      if (name != dtype_name(t)) continue;
      if (!h5::stores(d, t))
        throw CheckpointError(d.name() + ": attribute dtype=\"" + name +
                              "\" does not match the stored HDF5 type");
      return t;
    }
    throw CheckpointError(d.name() + ": unknown dtype attribute \"" + name +
                          "\" (supported: f32, f64, bf16, i32, i64)");
  }
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64})
    if (h5::stores(d, t)) return t;
  throw CheckpointError(d.name() +
                        ": unsupported HDF5 element type (need f32, f64, i32, i64, or u16 with "
                        "attribute dtype=\"bf16\")");
}

// ---- validation -------------------------------------------------------------------------------
void check_key(const std::string& section, const std::string& key) {
  HZ_CHECK(!key.empty(), ValueError, "save_checkpoint: empty key in ", section,
           "; every entry needs a name");
  HZ_CHECK(key.find('\0') == std::string::npos, ValueError, "save_checkpoint: key in ", section,
           " contains a NUL byte (HDF5 names are C strings); rename it");
}

void validate(const CheckpointData& c) {
  HZ_CHECK(c.format_version == kCheckpointFormatVersion, ValueError,
           "save_checkpoint: format_version ", c.format_version,
           " requested, but this build writes format_version ", kCheckpointFormatVersion,
           "; leave CheckpointData::format_version at its default");
  for (const auto* m : {&c.model, &c.optimizer}) {
    const char* section = m == &c.model ? "model" : "optimizer";
    for (const auto& [k, t] : *m) {
      check_key(section, k);
      HZ_CHECK(t.defined(), ValueError, "save_checkpoint: ", section, " tensor '", k,
               "' is undefined; drop it or give it a value");
    }
  }
  for (const auto& [k, v] : c.counters) check_key("counters", k);
  for (const auto& [k, v] : c.meta) {
    check_key("meta", k);
    HZ_CHECK(v.find('\0') == std::string::npos, ValueError, "save_checkpoint: meta '", k,
             "' contains a NUL byte; HDF5 strings cannot hold it");
  }
}

// ---- files ------------------------------------------------------------------------------------
std::string errno_text() { return std::strerror(errno); }

// ---- the whole-file checksum in the HDF5 user block ------------------------------------------------
// libhdf5 does not survive every damaged file (a flipped byte in a B-tree header makes it read out
// of bounds), so a checkpoint carries a checksum of its HDF5 bytes in the user block (bytes HDF5
// reserves for the application at the start of the file) and load_checkpoint verifies it before
// libhdf5 reads any tensor (libhdf5 reads the structure first, in the isolated child, so that the
// datasets it declares bound the hashing: checkpoint.h, "Loading").
constexpr char kSumMagic[8] = {'H', 'Z', 'S', 'U', 'M', '0', '0', '1'};
constexpr uint64_t kUserblock = 512;
constexpr unsigned char kHdf5Sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

uint64_t get_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
void put_le64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// FNV-1a 64 of n zero bytes after state h: each multiplies by the prime (h ^ 0 == h), so h * prime^n.
uint64_t fnv_zeros(uint64_t h, uint64_t n) {
  uint64_t p = kFnvPrime;
  for (; n; n >>= 1, p *= p)
    if (n & 1) h *= p;
  return h;
}

// FNV-1a 64 over bytes [from, size) of fd. Holes of a sparse file (SEEK_HOLE) read as zeros and are
// hashed as such without reading them, so a dataset never written costs nothing to verify.
uint64_t hash_from(int fd, uint64_t from, uint64_t size, const std::string& path) {
  std::vector<unsigned char> buf(1 << 20);
  uint64_t h = kFnvOffset;
  for (uint64_t at = from, data_end = from; at < size;) {
    if (at >= data_end) {  // where the next data starts and ends (a file system without holes: all data)
      const off_t d = ::lseek(fd, static_cast<off_t>(at), SEEK_DATA);
      if (d < 0 && errno == ENXIO) {  // a hole to the end
        h = fnv_zeros(h, size - at);
        break;
      }
      if (d >= 0 && static_cast<uint64_t>(d) > at) {
        const uint64_t to = std::min<uint64_t>(static_cast<uint64_t>(d), size);
        h = fnv_zeros(h, to - at);
        at = to;
        continue;
      }
      const off_t e = d < 0 ? -1 : ::lseek(fd, static_cast<off_t>(at), SEEK_HOLE);
      data_end = e < 0 ? size : std::min<uint64_t>(static_cast<uint64_t>(e), size);
      if (data_end <= at) data_end = size;
    }
    const ssize_t n = ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), data_end - at), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw CheckpointError(path + ": cannot read the checkpoint: " + (n < 0 ? errno_text() : "unexpected end of file"));
    h = fnv1a64(buf.data(), static_cast<size_t>(n), h);
    at += static_cast<uint64_t>(n);
  }
  return h;
}

// Writes the user block's header: magic, file size, checksum of the bytes after the block.
void seal(const std::string& tmp, const std::string& ckpt) {
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(ckpt + ": cannot reopen " + tmp + " to checksum it: " + errno_text());
  struct stat st {};
  std::string err;
  if (::fstat(fd, &st) != 0) err = errno_text();
  unsigned char head[24];
  if (err.empty()) {
    std::memcpy(head, kSumMagic, 8);
    put_le64(head + 8, static_cast<uint64_t>(st.st_size));
    try {
      put_le64(head + 16, hash_from(fd, kUserblock, static_cast<uint64_t>(st.st_size), ckpt));
    } catch (const CheckpointError& e) {
      err = e.what();
    }
  }
  if (err.empty() && ::pwrite(fd, head, sizeof head, 0) != static_cast<ssize_t>(sizeof head)) err = errno_text();
  ::close(fd);
  if (!err.empty()) throw CheckpointError(ckpt + ": could not write the checksum block: " + err + "; check free disk space");
}

// Reads the user block of a sealed checkpoint before libhdf5 sees the file: the file size it declares
// must be the file's, and the checksum it holds comes back (verified later, once the file's datasets
// bound how much hashing is legitimate). A file without it (the HDF5 signature at byte 0: written
// before checkpoints were sealed, or its block stripped) is refused: libhdf5 would read it unverified.
// Empty for a file that is neither sealed nor HDF5 (the reader then says what it is).
std::optional<uint64_t> read_seal(const std::string& path, uint64_t size) {
  std::string why;
  const int fd = open_input(path, why);  // a regular file only (core/file.h)
  if (fd < 0) throw CheckpointError(path + ": cannot read the checkpoint: " + why);
  unsigned char head[24] = {}, sig[8] = {};
  const bool has_head = ::pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head);
  const bool sig_at_block = size >= kUserblock + 8 && ::pread(fd, sig, 8, kUserblock) == 8 &&
                            std::memcmp(sig, kHdf5Sig, 8) == 0;
  ::close(fd);
  std::string bad;
  if (has_head && std::memcmp(head, kSumMagic, 8) == 0) {
    const uint64_t want_size = get_le64(head + 8);
    if (want_size != size)
      bad = "the file holds " + std::to_string(size) + " bytes but was written with " + std::to_string(want_size) +
            " (truncated or appended to): checksum mismatch: the file is corrupted; use an earlier checkpoint";
    else
      return get_le64(head + 16);
  } else if (!has_head && size > 0 && std::memcmp(head, kSumMagic, std::min<uint64_t>(size, 8)) == 0) {
    bad = "truncated (" + std::to_string(size) + " bytes, the checksum block incomplete); use an earlier checkpoint";
  } else if (sig_at_block && !(has_head && std::memcmp(head, kHdf5Sig, 8) == 0)) {
    bad = "the checksum block at the start of the file is damaged: the file is corrupted; use an earlier checkpoint";
  } else if (has_head && std::memcmp(head, kHdf5Sig, 8) == 0) {
    bad = "an HDF5 file without Horizon's checksum block (written before checkpoints were sealed, or its first " +
          std::to_string(kUserblock) + " bytes removed): Horizon reads only sealed checkpoints, since libhdf5 "
          "cannot read an unverified file safely; h5py still reads it";
  }
  if (!bad.empty()) throw CheckpointError(path + ": " + bad);
  return std::nullopt;
}

void fsync_path(const std::string& p, bool directory, const std::string& ckpt) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw CheckpointError(ckpt + ": cannot open " + p + " to fsync it: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string err = rc != 0 ? errno_text() : std::string();
  ::close(fd);
  if (rc != 0)
    throw CheckpointError(ckpt + ": fsync of " + p + " failed: " + err +
                          "; check the disk (full or failing?)");
}

std::string parent_dir(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

void write_tensors(h5::Group& g, const TensorMap& m) {
  for (const auto& [key, t] : m) {
    h5::Dataset d = g.create_dataset(escape_key(key), h5::file_type(t.dtype()), t.shape());
    d.write(h5::memory_type(t.dtype()), t.raw_data());
    d.write_attr_string("key", key);
    d.write_attr_string("dtype", dtype_name(t.dtype()));
    d.close();
  }
}

// The key of a member of /model, /optimizer, /counters or /meta: its "key" attribute, which must
// agree with the escaped link name.
template <class Obj>
std::string member_key(const Obj& o, const std::string& link) {
  if (!o.has_attr("key")) return unescape_key(link);
  std::string key = o.read_attr_string("key");
  if (escape_key(key) != link)
    throw CheckpointError(o.name() + ": its key attribute \"" + key +
                          "\" does not match the dataset name");
  return key;
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

}  // namespace

// step_<N>.h5 -> N (>= 0); -1 for any other name. `suffix` is ".h5" or ".h5.tmp".
int64_t parse_step_name(const std::string& name, const std::string& suffix) {
  const std::string prefix = "step_";
  if (name.size() <= prefix.size() + suffix.size() || !starts_with(name, prefix) ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18) return -1;
  for (char ch : digits)
    if (ch < '0' || ch > '9') return -1;
  return std::stoll(digits);
}

namespace {

// (N, path) of step_<N><suffix> regular files in dir, sorted by N then name.
std::vector<std::pair<int64_t, std::string>> scan(const std::string& dir,
                                                  const std::string& suffix) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (!it->is_regular_file(ec2)) continue;
    const int64_t n = parse_step_name(it->path().filename().string(), suffix);
    if (n >= 0) out.emplace_back(n, it->path().string());
  }
  if (ec) throw CheckpointError(dir + ": cannot list the directory: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// ---- key escaping -----------------------------------------------------------------------------
std::string escape_key(const std::string& key) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    const bool esc = c == '%' || c == '/' || c < 0x20 || c >= 0x7f || (i == 0 && c == '.');
    if (esc) {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string unescape_key(const std::string& link) {
  auto hexval = [&](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    throw ValueError("unescape_key: malformed escape in \"" + link +
                     "\" ('%' must be followed by two hex digits)");
  };
  std::string out;
  out.reserve(link.size());
  for (size_t i = 0; i < link.size(); ++i) {
    if (link[i] != '%') {
      out += link[i];
      continue;
    }
    HZ_CHECK(i + 2 < link.size(), ValueError, "unescape_key: truncated escape at the end of \"",
             link, "\"");
    out += static_cast<char>(hexval(link[i + 1]) * 16 + hexval(link[i + 2]));
    i += 2;
  }
  return out;
}

void seal_checkpoint_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(path + ": cannot read it: " + errno_text());
  unsigned char sig[8] = {};
  const bool ok = ::pread(fd, sig, 8, kUserblock) == 8 && std::memcmp(sig, kHdf5Sig, 8) == 0;
  ::close(fd);
  if (!ok)
    throw CheckpointError(path + ": no HDF5 signature at byte " + std::to_string(kUserblock) +
                          ": only a file created with a " + std::to_string(kUserblock) + "-byte user block can be sealed");
  seal(path, path);
}

// ---- checksum ---------------------------------------------------------------------------------
uint64_t checkpoint_checksum(const CheckpointData& c) {
  return checksum_of(c.format_version, c.step, c.tokens_seen, host_contiguous(c.model),
                     host_contiguous(c.optimizer), c.counters, c.meta);
}

// ---- save -------------------------------------------------------------------------------------
void save_checkpoint(const std::string& path, const CheckpointData& c) {
  HZ_CHECK(!path.empty(), ValueError, "save_checkpoint: empty path");
  validate(c);
  const TensorMap model = host_contiguous(c.model);
  const TensorMap optimizer = host_contiguous(c.optimizer);
  const uint64_t checksum =
      checksum_of(c.format_version, c.step, c.tokens_seen, model, optimizer, c.counters, c.meta);

  const std::string dir = parent_dir(path);
  {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
      throw CheckpointError(path + ": cannot create the checkpoint directory " + dir + ": " +
                            (ec ? ec.message() : std::string("not a directory")));
  }
  const std::string tmp = path + ".tmp";
  try {
    {
      h5::File f = h5::File::create(tmp, kUserblock);
      h5::Group& root = f.root();
      {
        h5::Group g = root.create_group("model");
        write_tensors(g, model);
      }
      {
        h5::Group g = root.create_group("optimizer");
        write_tensors(g, optimizer);
      }
      {
        h5::Group g = root.create_group("counters");
        for (const auto& [key, v] : c.counters) {
          h5::Dataset d = g.create_dataset(escape_key(key), H5T_STD_I64LE, {});
          d.write(H5T_NATIVE_INT64, &v);
          d.write_attr_string("key", key);
        }
      }
      {
        h5::Group g = root.create_group("meta");
        for (const auto& [key, v] : c.meta) {
          h5::Dataset d = g.write_string(escape_key(key), v);
          d.write_attr_string("key", key);
        }
      }
      root.write_attr_i64("format_version", c.format_version);
      root.write_attr_i64("step", c.step);
      root.write_attr_i64("tokens_seen", c.tokens_seen);
      root.write_attr_u64("checksum", checksum);
      f.close();
    }
    seal(tmp, path);
    fsync_path(tmp, false, path);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw CheckpointError(path + ": cannot rename " + tmp + " over it: " + errno_text());
    fsync_path(dir, true, path);
  } catch (const h5::HDF5Error& e) {
    std::remove(tmp.c_str());
    throw CheckpointError(path + ": could not write the checkpoint: " + e.what() +
                          "; check free disk space and write permission");
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

// ---- load -------------------------------------------------------------------------------------
// libhdf5 reads in a child process (core/isolate.h): the child streams what it read through an
// in-memory file as records, the parent rebuilds the tensors, checks them and the checksum. A file
// that crashes libhdf5 or keeps it busy past the deadline is then refused like any damaged file.
namespace {

// The structure pass reads no tensor's bytes: its deadline does not grow with the file.
constexpr double kStructureSeconds = 120;

enum Record : char { kHeader = 'H', kTensor = 'T', kCounter = 'C', kMeta = 'M', kEnd = 'E' };

class RecordWriter {
 public:
  explicit RecordWriter(int fd) : fd_(fd) {}
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    if (buf_.size() + n > kBuf) flush();
    if (n >= kBuf) write_all(fd_, p, n);
    else buf_.append(static_cast<const char*>(p), n);
  }
  void flush() {
    if (!buf_.empty()) write_all(fd_, buf_.data(), buf_.size());
    buf_.clear();
  }

 private:
  static constexpr size_t kBuf = 1 << 20;
  int fd_;
  std::string buf_;
};

class RecordReader {
 public:
  RecordReader(const char* p, size_t n, const std::string& path) : p_(p), n_(n), path_(path) {}
  uint64_t u64() {
    uint64_t v;
    std::memcpy(&v, take(8), 8);
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    return std::string(take(n), n);
  }
  const char* take(uint64_t n) {
    if (n > n_ - at_) throw CheckpointError(path_ + ": the isolated reader's output is cut short");
    const char* p = p_ + at_;
    at_ += n;
    return p;
  }

 private:
  const char* p_;
  size_t n_, at_ = 0;
  const std::string& path_;
};

// Streams one group's datasets as tensor records (section 0 model, 1 optimizer): key, dtype and
// shape, and with `data` their bytes.
void stream_tensors(const h5::Group& g, char section, RecordWriter& w, bool data) {
  for (const auto& link : g.links()) {
    h5::Dataset d = g.open_dataset(link);
    const std::string key = member_key(d, link);
    const DType dt = dtype_from_file(d);
    // The shape comes from the file: check it against the bytes the file stores before allocating
    // (a flipped bit in a dimension must not make the reader allocate gigabytes).
    const int64_t n = d.numel();
    uint64_t need = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(n), static_cast<uint64_t>(dtype_size(dt)), &need) ||
        (n > 0 && d.storage_size() != need))
      throw CheckpointError(d.name() + ": its shape needs " + std::to_string(n) + " elements of " + dtype_name(dt) +
                            " but the file stores " + std::to_string(d.storage_size()) + " bytes for it: the header is damaged");
    const h5::Dims dims = d.dims();
    const char head[3] = {kTensor, section, static_cast<char>(dt)};
    w.raw(head, 3);
    w.str(key);
    w.u64(dims.size());
    for (auto x : dims) w.u64(static_cast<uint64_t>(x));
    w.u64(need);
    if (!data) continue;
    std::vector<char> buf(need);
    d.read(h5::memory_type(dt), buf.data());
    w.raw(buf.data(), need);
  }
}

// What one pass of the reader does: the structure alone (every tensor's key, dtype and shape, the
// counters and meta), or that and the tensors' bytes, after the seal's checksum is verified.
struct ReadPass {
  bool data = false;
  bool optimizer = true;          // the data pass reads /optimizer's tensors
  std::optional<uint64_t> seal;   // the data pass verifies it first
};

// The child's part: everything libhdf5 does, streamed to fd.
void read_hdf5(const std::string& path, int64_t size, int fd, const ReadPass& pass) {
  if (pass.data && pass.seal) {  // the bytes before libhdf5 reads any tensor (the size is bounded by now)
    std::string why;
    const int in = open_input(path, why);
    if (in < 0) throw CheckpointError(path + ": cannot read the checkpoint: " + why);
    uint64_t h = 0;
    try {
      h = hash_from(in, kUserblock, static_cast<uint64_t>(size), path);
    } catch (...) {
      ::close(in);
      throw;
    }
    ::close(in);
    if (h != *pass.seal)
      throw CheckpointError(path + ": checksum mismatch: the file is corrupted; use an earlier checkpoint (its bytes "
                                   "differ from what was written)");
  }
  if (!h5::is_hdf5(path)) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char head[8] = {};
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(head), 8);
    const auto got = static_cast<size_t>(in.gcount());
    if (size == 0)
      throw CheckpointError(path + ": empty file (0 bytes), not a checkpoint; use an earlier checkpoint");
    if (std::memcmp(head, sig, got) == 0 || std::memcmp(head, kSumMagic, std::min<size_t>(got, 8)) == 0)
      throw CheckpointError(path + ": truncated or damaged HDF5 file (" + std::to_string(size) +
                            " bytes, header unreadable); use an earlier checkpoint");
    throw CheckpointError(path + ": not an HDF5 file (no HDF5 signature); a checkpoint is a step_<N>.h5 written by Horizon");
  }
  std::optional<h5::File> file;
  try {
    file.emplace(h5::File::open(path));
  } catch (const h5::HDF5Error& e) {
    throw CheckpointError(path + ": cannot open the HDF5 file: it is truncated or damaged (" + e.what() +
                          "); use an earlier checkpoint");
  }
  RecordWriter w(fd);
  try {
    const h5::Group& root = file->root();
    if (!root.has_attr("format_version"))
      throw CheckpointError(path + ": not a Horizon checkpoint (no format_version attribute on /); pass a step_<N>.h5 "
                                   "written by Horizon");
    const int64_t version = root.read_attr_i64("format_version");
    if (version != kCheckpointFormatVersion)
      throw CheckpointError(path + ": unsupported checkpoint format_version " + std::to_string(version) +
                            "; this build reads format_version " + std::to_string(kCheckpointFormatVersion) +
                            " (use the Horizon version that wrote it)");
    for (const char* g : {"model", "optimizer", "counters", "meta"})
      if (!root.has(g))
        throw CheckpointError(path + ": not a complete Horizon checkpoint (group /" + std::string(g) +
                              " is missing); use an earlier checkpoint");
    for (const char* a : {"step", "tokens_seen", "checksum"})
      if (!root.has_attr(a))
        throw CheckpointError(path + ": not a complete Horizon checkpoint (attribute " + std::string(a) +
                              " on / is missing); use an earlier checkpoint");
    const char head = kHeader;
    w.raw(&head, 1);
    w.u64(static_cast<uint64_t>(version));
    w.u64(static_cast<uint64_t>(root.read_attr_i64("step")));
    w.u64(static_cast<uint64_t>(root.read_attr_i64("tokens_seen")));
    w.u64(root.read_attr_u64("checksum"));
    stream_tensors(root.open_group("model"), 0, w, pass.data);
    if (!pass.data || pass.optimizer) stream_tensors(root.open_group("optimizer"), 1, w, pass.data);
    {
      const h5::Group g = root.open_group("counters");
      for (const auto& link : g.links()) {
        h5::Dataset d = g.open_dataset(link);
        const std::string key = member_key(d, link);
        if (d.type_class() != H5T_INTEGER || d.numel() != 1 || !d.dims().empty())
          throw CheckpointError(d.name() + ": a counter must be a scalar integer");
        int64_t v = 0;
        d.read(H5T_NATIVE_INT64, &v);
        const char r = kCounter;
        w.raw(&r, 1);
        w.str(key);
        w.u64(static_cast<uint64_t>(v));
      }
    }
    {
      const h5::Group g = root.open_group("meta");
      for (const auto& link : g.links()) {
        h5::Dataset d = g.open_dataset(link);
        const std::string key = member_key(d, link), value = d.read_string();
        const char r = kMeta;
        w.raw(&r, 1);
        w.str(key);
        w.str(value);
      }
    }
    file->close();
  } catch (const h5::HDF5Error& e) {
    throw CheckpointError(path + ": cannot read the checkpoint: " + e.what() +
                          "; the file is damaged or was not written by Horizon; use an earlier checkpoint");
  } catch (const ValueError& e) {  // malformed escaped name
    throw CheckpointError(path + ": " + e.what());
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    if (starts_with(msg, path + ":")) throw;
    throw CheckpointError(path + ": " + msg + "; use an earlier checkpoint");
  }
  const char end = kEnd;
  w.raw(&end, 1);
  w.flush();
}

// Runs one pass in the isolated child; its output, or the refusal.
IsolatedOutput run_pass(const std::string& path, int64_t size, const ReadPass& pass, double seconds) {
  IsolatedResult r = run_isolated([&](int fd) { read_hdf5(path, size, fd, pass); }, seconds);
  switch (r.status) {
    case IsolatedResult::Status::Ok: return std::move(r.output);
    case IsolatedResult::Status::Refused: throw CheckpointError(r.message);
    case IsolatedResult::Status::Crashed:
      throw CheckpointError(path + ": libhdf5 crashed reading it (" + r.message +
                            "): the file is damaged or crafted; use an earlier checkpoint");
    case IsolatedResult::Status::TimedOut:
      throw CheckpointError(path + ": reading it " + r.message +
                            " (libhdf5 is looping in it): the file is damaged or crafted; use an earlier checkpoint");
    default: throw CheckpointError(path + ": the checkpoint reader failed: " + r.message);
  }
}

// A pass's records: the header, the tensors (with their bytes after a data pass), counters, meta.
struct Records {
  int64_t format_version = 0, step = 0, tokens_seen = 0;
  uint64_t stored = 0;
  struct Entry {
    char section;
    DType dtype;
    std::string key;
    Shape shape;
    uint64_t nbytes;
    const char* data;  // a data pass's; into the pass's output
  };
  std::vector<Entry> tensors;
  std::map<std::string, int64_t> counters;
  std::map<std::string, std::string> meta;
};

Records parse_records(const IsolatedOutput& out, const std::string& path, bool data) {
  Records rec;
  RecordReader in(out.data(), out.size(), path);
  for (bool done = false; !done;) {
    const char kind = *in.take(1);
    switch (kind) {
      case kHeader:
        rec.format_version = static_cast<int64_t>(in.u64());
        rec.step = static_cast<int64_t>(in.u64());
        rec.tokens_seen = static_cast<int64_t>(in.u64());
        rec.stored = in.u64();
        break;
      case kTensor: {
        const char* h = in.take(2);
        Records::Entry t{h[0], static_cast<DType>(h[1]), in.str(), {}, 0, nullptr};
        t.shape.resize(in.u64());
        for (auto& x : t.shape) x = static_cast<int64_t>(in.u64());
        t.nbytes = in.u64();
        if (data) t.data = in.take(t.nbytes);
        rec.tensors.push_back(std::move(t));
        break;
      }
      case kCounter: {
        const std::string key = in.str();
        rec.counters.emplace(key, static_cast<int64_t>(in.u64()));
        break;
      }
      case kMeta: {
        const std::string key = in.str();
        rec.meta.emplace(key, in.str());
        break;
      }
      case kEnd: done = true; break;
      default: throw CheckpointError(path + ": the isolated reader's output is inconsistent");
    }
  }
  return rec;
}

// HDF5's own bytes beside the data a checkpoint's datasets declare: the superblock, groups' B-trees
// and heaps, and per dataset its object header with the key and dtype attributes (a few hundred
// bytes plus the key twice, in the link and in the attribute). Generous: the bound only has to stop
// a file padded far beyond what it holds (a 1 TB sparse file whose checksum block was rewritten).
uint64_t structure_allowance(const Records& rec) {
  uint64_t a = 1 << 20;
  for (const auto& t : rec.tensors) a += 8192 + 4 * t.key.size() + 16 * t.shape.size();
  for (const auto& [k, v] : rec.counters) a += 8192 + 4 * k.size();
  for (const auto& [k, v] : rec.meta) a += 8192 + 4 * k.size();
  return a;
}

}  // namespace

CheckpointData load_checkpoint(const std::string& path, const LoadOptions& opt) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw CheckpointError(path + ": cannot read the checkpoint: " + errno_text() +
                          "; check the path (find_latest_checkpoint(dir) finds the newest one)");
  if (S_ISDIR(st.st_mode))
    throw CheckpointError(path +
                          ": is a directory, not a checkpoint file; pass one of its "
                          "step_<N>.h5 files (find_latest_checkpoint(dir) finds the newest)");
  // a FIFO, a socket or a device: refused before anything opens it (core/file.h)
  if (const std::string why = input_problem(path); !why.empty()) throw CheckpointError(path + ": " + why);
  const auto size = static_cast<uint64_t>(st.st_size);
  const std::optional<uint64_t> seal = size > 0 ? read_seal(path, size) : std::nullopt;

  // 1. The structure (no tensor's bytes): what the file declares bounds everything after it.
  const IsolatedOutput structure = run_pass(path, st.st_size, ReadPass{}, kStructureSeconds);
  const Records declared = parse_records(structure, path, false);
  if (!seal)  // libhdf5 found a file past byte 0 that carries no checksum block
    throw CheckpointError(path + ": an HDF5 file without Horizon's checksum block: Horizon reads only sealed checkpoints");
  uint64_t data_bytes = 0, needed = 0;
  for (const auto& t : declared.tensors) {
    data_bytes += t.nbytes;
    if (t.section == 0 || opt.optimizer) needed += t.nbytes;
  }
  for (const auto& [k, v] : declared.meta) data_bytes += v.size();
  const uint64_t allowance = structure_allowance(declared);
  if (size > kUserblock + data_bytes + allowance)
    throw CheckpointError(path + ": the file holds " + std::to_string(size) + " bytes, but its datasets declare " +
                          std::to_string(data_bytes) + " bytes of data (and at most " + std::to_string(allowance) +
                          " of HDF5 structure): padded or sparse, refused before reading it; use an earlier checkpoint");
  if (opt.check) {
    CheckpointManifest m;
    m.format_version = declared.format_version, m.step = declared.step, m.tokens_seen = declared.tokens_seen;
    for (const auto& t : declared.tensors) (t.section ? m.optimizer : m.model).emplace(t.key, TensorInfo{t.dtype, t.shape});
    m.counters = declared.counters;
    m.meta = declared.meta;
    opt.check(m);
  }

  // 2. The checksum over the (now bounded) file, then the tensors the caller asked for, within a
  // deadline of 2 minutes plus 10 MB/s of what is hashed and read.
  const double budget = 120.0 + static_cast<double>(size + needed) / 10e6;
  const IsolatedOutput out = run_pass(path, st.st_size, ReadPass{true, opt.optimizer, seal}, budget);
  const Records rec = parse_records(out, path, true);
  CheckpointData c;
  c.format_version = rec.format_version, c.step = rec.step, c.tokens_seen = rec.tokens_seen;
  c.counters = rec.counters;
  c.meta = rec.meta;
  // exactly what the first pass declared of the sections asked for (the file cannot have changed in between)
  std::vector<const Records::Entry*> want;
  for (const auto& t : declared.tensors)
    if (t.section == 0 || opt.optimizer) want.push_back(&t);
  if (want.size() != rec.tensors.size())
    throw CheckpointError(path + ": the file changed while it was read; load it again");
  for (size_t k = 0; k < want.size(); ++k) {
    const auto& t = rec.tensors[k];
    if (want[k]->section != t.section || want[k]->key != t.key || want[k]->shape != t.shape || want[k]->dtype != t.dtype)
      throw CheckpointError(path + ": the file changed while it was read; load it again");
    Tensor x = Tensor::empty(t.shape, t.dtype);
    if (t.nbytes != static_cast<uint64_t>(x.numel()) * dtype_size(t.dtype))
      throw CheckpointError(path + ": the isolated reader's output is inconsistent");
    if (t.nbytes) std::memcpy(x.raw_data(), t.data, t.nbytes);
    const int64_t bad = x.first_non_finite();
    if (bad >= 0)
      throw CheckpointError(path + ": /" + (t.section ? "optimizer/" : "model/") + escape_key(t.key) + " ('" + t.key +
                            "'): element " + std::to_string(bad) + " of " + shape_str(x.shape()) + " is " +
                            std::to_string(x.at_flat(bad)) +
                            ": a checkpoint holds finite values only (a diverged run, or a damaged file)");
    (t.section ? c.optimizer : c.model).emplace(t.key, std::move(x));
  }
  // the content checksum covers the optimizer too: without it, the verified seal vouches for the bytes
  if (opt.optimizer && checkpoint_checksum(c) != rec.stored)
    throw CheckpointError(path + ": checksum mismatch: the file is corrupted; use an earlier checkpoint");
  return c;
}

// ---- run directories --------------------------------------------------------------------------
std::string checkpoint_path(const std::string& dir, int64_t step) {
  HZ_CHECK(step >= 0, ValueError, "checkpoint_path: step must be >= 0, got ", step);
  return (fs::path(dir) / ("step_" + std::to_string(step) + ".h5")).string();
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& [n, p] : scan(dir, ".h5")) out.push_back(p);
  return out;
}

std::string find_latest_checkpoint(const std::string& dir) {
  const auto all = scan(dir, ".h5");
  return all.empty() ? std::string() : all.back().second;
}

void prune_checkpoints(const std::string& dir, int keep_last) {
  HZ_CHECK(keep_last >= 1, ValueError, "prune_checkpoints: keep_last must be >= 1, got ", keep_last,
           " (to keep every checkpoint, do not prune)");
  const auto all = scan(dir, ".h5");
  if (all.empty()) return;
  const int64_t newest = all.back().first;
  std::vector<std::string> doomed;
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i)
    doomed.push_back(all[i].second);
  for (auto& [m, p] : scan(dir, ".h5.tmp"))
    if (m < newest) doomed.push_back(p);
  for (const auto& p : doomed) {
    std::error_code ec;
    fs::remove(p, ec);
    if (ec) throw CheckpointError(p + ": cannot delete old checkpoint: " + ec.message());
  }
}

}  // namespace hz::train
