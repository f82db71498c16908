#include "core/tensor.h"

#include "core/names.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "core/backend.h"
#include "core/bf16.h"

namespace hz {

// ---- dtype / device ---------------------------------------------------------------------------
static const size_t kDTypeSize[] = {4, 8, 2, 4, 8};
static const char* const kDTypeName[] = {"f32", "f64", "bf16", "i32", "i64"};
static_assert(sizeof(kDTypeSize) / sizeof(kDTypeSize[0]) == static_cast<size_t>(DType::Count));
static_assert(sizeof(kDTypeName) / sizeof(kDTypeName[0]) == static_cast<size_t>(DType::Count));
size_t dtype_size(DType t) { return kDTypeSize[static_cast<int>(t)]; }
const char* dtype_name(DType t) { return kDTypeName[static_cast<int>(t)]; }
namespace {
const char* const kDeviceTypeNames[] = {"cpu", "cuda"};
}  // namespace
const char* name(DeviceType t) { return enum_name(t, kDeviceTypeNames); }
DeviceType parse_device_type(const std::string& s) { return parse_name<DeviceType>(s, kDeviceTypeNames, "device"); }

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

// ---- shapes -----------------------------------------------------------------------------------
std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  if (s.size() == 1) os << ",";
  os << ")";
  return os.str();
}
int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}
Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}
Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    HZ_CHECK(da == db || da == 1 || db == 1, ShapeError, "shapes ", shape_str(a), " and ",
             shape_str(b), " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---- storage ----------------------------------------------------------------------------------
DeviceMemoryStats memory_stats(Device d) { return HZ_BACKEND(d, memory_stats)(d.index); }
void reset_peak_memory(Device d) { HZ_BACKEND(d, reset_peak)(d.index); }

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  ptr_ = HZ_BACKEND(device, alloc)(bytes, device.index);
}
Storage::~Storage() { backend(device_).release(ptr_, bytes_, device_.index); }

namespace {
// Moves `bytes` between two devices (at least one of them the CPU, or the same CUDA device).
void transfer(void* dst, Device dd, const void* src, Device sd, size_t bytes) {
  if (bytes == 0) return;
  if (dd.is_cpu() && sd.is_cpu()) {
    std::memcpy(dst, src, bytes);
  } else if (sd.is_cpu()) {
    HZ_BACKEND(dd, upload)(dst, src, bytes, dd.index);
  } else if (dd.is_cpu()) {
    HZ_BACKEND(sd, download)(dst, src, bytes, sd.index);
  } else {  // device to device through the host (different CUDA devices: rare, not a hot path)
    std::vector<char> host(bytes);
    HZ_BACKEND(sd, download)(host.data(), src, bytes, sd.index);
    HZ_BACKEND(dd, upload)(dst, host.data(), bytes, dd.index);
  }
}
}  // namespace

// ---- creation ---------------------------------------------------------------------------------
Tensor Tensor::empty(const Shape& shape, DType dtype, Device dev) {
  for (auto d : shape) HZ_CHECK(d >= 0, ShapeError, "negative dimension in shape ", shape_str(shape));
  Tensor t;
  t.storage_ = std::make_shared<Storage>(shape_numel(shape) * dtype_size(dtype), dev);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}
Tensor Tensor::zeros(const Shape& shape, DType dtype, Device dev) { return full(shape, 0.0, dtype, dev); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device dev) { return full(shape, 1.0, dtype, dev); }
Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device dev) {
  Tensor t = empty(shape, dtype, dev);
  t.fill_(value);
  return t;
}
Tensor Tensor::arange(int64_t start, int64_t end, int64_t step, DType dtype, Device dev) {
  HZ_CHECK(step != 0, ValueError, "arange: step must be non-zero");
  const int64_t n = std::max<int64_t>(0, (end - start + step - (step > 0 ? 1 : -1)) / step);
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(start + i * step);
  return from_vector(v, {n}, dtype, dev);
}
Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype,
                           Device dev) {
  HZ_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), ShapeError, "from_vector: ",
           values.size(), " values do not fill shape ", shape_str(shape));
  Tensor src = empty(shape, DType::F64);
  std::copy(values.begin(), values.end(), src.data<double>());
  Tensor t = dtype == DType::F64 ? src : src.to(dtype);
  return dev.is_cpu() ? t : t.to(dev);
}
template <class T>
Tensor Tensor::from_data(const T* values, const Shape& shape, Device dev) {
  Tensor t = empty(shape, dtype_of<T>::value);
  std::memcpy(t.raw_data(), values, t.numel() * sizeof(T));
  return dev.is_cpu() ? t : t.to(dev);
}
template Tensor Tensor::from_data<float>(const float*, const Shape&, Device);
template Tensor Tensor::from_data<double>(const double*, const Shape&, Device);
template Tensor Tensor::from_data<int32_t>(const int32_t*, const Shape&, Device);
template Tensor Tensor::from_data<int64_t>(const int64_t*, const Shape&, Device);

// ---- metadata ---------------------------------------------------------------------------------
Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }
int64_t Tensor::normalize_dim(int64_t d) const {
  const int64_t n = dim();
  HZ_CHECK(d >= -n && d < n, ShapeError, "dim ", d, " out of range for a ", n, "-d tensor ",
           shape_str(shape_));
  return d < 0 ? d + n : d;
}
int64_t Tensor::size(int64_t d) const { return shape_[normalize_dim(d)]; }
int64_t Tensor::stride(int64_t d) const { return strides_[normalize_dim(d)]; }
bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to misplace
  int64_t acc = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}
std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return std::string("Tensor(") + dtype_name(dtype_) + ", " + device().str() + ", " +
         shape_str(shape_) + ")";
}
void* Tensor::raw_data() const {
  HZ_CHECK(defined(), ValueError, "data access on an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * dtype_size(dtype_);
}
template <class T>
T* Tensor::data() const {
  HZ_CHECK(dtype_ == dtype_of<T>::value, DTypeError, "data<", dtype_name(dtype_of<T>::value),
           ">() on a ", dtype_name(dtype_), " tensor");
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int32_t* Tensor::data<int32_t>() const;
template int64_t* Tensor::data<int64_t>() const;
template <>
bf16* Tensor::data<bf16>() const {
  HZ_CHECK(dtype_ == DType::BF16, DTypeError, "data<bf16>() on a ", dtype_name(dtype_), " tensor");
  return static_cast<bf16*>(raw_data());
}

// ---- element access ---------------------------------------------------------------------------
static double load_as_double(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::F64: return static_cast<const double*>(base)[i];
    case DType::BF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::I32: return static_cast<const int32_t*>(base)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    default: throw DTypeError("bad dtype");
  }
}
std::vector<double> Tensor::to_vector() const {
  Tensor c = contiguous().to(Device::cpu());
  std::vector<double> v(c.numel());
  for (int64_t i = 0; i < c.numel(); ++i) v[i] = load_as_double(c.raw_data(), c.dtype_, i);
  return v;
}
int64_t Tensor::first_non_finite() const {
  if (!is_floating(dtype_)) return -1;
  const Tensor c = contiguous().to(Device::cpu());
  const int64_t n = c.numel();
  // a float is finite unless its exponent bits are all ones
  auto scan = [n](auto* p, auto exp_mask) -> int64_t {
    for (int64_t i = 0; i < n; ++i)
      if ((p[i] & exp_mask) == exp_mask) return i;
    return -1;
  };
  switch (dtype_) {
    case DType::F32: return scan(static_cast<const uint32_t*>(c.raw_data()), uint32_t{0x7f800000u});
    case DType::F64: return scan(static_cast<const uint64_t*>(c.raw_data()), uint64_t{0x7ff0000000000000ull});
    case DType::BF16: return scan(static_cast<const uint16_t*>(c.raw_data()), uint16_t{0x7f80u});
    default: return -1;
  }
}
double Tensor::item() const {
  HZ_CHECK(numel() == 1, ShapeError, "item() needs exactly one element, tensor has shape ",
           shape_str(shape_));
  return at_flat(0);
}
double Tensor::at_flat(int64_t i) const {
  HZ_CHECK(i >= 0 && i < numel(), ShapeError, "flat index ", i, " out of range for ", numel(),
           " elements");
  int64_t off = 0;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    off += (i % shape_[d]) * strides_[d];
    i /= shape_[d];
  }
  if (device().is_cpu()) return load_as_double(raw_data(), dtype_, off);
  return with_view({1}, {1}, offset_ + off).to(Device::cpu()).at_flat(0);
}
double Tensor::at(std::initializer_list<int64_t> idx) const {
  HZ_CHECK(static_cast<int64_t>(idx.size()) == dim(), ShapeError, "at(): ", idx.size(),
           " indices for a ", dim(), "-d tensor");
  int64_t flat = 0, d = 0;
  for (int64_t i : idx) {
    const int64_t n = shape_[d];
    HZ_CHECK(i >= -n && i < n, ShapeError, "index ", i, " out of range for dim ", d, " of size ", n);
    flat = flat * n + (i < 0 ? i + n : i);
    ++d;
  }
  return at_flat(flat);
}
void Tensor::set(std::initializer_list<int64_t> idx, double v) {
  HZ_CHECK(device().is_cpu(), DeviceError, "set() works on CPU tensors only");
  HZ_CHECK(static_cast<int64_t>(idx.size()) == dim(), ShapeError, "set(): ", idx.size(),
           " indices for a ", dim(), "-d tensor");
  int64_t off = 0, d = 0;
  for (int64_t i : idx) {
    const int64_t n = shape_[d];
    HZ_CHECK(i >= -n && i < n, ShapeError, "index ", i, " out of range for dim ", d, " of size ", n);
    off += (i < 0 ? i + n : i) * strides_[d];
    ++d;
  }
  Tensor one = with_view({1}, {1}, offset_ + off);
  one.fill_(v);
}

// ---- views ------------------------------------------------------------------------------------
Tensor Tensor::with_view(Shape shape, Shape strides, int64_t offset) const {
  Tensor t;
  t.storage_ = storage_;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  t.dtype_ = dtype_;
  return t;
}

static Shape infer_shape(Shape shape, int64_t numel) {
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      HZ_CHECK(infer < 0, ShapeError, "only one dimension may be -1 in ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      HZ_CHECK(shape[i] >= 0, ShapeError, "invalid dimension in ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    HZ_CHECK(known > 0 && numel % known == 0, ShapeError, "cannot infer -1 in ", shape_str(shape),
             " for ", numel, " elements");
    shape[infer] = numel / known;
  }
  HZ_CHECK(shape_numel(shape) == numel, ShapeError, "shape ", shape_str(shape), " does not hold ",
           numel, " elements");
  return shape;
}

// Strides for viewing this layout as `shape` without copying, if possible (numpy's algorithm:
// split/merge dims only inside runs that are contiguous with each other).
static bool view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape,
                         Shape& out) {
  out.assign(shape.size(), 0);
  if (shape_numel(shape) == 0) {
    out = contiguous_strides(shape);
    return true;
  }
  // drop size-1 dims from the old layout
  Shape os, ost;
  for (size_t i = 0; i < old_shape.size(); ++i)
    if (old_shape[i] != 1) { os.push_back(old_shape[i]); ost.push_back(old_strides[i]); }
  size_t oi = 0, ni = 0;
  const size_t on = os.size(), nn = shape.size();
  while (ni < nn) {
    if (shape[ni] == 1) { out[ni] = 1; ++ni; continue; }
    if (oi >= on) return false;
    // take a group of old dims and new dims with equal products
    size_t oj = oi, nj = ni;
    int64_t po = os[oi], pn = shape[ni];
    while (po != pn) {
      if (po < pn) { if (++oj >= on) return false; po *= os[oj]; }
      else { if (++nj >= nn) return false; pn *= shape[nj]; }
    }
    for (size_t k = oi; k < oj; ++k)
      if (ost[k] != ost[k + 1] * os[k + 1]) return false;  // old group must be contiguous
    int64_t st = ost[oj];
    for (size_t k = nj + 1; k-- > ni;) {
      out[k] = st;
      st *= shape[k];
    }
    oi = oj + 1;
    ni = nj + 1;
  }
  return oi == on;
}

Tensor Tensor::view(const Shape& shape_in) const {
  Shape shape = infer_shape(shape_in, numel());
  Shape st;
  HZ_CHECK(view_strides(shape_, strides_, shape, st), ShapeError, "view ", shape_str(shape),
           " is not compatible with the layout of ", str(),
           " (non-contiguous); use reshape() to copy");
  return with_view(shape, st, offset_);
}
Tensor Tensor::reshape(const Shape& shape_in) const {
  Shape shape = infer_shape(shape_in, numel());
  Shape st;
  if (view_strides(shape_, strides_, shape, st)) return with_view(shape, st, offset_);
  return contiguous().view(shape);
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = normalize_dim(d0);
  d1 = normalize_dim(d1);
  Shape s = shape_, st = strides_;
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return with_view(s, st, offset_);
}
Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  HZ_CHECK(static_cast<int64_t>(dims.size()) == dim(), ShapeError, "permute: ", dims.size(),
           " dims given for a ", dim(), "-d tensor");
  std::vector<bool> seen(dims.size(), false);
  Shape s(dims.size()), st(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = normalize_dim(dims[i]);
    HZ_CHECK(!seen[d], ShapeError, "permute: dim ", d, " repeated");
    seen[d] = true;
    s[i] = shape_[d];
    st[i] = strides_[d];
  }
  return with_view(s, st, offset_);
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = normalize_dim(d);
  HZ_CHECK(start >= 0 && length >= 0 && start + length <= shape_[d], ShapeError, "narrow(dim ", d,
           ", start ", start, ", length ", length, ") out of range for size ", shape_[d]);
  Shape s = shape_;
  s[d] = length;
  return with_view(s, strides_, offset_ + start * strides_[d]);
}
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = normalize_dim(d);
  HZ_CHECK(step > 0, ValueError, "slice step must be positive");
  const int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape_, st = strides_;
  s[d] = (end - start + step - 1) / step;
  st[d] = strides_[d] * step;
  return with_view(s, st, offset_ + start * strides_[d]);
}
Tensor Tensor::select(int64_t d, int64_t index) const {
  d = normalize_dim(d);
  if (index < 0) index += shape_[d];
  HZ_CHECK(index >= 0 && index < shape_[d], ShapeError, "select index ", index,
           " out of range for size ", shape_[d]);
  Shape s = shape_, st = strides_;
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return with_view(s, st, offset_ + index * strides_[d]);
}
Tensor Tensor::expand(const Shape& shape) const {
  HZ_CHECK(shape.size() >= shape_.size(), ShapeError, "expand: target ", shape_str(shape),
           " has fewer dims than ", shape_str(shape_));
  const size_t lead = shape.size() - shape_.size();
  Shape st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) continue;
    const int64_t have = shape_[i - lead];
    if (have == shape[i]) st[i] = strides_[i - lead];
    else HZ_CHECK(have == 1, ShapeError, "expand: cannot expand ", shape_str(shape_), " to ",
                  shape_str(shape), " (dim ", i, ")");
  }
  return with_view(shape, st, offset_);
}
Tensor Tensor::unsqueeze(int64_t d) const {
  const int64_t n = dim() + 1;
  HZ_CHECK(d >= -n && d < n, ShapeError, "unsqueeze dim ", d, " out of range");
  if (d < 0) d += n;
  Shape s = shape_, st = strides_;
  const int64_t inner = d < dim() ? strides_[d] * shape_[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, inner);
  return with_view(s, st, offset_);
}
Tensor Tensor::squeeze(int64_t d) const {
  d = normalize_dim(d);
  HZ_CHECK(shape_[d] == 1, ShapeError, "squeeze: dim ", d, " has size ", shape_[d], ", not 1");
  Shape s = shape_, st = strides_;
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return with_view(s, st, offset_);
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  HZ_CHECK(defined(), ValueError, "as_strided on an undefined tensor");
  HZ_CHECK(shape.size() == strides.size(), ShapeError, "as_strided: ", shape.size(), " sizes but ", strides.size(),
           " strides");
  const int64_t cap = static_cast<int64_t>(storage_->bytes() / dtype_size(dtype_));
  int64_t hi = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    HZ_CHECK(shape[i] >= 0 && strides[i] >= 0, ShapeError, "as_strided: negative size or stride");
    if (shape[i] == 0) hi = offset - 1;  // no element: nothing to bound
    if (hi >= offset) hi += (shape[i] - 1) * strides[i];
  }
  HZ_CHECK(offset >= 0 && (shape_numel(shape) == 0 || hi < cap), ShapeError, "as_strided: view ", shape_str(shape),
           " with strides ", shape_str(strides), " at offset ", offset, " reaches beyond the storage of ", cap,
           " elements");
  return with_view(shape, strides, offset);
}

Tensor Tensor::to_same_layout(Device dev) const {
  if (dev == device()) return *this;
  Tensor t;
  t.storage_ = std::make_shared<Storage>(storage_->bytes(), dev);
  transfer(t.storage_->data(), dev, storage_->data(), device(), storage_->bytes());
  t.shape_ = shape_;
  t.strides_ = strides_;
  t.offset_ = offset_;
  t.dtype_ = dtype_;
  return t;
}

// ---- copies -----------------------------------------------------------------------------------
Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}
Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  HZ_BACKEND(device(), copy)(*this, out);
  return out;
}
Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape_, dtype_, dev);
  transfer(out.raw_data(), dev, src.raw_data(), src.device(), numel() * dtype_size(dtype_));
  return out;
}
Tensor Tensor::to(DType dt) const {
  if (dt == dtype_) return *this;
  Tensor out = empty(shape_, dt, device());
  HZ_BACKEND(device(), copy)(*this, out);
  return out;
}
void Tensor::copy_(const Tensor& src_in) {
  Tensor src = src_in.shape() == shape_ ? src_in : src_in.expand(shape_);
  if (src.device() != device()) src = src.contiguous().to(device());
  HZ_BACKEND(device(), copy)(src, *this);
}
void Tensor::fill_(double value) { HZ_BACKEND(device(), fill)(*this, value); }

}  // namespace hz
