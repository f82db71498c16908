// Horizon: context parallelism in training (see context_parallel.h).
#include "train/context_parallel.h"

#include <fmt/core.h>

#include <algorithm>

namespace hz::train {

namespace {

class Started : public attn::ContextGroup::Pending {
 public:
  explicit Started(std::unique_ptr<dist::Request> r) : r_(std::move(r)) {}
  void wait() override { r_->wait(); }
  void progress() override { r_->test(); }

 private:
  std::unique_ptr<dist::Request> r_;
};

class CommGroup : public attn::ContextGroup {
 public:
  explicit CommGroup(dist::Communicator& c) : c_(c) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  void all_gather_into(const Tensor& in, Tensor& out) override { c_.all_gather_into(in, out); }
  void send_recv(const Tensor& send, int dest, Tensor& recv, int src) override { c_.send_recv(send, dest, recv, src); }
  std::unique_ptr<Pending> start_send_recv(const Tensor& send, int dest, Tensor& recv, int src) override {
    return std::make_unique<Started>(c_.send_recv_async(send, dest, recv, src));
  }

 private:
  dist::Communicator& c_;
};

}  // namespace

std::shared_ptr<attn::ContextGroup> context_group(dist::Communicator& group) { return std::make_shared<CommGroup>(group); }

data::Batch local_batch(const data::Batch& b, const attn::ZigzagLayout& L) {
  data::Batch out;
  out.tokens = attn::local_rows(b.tokens, 1, L);
  out.targets = attn::local_rows(b.targets, 1, L);
  if (b.weights.defined()) out.weights = attn::local_rows(b.weights, 1, L);
  out.cu_seqlens = b.cu_seqlens;
  return out;
}

double loss_weight(const Tensor& targets, const Tensor& weights) {
  const std::vector<double> t = targets.to_vector();
  const std::vector<double> w = weights.defined() ? weights.to_vector() : std::vector<double>();
  double s = 0;
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] != -100) s += w.empty() ? 1.0 : w[i];
  return s;
}

attn::AttnConfig training_config(const Recipe& r, const nn::Transformer& m, size_t layer) {
  nn::AttnCall call;
  call.T = r.data.seq_len;
  call.train_T = m.cfg.train_context;
  if (r.data.documents == attn::DocumentMode::Masked)
    call.documents = std::make_shared<attn::Documents>(attn::Documents::whole(r.data.batch_size, r.data.seq_len));
  return m.layers[layer]->attn->kernel_config(call);
}

std::vector<ContextPlanRow> context_plan(const Recipe& r, const nn::Transformer& m, int N) {
  std::vector<ContextPlanRow> rows;
  const int64_t T = r.data.seq_len, B = r.data.batch_size;
  const int64_t a = r.run.precision == nn::Precision::BF16 ? 2 : static_cast<int64_t>(dtype_size(m.cfg.dtype));
  const int64_t kv_row = B * m.cfg.kv_heads() * m.cfg.hdim() * 2;  // elements of k and v per row
  // the accumulation dtype: f32 under bf16 (FoX's log f, the ring's dK/dV)
  const int64_t fa = r.run.precision == nn::Precision::BF16 ? 4 : static_cast<int64_t>(dtype_size(m.cfg.dtype));
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const attn::AttnConfig cfg = training_config(r, m, l);
    const bool fox = m.layers[l]->attn->spec.forget;
    // FoX's log f or c (B H per row) travels with k and v, forward and backward
    const int64_t fox_row = fox ? B * m.cfg.n_heads * fa : 0;
    int64_t bytes = 0;
    for (int q = 0; q < N; ++q) {
      const attn::ContextTraffic t =
          attn::context_traffic(cfg, attn::ZigzagLayout(T, N, q), r.parallel.context_exchange, fox);
      bytes = std::max(bytes, (t.fwd_rows + t.bwd_rows) * (kv_row * a + fox_row) +
                                  t.bwd_acc_rows * (kv_row * fa + fox_row) + t.fox_totals * B * m.cfg.n_heads * fa);
    }
    const std::string ex = attn::name(attn::context_exchange(cfg, attn::ZigzagLayout(T, N, 0), r.parallel.context_exchange));
    if (!rows.empty() && rows.back().exchange == ex && rows.back().bytes == bytes) {
      ++rows.back().count;
      rows.back().layers = fmt::format("{}-{}", l + 1 - rows.back().count, l);
    } else {
      rows.push_back({fmt::format("{}", l), ex, bytes, 1});
    }
  }
  return rows;
}

}  // namespace hz::train
