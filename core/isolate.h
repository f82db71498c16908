// Horizon: running a parser that cannot be trusted with its input in a child process.
//
// libhdf5 reads a file's B-trees, heaps and object headers with few bounds checks: a crafted or
// damaged file (with a valid checksum, which anyone can recompute) can make it write out of bounds,
// abort, or walk a cycle forever. Such a reader runs here in a forked child: `work` gets a file
// descriptor (an anonymous in-memory file, memfd) to write its result to; the parent maps that
// result once the child exits 0. A crash (a signal), a refusal (an hz::Error, whose message comes
// back), any other exception, and a child still running after `seconds` (killed) all come back as
// a status with a message, never as a crash or a hang of the caller. The child dies with its
// parent (PR_SET_PDEATHSIG: a parent killed with kill -9 leaves no orphan reader behind).
// The child must use only fork-safe things: malloc, plain containers, the library it isolates (no
// OpenMP regions, no CUDA, no Horizon tensor allocator, which another thread may hold locked).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace hz {

// The child's output, mapped read-only; unmapped by the destructor.
class IsolatedOutput {
 public:
  IsolatedOutput() = default;
  IsolatedOutput(const char* data, size_t size) : data_(data), size_(size) {}
  ~IsolatedOutput();
  IsolatedOutput(IsolatedOutput&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr, o.size_ = 0; }
  IsolatedOutput& operator=(IsolatedOutput&& o) noexcept;
  IsolatedOutput(const IsolatedOutput&) = delete;
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

struct IsolatedResult {
  enum class Status { Ok, Refused, Crashed, TimedOut, Failed } status = Status::Failed;
  std::string message;  // Refused: the hz::Error's text; otherwise what happened ("signal 11 (Segmentation fault)")
  IsolatedOutput output;  // Ok only
};

// Runs work(fd) in a child process; see above. `seconds` > 0.
IsolatedResult run_isolated(const std::function<void(int fd)>& work, double seconds);

// Writes all n bytes to fd (retrying short writes); throws hz::Error on failure. For `work`.
void write_all(int fd, const void* p, size_t n);

}  // namespace hz
