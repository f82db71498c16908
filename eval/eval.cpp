#include "eval/eval.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include "core/file.h"
#include "data/loader.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "data/tokenizer.h"
#include "distributed/context/route.h"
#include "distributed/context/shard.h"
#include "eval/inference.h"

namespace hz::eval {

void require_finite(double value, const std::string& model, const std::string& what) {
  HZ_CHECK(std::isfinite(value), ValueError, model, ": ", what, " is not finite (", value,
           "): the model has non-finite weights or outputs (a diverged run or a damaged checkpoint)");
}

namespace {

struct Scores {
  double sum = 0, last_sum = 0;
  int64_t n = 0, last_n = 0;
  std::vector<double> pos_sum;
  int64_t pos_count = 0;
};

// Each token's NLL in a batch of L-token sequences split over a context-parallel group: this
// rank scores its zigzag share (documents and positions stay global), then every rank's share is
// put back at its global positions, (B, L) in order (distributed/context/shard.h).
std::vector<double> context_nll(const nn::Transformer& m, const data::Batch& b, nn::AttnCall call,
                                dist::Communicator& group, dist::ContextExchange exchange) {
  const int64_t L = b.tokens.size(1);
  const int N = group.size();
  HZ_CHECK(L >= 2 * N, ValueError, "eval: length ", L, " cannot be split over ", N,
           " context-parallel ranks (each holds two chunks: the length must be at least ", 2 * N, ")");
  const auto route = std::make_shared<dist::ContextRoute>(group, L, exchange);
  call.route = route;
  const data::Batch mine = dist::shard_batch(b, route->layout());
  return dist::gather_shares(m.token_nll(mine.tokens, mine.targets, call), group, route->layout());
}

Scores score(const nn::Transformer& m, const std::vector<data::Batch>& batches, int64_t L, int64_t train_len, bool by_pos,
             const attn::DocumentOptions& docs, dist::Communicator* context, dist::ContextExchange exchange) {
  ag::NoGradGuard ng;
  Scores s;
  if (by_pos) s.pos_sum.assign(L, 0.0);
  nn::AttnCall call;
  call.T = L;
  call.train_len = train_len;
  for (const auto& b : batches) {
    call.documents = attn::Documents::of_batch(b.tokens.size(0), b.tokens.size(1), b.cu_seqlens, docs);
    // the head in chunks of rows: long lengths never hold the (B L, V) logits
    const std::vector<double> v = context ? context_nll(m, b, call, *context, exchange) : m.token_nll(b.tokens, b.targets, call).to_vector();
    const std::vector<double> w = m.loss_weights(b.weights, b.tokens.size(0), L, call).to_vector();  // prefix-LM
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

}  // namespace

double mean_loss(const nn::Transformer& m, const data::Shard& val, int64_t L, int64_t batch, int64_t max_batches,
                 int64_t train_len, const attn::DocumentOptions& docs) {
  std::vector<data::Batch> batches;
  try {
    batches = data::eval_batches(val, L, batch, max_batches);
  } catch (const ValueError&) {
    return std::nan("");  // the validation split holds no full batch at this length
  }
  if (batches.empty()) return std::nan("");
  const Scores s = score(m, batches, L, train_len, false, docs, nullptr, dist::ContextExchange::Ring);
  return s.n ? s.sum / s.n : std::nan("");
}

std::vector<PasskeyCell> evaluate_passkey(nn::Transformer& m, const EvalOptions& o, std::vector<RetrievalHead>* heads) {
  std::vector<PasskeyCell> cells;
  if (o.passkey_examples <= 0) return cells;
  const auto tok = data::make_tokenizer(o.tokenizer);
  const int64_t train_len = o.train_len, V = m.cfg.vocab_size;
  ag::NoGradGuard ng;
  for (int64_t L : o.lengths) {
    try {  // lengths too short for needle + question are left out of the grid
      Generator probe(0);
      data::make_passkey(*tok, probe, L + 1, 0.0);
    } catch (const ValueError&) {
      continue;
    }
    std::vector<RetrievalHead> length_heads;  // this length's, pooled over depths and examples
    ScopedInference opts(m, o.inference, train_len, L);
    nn::AttnCall call;
    call.T = L;
    call.train_len = train_len;
    for (size_t di = 0; di < o.passkey_depths.size(); ++di) {
      PasskeyCell cell;
      cell.length = L;
      cell.depth = o.passkey_depths[di];
      int64_t digits = 0, digits_ok = 0;
      for (int64_t e = 0; e < o.passkey_examples; ++e) {
        Generator g(o.seed + 7919, static_cast<uint64_t>(L) * 1000003 + di * 1009 + e);
        const data::SyntheticExample ex = data::make_passkey(*tok, g, L + 1, cell.depth);
        std::vector<double> ids(ex.tokens.begin(), ex.tokens.begin() + L);
        // logits only for the answer's rows (the span from its first to its last weighted row)
        int64_t lo = L, hi = 0;
        for (int64_t i = 0; i < L; ++i)
          if (ex.weights[i] != 0) lo = std::min(lo, i), hi = i + 1;
        HZ_CHECK(lo < hi, ValueError, "passkey: an example without answer tokens");
        const Tensor h = m.hidden(Tensor::from_vector(ids, {1, L}, DType::I64), Tensor(), call).value();
        const Tensor lg = m.project(ag::Variable(h.reshape({L, -1}).narrow(0, lo, hi - lo).contiguous()))
                              .value().to(Device::cpu()).to(DType::F32).contiguous();
        const float* row0 = lg.data<float>();
        bool all = true;
        std::vector<int64_t> rows;
        std::vector<int32_t> produced;
        for (int64_t i = lo; i < hi; ++i) {
          if (ex.weights[i] == 0) continue;
          const float* row = row0 + (i - lo) * V;
          const int64_t best = std::max_element(row, row + V) - row;  // the first maximum, as before
          const bool ok = best == ex.tokens[i + 1];
          all &= ok;
          digits_ok += ok;
          ++digits;
          rows.push_back(i);
          produced.push_back(static_cast<int32_t>(best));
        }
        if (heads && o.needles.retrieval_heads)
          probe_answer_rows(m, "passkey_grid", L, std::vector<int32_t>(ex.tokens.begin(), ex.tokens.begin() + L), rows,
                            produced, ex.needle_spans, L, train_len > 0 ? train_len : m.cfg.train_len, o.inference,
                            length_heads);
        ++cell.examples;
        cell.correct += all;
      }
      cell.digit_accuracy = digits ? static_cast<double>(digits_ok) / digits : 0.0;
      cells.push_back(cell);
    }
    if (heads) heads->insert(heads->end(), length_heads.begin(), length_heads.end());
  }
  return cells;
}

EvalReport evaluate(nn::Transformer& m, const data::Shard& val, const EvalOptions& o, bool with_nll) {
  EvalReport rep;
  const int64_t train_len = o.train_len;
  HZ_CHECK(!o.lengths.empty(), ValueError, "eval: no evaluation lengths given");
  const int64_t longest = *std::max_element(o.lengths.begin(), o.lengths.end());
  for (int64_t L : o.lengths) {
    const auto batches = data::eval_batches(val, L, o.batch_size, o.batches, 257, o.skip_batches);
    HZ_CHECK(!batches.empty(), ValueError, "eval: the validation split (", val.n_tokens(),
             " tokens) is too small for one batch of ", o.batch_size, " x ", L,
             " tokens; lower eval.batch_size or eval.lengths, or raise data.val_fraction");
    std::vector<double> cs{o.inference.drope_c};
    if (!o.fit_drope_c.empty() && L > train_len) cs = o.fit_drope_c;
    std::vector<double> as{o.inference.swan_a};
    if (!o.fit_swan_a.empty()) {
      as = o.fit_swan_a;
      as.insert(as.begin(), 0.0);  // row scaling off: the reference of the per-window fit
    }
    const bool by_pos = (with_nll && L == longest) || !o.fit_swan_a.empty();
    LengthResult best;
    best.loss = INFINITY;
    std::vector<double> best_pos;
    std::vector<std::vector<double>> pos_by_a(as.size());  // at the first c (the fit of a)
    for (double c : cs)
      for (size_t ai = 0; ai < as.size(); ++ai) {
        InferenceOptions io = o.inference;
        io.drope_c = c;
        io.swan_a = as[ai];
        ScopedInference opts(m, io, train_len, L);
        const Scores s = score(m, batches, L, train_len, by_pos, o.documents, o.context, o.context_exchange);
        std::vector<double> pos = s.pos_sum;
        for (auto& x : pos) x /= std::max<int64_t>(1, s.pos_count);
        if (c == cs.front()) pos_by_a[ai] = pos;
        LengthResult lr;
        lr.length = L;
        lr.loss = s.sum / std::max<int64_t>(1, s.n);
        lr.ppl = std::exp(lr.loss);
        lr.last256_loss = s.last_sum / std::max<int64_t>(1, s.last_n);
        lr.tokens = s.n;
        lr.drope_c = c;
        lr.swan_a = as[ai];
        if (lr.loss < best.loss) {
          best = lr;
          best_pos = pos;
        }
      }
    rep.lengths.push_back(best);
    if (with_nll && L == longest) {
      rep.nll_length = L;
      rep.nll_by_position = best_pos;
    }
    if (!o.fit_swan_a.empty()) {
      const int64_t W = std::max<int64_t>(1, o.swan_window);
      for (int64_t b0 = 0; b0 < L; b0 += W) {
        const int64_t b1 = std::min(L, b0 + W);
        auto mean = [&](const std::vector<double>& v) {
          double sum = 0;
          for (int64_t t = b0; t < b1; ++t) sum += v[t];
          return sum / static_cast<double>(b1 - b0);
        };
        SwanWindowFit f;
        f.length = L;
        f.begin = b0;
        f.end = b1;
        f.nll_off = mean(pos_by_a[0]);
        f.nll_best = INFINITY;
        for (size_t ai = 1; ai < as.size(); ++ai)
          if (const double v = mean(pos_by_a[ai]); v < f.nll_best) {
            f.nll_best = v;
            f.best_a = as[ai];
          }
        rep.swan_fit.push_back(f);
      }
    }
  }
  rep.passkey = evaluate_passkey(m, o, &rep.passkey_retrieval);
  return rep;
}

std::string report_table(const EvalReport& r, int64_t train_len) {
  std::ostringstream os;
  os << fmt::format("{:>8} {:>6} {:>10} {:>10} {:>12} {:>10} {:>8} {:>8}\n", "length", "x", "loss", "ppl",
                    "last256 loss", "tokens", "drope_c", "swan_a");
  for (const auto& l : r.lengths)
    os << fmt::format("{:>8} {:>6.1f} {:>10.4f} {:>10.3f} {:>12.4f} {:>10} {:>8.3f} {:>8g}\n", l.length,
                      static_cast<double>(l.length) / train_len, l.loss, l.ppl, l.last256_loss, l.tokens, l.drope_c,
                      l.swan_a);
  if (!r.swan_fit.empty()) {
    os << "\nSWAN a fitted per window (mean NLL with the best a / without row scaling)\n";
    os << fmt::format("{:>8} {:>14} {:>10} {:>10} {:>10}\n", "length", "window", "best a", "nll", "nll off");
    for (const auto& f : r.swan_fit)
      os << fmt::format("{:>8} {:>14} {:>10g} {:>10.4f} {:>10.4f}\n", f.length, fmt::format("[{},{})", f.begin, f.end),
                        f.best_a, f.nll_best, f.nll_off);
  }
  if (!r.passkey.empty()) {
    os << "\npasskey retrieval (examples with every answer digit right / digit accuracy)\n";
    os << fmt::format("{:>8} {:>7} {:>10} {:>10}\n", "length", "depth", "accuracy", "digits");
    for (const auto& c : r.passkey)
      os << fmt::format("{:>8} {:>7.2f} {:>9.1f}% {:>9.1f}%\n", c.length, c.depth,
                        100.0 * c.correct / std::max<int64_t>(1, c.examples), 100.0 * c.digit_accuracy);
  }
  return os.str();
}

FileSet report_files(const EvalReport& r, int64_t train_len, const std::map<std::string, int64_t>& effective) {
  FileSet files;
  std::ostringstream csv, js;
  csv << "length,extension,loss,ppl,last256_loss,tokens,drope_c,swan_a\n";
  js << "{\"train_length\": " << train_len << ", \"lengths\": [";
  for (size_t i = 0; i < r.lengths.size(); ++i) {
    const auto& l = r.lengths[i];
    csv << fmt::format("{},{:.4f},{:.6f},{:.6f},{:.6f},{},{},{}\n", l.length, double(l.length) / train_len, l.loss, l.ppl,
                       l.last256_loss, l.tokens, l.drope_c, l.swan_a);
    js << (i ? ", " : "")
       << fmt::format("{{\"length\": {}, \"loss\": {:.6f}, \"ppl\": {:.6f}, \"last256_loss\": {:.6f}, \"tokens\": {}, \"drope_c\": {}, \"swan_a\": {}}}",
                      l.length, l.loss, l.ppl, l.last256_loss, l.tokens, l.drope_c, l.swan_a);
  }
  js << "], \"nll_length\": " << r.nll_length;
  if (!effective.empty()) {
    js << ", \"effective_length\": {";
    bool first = true;
    for (const auto& [task, L] : effective) js << (first ? "" : ", ") << "\"" << task << "\": " << L, first = false;
    js << "}";
  }
  js << "}\n";
  files.emplace_back("eval.csv", csv.str());
  files.emplace_back("eval.json", js.str());
  if (!r.passkey.empty()) {
    std::ostringstream pk;
    pk << "length,depth,examples,correct,accuracy,digit_accuracy\n";
    for (const auto& c : r.passkey)
      pk << fmt::format("{},{},{},{},{:.4f},{:.4f}\n", c.length, c.depth, c.examples, c.correct,
                        static_cast<double>(c.correct) / std::max<int64_t>(1, c.examples), c.digit_accuracy);
    files.emplace_back("passkey.csv", pk.str());
  }
  if (!r.swan_fit.empty()) {
    std::ostringstream sf;
    sf << "length,begin,end,best_a,nll_best,nll_off\n";
    for (const auto& f : r.swan_fit)
      sf << fmt::format("{},{},{},{},{:.6f},{:.6f}\n", f.length, f.begin, f.end, f.best_a, f.nll_best, f.nll_off);
    files.emplace_back("swan_fit.csv", sf.str());
  }
  std::ostringstream pos;
  pos << "position,nll\n";
  for (size_t t = 0; t < r.nll_by_position.size(); ++t) pos << t << "," << fmt::format("{:.6f}", r.nll_by_position[t]) << "\n";
  files.emplace_back("nll_by_position.csv", pos.str());
  return files;
}

const std::vector<std::string>& result_file_names() {
  static const std::vector<std::string> names = {
      "eval.csv",     "eval.json",   "passkey.csv",         "swan_fit.csv", "nll_by_position.csv", "eval_recipe.yaml",
      "needles.csv",  "needles.json", "needles_examples.jsonl", "retrieval_heads.csv", "probes.csv"};
  return names;
}

void write_report(const EvalReport& r, const std::string& dir, int64_t train_len) {
  write_files_atomic(dir, report_files(r, train_len));
}

}  // namespace hz::eval
