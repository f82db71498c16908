#include "io/hdf5.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/file.h"

namespace hz::io::h5 {

// ---- library lifetime ---------------------------------------------------------------------------
// When closing a file fails (a full disk while flushing), libhdf5 1.10 keeps a half-destroyed file
// ID; its own shutdown at exit then dereferences it and the process dies with SIGSEGV after the
// clean error message. So the library's atexit hook is switched off before it initialises (this
// static initialiser runs before main) and replaced by one that shuts it down only when no close
// has failed; after a failed close the operating system reclaims what is left.
namespace {
std::atomic<bool> g_close_failed{false};
const bool g_lifetime = [] {
  H5dont_atexit();
  std::atexit([] {
    if (!g_close_failed.load()) H5close();
  });
  return true;
}();
}  // namespace

// ---- errors -----------------------------------------------------------------------------------
void silence_errors() {
  (void)g_lifetime;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

namespace {
herr_t collect_error(unsigned, const H5E_error2_t* err, void* out) {
  auto* msgs = static_cast<std::vector<std::string>*>(out);
  msgs->push_back(err->desc ? err->desc : "");
  return 0;
}
}  // namespace

std::string last_error_message() {
  std::vector<std::string> msgs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &msgs);
  H5Eclear2(H5E_DEFAULT);
  // Walking downward goes from the API call to the root cause: the last entry is the most specific.
  for (auto it = msgs.rbegin(); it != msgs.rend(); ++it)
    if (!it->empty()) return *it;
  return {};
}

namespace {
[[noreturn]] void fail(const std::string& what) {
  const std::string why = last_error_message();
  throw HDF5Error(why.empty() ? what : what + " (HDF5: " + why + ")");
}
// hid_t and herr_t results: negative means failure.
hid_t check_id(hid_t id, const std::string& what) {
  if (id < 0) fail(what);
  return id;
}
void check(herr_t rc, const std::string& what) {
  if (rc < 0) fail(what);
}
std::string join(const std::string& parent, const std::string& link) {
  if (parent.empty() || parent == "/") return "/" + link;
  return parent + "/" + link;
}

Id make_space(const Dims& dims, const std::string& what) {
  if (dims.empty()) return Id(check_id(H5Screate(H5S_SCALAR), what), H5Sclose);
  std::vector<hsize_t> d(dims.begin(), dims.end());
  for (auto v : dims)
    if (v < 0) throw HDF5Error(what + ": negative dimension");
  return Id(check_id(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), what),
            H5Sclose);
}

Dims space_dims(hid_t space, const std::string& what) {
  const H5S_class_t cls = H5Sget_simple_extent_type(space);
  if (cls == H5S_SCALAR) return {};
  if (cls != H5S_SIMPLE)
    throw HDF5Error(what + ": dataspace is null or invalid (no elements to read)");
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) fail(what);
  std::vector<hsize_t> d(static_cast<size_t>(rank));
  if (rank > 0) check(H5Sget_simple_extent_dims(space, d.data(), nullptr), what);
  return Dims(d.begin(), d.end());
}

// The fixed-length UTF-8 type that holds `v` and its terminating NUL (what Horizon writes: a
// reader allocates exactly the stored size, with no heap reference a flipped byte could redirect).
Id utf8_fixed_string_type(const std::string& v, const std::string& what) {
  Id t(check_id(H5Tcopy(H5T_C_S1), what), H5Tclose);
  check(H5Tset_size(t.get(), v.size() + 1), what);
  check(H5Tset_strpad(t.get(), H5T_STR_NULLTERM), what);
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), what);
  return t;
}

// Reads one fixed-length string through `read(mem_type, buf)`; the memory type takes the
// file's character set (HDF5 refuses to convert between ASCII and UTF-8).
// storage: the bytes the object occupies in the file (H5Aget_storage_size / H5Dget_storage_size),
// which bounds a fixed-length string's size before anything is allocated.
template <class ReadFn>
std::string read_one_string(hid_t file_type, hid_t space, uint64_t storage, const std::string& what, ReadFn read) {
  if (H5Tget_class(file_type) != H5T_STRING) throw HDF5Error(what + ": not a string");
  if (H5Sget_simple_extent_type(space) == H5S_NULL) throw HDF5Error(what + ": holds no value (null dataspace)");
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n != 1) throw HDF5Error(what + ": expected one string, found " + std::to_string(n));
  const H5T_cset_t cset = H5Tget_cset(file_type);
  Id mem(check_id(H5Tcopy(H5T_C_S1), what), H5Tclose);
  check(H5Tset_cset(mem.get(), cset), what);
  const htri_t vl = H5Tis_variable_str(file_type);
  if (vl < 0) fail(what);
  // A variable-length string lives in the file's global heap, which libhdf5 reads without bounds
  // checks (a flipped bit there crashes or hangs it): Horizon writes and reads fixed-length ones only.
  if (vl) throw HDF5Error(what + ": a variable-length string, which Horizon does not read (it writes fixed-length ones)");
  const size_t size = H5Tget_size(file_type);
  if (size == 0) fail(what);
  if (size > kMaxStringBytes || size > storage)
    throw HDF5Error(what + ": a fixed-length string of " + std::to_string(size) + " bytes, but the object stores " +
                    std::to_string(storage) + " bytes (at most " + std::to_string(kMaxStringBytes) +
                    " allowed): the file is damaged");
  check(H5Tset_size(mem.get(), size), what);
  check(H5Tset_strpad(mem.get(), H5Tget_strpad(file_type)), what);
  std::vector<char> buf(size + 1, '\0');
  check(read(mem.get(), static_cast<void*>(buf.data())), what);
  return std::string(buf.data(), strnlen(buf.data(), size));
}
}  // namespace

// ---- Id ---------------------------------------------------------------------------------------
Id::~Id() {
  if (id_ >= 0 && closer_ && closer_(id_) < 0) g_close_failed = true;
}
Id& Id::operator=(Id&& o) noexcept {
  if (this != &o) {
    if (id_ >= 0 && closer_ && closer_(id_) < 0) g_close_failed = true;
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}
void Id::close(const std::string& what) {
  if (id_ < 0) return;
  const hid_t id = id_;
  id_ = H5I_INVALID_HID;
  if (closer_ && closer_(id) < 0) {
    g_close_failed = true;
    fail(what);
  }
}

// ---- attributes -------------------------------------------------------------------------------
bool Object::has_attr(const std::string& attr) const {
  const htri_t r = H5Aexists(id(), attr.c_str());
  if (r < 0) fail("checking for attribute '" + attr + "' on " + name_);
  return r > 0;
}

namespace {
Id open_attr(const Object& o, const std::string& attr) {
  if (!o.has_attr(attr)) throw HDF5Error(o.name() + " has no attribute '" + attr + "'");
  return Id(check_id(H5Aopen(o.id(), attr.c_str(), H5P_DEFAULT),
                     "opening attribute '" + attr + "' of " + o.name()),
            H5Aclose);
}
template <class T>
T read_scalar_attr(const Object& o, const std::string& attr, hid_t mem_type) {
  const std::string what = "reading attribute '" + attr + "' of " + o.name();
  Id a = open_attr(o, attr);
  Id type(check_id(H5Aget_type(a.get()), what), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) throw HDF5Error(what + ": not an integer");
  Id space(check_id(H5Aget_space(a.get()), what), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    throw HDF5Error(what + ": expected a single value");
  T v{};
  check(H5Aread(a.get(), mem_type, &v), what);
  return v;
}
void write_scalar_attr(Object& o, const std::string& attr, hid_t file_type, hid_t mem_type,
                       const void* v) {
  const std::string what = "writing attribute '" + attr + "' of " + o.name();
  if (o.has_attr(attr)) check(H5Adelete(o.id(), attr.c_str()), what);
  Id space = make_space({}, what);
  Id a(check_id(H5Acreate2(o.id(), attr.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                what),
       H5Aclose);
  check(H5Awrite(a.get(), mem_type, v), what);
  a.close(what);
}
}  // namespace

void Object::write_attr_i64(const std::string& attr, int64_t v) {
  write_scalar_attr(*this, attr, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
void Object::write_attr_u64(const std::string& attr, uint64_t v) {
  write_scalar_attr(*this, attr, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}
void Object::write_attr_string(const std::string& attr, const std::string& v) {
  const std::string what = "writing string attribute '" + attr + "' of " + name_;
  if (v.size() > kMaxStringBytes) throw HDF5Error(what + ": longer than " + std::to_string(kMaxStringBytes) + " bytes");
  Id type = utf8_fixed_string_type(v, what);
  write_scalar_attr(*this, attr, type.get(), type.get(), v.c_str());
}
int64_t Object::read_attr_i64(const std::string& attr) const {
  return read_scalar_attr<int64_t>(*this, attr, H5T_NATIVE_INT64);
}
uint64_t Object::read_attr_u64(const std::string& attr) const {
  return read_scalar_attr<uint64_t>(*this, attr, H5T_NATIVE_UINT64);
}
std::string Object::read_attr_string(const std::string& attr) const {
  const std::string what = "reading string attribute '" + attr + "' of " + name_;
  Id a = open_attr(*this, attr);
  Id type(check_id(H5Aget_type(a.get()), what), H5Tclose);
  Id space(check_id(H5Aget_space(a.get()), what), H5Sclose);
  return read_one_string(type.get(), space.get(), H5Aget_storage_size(a.get()), what,
                         [&](hid_t mem, void* buf) { return H5Aread(a.get(), mem, buf); });
}

// ---- Dataset ----------------------------------------------------------------------------------
Dims Dataset::dims() const {
  const std::string what = "reading the shape of " + name_;
  Id space(check_id(H5Dget_space(id()), what), H5Sclose);
  return space_dims(space.get(), what);
}
int64_t Dataset::numel() const {
  int64_t n = 1;
  for (auto d : dims())
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw HDF5Error(name_ + ": its dimensions overflow a 64-bit element count: the file is damaged");
  return n;
}
uint64_t Dataset::storage_size() const { return H5Dget_storage_size(id()); }
H5T_class_t Dataset::type_class() const {
  Id t(check_id(H5Dget_type(id()), "reading the type of " + name_), H5Tclose);
  return H5Tget_class(t.get());
}
size_t Dataset::type_size() const {
  Id t(check_id(H5Dget_type(id()), "reading the type of " + name_), H5Tclose);
  return H5Tget_size(t.get());
}
bool Dataset::type_signed() const {
  Id t(check_id(H5Dget_type(id()), "reading the type of " + name_), H5Tclose);
  return H5Tget_sign(t.get()) == H5T_SGN_2;
}
void Dataset::write(hid_t mem_type, const void* data) {
  if (numel() == 0) return;
  check(H5Dwrite(id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "writing " + name_);
}
void Dataset::read(hid_t mem_type, void* data) const {
  if (numel() == 0) return;
  check(H5Dread(id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "reading " + name_);
}
std::string Dataset::read_string() const {
  const std::string what = "reading string dataset " + name_;
  Id type(check_id(H5Dget_type(id()), what), H5Tclose);
  Id space(check_id(H5Dget_space(id()), what), H5Sclose);
  return read_one_string(type.get(), space.get(), storage_size(), what, [&](hid_t mem, void* buf) {
    return H5Dread(id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  });
}

// ---- Group ------------------------------------------------------------------------------------
namespace {
Id utf8_link_plist(const std::string& what) {
  Id lcpl(check_id(H5Pcreate(H5P_LINK_CREATE), what), H5Pclose);
  check(H5Pset_char_encoding(lcpl.get(), H5T_CSET_UTF8), what);
  return lcpl;
}
struct LinkList {
  std::vector<std::string> names;
  std::string not_hard;  // the first link that is not a hard link
};
herr_t collect_link(hid_t, const char* name, const H5L_info_t* info, void* out) {
  auto* l = static_cast<LinkList*>(out);
  if (info->type != H5L_TYPE_HARD && l->not_hard.empty()) l->not_hard = name;
  l->names.emplace_back(name);
  return 0;
}
const char* link_kind(H5L_type_t t) {
  switch (t) {
    case H5L_TYPE_SOFT: return "a soft link";
    case H5L_TYPE_EXTERNAL: return "an external link (to another file)";
    default: return "a user-defined link";
  }
}
// Soft, external and user-defined links make libhdf5 follow a path Horizon did not write (an
// external link opens another file): only hard links are opened.
void require_hard_link(hid_t group, const std::string& link, const std::string& path) {
  H5L_info_t info{};
  if (H5Lget_info(group, link.c_str(), &info, H5P_DEFAULT) < 0) fail("reading the link " + path);
  if (info.type != H5L_TYPE_HARD)
    throw HDF5Error(path + " is " + link_kind(info.type) + ", which Horizon does not follow (it writes hard links only)");
}
// A dataset Horizon reads: contiguous or compact storage in this file (no external raw-data files, no
// virtual layout mapping other files, no filters), of a fixed-size integer, float or string type.
void require_plain_dataset(hid_t d, const std::string& path) {
  const std::string what = "checking dataset " + path;
  Id dcpl(check_id(H5Dget_create_plist(d), what), H5Pclose);
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT)
    throw HDF5Error(path + ": " +
                    (layout == H5D_VIRTUAL ? std::string("a virtual dataset (its values live in other files)")
                     : layout == H5D_CHUNKED ? std::string("a chunked dataset")
                                             : "a dataset of unknown layout") +
                    ", which Horizon does not read (it writes contiguous datasets)");
  const int external = H5Pget_external_count(dcpl.get());
  if (external != 0)
    throw HDF5Error(path + ": its values are stored in " +
                    (external > 0 ? std::to_string(external) + " external file(s)" : std::string("an unreadable place")) +
                    ", which Horizon does not read (it writes every value inside the checkpoint)");
  if (H5Pget_nfilters(dcpl.get()) != 0) throw HDF5Error(path + ": a filtered (compressed) dataset, which Horizon does not read");
  Id type(check_id(H5Dget_type(d), what), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  const htri_t vl = cls == H5T_STRING ? H5Tis_variable_str(type.get()) : 0;
  if (vl < 0) fail(what);
  if ((cls != H5T_INTEGER && cls != H5T_FLOAT && cls != H5T_STRING) || vl)
    throw HDF5Error(path + ": " +
                    (vl ? std::string("a variable-length string") : "an element type of class " + std::to_string(int(cls))) +
                    ", which Horizon does not read (it writes fixed-size integers, floats and fixed-length strings)");
}
}  // namespace

bool Group::has(const std::string& link) const {
  const htri_t r = H5Lexists(id(), link.c_str(), H5P_DEFAULT);
  if (r < 0) fail("checking for '" + link + "' in " + name_);
  return r > 0;
}
std::vector<std::string> Group::links() const {
  LinkList out;
  hsize_t idx = 0;
  check(H5Literate(id(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_link, &out),
        "listing the members of " + name_);
  if (!out.not_hard.empty()) require_hard_link(id(), out.not_hard, join(name_, out.not_hard));
  return out.names;
}
Group Group::create_group(const std::string& link) {
  const std::string path = join(name_, link);
  Id lcpl = utf8_link_plist("creating group " + path);
  return Group(Id(check_id(H5Gcreate2(id(), link.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
                           "creating group " + path),
                  H5Gclose),
               path);
}
Group Group::open_group(const std::string& link) const {
  const std::string path = join(name_, link);
  if (!has(link)) throw HDF5Error("no group " + path);
  require_hard_link(id(), link, path);
  return Group(
      Id(check_id(H5Gopen2(id(), link.c_str(), H5P_DEFAULT), "opening group " + path), H5Gclose),
      path);
}
Dataset Group::create_dataset(const std::string& link, hid_t file_type, const Dims& dims) {
  const std::string path = join(name_, link);
  const std::string what = "creating dataset " + path;
  Id space = make_space(dims, what);
  Id lcpl = utf8_link_plist(what);
  return Dataset(Id(check_id(H5Dcreate2(id(), link.c_str(), file_type, space.get(), lcpl.get(),
                                        H5P_DEFAULT, H5P_DEFAULT),
                             what),
                    H5Dclose),
                 path);
}
Dataset Group::open_dataset(const std::string& link) const {
  const std::string path = join(name_, link);
  if (!has(link)) throw HDF5Error("no dataset " + path);
  require_hard_link(id(), link, path);
  Id d(check_id(H5Dopen2(id(), link.c_str(), H5P_DEFAULT), "opening dataset " + path), H5Dclose);
  require_plain_dataset(d.get(), path);
  return Dataset(std::move(d), path);
}
Dataset Group::write_string(const std::string& link, const std::string& value) {
  const std::string what = "writing string dataset " + join(name_, link);
  if (value.size() > kMaxStringBytes) throw HDF5Error(what + ": longer than " + std::to_string(kMaxStringBytes) + " bytes");
  Id type = utf8_fixed_string_type(value, what);
  Dataset d = create_dataset(link, type.get(), {});
  check(H5Dwrite(d.id(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, value.c_str()), what);
  return d;
}

// ---- File -------------------------------------------------------------------------------------
namespace {
Id strong_close_fapl(const std::string& what) {
  Id fapl(check_id(H5Pcreate(H5P_FILE_ACCESS), what), H5Pclose);
  // Closing the file closes every object still open in it, so the bytes are all written when
  // H5Fclose returns (the default "weak" degree would keep the file open behind our back).
  check(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), what);
  return fapl;
}
}  // namespace

File File::create(const std::string& path, uint64_t userblock) {
  silence_errors();
  const std::string what = "creating HDF5 file " + path;
  Id fapl = strong_close_fapl(what);
  Id fcpl(check_id(H5Pcreate(H5P_FILE_CREATE), what), H5Pclose);
  if (userblock > 0) check(H5Pset_userblock(fcpl.get(), userblock), what);
  Id f(check_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), what), H5Fclose);
  Id root(check_id(H5Gopen2(f.get(), "/", H5P_DEFAULT), what), H5Gclose);
  return File(std::move(f), Group(std::move(root), "/"), path);
}
File File::open(const std::string& path, bool writable) {
  // a regular file only (core/file.h): libhdf5 would wait on a FIFO for a writer
  if (const std::string why = input_problem(path); !why.empty()) throw HDF5Error("opening HDF5 file " + path + ": " + why);
  silence_errors();
  const std::string what = "opening HDF5 file " + path;
  Id fapl = strong_close_fapl(what);
  Id f(check_id(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl.get()), what),
       H5Fclose);
  Id root(check_id(H5Gopen2(f.get(), "/", H5P_DEFAULT), what), H5Gclose);
  return File(std::move(f), Group(std::move(root), "/"), path);
}
void File::flush() {
  check(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), "flushing HDF5 file " + path_);
}
void File::close() {
  root_.close();
  file_.close("closing (and flushing) HDF5 file " + path_);
}

bool is_hdf5(const std::string& path) {
  if (!input_problem(path).empty()) return false;  // never opens a FIFO (core/file.h)
  silence_errors();
#if H5_VERSION_GE(1, 12, 0)
  const htri_t r = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  const htri_t r = H5Fis_hdf5(path.c_str());
#endif
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

// ---- Horizon's dtypes in a file ----------------------------------------------------------------
hid_t file_type(DType t) {
  switch (t) {
    case DType::F32: return H5T_IEEE_F32LE;
    case DType::F64: return H5T_IEEE_F64LE;
    case DType::BF16: return H5T_STD_U16LE;
    case DType::I32: return H5T_STD_I32LE;
    case DType::I64: return H5T_STD_I64LE;
    default: break;
  }
  throw DTypeError(std::string("HDF5: no type for dtype ") + dtype_name(t));
}
hid_t memory_type(DType t) {
  switch (t) {
    case DType::F32: return H5T_NATIVE_FLOAT;
    case DType::F64: return H5T_NATIVE_DOUBLE;
    case DType::BF16: return H5T_NATIVE_UINT16;
    case DType::I32: return H5T_NATIVE_INT32;
    case DType::I64: return H5T_NATIVE_INT64;
    default: break;
  }
  throw DTypeError(std::string("HDF5: no type for dtype ") + dtype_name(t));
}

bool stores(const Dataset& d, DType t) {
  const H5T_class_t cls = d.type_class();
  const size_t size = d.type_size();
  switch (t) {
    case DType::F32: return cls == H5T_FLOAT && size == 4;
    case DType::F64: return cls == H5T_FLOAT && size == 8;
    case DType::BF16: return cls == H5T_INTEGER && size == 2 && !d.type_signed();
    case DType::I32: return cls == H5T_INTEGER && size == 4 && d.type_signed();
    case DType::I64: return cls == H5T_INTEGER && size == 8 && d.type_signed();
    default: return false;
  }
}

}  // namespace hz::io::h5
