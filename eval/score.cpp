#include "eval/score.h"


namespace hz::eval {

std::vector<double> token_nll(const nn::Transformer& m, const std::vector<int64_t>& ids, int64_t train_len,
                              int64_t chunk_rows, const attn::DocumentOptions& docs, int64_t eos) {
  const int64_t n = static_cast<int64_t>(ids.size());
  HZ_CHECK(n >= 2, ValueError, "score: need at least 2 tokens to score the second given the first, got ", n);
  HZ_CHECK(chunk_rows >= -1, ValueError, "score: chunk_rows must be -1 (automatic), 0 (all) or positive");
  const int64_t V = m.cfg.vocab_size;
  for (int64_t i = 0; i < n; ++i)
    HZ_CHECK(ids[i] >= 0 && ids[i] < V, ValueError, "score: token ", ids[i], " at position ", i,
             " is outside the model's vocabulary [0, ", V, "); was the text tokenized with the model's tokenizer?");
  std::vector<double> flat(ids.begin(), ids.end()), next(ids.begin() + 1, ids.end());
  next.push_back(-100);  // the last position has no next token: ignored
  nn::AttnCall call;
  call.T = n;
  call.train_len = train_len > 0 ? train_len : m.cfg.train_len;
  if (docs.mode == attn::DocumentMode::Masked) {
    HZ_CHECK(eos >= 0, ValueError, "score: masked documents are cut at the tokenizer's EOS, and this one has none");
    std::vector<int64_t> cu{0};
    for (int64_t i = 0; i + 1 < n; ++i)
      if (ids[i] == eos) cu.push_back(i + 1);
    cu.push_back(n);
    call.documents = attn::Documents::of_batch(1, n, cu, docs);
  }
  std::vector<double> nll = m.token_nll(Tensor::from_vector(flat, {1, n}, DType::I64),
                                        Tensor::from_vector(next, {1, n}, DType::I64), call, chunk_rows)
                                .to_vector();
  nll.pop_back();
  return nll;
}

}  // namespace hz::eval
