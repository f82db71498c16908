#include "attention/documents.h"

#include "core/names.h"

namespace hz::attn {

namespace {
constexpr const char* kModes[] = {"stream", "masked"};
}
const char* name(DocumentMode m) { return enum_name(m, kModes); }
DocumentMode parse_document_mode(const std::string& s) {
  return parse_name<DocumentMode>(s, kModes, "data.documents mode");
}

Documents::Documents(int64_t B, int64_t T, std::vector<int64_t> cu_seqlens, bool position_reset)
    : B_(B), T_(T), reset_(position_reset), cu_(std::move(cu_seqlens)) {
  HZ_CHECK(B > 0 && T > 0, ValueError, "documents: batch ", B, " x ", T, " must be positive");
  HZ_CHECK(T <= INT32_MAX, ValueError, "documents: sequence length ", T, " exceeds int32");
  HZ_CHECK(cu_.size() >= 2 && cu_.front() == 0 && cu_.back() == B * T, ValueError,
           "documents: cumulative lengths must run from 0 to B T = ", B * T);
  size_t k = 1;
  for (int64_t b = 1; b <= B; ++b) {  // every sequence end is a boundary; strictly increasing
    for (; k < cu_.size() && cu_[k] < b * T; ++k)
      HZ_CHECK(cu_[k] > cu_[k - 1], ValueError, "documents: cumulative lengths must increase strictly (",
               cu_[k - 1], ", ", cu_[k], ")");
    HZ_CHECK(k < cu_.size() && cu_[k] == b * T && cu_[k] > cu_[k - 1], ValueError,
             "documents: a document crosses the end of sequence ", b - 1, " (position ", b * T,
             " is not among the cumulative lengths)");
    ++k;
  }
  HZ_CHECK(k == cu_.size(), ValueError, "documents: cumulative lengths past B T");
}

std::shared_ptr<const Documents> Documents::of_batch(int64_t B, int64_t T, const std::vector<int64_t>& cu_seqlens,
                                                     const DocumentOptions& opts) {
  if (opts.mode == DocumentMode::Stream) return nullptr;
  if (cu_seqlens.empty()) return std::make_shared<Documents>(Documents::whole(B, T, opts.position_reset));
  return std::make_shared<Documents>(B, T, cu_seqlens, opts.position_reset);
}

Documents Documents::whole(int64_t B, int64_t T, bool position_reset) {
  std::vector<int64_t> cu(B + 1);
  for (int64_t b = 0; b <= B; ++b) cu[b] = b * T;
  return Documents(B, T, std::move(cu), position_reset);
}

std::vector<int64_t> Documents::lengths(int64_t b) const {
  std::vector<int64_t> out;
  for (size_t d = 0; d + 1 < cu_.size(); ++d)
    if (cu_[d] >= b * T_ && cu_[d + 1] <= (b + 1) * T_) out.push_back(cu_[d + 1] - cu_[d]);
  return out;
}

const Tensor& Documents::bounds(Device dev) const {
  if (!bounds_cpu_.defined()) {
    bounds_cpu_ = Tensor::empty({2, B_, T_}, DType::I32);
    positions_cpu_ = Tensor::empty({B_, T_}, DType::I64);
    int32_t* st = bounds_cpu_.data<int32_t>();
    int32_t* en = st + B_ * T_;
    int64_t* pos = positions_cpu_.data<int64_t>();
    for (size_t d = 0; d + 1 < cu_.size(); ++d) {
      const int64_t b = cu_[d] / T_, s = cu_[d] - b * T_, e = cu_[d + 1] - b * T_;
      for (int64_t t = s; t < e; ++t) {
        st[b * T_ + t] = static_cast<int32_t>(s);
        en[b * T_ + t] = static_cast<int32_t>(e);
        pos[b * T_ + t] = reset_ ? t - s : t;
      }
    }
  }
  if (dev.is_cpu()) return bounds_cpu_;
  if (!bounds_dev_.defined() || bounds_dev_.device() != dev) bounds_dev_ = bounds_cpu_.to(dev);
  return bounds_dev_;
}

const Tensor& Documents::positions(Device dev) const {
  bounds(Device::cpu());
  if (dev.is_cpu()) return positions_cpu_;
  if (!positions_dev_.defined() || positions_dev_.device() != dev) positions_dev_ = positions_cpu_.to(dev);
  return positions_dev_;
}

int64_t Documents::causal_pairs() const {
  int64_t n = 0;
  for (size_t d = 0; d + 1 < cu_.size(); ++d) {
    const int64_t L = cu_[d + 1] - cu_[d];
    n += L * (L + 1) / 2;
  }
  return n;
}

std::string Documents::describe() const {
  const int64_t n = count();
  std::string s = std::to_string(n) + (n == 1 ? " document in " : " documents in ") + std::to_string(B_) + " x " +
                  std::to_string(T_) + " (lengths";
  for (int64_t b = 0; b < B_; ++b) {
    const auto l = lengths(b);
    s += b ? " |" : "";
    for (size_t i = 0; i < l.size(); ++i) {
      if (i == 8 && l.size() > 9) {
        s += " ... (" + std::to_string(l.size() - 8) + " more)";
        break;
      }
      s += " " + std::to_string(l[i]);
    }
  }
  return s + (reset_ ? "), positions restart at each document" : "), positions count from each sequence's start");
}

}  // namespace hz::attn
