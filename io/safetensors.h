// Horizon io: the safetensors format (Hugging Face's weight files), read and write.
//
// ---- File layout (https://github.com/huggingface/safetensors, the format the Python library writes)
//   8 bytes      N, unsigned 64-bit little-endian: the header length
//   N bytes      UTF-8 JSON object (may be padded with trailing spaces):
//                  "<tensor name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//                  "__metadata__":  {"<key>": "<string value>", ...}      (optional)
//   the rest     the data buffer; a tensor's bytes are [begin, end) relative to its start,
//                row-major, little-endian.
// A file is valid when: N fits in the file and is at most 100,000,000 (the library's limit); the
// header is a JSON object nested at most 64 deep (core/json_guard.h; checked before parsing); every tensor has a known dtype, a shape of non-negative integers and
// end - begin == numel * itemsize; sorted by begin, the tensors tile the buffer exactly (each
// begin equals the previous end, the first begins at 0, the last ends at the buffer's end): no
// overlap, no hole, nothing past the end. Anything else is refused with a SafetensorsError naming
// the file, the tensor and what is wrong (a truncated download typically shows as "the data
// buffer ends at byte X but tensor T needs bytes up to Y").
//
// ---- Dtypes
// Known to the format: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL U16 U32 U64 F8_E4M3 F8_E5M2. Horizon
// loads F64, F32, BF16, I64, I32 as themselves and F16 as F32 (exact); the others are validated but
// refused on load, naming the dtype. Writing: F64/F32/BF16/I64/I32 tensors as themselves, or every
// floating tensor converted to F32, BF16 or F16 (round to nearest even, like torch).
//
// ---- Sharded checkpoints (transformers' layout)
// model.safetensors.index.json = {"metadata": {...}, "weight_map": {"<tensor>": "<shard file>"}};
// every shard sits next to the index (plain file names only), every tensor of the map is in its
// shard, and every tensor of a shard is in the map under that shard (no tensor in two shards).
// The index is read only when it holds at most 64 MiB and nests at most 64 deep.
//
// Files are memory-mapped: opening reads and validates only the header; load() copies one tensor.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace hz::io {

struct SafetensorsError : hz::Error {
  using Error::Error;
};

// Item size of a dtype name of the format ("F32" -> 4); 0 when the name is unknown.
size_t safetensors_itemsize(const std::string& dtype);

struct TensorEntry {
  std::string name;
  std::string dtype;  // as in the file: "F32", "BF16", ...
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data buffer
  int64_t numel() const { return shape_numel(shape); }
};

class SafetensorsFile {
 public:
  // Maps the file and validates the whole header (see above). Throws SafetensorsError.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return entries_; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const;
  const TensorEntry& entry(const std::string& name) const;  // throws SafetensorsError if absent
  // A CPU tensor with the stored values: F64/F32/BF16/I64/I32 as themselves, F16 as F32.
  Tensor load(const std::string& name) const;
  // The raw little-endian bytes of a tensor (valid while this object or a copy lives).
  const unsigned char* bytes(const std::string& name) const;
  uint64_t header_size() const { return header_size_; }

 private:
  struct Mapping;
  std::shared_ptr<Mapping> map_;
  std::string path_;
  uint64_t header_size_ = 0;
  std::vector<TensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Every tensor of a checkpoint directory: model.safetensors, else model.safetensors.index.json
// and its shards (validated as above). A directory holding only pytorch_model.bin (pickle) is
// refused with the transformers call that converts it.
class SafetensorsSet {
 public:
  static SafetensorsSet open_dir(const std::string& dir);
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  const TensorEntry& entry(const std::string& name) const;
  Tensor load(const std::string& name) const;
  const unsigned char* bytes(const std::string& name) const;  // raw stored bytes (valid while this lives)
  const std::string& file_of(const std::string& name) const;  // path of the shard holding it
  std::vector<std::string> files() const;                       // every file read
  std::map<std::string, std::string> metadata() const;         // of the first file

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

// How floating tensors are stored when writing.
enum class StoreAs : uint8_t { Native, F32, BF16, F16 };
StoreAs parse_store_as(const std::string& s);  // "native" | "f32" | "bf16" | "f16"

// Writes one file atomically (path.tmp, then renamed). Tensors may be views on any device.
// Entries are laid out in name order, the header padded with spaces to a multiple of 8 bytes.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      StoreAs store = StoreAs::Native);

// Writes model.safetensors, or, when the stored bytes exceed max_shard_bytes, shards named
// model-0000k-of-0000n.safetensors (tensors in name order, greedily; a tensor is never split, one
// larger than the limit gets a shard of its own) plus model.safetensors.index.json as transformers'
// save_pretrained writes it (metadata.total_parameters = stored elements, metadata.total_size =
// stored tensor bytes, weight_map in name order, 2-space indent), after the shards, each file
// atomically. Returns the files.
std::vector<std::string> save_safetensors_dir(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                                              const std::map<std::string, std::string>& metadata,
                                              StoreAs store, uint64_t max_shard_bytes);

// "5GB", "500MB", "64KB", "1000" (bytes; decimal units as transformers' max_shard_size, KiB/MiB/GiB
// binary). Throws ValueError for anything else.
uint64_t parse_byte_size(const std::string& s);

// IEEE half <-> float (round to nearest even; NaN stays NaN; overflow becomes infinity).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

}  // namespace hz::io
