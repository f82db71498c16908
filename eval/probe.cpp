#include "eval/probe.h"

#include <fmt/core.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <limits>

#include "autograd/functions.h"
#include "core/file.h"
#include "data/loader.h"
#include "data/sampling.h"
#include "data/shard.h"

namespace hz::eval {

namespace {

// Solves (A + lambda I) x = b for symmetric positive semi-definite A (n x n) by Cholesky.
std::vector<double> ridge_solve(const std::vector<double>& A, const std::vector<double>& b, int64_t n, double lambda) {
  std::vector<double> Lm(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double s = A[i * n + j] + (i == j ? lambda : 0.0);
      for (int64_t k = 0; k < j; ++k) s -= Lm[i * n + k] * Lm[j * n + k];
      if (i == j) {
        HZ_CHECK(s > 0, ValueError, "probe: the regularised normal matrix is not positive definite");
        Lm[i * n + i] = std::sqrt(s);
      } else {
        Lm[i * n + j] = s / Lm[j * n + j];
      }
    }
  std::vector<double> y(n), x(n);
  for (int64_t i = 0; i < n; ++i) {
    double s = b[i];
    for (int64_t k = 0; k < i; ++k) s -= Lm[i * n + k] * y[k];
    y[i] = s / Lm[i * n + i];
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    double s = y[i];
    for (int64_t k = i + 1; k < n; ++k) s -= Lm[k * n + i] * x[k];
    x[i] = s / Lm[i * n + i];
  }
  return x;
}

struct Fit {
  std::vector<double> mean, scale, w;
  double y_mean = 0;
  double predict(const double* row) const {
    double s = y_mean;
    for (size_t c = 0; c < w.size(); ++c) s += w[c] * (row[c] - mean[c]) * scale[c];
    return s;
  }
};

Fit fit_rows(const std::vector<double>& X, int64_t C, int64_t L, const std::vector<int64_t>& rows, double lambda_rel) {
  Fit f;
  const double n = static_cast<double>(rows.size());
  f.mean.assign(C, 0.0);
  f.scale.assign(C, 0.0);
  for (int64_t r : rows) {
    f.y_mean += static_cast<double>(r % L) / n;
    for (int64_t c = 0; c < C; ++c) f.mean[c] += X[r * C + c] / n;
  }
  for (int64_t r : rows)
    for (int64_t c = 0; c < C; ++c) f.scale[c] += (X[r * C + c] - f.mean[c]) * (X[r * C + c] - f.mean[c]) / n;
  for (auto& s : f.scale) s = s > 1e-24 ? 1.0 / std::sqrt(s) : 0.0;
  std::vector<double> A(C * C, 0.0), b(C, 0.0), z(C);
  for (int64_t r : rows) {
    for (int64_t c = 0; c < C; ++c) z[c] = (X[r * C + c] - f.mean[c]) * f.scale[c];
    const double y = static_cast<double>(r % L) - f.y_mean;
    for (int64_t i = 0; i < C; ++i) {
      b[i] += z[i] * y;
      for (int64_t j = 0; j <= i; ++j) A[i * C + j] += z[i] * z[j];
    }
  }
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < i; ++j) A[j * C + i] = A[i * C + j];
  f.w = ridge_solve(A, b, C, lambda_rel * n);
  return f;
}

double r2(const Fit& f, const std::vector<double>& X, int64_t C, int64_t L, const std::vector<int64_t>& rows) {
  double mean = 0;
  for (int64_t r : rows) mean += static_cast<double>(r % L) / static_cast<double>(rows.size());
  double res = 0, tot = 0;
  for (int64_t r : rows) {
    const double y = static_cast<double>(r % L), p = f.predict(&X[r * C]);
    res += (y - p) * (y - p);
    tot += (y - mean) * (y - mean);
  }
  return tot > 0 ? 1.0 - res / tot : 0.0;
}

}  // namespace

std::vector<ProbeResult> fit_position_probes(const std::vector<std::vector<double>>& feats, int64_t C, int64_t L,
                                             uint64_t seed) {
  HZ_CHECK(L >= 10, ValueError, "probe: need sequences of at least 10 positions, got ", L);
  // held-out positions (20%), then a validation share (20%) of the fitting positions
  std::vector<int64_t> pos(L);
  for (int64_t i = 0; i < L; ++i) pos[i] = i;
  Generator g(seed, 0x9e37);
  data::shuffle_in_place(pos, g);
  const int64_t n_held = L / 5, n_val = (L - n_held) / 5;
  std::vector<int> role(L, 0);  // 0 fit, 1 validation (part of fit), 2 held out
  for (int64_t i = 0; i < n_held; ++i) role[pos[i]] = 2;
  for (int64_t i = n_held; i < n_held + n_val; ++i) role[pos[i]] = 1;
  std::vector<ProbeResult> out;
  for (size_t layer = 0; layer < feats.size(); ++layer) {
    const std::vector<double>& X = feats[layer];
    const int64_t N = static_cast<int64_t>(X.size()) / C;
    std::vector<int64_t> fit_all, fit_inner, val, held;
    for (int64_t r = 0; r < N; ++r) {
      const int ro = role[r % L];
      if (ro == 2) held.push_back(r);
      else {
        fit_all.push_back(r);
        (ro == 1 ? val : fit_inner).push_back(r);
      }
    }
    double best_lambda = 1e-4, best = -std::numeric_limits<double>::infinity();
    for (double lam = 1e-4; lam <= 1e3 * 1.0001; lam *= 10) {
      const double s = r2(fit_rows(X, C, L, fit_inner, lam), X, C, L, val);
      if (s > best) {
        best = s;
        best_lambda = lam;
      }
    }
    const Fit f = fit_rows(X, C, L, fit_all, best_lambda);
    out.push_back({static_cast<int64_t>(layer), r2(f, X, C, L, held), r2(f, X, C, L, fit_all), best_lambda});
  }
  return out;
}

std::vector<ProbeResult> position_probe(const nn::Transformer& m, const data::Shard& val, int64_t L, int64_t sequences,
                                        uint64_t seed, int64_t train_len) {
  HZ_CHECK(sequences >= 1, ValueError, "probe: need at least one sequence");
  const auto batches = data::eval_batches(val, L, 1, sequences);
  HZ_CHECK(static_cast<int64_t>(batches.size()) == sequences, ValueError, "probe: the validation split holds ",
           batches.size(), " sequences of ", L, " tokens, fewer than the ", sequences,
           " asked; lower eval.probe_sequences or raise data.val_fraction");
  ag::NoGradGuard ng;
  const int64_t C = m.cfg.d_model;
  std::vector<std::vector<double>> feats(m.layers.size() + 1);
  nn::AttnCall call;
  call.T = L;
  call.train_len = train_len;
  const Tensor positions = Tensor::arange(0, L);
  for (const auto& b : batches) {
    ag::Variable x = m.embed->forward(b.tokens);
    auto add = [&](size_t layer, const ag::Variable& h) {
      const std::vector<double> v = h.value().to_vector();
      feats[layer].insert(feats[layer].end(), v.begin(), v.end());
    };
    add(0, x);
    for (size_t l = 0; l < m.layers.size(); ++l) {
      x = m.layers[l]->forward(x, positions, call);
      add(l + 1, x);
    }
  }
  return fit_position_probes(feats, C, L, seed);
}

std::string probe_table(const std::vector<ProbeResult>& r) {
  std::ostringstream os;
  os << "\nlinear position probe (ridge; R^2 on held-out positions; layer 0 = embeddings)\n";
  os << fmt::format("{:>6} {:>12} {:>10} {:>10}\n", "layer", "R2 held-out", "R2 fit", "lambda");
  for (const auto& p : r) os << fmt::format("{:>6} {:>12.4f} {:>10.4f} {:>10g}\n", p.layer, p.r2_heldout, p.r2_fit, p.lambda);
  return os.str();
}

FileSet probe_files(const std::vector<ProbeResult>& r) {
  std::string f = "layer,r2_heldout,r2_fit,lambda\n";
  for (const auto& p : r) f += fmt::format("{},{:.6f},{:.6f},{}\n", p.layer, p.r2_heldout, p.r2_fit, p.lambda);
  return {{"probes.csv", f}};
}
void write_probes(const std::vector<ProbeResult>& r, const std::string& dir) { write_files_atomic(dir, probe_files(r)); }

}  // namespace hz::eval
