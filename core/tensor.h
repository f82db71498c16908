// Horizon: the Tensor.
//
// A Tensor is a strided view (shape, strides in elements, offset in elements) over shared
// Storage with a dtype and a device. View operations (reshape of contiguous data, transpose,
// permute, narrow/slice, expand, unsqueeze/squeeze) share storage and never copy; contiguous()
// copies only when the view is not already row-major contiguous.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace hz {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);       // "(2, 3, 4)"
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);
// Broadcast two shapes numpy-style; throws ShapeError naming both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Memory held on a device (for the trainer's metrics, benchmarks and memory-growth tests).
struct DeviceMemoryStats {
  int64_t allocated = 0;      // bytes held by live tensors
  int64_t reserved = 0;       // bytes held by the allocator (>= allocated: cached blocks)
  int64_t peak = 0;           // largest `allocated` since the last reset
  int64_t device_allocs = 0;  // calls into the device's own allocator (malloc / cudaMalloc*) so far
};
DeviceMemoryStats memory_stats(Device d);
void reset_peak_memory(Device d);  // peak := allocated

// CPU shorthands (thread-safe).
struct MemoryStats {
  int64_t current = 0;
  int64_t peak = 0;
};
MemoryStats cpu_memory_stats();
void reset_cpu_peak_memory();  // peak := current

// Raw memory on one device. Freed through the device's allocator when the last owner goes.
class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor (defined() == false)

  // ---- creation -------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device dev = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device dev = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device dev = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
                     Device dev = Device::cpu());
  // [start, end) with step; dtype I64 by default.
  static Tensor arange(int64_t start, int64_t end, int64_t step = 1, DType dtype = DType::I64,
                       Device dev = Device::cpu());
  // Copies host values (converted to dtype) into a new tensor of the given shape.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::F32, Device dev = Device::cpu());
  template <class T>
  static Tensor from_data(const T* values, const Shape& shape, Device dev = Device::cpu());

  // ---- metadata -------------------------------------------------------------------------
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::string str() const;  // short description: "Tensor(f32, cpu, (2, 3))"

  // Pointer to the first element of this view (offset applied). Checks dtype.
  template <class T> T* data() const;
  void* raw_data() const;  // first element of this view, untyped

  // ---- element access (slow; for tests and debugging; copies from GPU) -----------------
  double item() const;                                    // numel() must be 1
  double at(std::initializer_list<int64_t> idx) const;    // negative indices allowed
  double at_flat(int64_t i) const;                        // i-th element in row-major order
  void set(std::initializer_list<int64_t> idx, double v);  // CPU only
  std::vector<double> to_vector() const;                   // row-major values
  // Row-major index of the first NaN or +-Inf element, -1 when all are finite (and for integer
  // dtypes); copies from the GPU. Loaders use it to refuse non-finite weights, naming the tensor.
  int64_t first_non_finite() const;

  // ---- views (no copies) ----------------------------------------------------------------
  Tensor view(const Shape& shape) const;     // requires a compatible layout; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // view when possible, otherwise contiguous copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes dim
  Tensor expand(const Shape& shape) const;          // broadcast size-1 dims (stride 0)
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten() const { return reshape({numel()}); }

  // A view with explicit shape, strides and offset (elements) over this tensor's storage; checked
  // to stay inside the storage.
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // The same view (shape, strides, offset) over a copy of the whole storage on `dev` (tests and
  // tools that need a strided view on another device).
  Tensor to_same_layout(Device dev) const;

  // ---- copies -----------------------------------------------------------------------------
  Tensor contiguous() const;  // self if already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor to(Device dev) const;
  Tensor to(DType dt) const;  // value conversion (bf16 rounds to nearest even)
  void copy_(const Tensor& src);  // same shape (src may broadcast), any dtype/device
  void fill_(double value);
  void zero_() { fill_(0.0); }

  int64_t normalize_dim(int64_t d) const;  // d in [-dim, dim) -> [0, dim)

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::F32;

  Tensor with_view(Shape shape, Shape strides, int64_t offset) const;
};

}  // namespace hz
