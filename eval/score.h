// Horizon: per-token negative log-likelihood of one token sequence (`horizon score`): the simplest
// number to compare with other frameworks. One forward pass over all n tokens at positions
// 0..n-1 (no windowing, no BOS added here); the output head runs on chunks of rows so the (n, V)
// logits never exist at once.
#pragma once
#include <cstdint>
#include <vector>

#include "attention/documents.h"
#include "nn/transformer.h"

namespace hz::eval {

// nll[i] = -ln p(ids[i+1] | ids[0..i]) in nats, i = 0..n-2. train_len: the training length the
// attention call reports (temperature / dynamic scalings; 0 = the model's train_len).
// docs: packed documents scored as the model trained on them (data.documents / data.position_reset):
// with masked documents each ends after an `eos` token (which belongs to it) and every token sees
// its own document only, positions restarting at each document with position_reset; eos must then
// be a token id.
std::vector<double> token_nll(const nn::Transformer& m, const std::vector<int64_t>& ids, int64_t train_len = 0,
                              int64_t chunk_rows = -1, const attn::DocumentOptions& docs = {}, int64_t eos = -1);

}  // namespace hz::eval
