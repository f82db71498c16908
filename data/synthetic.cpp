#include "data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "data/needles.h"
#include "data/sampling.h"

namespace hz::data {

namespace {

const char* const kFillerSentences[] = {
    "The grass is green. ", "The sky is blue. ", "The sun is yellow. ", "Here we go. ", "There and back again. ",
};

using Ids = std::vector<int32_t>;

// `n` tokens of filler: the sentences in turn, as a window into an endless repetition that ends
// with a whole sentence (so the question never follows a cut-off word); only the first sentence
// may be cut, from the left. `bounds` receives every sentence start inside the window, 0 and n.
Ids make_filler(const Tokenizer& tok, int64_t n, std::vector<int64_t>& bounds) {
  std::vector<Ids> sent;
  for (const char* s : kFillerSentences) sent.push_back(tok.encode(s));
  Ids full;
  std::vector<int64_t> starts;
  for (size_t i = 0; static_cast<int64_t>(full.size()) < n; i = (i + 1) % sent.size()) {
    starts.push_back(static_cast<int64_t>(full.size()));
    full.insert(full.end(), sent[i].begin(), sent[i].end());
  }
  const int64_t drop = static_cast<int64_t>(full.size()) - n;  // cut from the front
  bounds.assign(1, 0);
  for (int64_t st : starts)
    if (st - drop > 0) bounds.push_back(st - drop);
  if (bounds.back() != n) bounds.push_back(n);
  return Ids(full.begin() + drop, full.end());
}

// The sentence boundary nearest to `target` (ties: the earlier one).
int64_t nearest_bound(const std::vector<int64_t>& bounds, double target) {
  int64_t best = bounds.front();
  for (int64_t b : bounds)
    if (std::abs(static_cast<double>(b) - target) < std::abs(static_cast<double>(best) - target)) best = b;
  return best;
}

std::string random_digits7(Generator& g) { return std::to_string(1000000 + uniform_int(g, 9000000)); }

struct Insert {
  int64_t pos;  // filler position (a sentence boundary)
  Ids ids;
};

// filler with the inserts (sorted by pos) spliced in, then the question, then the answer; fills
// tokens, weights and answer_begin. Checks the total is `length`.
SyntheticExample assemble(const Ids& filler, const std::vector<Insert>& inserts, const Ids& question,
                          const Ids& answer_ids, const std::string& answer, int64_t length) {
  SyntheticExample ex;
  ex.tokens.reserve(static_cast<size_t>(length));
  int64_t at = 0;
  for (const Insert& in : inserts) {
    ex.tokens.insert(ex.tokens.end(), filler.begin() + at, filler.begin() + in.pos);
    const int64_t begin = static_cast<int64_t>(ex.tokens.size());
    ex.tokens.insert(ex.tokens.end(), in.ids.begin(), in.ids.end());
    ex.needle_spans.emplace_back(begin, static_cast<int64_t>(ex.tokens.size()));
    at = in.pos;
  }
  ex.tokens.insert(ex.tokens.end(), filler.begin() + at, filler.end());
  ex.tokens.insert(ex.tokens.end(), question.begin(), question.end());
  ex.answer_begin = static_cast<int64_t>(ex.tokens.size());
  ex.tokens.insert(ex.tokens.end(), answer_ids.begin(), answer_ids.end());
  HZ_CHECK(static_cast<int64_t>(ex.tokens.size()) == length, Error, "synthetic example has ", ex.tokens.size(),
           " tokens instead of ", length, " (internal error)");
  ex.weights.assign(static_cast<size_t>(length), 0.0f);
  for (int64_t i = ex.answer_begin - 1; i + 1 < length; ++i) ex.weights[static_cast<size_t>(i)] = 1.0f;
  ex.answer = answer;
  return ex;
}

int64_t total_size(const std::vector<Ids>& parts) {
  int64_t n = 0;
  for (const Ids& p : parts) n += static_cast<int64_t>(p.size());
  return n;
}

}  // namespace

SyntheticExample make_passkey(const Tokenizer& tok, Generator& g, int64_t length, double depth) {
  HZ_CHECK(depth >= 0.0 && depth <= 1.0, ValueError, "passkey: depth must be in [0, 1], got ", depth);
  const std::string key = random_digits7(g);
  const Ids needle = tok.encode("The pass key is " + key + ". Remember it. " + key + " is the pass key. ");
  const Ids question = tok.encode("What is the pass key? The pass key is ");
  const Ids answer = tok.encode(key);
  HZ_CHECK(!answer.empty(), Error, "passkey: the tokenizer encodes the answer to no tokens");
  const int64_t fixed = total_size({needle, question, answer});
  HZ_CHECK(length >= fixed, ValueError, "passkey: length ", length, " is too short; the needle, question and answer need ",
           fixed, " tokens with tokenizer '", tok.name(), "'");
  std::vector<int64_t> bounds;
  const Ids filler = make_filler(tok, length - fixed, bounds);
  const int64_t pos = nearest_bound(bounds, depth * static_cast<double>(filler.size()));
  return assemble(filler, {{pos, needle}}, question, answer, key, length);
}

SyntheticExample make_kv_retrieval(const Tokenizer& tok, Generator& g, int64_t length, int n_keys) {
  HZ_CHECK(n_keys >= 1, ValueError, "kv retrieval: n_keys must be >= 1, got ", n_keys);
  HZ_CHECK(n_keys <= 10000, ValueError, "kv retrieval: n_keys must be <= 10000, got ", n_keys);
  std::vector<std::string> keys, values;
  std::set<std::string> seen;
  while (static_cast<int>(keys.size()) < n_keys) {
    std::string k(4, 'A');
    for (char& c : k) c = static_cast<char>('A' + uniform_int(g, 26));
    if (!seen.insert(k).second) continue;  // keys are distinct
    keys.push_back(k);
    values.push_back(random_digits7(g));
  }
  const int64_t asked = uniform_int(g, n_keys);
  std::vector<Ids> needles;
  for (int i = 0; i < n_keys; ++i)
    needles.push_back(tok.encode("The value of key " + keys[i] + " is " + values[i] + ". "));
  const Ids question =
      tok.encode("What is the value of key " + keys[asked] + "? The value of key " + keys[asked] + " is ");
  const Ids answer = tok.encode(values[asked]);
  HZ_CHECK(!answer.empty(), Error, "kv retrieval: the tokenizer encodes the answer to no tokens");
  std::vector<Ids> parts = needles;
  parts.push_back(question);
  parts.push_back(answer);
  const int64_t fixed = total_size(parts);
  HZ_CHECK(length >= fixed, ValueError, "kv retrieval: length ", length, " is too short; ", n_keys,
           " needles, the question and the answer need ", fixed, " tokens with tokenizer '", tok.name(), "'");
  std::vector<int64_t> bounds;
  const Ids filler = make_filler(tok, length - fixed, bounds);
  const double F = static_cast<double>(filler.size());
  std::vector<Insert> inserts;
  for (int i = 0; i < n_keys; ++i) {
    const double u = uniform01(g);
    inserts.push_back({nearest_bound(bounds, F * (i + u) / n_keys), needles[static_cast<size_t>(i)]});
  }
  // targets increase with i, so the nearest boundaries are already non-decreasing
  std::stable_sort(inserts.begin(), inserts.end(), [](const Insert& a, const Insert& b) { return a.pos < b.pos; });
  return assemble(filler, inserts, question, answer, values[static_cast<size_t>(asked)], length);
}

const std::vector<std::string>& synthetic_task_names() {
  static const std::vector<std::string> names{"passkey", "kv", "niah", "niah_short"};
  return names;
}

SyntheticLoader::SyntheticLoader(std::string task, std::shared_ptr<const Tokenizer> tok, int64_t seq_len,
                                 int64_t batch, uint64_t seed, int64_t rank, int64_t world)
    : task_(std::move(task)), tok_(std::move(tok)), T_(seq_len), B_(batch), seed_(seed), rank_(rank), world_(world) {
  const auto& names = synthetic_task_names();
  if (std::find(names.begin(), names.end(), task_) == names.end()) {
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    throw ValueError(detail::concat_msg("unknown synthetic task '", task_, "'; known tasks: ", known));
  }
  HZ_CHECK(tok_ != nullptr, ValueError, "SyntheticLoader: the tokenizer is null");
  HZ_CHECK(T_ >= 1, ValueError, "SyntheticLoader: seq_len must be >= 1, got ", T_);
  HZ_CHECK(B_ >= 1, ValueError, "SyntheticLoader: batch size must be >= 1, got ", B_);
  HZ_CHECK(world_ >= 1 && rank_ >= 0 && rank_ < world_, ValueError, "SyntheticLoader: rank ", rank_,
           " is outside a world of ", world_);
  (void)example(0);  // a seq_len too short for the task fails here, with the minimum in the message
}

SyntheticExample SyntheticLoader::example(int64_t k) const {
  HZ_CHECK(k >= 0, ValueError, "SyntheticLoader: example index must be >= 0, got ", k);
  Generator g(seed_, static_cast<uint64_t>(k));
  if (task_ == "passkey") {
    const double depth = uniform01(g);
    return make_passkey(*tok_, g, T_ + 1, depth);
  }
  if (task_ == "niah" || task_ == "niah_short") {  // RULER needle tasks on the Bible (data/needles.h)
    NeedleTrainingExample n = make_needle_training(*tok_, bible_verses(),
                                                   task_ == "niah" ? NeedleFormat::Ruler : NeedleFormat::Short, g, T_ + 1);
    SyntheticExample ex;
    ex.tokens = std::move(n.tokens);
    ex.weights = std::move(n.weights);
    ex.answer_begin = n.answer_begin;
    ex.answer = n.answer_text;
    return ex;
  }
  return make_kv_retrieval(*tok_, g, T_ + 1);
}

Batch SyntheticLoader::next() {
  Batch b;
  b.tokens = Tensor::empty({B_, T_}, DType::I64);
  b.targets = Tensor::empty({B_, T_}, DType::I64);
  b.weights = Tensor::empty({B_, T_}, DType::F32);
  int64_t* in = b.tokens.data<int64_t>();
  int64_t* tg = b.targets.data<int64_t>();
  float* w = b.weights.data<float>();
  for (int64_t i = 0; i < B_; ++i, ++index_) {
    const SyntheticExample ex = example((index_ / B_ * world_ + rank_) * B_ + index_ % B_);
    for (int64_t t = 0; t < T_; ++t) {
      in[i * T_ + t] = ex.tokens[static_cast<size_t>(t)];
      tg[i * T_ + t] = ex.tokens[static_cast<size_t>(t + 1)];
      w[i * T_ + t] = ex.weights[static_cast<size_t>(t)];
    }
  }
  return b;
}

void SyntheticLoader::restore(const LoaderCursor& c) {
  HZ_CHECK(c.epoch == 0 && c.index >= 0, ValueError, "SyntheticLoader: cannot restore cursor {epoch ", c.epoch,
           ", index ", c.index, "}: a synthetic stream has epoch 0 and index >= 0; was the checkpoint made with a "
           "corpus loader?");
  index_ = c.index;
}

}  // namespace hz::data
