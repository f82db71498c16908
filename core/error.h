// Horizon: typed exceptions. Library code throws these with a message that says what to do;
// only cli/ turns them into exit codes.
#pragma once
#include <stdexcept>
#include <string>

namespace hz {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ShapeError : Error { using Error::Error; };        // incompatible shapes / bad dims
struct DTypeError : Error { using Error::Error; };        // unsupported or mismatched dtypes
struct DeviceError : Error { using Error::Error; };       // device mismatch, no GPU, CUDA failure
struct NotImplementedError : Error { using Error::Error; };
struct ValueError : Error { using Error::Error; };        // bad argument values

namespace detail {
std::string concat_msg();
template <class T, class... R>
std::string concat_msg(const T& first, const R&... rest);
}  // namespace detail

}  // namespace hz

#include <sstream>
namespace hz::detail {
inline std::string concat_msg() { return {}; }
template <class T, class... R>
std::string concat_msg(const T& first, const R&... rest) {
  std::ostringstream os;
  os << first;
  ((os << rest), ...);
  return os.str();
}
}  // namespace hz::detail

// HZ_CHECK(cond, ExcType, parts...): throws ExcType("parts...") when cond is false.
#define HZ_CHECK(cond, Exc, ...)                                   \
  do {                                                             \
    if (!(cond)) throw Exc(::hz::detail::concat_msg(__VA_ARGS__)); \
  } while (0)
