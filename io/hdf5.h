// Horizon: a thin RAII wrapper over the HDF5 C API (hdf5.h, 1.10+).
//
// Every handle (file, group, dataset, attribute, dataspace, datatype, property list) is owned by
// an `h5::Id` that closes it with the matching H5*close in its destructor, so an exception thrown
// half-way through writing a file leaks nothing. HDF5's automatic error printing is switched off
// (H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr)) the first time any wrapper function runs; every
// failing HDF5 call is turned into an `h5::HDF5Error` whose message names the operation and the
// object and ends with the innermost HDF5 error description. Callers that know more (e.g. the
// checkpoint path) catch it and rethrow their own hz::Error subclass.
// Library shutdown: HDF5's own atexit hook is replaced by one that skips H5close once any close
// has failed (libhdf5 1.10 would otherwise segfault at exit after, e.g., "no space left on
// device"), so a write error ends in the caller's clean exit status.
//
// Scope: what Horizon's checkpoints need, no more: groups, contiguous (unchunked, uncompressed)
// datasets of fixed-size numeric types with any rank (0-d = scalar dataspace, empty = zero dims),
// UTF-8 string datasets and attributes, scalar i64/u64 attributes.
// Strings are written fixed-length (NUL-terminated, the stored size = length + 1) so a reader
// allocates exactly what the file stores.
// Reading treats a file as untrusted: libhdf5 is only asked to walk structures this wrapper writes.
// Refused before anything is read from them: soft, external and user-defined links (Group::links,
// open_group, open_dataset follow hard links only); datasets that are chunked, filtered, virtual
// (values in other files) or stored in external raw-data files; element types other than fixed-size
// integers, floats and fixed-length strings; variable-length strings (attributes and datasets: they
// live in the global heap, which libhdf5 1.10 reads without bounds checks). A string holds at most
// kMaxStringBytes and at most the object's storage size; a dataset's element count must fit 64 bits
// (Dataset::numel throws otherwise).
// The serial HDF5 library is not thread-safe: use these objects from one thread at a time.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace hz::io::h5 {

struct HDF5Error : hz::Error { using Error::Error; };

constexpr size_t kMaxStringBytes = 64u << 20;  // one string attribute or dataset

// Switch off HDF5's automatic printing of error stacks (idempotent; called by every entry point).
void silence_errors();

// One owned hid_t plus the function that closes it. Move-only.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Id();
  Id(Id&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& o) noexcept;
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now (throws HDF5Error "<what> ..." on failure); the destructor then does nothing.
  void close(const std::string& what = "closing an HDF5 object");

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Shape of a dataspace: {} for a scalar dataspace.
using Dims = std::vector<int64_t>;

class Dataset;
class Group;

// Anything that can carry attributes (file root group, group, dataset).
class Object {
 public:
  hid_t id() const { return id_.get(); }
  const std::string& name() const { return name_; }  // path used to open it, for messages

  bool has_attr(const std::string& attr) const;
  void write_attr_i64(const std::string& attr, int64_t v);
  void write_attr_u64(const std::string& attr, uint64_t v);
  void write_attr_string(const std::string& attr, const std::string& v);  // fixed-length UTF-8, scalar
  int64_t read_attr_i64(const std::string& attr) const;  // any integer type that fits
  uint64_t read_attr_u64(const std::string& attr) const;
  std::string read_attr_string(const std::string& attr) const;  // fixed-length, ASCII or UTF-8

 protected:
  Object() = default;
  Object(Id id, std::string name) : id_(std::move(id)), name_(std::move(name)) {}
  Id id_;
  std::string name_;
};

class Dataset : public Object {
 public:
  Dataset(Id id, std::string name) : Object(std::move(id), std::move(name)) {}

  Dims dims() const;      // {} for a scalar dataspace; throws for a null dataspace
  int64_t numel() const;  // product of dims (1 for scalar)
  H5T_class_t type_class() const;
  size_t type_size() const;  // bytes per element in the file
  uint64_t storage_size() const;  // bytes allocated in the file (H5Dget_storage_size; 0 if none)
  bool type_signed() const;  // integer types only
  bool is_string() const { return type_class() == H5T_STRING; }

  // Whole-dataset transfer; mem_type is a native type such as H5T_NATIVE_FLOAT. HDF5 converts
  // between the memory and file types. Nothing is transferred for a zero-element dataset.
  void write(hid_t mem_type, const void* data);
  void read(hid_t mem_type, void* data) const;
  std::string read_string() const;  // scalar fixed-length string dataset (ASCII or UTF-8)
  void close() { id_.close(); }
};

class Group : public Object {
 public:
  Group(Id id, std::string name) : Object(std::move(id), std::move(name)) {}

  bool has(const std::string& link) const;  // a link of that name exists in this group
  std::vector<std::string> links() const;   // link names, in name order (HDF5Error if one is not a hard link)
  Group create_group(const std::string& link);
  Group open_group(const std::string& link) const;

  // Contiguous dataset with the given file type (e.g. H5T_IEEE_F32LE) and shape.
  Dataset create_dataset(const std::string& link, hid_t file_type, const Dims& dims);
  Dataset open_dataset(const std::string& link) const;
  // Scalar fixed-length UTF-8 string dataset (length + 1 bytes, NUL-terminated).
  Dataset write_string(const std::string& link, const std::string& value);
  void close() { id_.close(); }
};

class File {
 public:
  // Truncates an existing file. userblock > 0 (a power of two >= 512) reserves that many bytes at
  // the start of the file that HDF5 leaves alone (the caller may write its own header there).
  static File create(const std::string& path, uint64_t userblock = 0);
  static File open(const std::string& path, bool writable = false);

  Group& root() { return root_; }
  const Group& root() const { return root_; }
  const std::string& path() const { return path_; }
  void flush();
  // Closes root group and file now, reporting errors (the destructor closes silently).
  void close();

 private:
  File(Id file, Group root, std::string path)
      : file_(std::move(file)), root_(std::move(root)), path_(std::move(path)) {}
  Id file_;
  Group root_;
  std::string path_;
};

// Horizon's dtypes in a file: each stored as a little-endian HDF5 type (bf16 as its 16 bits, an
// unsigned integer), read and written through the matching native type; DTypeError for a dtype
// with no mapping. stores(d, t): the dataset's stored type is what `t` is written as.
hid_t file_type(DType t);
hid_t memory_type(DType t);
bool stores(const Dataset& d, DType t);

// Raw helpers, also used by tests.
// True when the file starts with the HDF5 signature (H5Fis_hdf5 > 0); false for other files.
bool is_hdf5(const std::string& path);
// The innermost message of the current HDF5 error stack ("" if none); clears the stack.
std::string last_error_message();

}  // namespace hz::io::h5
