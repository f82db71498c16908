#include "data/needles.h"

#include "core/names.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "core/error.h"
#include "data/corpus.h"
#include "data/sampling.h"

namespace hz::data {

namespace {

const char* const kTaskNames[] = {"niah_single_2", "niah_single_word", "niah_multikey_1",
                                  "niah_multivalue",    "niah_multiquery",  "passkey"};
static_assert(sizeof(kTaskNames) / sizeof(*kTaskNames) == static_cast<size_t>(NeedleTask::Count));

// Key and word values: adjective-noun pairs, as RULER's word needles.
const char* const kAdjectives[] = {"quiet", "bright", "silver", "hollow", "ancient", "gentle", "bitter", "golden",
                                   "hidden", "frozen", "narrow", "crimson", "distant", "rapid", "humble", "wild",
                                   "steady", "hungry", "polite", "rusty", "velvet", "lonely", "clever", "dusty"};
const char* const kNouns[] = {"harbor", "lantern", "meadow", "falcon", "anchor", "orchard", "candle", "river",
                              "compass", "violin", "garden", "mirror", "tunnel", "feather", "castle", "pebble",
                              "window", "canyon", "ribbon", "kettle", "island", "saddle", "beacon", "thimble"};

std::string random_word(Generator& g) {
  const int64_t na = sizeof(kAdjectives) / sizeof(*kAdjectives), nn = sizeof(kNouns) / sizeof(*kNouns);
  return std::string(kAdjectives[uniform_int(g, na)]) + "-" + kNouns[uniform_int(g, nn)];
}
std::string random_number(Generator& g) { return std::to_string(1000000 + uniform_int(g, 9000000)); }

struct Layout {
  bool words = false;   // word values
  int n_keys = 1, n_values = 1, n_queries = 1;
};
Layout layout(NeedleTask t) {
  switch (t) {
    case NeedleTask::SingleWord: return {true, 1, 1, 1};
    case NeedleTask::MultiKey: return {false, 4, 1, 1};
    case NeedleTask::MultiValue: return {false, 1, 4, 1};
    case NeedleTask::MultiQuery: return {false, 4, 1, 4};
    default: return {false, 1, 1, 1};
  }
}

std::string join_list(const std::vector<std::string>& v, const char* last_sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : (i + 1 == v.size() ? last_sep : ", ")) + v[i];
  return s;
}

// The pieces of one example: needle lines (the asked one first), instruction, question.
struct Parts {
  std::vector<std::string> needles;  // needles[0] is placed at the depth
  std::vector<bool> asked;           // per needle: it holds an asked value (needles[0] always does)
  std::string head, question;
  std::vector<std::string> answers;
  std::string answer_text;
};

Parts make_parts(NeedleTask task, NeedleFormat fmt, Generator& g) {
  Parts p;
  const bool ruler = fmt == NeedleFormat::Ruler;
  if (task == NeedleTask::Passkey) {
    const std::string v = random_number(g);
    p.needles = {"The pass key is " + v + ". Remember it. " + v + " is the pass key."};
    p.asked = {true};
    p.head = ruler ? "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
                     "I will quiz you about the important information there.\n"
                   : "";
    p.question = ruler ? "What is the pass key? The pass key is" : "The pass key is";
    p.answers = {v};
    p.answer_text = " " + v + ".";
    return p;
  }
  const Layout L = layout(task);
  std::set<std::string> used;
  std::vector<std::string> keys;
  while (static_cast<int>(keys.size()) < L.n_keys) {
    const std::string k = random_word(g);
    if (used.insert(k).second) keys.push_back(k);
  }
  std::vector<std::vector<std::string>> values(L.n_keys);
  for (int k = 0; k < L.n_keys; ++k)
    while (static_cast<int>(values[k].size()) < L.n_values) {
      const std::string v = L.words ? random_word(g) : random_number(g);
      if (used.insert(v).second) values[k].push_back(v);
    }
  const char* type = L.words ? "words" : "numbers";
  const std::string one = L.words ? "word" : "number";
  // asked keys: the first n_queries of a seeded order of the keys
  std::vector<int64_t> order(L.n_keys);
  for (int k = 0; k < L.n_keys; ++k) order[k] = k;
  shuffle_in_place(order, g);
  std::vector<std::string> asked;
  for (int q = 0; q < L.n_queries; ++q) {
    asked.push_back(keys[order[q]]);
    for (const auto& v : values[order[q]]) p.answers.push_back(v);
  }
  // needles: the asked key's (first value) first, then every other one
  auto needle = [&](const std::string& k, const std::string& v) {
    return ruler ? std::string("One of the special magic ") + type + " for " + k + " is: " + v + "."
                 : "The magic " + one + " for " + k + " is " + v + ".";
  };
  p.needles.push_back(needle(keys[order[0]], values[order[0]][0]));
  p.asked.push_back(true);
  for (int k = 0; k < L.n_keys; ++k)
    for (int vi = 0; vi < L.n_values; ++vi)
      if (!(k == order[0] && vi == 0)) {
        p.needles.push_back(needle(keys[k], values[k][vi]));
        p.asked.push_back(std::find(order.begin(), order.begin() + L.n_queries, k) != order.begin() + L.n_queries);
      }
  const bool single = L.n_queries * L.n_values == 1;
  const std::string query = join_list(asked, ", and ");
  const std::string noun = single ? one : std::string(type);
  if (ruler) {
    p.head = std::string(single ? "A special magic " + one + " is" : std::string("Some special magic ") + type + " are") +
             " hidden within the following text. Make sure to memorize it. I will quiz you about the " + noun +
             " afterwards.\n";
    p.question = std::string(single ? "What is the" : "What are all the") + " special magic " + noun + " for " + query +
                 " mentioned in the provided text? The special magic " + noun + " for " + query +
                 " mentioned in the provided text " + (single ? "is" : "are");
  } else {
    p.question = "The magic " + noun + " for " + query + (single ? " is" : " are");
  }
  p.answer_text = " " + join_list(p.answers, ", ") + ".";
  return p;
}

// The prompt text with `n` verses from `start` and the needles at their lines; asked_chars gets the
// byte range [begin, end) of each asked needle's sentence in the returned text (without its newline).
std::string render(const Parts& p, const std::vector<std::string>& verses, int64_t start, int64_t n, double depth,
                   const std::vector<double>& other_pos, int64_t* needle_line,
                   std::vector<std::pair<size_t, size_t>>* asked_chars = nullptr) {
  // insertion points: boundary index in [0, n] (before verse b)
  std::vector<std::pair<int64_t, size_t>> ins;
  ins.push_back({static_cast<int64_t>(std::llround(depth * static_cast<double>(n))), 0});
  for (size_t i = 1; i < p.needles.size(); ++i)
    ins.push_back({static_cast<int64_t>(std::floor(other_pos[i - 1] * static_cast<double>(n + 1))), i});
  for (auto& x : ins) x.first = std::min<int64_t>(x.first, n);
  std::stable_sort(ins.begin(), ins.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::string ctx;
  size_t k = 0;
  int64_t line = 0;
  const int64_t V = static_cast<int64_t>(verses.size());
  for (int64_t b = 0; b <= n; ++b) {
    for (; k < ins.size() && ins[k].first == b; ++k) {
      if (ins[k].second == 0 && needle_line) *needle_line = line;
      if (asked_chars && p.asked[ins[k].second]) {
        const size_t at = p.head.size() + ctx.size();
        asked_chars->push_back({at, at + p.needles[ins[k].second].size()});
      }
      ctx += p.needles[ins[k].second] + "\n";
      ++line;
    }
    if (b < n) {
      ctx += verses[(start + b) % V] + "\n";
      ++line;
    }
  }
  return p.head + ctx + p.question;
}

}  // namespace

const std::vector<std::string>& needle_task_names() {
  static const std::vector<std::string> n(std::begin(kTaskNames), std::end(kTaskNames));
  return n;
}
const char* name(NeedleTask t) { return kTaskNames[static_cast<int>(t)]; }
NeedleTask parse_needle_task(const std::string& s) {
  for (size_t i = 0; i < needle_task_names().size(); ++i)
    if (s == kTaskNames[i]) return static_cast<NeedleTask>(i);
  // the names before they followed lm-eval's RULER tasks
  if (s == "niah_single_number") return NeedleTask::SingleNumber;
  if (s == "niah_multikey") return NeedleTask::MultiKey;
  std::string known;
  for (const auto& n : needle_task_names()) known += " " + n;
  throw ValueError("unknown needle task '" + s + "'; known tasks:" + known);
}
namespace {
const char* const kFormatNames[] = {"ruler", "short"};
}  // namespace
const char* name(NeedleFormat f) { return enum_name(f, kFormatNames); }
NeedleFormat parse_needle_format(const std::string& s) {
  return parse_name<NeedleFormat>(s, kFormatNames, "needle format");
}

const std::vector<std::string>& bible_verses() {
  static const std::vector<std::string> verses = [] {
    std::vector<std::string> v;
    for (const Document& d : load_bible_kjv()) {
      size_t a = 0;
      while (a <= d.text.size()) {
        size_t b = d.text.find('\n', a);
        if (b == std::string::npos) b = d.text.size();
        if (b > a) v.push_back(d.text.substr(a, b - a));
        a = b + 1;
      }
    }
    return v;
  }();
  return verses;
}

NeedleExample make_needle(const Tokenizer& tok, const std::vector<std::string>& verses, NeedleTask task,
                          NeedleFormat fmt, Generator& g, int64_t length, double depth, int64_t answer_budget) {
  HZ_CHECK(depth >= 0 && depth <= 1, ValueError, "needle: depth must be in [0, 1], got ", depth);
  HZ_CHECK(!verses.empty(), ValueError, "needle: the haystack has no verses");
  HZ_CHECK(answer_budget >= 0, ValueError, "needle: answer_budget must be >= 0");
  NeedleExample ex;
  ex.task = task;
  ex.depth = depth;
  const Parts p = make_parts(task, fmt, g);
  const int64_t start = uniform_int(g, static_cast<int64_t>(verses.size()));
  std::vector<double> other(p.needles.size() > 0 ? p.needles.size() - 1 : 0);
  for (auto& x : other) x = uniform01(g);
  const int64_t limit = length - answer_budget;
  auto tokens_with = [&](int64_t n) {
    return static_cast<int64_t>(tok.encode(render(p, verses, start, n, depth, other, nullptr)).size());
  };
  const int64_t minimum = tokens_with(0);
  HZ_CHECK(minimum <= limit, ValueError, "needle task ", name(task), ": a length of ", length,
           " tokens cannot hold the instruction, needles and question (", minimum, " tokens) plus ", answer_budget,
           " answer tokens; use lengths >= ", minimum + answer_budget, " or the short format");
  // largest n with tokens_with(n) <= limit: grow by doubling, then bisect
  int64_t lo = 0, hi = 1;
  while (tokens_with(hi) <= limit) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (tokens_with(mid) <= limit ? lo : hi) = mid;
  }
  ex.haystack_lines = lo;
  std::vector<std::pair<size_t, size_t>> asked_chars;
  ex.prompt_text = render(p, verses, start, lo, depth, other, &ex.needle_line, &asked_chars);
  ex.prompt = tok.encode(ex.prompt_text);
  // an asked needle's tokens: those of the text up to its end less those of the text before it
  // (needles are whole lines, so a tokenizer that splits at newlines starts a token there)
  const int64_t P = static_cast<int64_t>(ex.prompt.size());
  for (const auto& [b, e] : asked_chars) {
    const int64_t tb = std::min<int64_t>(P, static_cast<int64_t>(tok.encode(ex.prompt_text.substr(0, b)).size()));
    const int64_t te = std::min<int64_t>(P, static_cast<int64_t>(tok.encode(ex.prompt_text.substr(0, e)).size()));
    if (te > tb) ex.needle_spans.push_back({tb, te});
  }
  ex.answers = p.answers;
  ex.answer_text = p.answer_text;
  ex.answer = tok.encode(p.answer_text);
  return ex;
}

double needle_score(const std::string& text, const std::vector<std::string>& answers) {
  if (answers.empty()) return 1.0;
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string t = lower(text);
  int64_t found = 0;
  for (const auto& a : answers) found += !a.empty() && t.find(lower(a)) != std::string::npos;
  return static_cast<double>(found) / static_cast<double>(answers.size());
}

NeedleTrainingExample make_needle_training(const Tokenizer& tok, const std::vector<std::string>& verses,
                                           NeedleFormat fmt, Generator& g, int64_t length) {
  // the tasks in a seeded order; the first that fits the length is taken (at short lengths the
  // multi-needle tasks may not fit at all)
  std::vector<int64_t> order(static_cast<size_t>(NeedleTask::Count));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  shuffle_in_place(order, g);
  const double depth = uniform01(g);
  NeedleExample ex;
  bool found = false;
  std::string why;
  for (int64_t t : order) {
    const NeedleTask task = static_cast<NeedleTask>(t);
    // answer tokens are known only after the draw: size the budget from the canonical answer
    Generator probe = g;
    const Parts p = make_parts(task, fmt, probe);
    const int64_t budget = static_cast<int64_t>(tok.encode(p.answer_text).size());
    try {
      Generator gt = g;
      ex = make_needle(tok, verses, task, fmt, gt, length, depth, budget);
      g = gt;
      found = true;
      break;
    } catch (const ValueError& e) {
      why = e.what();
    }
  }
  HZ_CHECK(found, ValueError, "needle training: no needle task fits ", length, " tokens (", why, ")");
  NeedleTrainingExample out;
  const int64_t body = static_cast<int64_t>(ex.prompt.size() + ex.answer.size());
  const int64_t pad = length - body;
  HZ_CHECK(pad >= 0, ValueError, "needle training: the example does not fit ", length, " tokens");
  if (pad > 0) {  // the Bible text just before a seeded verse, cut to `pad` tokens from the left
    std::vector<int32_t> before;
    int64_t v = uniform_int(g, static_cast<int64_t>(verses.size()));
    while (static_cast<int64_t>(before.size()) < pad) {
      std::vector<int32_t> t = tok.encode(verses[v] + "\n");
      t.insert(t.end(), before.begin(), before.end());
      before.swap(t);
      v = (v + static_cast<int64_t>(verses.size()) - 1) % static_cast<int64_t>(verses.size());
    }
    out.tokens.assign(before.end() - pad, before.end());
  }
  out.tokens.insert(out.tokens.end(), ex.prompt.begin(), ex.prompt.end());
  out.tokens.insert(out.tokens.end(), ex.answer.begin(), ex.answer.end());
  out.answer_begin = length - static_cast<int64_t>(ex.answer.size());
  out.answer_text = ex.answer_text;
  out.weights.assign(static_cast<size_t>(length), 0.0f);
  for (int64_t i = length - static_cast<int64_t>(ex.answer.size()) - 1; i < length - 1; ++i) out.weights[i] = 1.0f;
  return out;
}

}  // namespace hz::data
