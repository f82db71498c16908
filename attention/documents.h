// Horizon: packed documents, from one source of truth.
//
// A batch of B sequences of T tokens may pack several documents per sequence. Their boundaries
// are the cumulative lengths over the flattened batch, as varlen attention kernels take them:
//     cu_seqlens = [c_0 = 0, c_1, ..., c_n = B T],  strictly increasing, every b T among them,
// so document d is tokens [c_d, c_(d+1)) of the flattened batch and no document crosses a
// sequence. The loader derives them from its EOS cuts (data/loader.h); everything that depends on
// documents is computed here from them and nowhere else:
//   - the mask (attention/tiling.h): key j is visible to query i only inside i's document, via
//     start(p) / end(p), the first position and one past the last of the document holding p;
//   - the positions: with position reset, token t of a sequence sits at t - start(t) (RoPE and
//     every position-dependent logit term then count from its document's start), else at t.
// `stream` batches (today's default) have no Documents: one document per sequence, no mask.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hz::attn {

enum class DocumentMode : uint8_t { Stream, Masked, Count };
const char* name(DocumentMode m);
DocumentMode parse_document_mode(const std::string& s);  // "stream" | "masked"

// How a training or evaluation call treats a batch's documents: as one stream (no mask) or masked,
// with or without position reset (recipe data.documents, data.position_reset).
struct DocumentOptions {
  DocumentMode mode = DocumentMode::Stream;
  bool position_reset = false;
};

class Documents {
 public:
  Documents() = default;
  // Checks the cumulative lengths (ValueError saying what is wrong): they start at 0, end at B T,
  // increase strictly and contain every multiple of T.
  Documents(int64_t B, int64_t T, std::vector<int64_t> cu_seqlens, bool position_reset);
  // One sequence per document (each row of a batch of B whole documents of length T).
  static Documents whole(int64_t B, int64_t T, bool position_reset = true);
  // The documents of a batch of B sequences of T tokens with these cumulative lengths (a loader's
  // batch, data/loader.h), as a call with these options sees them: null for stream documents;
  // masked: one document per sequence when the batch gives no lengths.
  static std::shared_ptr<const Documents> of_batch(int64_t B, int64_t T, const std::vector<int64_t>& cu_seqlens,
                                                   const DocumentOptions& opts);

  bool defined() const { return B_ > 0; }
  int64_t batch() const { return B_; }
  int64_t seq_len() const { return T_; }
  bool position_reset() const { return reset_; }
  const std::vector<int64_t>& cu_seqlens() const { return cu_; }
  int64_t count() const { return static_cast<int64_t>(cu_.size()) - 1; }
  // Lengths of the documents of sequence b, in order.
  std::vector<int64_t> lengths(int64_t b) const;

  // (2, B, T) int32 on `dev`: [0] start(t), [1] end(t) of each position's document (positions
  // counted from its sequence's start). Built once per device and kept.
  const Tensor& bounds(Device dev) const;
  // (B, T) int64 on `dev`: the position of each token (t - start(t) with position reset, else t).
  const Tensor& positions(Device dev) const;
  // The number of (query, key) pairs the document mask leaves under plain causal attention:
  // sum over documents of L (L + 1) / 2.
  int64_t causal_pairs() const;
  std::string describe() const;  // "4 documents in 2 x 64 (lengths 20, 44 | 64), position reset"

 private:
  int64_t B_ = 0, T_ = 0;
  bool reset_ = false;
  std::vector<int64_t> cu_;
  mutable Tensor bounds_cpu_, positions_cpu_, bounds_dev_, positions_dev_;
};

}  // namespace hz::attn
