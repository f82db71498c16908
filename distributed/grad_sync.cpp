#include "distributed/grad_sync.h"

#include <chrono>

namespace hz::dist {

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

GradSync::GradSync(Communicator& comm, const NamedParams& params, int64_t bucket_bytes, bool overlap)
    : comm_(comm), overlap_(overlap) {
  HZ_CHECK(bucket_bytes > 0, ValueError, "gradient bucket size must be positive");
  DType dt = DType::F32;
  Device dev = Device::cpu();
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    ag::Variable* p = it->second;
    dt = p->dtype();
    dev = p->value().device();
    const int64_t bytes = p->numel() * static_cast<int64_t>(dtype_size(dt));
    if (buckets_.empty() || (buckets_.back().numel * static_cast<int64_t>(dtype_size(dt)) + bytes > bucket_bytes &&
                             !buckets_.back().params.empty()))
      buckets_.emplace_back();
    buckets_.back().params.push_back(p);
    buckets_.back().numel += p->numel();
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].flat = Tensor::zeros({buckets_[b].numel}, dt, dev);
    for (ag::Variable* p : buckets_[b].params) {
      impls_.push_back(p->impl());
      if (overlap_) p->impl()->grad_ready_hook = [this, b] { on_ready(b); };
    }
  }
}

GradSync::~GradSync() {
  for (auto& i : impls_) i->grad_ready_hook = nullptr;
}

void GradSync::begin() {
  armed_ = true;
  for (auto& b : buckets_) {
    b.ready = 0;
    b.launched = false;
    b.req.reset();
  }
}

void GradSync::launch(Bucket& b) {
  const double t0 = now();
  // pack: one copy per gradient into the bucket (the device's copy kernel, on its stream)
  int64_t off = 0;
  for (ag::Variable* p : b.params) {
    const int64_t n = p->numel();
    Tensor dst = b.flat.narrow(0, off, n).view(p->shape());
    if (p->grad().defined()) dst.copy_(p->grad());
    else dst.zero_();  // a parameter this rank did not use
    off += n;
  }
  b.req = comm_.all_reduce_async(b.flat, ReduceOp::Mean);
  b.launched = true;
  comm_seconds_ += now() - t0;
}

void GradSync::on_ready(size_t i) {
  if (!armed_) return;
  Bucket& b = buckets_[i];
  if (++b.ready == static_cast<int64_t>(b.params.size()) && !b.launched) {
    // buckets must start in the same order on every rank: launch only in bucket order
    bool earlier_pending = false;
    for (size_t j = 0; j < i; ++j) earlier_pending |= !buckets_[j].launched;
    if (!earlier_pending) {
      for (size_t j = i; j < buckets_.size(); ++j) {
        Bucket& c = buckets_[j];
        if (c.launched || c.ready != static_cast<int64_t>(c.params.size())) break;
        launch(c);
        ++overlapped_;
      }
    }
  }
  for (auto& c : buckets_)  // MPI makes progress only inside MPI calls
    if (c.launched && c.req) c.req->test();
}

void GradSync::finish() {
  for (auto& b : buckets_)
    if (!b.launched) launch(b);
  const double t0 = now();
  for (auto& b : buckets_) {
    b.req->wait();
    int64_t off = 0;
    for (ag::Variable* p : b.params) {
      const int64_t n = p->numel();
      Tensor view = b.flat.narrow(0, off, n).view(p->shape());
      if (!p->grad().defined()) p->grad() = Tensor::empty(p->shape(), b.flat.dtype(), b.flat.device());
      p->grad().copy_(view);
      off += n;
    }
  }
  comm_seconds_ += now() - t0;
  armed_ = false;
}

}  // namespace hz::dist
