// Horizon: training checkpoints in HDF5 that are complete or absent.
//
// ---- File layout (format_version 1; readable with h5py) -----------------------------------------
//   /                       attributes: format_version (i64), step (i64), tokens_seen (i64),
//                           checksum (u64, see below)
//   /model/<escaped key>    one dataset per tensor, contiguous, with its real shape (0-d tensors
//   /optimizer/<escaped>    are scalar dataspaces, empty tensors have zero-length dims) and type:
//                           f32 -> IEEE f32 LE, f64 -> IEEE f64 LE, i32 -> i32 LE, i64 -> i64 LE,
//                           bf16 -> u16 LE holding the raw bf16 bits.
//                           attributes: key (the original key, fixed-length UTF-8), dtype ("f32",
//                           "f64", "bf16", "i32", "i64")
//   /counters/<escaped key> scalar i64 dataset; attribute key
//   /meta/<escaped key>     scalar fixed-length UTF-8 string dataset; attribute key
//
// ---- Key escaping (escape_key / unescape_key) ---------------------------------------------------
// Keys may contain '/' (HDF5's path separator) and '.', so each key is stored under an escaped
// link name AND as its "key" attribute. Escaping is percent-encoding: '%', '/', control bytes
// (< 0x20 and 0x7f) and non-ASCII bytes (>= 0x80) become "%XX" (two upper-case hex digits); a
// leading '.' becomes "%2E" (so "." and ".." never appear as link names); every other byte
// (letters, digits, space, '.', '-', '_', ...) is kept. So "adamw/layers.0.wq/exp_avg" is stored as
// "adamw%2Flayers.0.wq%2Fexp_avg". Escaping is injective, so any key round-trips. Keys must be
// non-empty and contain no NUL byte; meta values must contain no NUL byte (HDF5 strings are
// NUL-terminated).
//
// ---- Whole-file checksum (since issue 19) -----------------------------------------------------
// The file starts with a 512-byte HDF5 user block (HDF5 data follows at byte 512; h5py reads it
// as usual): "HZSUM001", u64 file size, u64 FNV-1a 64 of bytes [512, size), zeros. load_checkpoint
// checks the size it declares before libhdf5 sees the file and refuses a file without the block
// (written before issue 19, or stripped). The checksum is unkeyed, so it stops damage, not a crafted
// file: for those the reader asks libhdf5 only for what Horizon writes (hard links; contiguous,
// unfiltered datasets inside the file; fixed-size numbers and fixed-length strings; no
// variable-length data, whose global heap libhdf5 reads unchecked; io/hdf5.h), refuses non-finite
// tensor values naming the tensor, and runs libhdf5 in a child process (core/isolate.h): a file
// that crashes it or keeps it looping is refused.
//
// Loading is two passes of that child, so that the work is bounded by what the file declares:
//   1. the structure alone (every tensor's key, dtype and shape checked against its stored bytes,
//      the counters and meta; no tensor's bytes), within 2 minutes whatever the file's size. The
//      file may hold no more than the data its datasets declare plus an allowance for HDF5's own
//      structure (1 MiB, plus 8 KiB and four times its key per dataset): a padded or sparse file
//      (a 1 TB hole behind a rewritten checksum block) is refused here, before any hashing. LoadOptions::check then sees the
//      manifest (an evaluation compares the shapes with the model its recipe builds), still
//      before any tensor is read or allocated.
//   2. the whole-file checksum (holes of a sparse file hashed as the zeros they read as, without
//      reading them), then the tensors of the sections asked for (LoadOptions::optimizer), within
//      2 minutes plus 10 MB/s of what is hashed and read. The content checksum below is
//      verified when the optimizer is read; without it the verified whole-file checksum vouches.
//
// ---- Checksum -----------------------------------------------------------------------------------
// FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3) over this byte stream, with
// every integer written as 8 bytes little-endian and every string as (u64 length, bytes):
//   "horizon-checkpoint", format_version, step, tokens_seen,
//   for section in ("model", "optimizer"): section, count, then per entry in key order
//       (std::map order = bytewise): key, dtype name, ndim, each dim, byte count, raw bytes
//       (row-major, little-endian, bf16 as its 16-bit pattern),
//   "counters", count, per entry: key, value,
//   "meta", count, per entry: key, value.
// A host must be little-endian (checked at compile time).
//
// ---- Writing and loading ----------------------------------------------------------------------
// save_checkpoint writes `path + ".tmp"` (creating missing parent directories), closes it, fsyncs
// it, renames it over `path` and fsyncs the directory, so a crash at any moment leaves either the
// previous complete file or the new complete file at `path` (plus at most a stale ".tmp", which
// the next save of that path overwrites and prune_checkpoints removes).
// load_checkpoint refuses, with a CheckpointError naming the path and what is wrong: a missing
// file or one that is not a regular file, a file that is not HDF5, a truncated/damaged file, a file
// larger than its datasets declare, a file without Horizon's layout, an unsupported format_version
// (naming the one found and the one supported), and a checksum mismatch. Tensors are loaded on the
// CPU, contiguous.
//
// Not thread-safe (the serial HDF5 library): save/load from one thread at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace hz::train {

struct CheckpointError : hz::Error { using Error::Error; };

constexpr int64_t kCheckpointFormatVersion = 1;

struct CheckpointData {
  int64_t format_version = kCheckpointFormatVersion;
  int64_t step = 0, tokens_seen = 0;
  std::map<std::string, Tensor> model;      // parameter name -> value (names contain dots)
  std::map<std::string, Tensor> optimizer;  // e.g. "adamw/layers.0.attn.wq.weight/exp_avg"
  std::map<std::string, int64_t> counters;  // e.g. "rng/offset", "loader/rank0/epoch", "world_size"
  std::map<std::string, std::string> meta;  // e.g. "recipe" (the resolved YAML), "horizon_version"
};

// Writes atomically (see above). Tensors may live on any device and be non-contiguous views.
// Throws ValueError for an invalid CheckpointData (undefined tensor, empty key, NUL in a key or
// meta value, format_version other than kCheckpointFormatVersion) and CheckpointError when the
// file cannot be written (the ".tmp" is removed; the previous file at `path` is untouched).
void save_checkpoint(const std::string& path, const CheckpointData& c);

// What a checkpoint's structure declares, read before any tensor's bytes (see "Loading").
struct TensorInfo {
  DType dtype;
  Shape shape;
};
struct CheckpointManifest {
  int64_t format_version = 0, step = 0, tokens_seen = 0;
  std::map<std::string, TensorInfo> model, optimizer;
  std::map<std::string, int64_t> counters;
  std::map<std::string, std::string> meta;
};
struct LoadOptions {
  // Read /optimizer's tensors (a resume needs them; evaluation and init_from do not, and leave
  // CheckpointData::optimizer empty).
  bool optimizer = true;
  // Called with the manifest before any tensor is read or allocated: throws to refuse the file
  // (e.g. shapes that are not the model's).
  std::function<void(const CheckpointManifest&)> check;
};
CheckpointData load_checkpoint(const std::string& path, const LoadOptions& opt = {});

// The checksum save_checkpoint stores (exposed for tests and tools).
uint64_t checkpoint_checksum(const CheckpointData& c);
// Writes the whole-file checksum block of an HDF5 file created with a 512-byte user block (what
// save_checkpoint does last; tests and the fuzzer use it to build well-formed files with wrong content).
void seal_checkpoint_file(const std::string& path);

// Key <-> HDF5 link name (see "Key escaping").
std::string escape_key(const std::string& key);
std::string unescape_key(const std::string& link);  // throws ValueError for a malformed name

// Checkpoint files in a run directory are named step_<N>.h5 (N decimal, no padding).
std::string checkpoint_path(const std::string& dir, int64_t step);  // dir/step_<N>.h5
// step_<N><suffix> (a file name, no directory) -> N (>= 0); -1 for any other name.
int64_t parse_step_name(const std::string& name, const std::string& suffix = ".h5");
std::vector<std::string> list_checkpoints(const std::string& dir);  // sorted by N; [] if no dir
std::string find_latest_checkpoint(const std::string& dir);  // largest N; "" if none; ignores *.tmp
// Deletes all but the newest keep_last (>= 1) step_<N>.h5, and stale step_<M>.h5.tmp files with
// M below the newest complete checkpoint's N (left by interrupted saves).
void prune_checkpoints(const std::string& dir, int keep_last);

}  // namespace hz::train
