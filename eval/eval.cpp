#include "eval/eval.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include "data/loader.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "data/tokenizer.h"

namespace hz::eval {

namespace {

struct Scores {
  double sum = 0, last_sum = 0;
  int64_t n = 0, last_n = 0;
  std::vector<double> pos_sum;
  int64_t pos_count = 0;
};

Scores score(const nn::Transformer& m, const std::vector<data::Batch>& batches, int64_t L, int64_t train_T, bool by_pos) {
  ag::NoGradGuard ng;
  Scores s;
  if (by_pos) s.pos_sum.assign(L, 0.0);
  const int64_t V = m.cfg.vocab_size;
  nn::AttnCall call;
  call.T = L;
  call.train_T = train_T;
  for (const auto& b : batches) {
    const Tensor logits = m.forward(b.tokens, Tensor(), call).value();
    const Tensor nll = ops::cross_entropy_rows(logits.reshape({-1, V}), b.targets.reshape({-1}));
    const std::vector<double> v = nll.to_vector(), w = b.weights.to_vector();
    const int64_t B = b.tokens.size(0);
    for (int64_t i = 0; i < B; ++i)
      for (int64_t t = 0; t < L; ++t) {
        const double x = v[i * L + t];
        if (w[i * L + t] == 0) continue;
        s.sum += x;
        ++s.n;
        if (t >= L - 256) {
          s.last_sum += x;
          ++s.last_n;
        }
        if (by_pos) s.pos_sum[t] += x;
      }
    s.pos_count += B;
  }
  return s;
}

// Applies recipe.eval's inference options for length L; restores the layers on destruction.
class InferenceOptions {
 public:
  InferenceOptions(nn::Transformer& m, const train::EvalSection& e, int64_t train_T, int64_t L, double drope_c) : m_(m) {
    for (auto& b : m.layers) saved_.push_back({b->attn->spec, b->attn->lampe});
    const double s = static_cast<double>(L) / train_T;
    for (auto& b : m.layers) {
      attn::AttentionSpec& sp = b->attn->spec;
      if (!e.rope_scaling.empty() && sp.pos.kind == attn::PosKind::Rope) {
        sp.pos.scaling = attn::parse_scaling(e.rope_scaling);
        // dynamic NTK derives s from the length itself (factor 1: s = L / train_T)
        sp.pos.factor = sp.pos.scaling == attn::RopeScaling::DynamicNTK ? 1.0 : std::max(1.0, s);
        sp.pos.original_context = train_T;
      }
      if (e.swan_a > 0 && sp.pos.kind == attn::PosKind::None && sp.mask.kind == attn::MaskKind::Causal) {
        sp.logit.kind = attn::LogitKind::SwanRow;
        sp.logit.swan_a = e.swan_a;
      }
      if (drope_c != 0 && sp.logit.kind == attn::LogitKind::Identity) {
        sp.logit.kind = attn::LogitKind::Temperature;
        sp.logit.temp_c = drope_c;
      }
      if (e.lampe && sp.pos.kind == attn::PosKind::Rope) {
        attn::LampeConfig lc;
        lc.L = e.lampe_L > 0 ? e.lampe_L : 0.75 * train_T;
        lc.a = e.lampe_a;
        lc.b = e.lampe_b;
        lc.s_local = e.lampe_local;
        lc.s_sink = e.lampe_sink;
        b->attn->lampe = lc;
      }
    }
  }
  ~InferenceOptions() {
    for (size_t i = 0; i < saved_.size(); ++i) {
      m_.layers[i]->attn->spec = saved_[i].first;
      m_.layers[i]->attn->lampe = saved_[i].second;
    }
  }

 private:
  nn::Transformer& m_;
  std::vector<std::pair<attn::AttentionSpec, std::optional<attn::LampeConfig>>> saved_;
};

}  // namespace

double mean_loss(const nn::Transformer& m, const data::Shard& val, int64_t L, int64_t batch, int64_t max_batches,
                 int64_t train_T) {
  std::vector<data::Batch> batches;
  try {
    batches = data::eval_batches(val, L, batch, max_batches);
  } catch (const ValueError&) {
    return std::nan("");  // the validation split holds no full batch at this length
  }
  if (batches.empty()) return std::nan("");
  const Scores s = score(m, batches, L, train_T, false);
  return s.n ? s.sum / s.n : std::nan("");
}

std::vector<PasskeyCell> evaluate_passkey(nn::Transformer& m, const train::Recipe& r) {
  std::vector<PasskeyCell> cells;
  if (r.eval.passkey_examples <= 0) return cells;
  const auto tok = data::make_tokenizer(r.data.tokenizer);
  const int64_t train_T = r.data.seq_len, V = m.cfg.vocab_size;
  ag::NoGradGuard ng;
  for (int64_t L : r.eval_lengths()) {
    try {  // lengths too short for needle + question are left out of the grid
      Generator probe(0);
      data::make_passkey(*tok, probe, L + 1, 0.0);
    } catch (const ValueError&) {
      continue;
    }
    InferenceOptions opts(m, r.eval, train_T, L, r.eval.drope_c);
    nn::AttnCall call;
    call.T = L;
    call.train_T = train_T;
    for (size_t di = 0; di < r.eval.passkey_depths.size(); ++di) {
      PasskeyCell cell;
      cell.length = L;
      cell.depth = r.eval.passkey_depths[di];
      int64_t digits = 0, digits_ok = 0;
      for (int64_t e = 0; e < r.eval.passkey_examples; ++e) {
        Generator g(static_cast<uint64_t>(r.run.seed) + 7919, static_cast<uint64_t>(L) * 1000003 + di * 1009 + e);
        const data::SyntheticExample ex = data::make_passkey(*tok, g, L + 1, cell.depth);
        std::vector<double> ids(ex.tokens.begin(), ex.tokens.begin() + L);
        const Tensor logits = m.forward(Tensor::from_vector(ids, {1, L}, DType::I64), Tensor(), call).value();
        const Tensor lg = logits.reshape({L, V}).contiguous();
        bool all = true;
        for (int64_t i = 0; i < L; ++i) {
          if (ex.weights[i] == 0) continue;
          int64_t best = 0;
          for (int64_t v = 1; v < V; ++v)
            if (lg.at({i, v}) > lg.at({i, best})) best = v;
          const bool ok = best == ex.tokens[i + 1];
          all &= ok;
          digits_ok += ok;
          ++digits;
        }
        ++cell.examples;
        cell.correct += all;
      }
      cell.digit_accuracy = digits ? static_cast<double>(digits_ok) / digits : 0.0;
      cells.push_back(cell);
    }
  }
  return cells;
}

EvalReport evaluate(nn::Transformer& m, const data::Shard& val, const train::Recipe& r, bool with_nll) {
  EvalReport rep;
  const int64_t train_T = r.data.seq_len;
  const int64_t batch = r.eval.batch_size > 0 ? r.eval.batch_size : r.data.batch_size;
  const auto lengths = r.eval_lengths();
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  for (int64_t L : lengths) {
    const auto batches = data::eval_batches(val, L, batch, r.eval.batches);
    HZ_CHECK(!batches.empty(), ValueError, "eval: the validation split (", val.n_tokens(),
             " tokens) is too small for one batch of ", batch, " x ", L,
             " tokens; lower eval.batch_size or eval.lengths, or raise data.val_fraction");
    std::vector<double> cands{r.eval.drope_c};
    if (!r.eval.fit_drope_c.empty() && L > train_T) cands = r.eval.fit_drope_c;
    LengthResult best;
    best.loss = INFINITY;
    std::vector<double> best_pos;
    for (double c : cands) {
      InferenceOptions opts(m, r.eval, train_T, L, c);
      const Scores s = score(m, batches, L, train_T, with_nll && L == longest);
      LengthResult lr;
      lr.length = L;
      lr.loss = s.sum / std::max<int64_t>(1, s.n);
      lr.ppl = std::exp(lr.loss);
      lr.last256_loss = s.last_sum / std::max<int64_t>(1, s.last_n);
      lr.tokens = s.n;
      lr.drope_c = c;
      if (lr.loss < best.loss) {
        best = lr;
        best_pos = s.pos_sum;
        for (auto& x : best_pos) x /= std::max<int64_t>(1, s.pos_count);
      }
    }
    rep.lengths.push_back(best);
    if (with_nll && L == longest) {
      rep.nll_length = L;
      rep.nll_by_position = best_pos;
    }
  }
  rep.passkey = evaluate_passkey(m, r);
  return rep;
}

std::string report_table(const EvalReport& r, int64_t train_T) {
  std::ostringstream os;
  os << fmt::format("{:>8} {:>6} {:>10} {:>10} {:>12} {:>10} {:>8}\n", "length", "x", "loss", "ppl", "last256 loss",
                    "tokens", "drope_c");
  for (const auto& l : r.lengths)
    os << fmt::format("{:>8} {:>6.1f} {:>10.4f} {:>10.3f} {:>12.4f} {:>10} {:>8.3f}\n", l.length,
                      static_cast<double>(l.length) / train_T, l.loss, l.ppl, l.last256_loss, l.tokens, l.drope_c);
  if (!r.passkey.empty()) {
    os << "\npasskey retrieval (examples with every answer digit right / digit accuracy)\n";
    os << fmt::format("{:>8} {:>7} {:>10} {:>10}\n", "length", "depth", "accuracy", "digits");
    for (const auto& c : r.passkey)
      os << fmt::format("{:>8} {:>7.2f} {:>9.1f}% {:>9.1f}%\n", c.length, c.depth,
                        100.0 * c.correct / std::max<int64_t>(1, c.examples), 100.0 * c.digit_accuracy);
  }
  return os.str();
}

void write_report(const EvalReport& r, const std::string& dir, int64_t train_T) {
  std::ofstream csv(dir + "/eval.csv");
  csv << "length,extension,loss,ppl,last256_loss,tokens,drope_c\n";
  std::ofstream js(dir + "/eval.json");
  js << "{\"train_length\": " << train_T << ", \"lengths\": [";
  for (size_t i = 0; i < r.lengths.size(); ++i) {
    const auto& l = r.lengths[i];
    csv << fmt::format("{},{:.4f},{:.6f},{:.6f},{:.6f},{},{}\n", l.length, double(l.length) / train_T, l.loss, l.ppl,
                       l.last256_loss, l.tokens, l.drope_c);
    js << (i ? ", " : "")
       << fmt::format("{{\"length\": {}, \"loss\": {:.6f}, \"ppl\": {:.6f}, \"last256_loss\": {:.6f}, \"tokens\": {}, \"drope_c\": {}}}",
                      l.length, l.loss, l.ppl, l.last256_loss, l.tokens, l.drope_c);
  }
  js << "], \"nll_length\": " << r.nll_length << "}\n";
  if (!r.passkey.empty()) {
    std::ofstream pk(dir + "/passkey.csv");
    pk << "length,depth,examples,correct,accuracy,digit_accuracy\n";
    for (const auto& c : r.passkey)
      pk << fmt::format("{},{},{},{},{:.4f},{:.4f}\n", c.length, c.depth, c.examples, c.correct,
                        static_cast<double>(c.correct) / std::max<int64_t>(1, c.examples), c.digit_accuracy);
  }
  std::ofstream pos(dir + "/nll_by_position.csv");
  pos << "position,nll\n";
  for (size_t t = 0; t < r.nll_by_position.size(); ++t) pos << t << "," << fmt::format("{:.6f}", r.nll_by_position[t]) << "\n";
}

}  // namespace hz::eval
