// Horizon: bucketed gradient synchronisation for data parallelism.
//
// Parameters are grouped into buckets of about `bucket_bytes` in reverse registration order
// (the order backward produces gradients). With overlap on, each parameter's grad-ready hook
// marks it done; a bucket whose parameters are all done is packed into one flat buffer and its
// non-blocking all-reduce (average) starts while backward continues. finish() launches any bucket
// not yet started (in bucket order, identical on every rank), waits for all and unpacks the
// averaged gradients. With overlap off, everything happens in finish() (a debugging switch).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "distributed/communicator.h"

namespace hz::dist {

class GradSync {
 public:
  using NamedParams = std::vector<std::pair<std::string, ag::Variable*>>;
  GradSync(Communicator& comm, const NamedParams& params, int64_t bucket_bytes = 25 << 20, bool overlap = true);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  void begin();   // arm the hooks for the coming backward (the last micro-batch of a step)
  void finish();  // complete every bucket: grads are now the average over ranks
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  double comm_seconds() const { return comm_seconds_; }  // cumulative time spent launching/waiting
  int64_t overlapped_buckets() const { return overlapped_; }  // launched during backward

 private:
  struct Bucket {
    std::vector<ag::Variable*> params;
    int64_t numel = 0;
    int64_t ready = 0;
    Tensor flat;
    std::unique_ptr<Request> req;
    bool launched = false;
  };
  void launch(Bucket& b);
  void on_ready(size_t bucket);
  Communicator& comm_;
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<ag::VariableImpl>> impls_;
  bool overlap_, armed_ = false;
  double comm_seconds_ = 0;
  int64_t overlapped_ = 0;
};

}  // namespace hz::dist
