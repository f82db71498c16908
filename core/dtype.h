// Horizon: element types and devices.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hz {

// f64 exists for finite-difference gradient checks (double precision) and golden references.
enum class DType : uint8_t { F32, F64, BF16, I32, I64, Count };
static_assert(static_cast<int>(DType::Count) == 5, "update dtype_name/dtype_size");

size_t dtype_size(DType t);
const char* dtype_name(DType t);
inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16; }
inline bool is_integer(DType t) { return t == DType::I32 || t == DType::I64; }

enum class DeviceType : uint8_t { CPU, CUDA, Count };
const char* name(DeviceType t);                       // cpu | cuda
DeviceType parse_device_type(const std::string& s);  // throws ValueError listing the names

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && (is_cpu() || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu", "cuda:0"
};

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };

}  // namespace hz
