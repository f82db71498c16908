#include "eval/score.h"

#include "core/ops.h"

namespace hz::eval {

std::vector<double> token_nll(const nn::Transformer& m, const std::vector<int64_t>& ids, int64_t train_T,
                              int64_t chunk_rows) {
  const int64_t n = static_cast<int64_t>(ids.size());
  HZ_CHECK(n >= 2, ValueError, "score: need at least 2 tokens to score the second given the first, got ", n);
  HZ_CHECK(chunk_rows > 0, ValueError, "score: chunk_rows must be positive");
  const int64_t V = m.cfg.vocab_size;
  for (int64_t i = 0; i < n; ++i)
    HZ_CHECK(ids[i] >= 0 && ids[i] < V, ValueError, "score: token ", ids[i], " at position ", i,
             " is outside the model's vocabulary [0, ", V, "); was the text tokenized with the model's tokenizer?");
  ag::NoGradGuard ng;
  std::vector<double> flat(ids.begin(), ids.end());
  const Tensor x = Tensor::from_vector(flat, {1, n}, DType::I64);
  nn::AttnCall call;
  call.T = n;
  call.train_T = train_T > 0 ? train_T : m.cfg.train_context;
  const Tensor h = m.hidden(x, Tensor(), call).value().reshape({n, m.cfg.d_model});
  std::vector<double> nll;
  nll.reserve(n - 1);
  for (int64_t r0 = 0; r0 < n - 1; r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, n - 1 - r0);
    const Tensor logits = m.project(ag::Variable(h.narrow(0, r0, rows).contiguous())).value();
    const Tensor targets = x.reshape({n}).narrow(0, r0 + 1, rows).contiguous().to(logits.device());
    const std::vector<double> v = ops::cross_entropy_rows(logits, targets).to_vector();
    nll.insert(nll.end(), v.begin(), v.end());
  }
  return nll;
}

}  // namespace hz::eval
