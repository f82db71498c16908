// The float64 oracle (reference_visibility, attention/reference.h: the mask and logit coefficients
// written from docs/methods.md) and the committed case table it wrote, tests/fixtures/attention_oracle.json:
// a few hundred drawn calls (T <= 24, 1-2 sequences, 1-4 query heads with GQA) covering every mask and
// logit field, each with its fields, one visibility bitmap per (b, h, i) row and the row's factor r_i
// and sums over its visible keys of the coefficients the reference uses (r_i a_t and m_t - slope_h t).
//   Oracle.TableMatchesOracle    the oracle's output equals the table (a drift in reference.cpp fails here);
//   Oracle.TilingMatchesTable    tiling.h's key_range / sink_range / visible_count / query_range /
//                                sink_rows / row_factor / logit_coef, the kernels' arithmetic, equal it;
//   Oracle.FusedOpMatchesTable   the fused CPU op gives weight exactly to the table's visible keys;
//   Oracle.TableCoversEveryField every field is drawn often enough to mean something.
// tests/hf/oracle_test.py holds hf/remote/modeling_horizon.py to the same table.
// Regenerate (after a deliberate change of a definition, reviewed in the diff):
//   HZ_REGEN_ORACLE=1 build/hz_test_attention --gtest_filter='Oracle.*'
// (The draws go through the standard library's distributions, so another library draws other calls;
// the readers take the calls from the table, so none minds.)
// Factors compare to 1e-12 relative (libm calls differ in the last bit), bitmaps exactly.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "attention/fused.h"
#include "attention/reference.h"
#include "attention/spec.h"
#include "attention/tiling.h"
#include "core/file.h"
#include "core/rng.h"

using namespace hz;
using namespace hz::attn;
using json = nlohmann::json;

namespace {

const std::string kTable = std::string(HZ_SOURCE_DIR) + "/tests/fixtures/attention_oracle.json";
constexpr int kCases = 400;
constexpr int64_t kMaxT = 24;

// One call of the table: its shapes and config (built from the case's fields, so that the readers
// check the calls the table holds, whatever generator wrote it).
struct Call {
  int64_t id = 0, B = 1, H = 1, Hkv = 1, Tq = 1, Tk = 1;
  AttnConfig cfg;
};

json to_json(const Call& c, const std::string& mask, int64_t scope_T) {
  const AttnConfig& g = c.cfg;
  json j = {{"id", c.id},
            {"B", c.B},
            {"H", c.H},
            {"Hkv", c.Hkv},
            {"Tq", c.Tq},
            {"Tk", c.Tk},
            {"mask", mask},
            {"window", g.window},
            {"chunk", g.chunk},
            {"sink_tokens", g.sink_tokens},
            {"prefix", g.prefix},
            {"min_distance", g.min_distance},
            {"q_offset", g.q_offset},
            {"key_begin", g.key_begin},
            {"key_end", g.key_end},
            {"key_position", g.key_position},
            {"alibi_slope", g.alibi_slope},
            {"logit", name(g.logit)},
            {"tau", g.tau},
            {"swan_a", g.swan_a},
            {"beta", g.beta},
            {"logn_position", g.logn_position},
            {"temp_c", g.temp_c},
            {"train_len", g.train_len},
            {"qtemp_alpha", g.qtemp_alpha},
            {"qtemp_beta", g.qtemp_beta}};
  if (mask == "scope") j["scope_T"] = scope_T;
  j["documents"] = nullptr;
  if (g.documents)
    j["documents"] = {{"T", g.documents->seq_len()},
                      {"cu_seqlens", g.documents->cu_seqlens()},
                      {"position_reset", g.documents->position_reset()}};
  j["positions"] = nullptr;
  if (g.positions.defined()) {
    const std::vector<double> v = g.positions.to_vector();
    const int64_t N = g.positions.size(1);
    json rows = json::array();
    for (int64_t b = 0; b < c.B; ++b) rows.push_back(std::vector<double>(v.begin() + b * N, v.begin() + (b + 1) * N));
    j["positions"] = rows;
  }
  return j;
}

Call from_json(const json& j) {
  Call c;
  c.id = j.at("id");
  c.B = j.at("B");
  c.H = j.at("H");
  c.Hkv = j.at("Hkv");
  c.Tq = j.at("Tq");
  c.Tk = j.at("Tk");
  AttnConfig& g = c.cfg;
  g.window = j.at("window").get<std::vector<int64_t>>();
  g.chunk = j.at("chunk");
  g.sink_tokens = j.at("sink_tokens");
  g.prefix = j.at("prefix");
  g.min_distance = j.at("min_distance");
  g.q_offset = j.at("q_offset");
  g.key_begin = j.at("key_begin");
  g.key_end = j.at("key_end");
  g.key_position = j.at("key_position");
  g.alibi_slope = j.at("alibi_slope").get<std::vector<double>>();
  g.logit = parse_logit(j.at("logit").get<std::string>());
  g.tau = j.at("tau");
  g.swan_a = j.at("swan_a");
  g.beta = j.at("beta");
  g.logn_position = j.at("logn_position");
  g.temp_c = j.at("temp_c");
  g.train_len = j.at("train_len");
  g.qtemp_alpha = j.at("qtemp_alpha");
  g.qtemp_beta = j.at("qtemp_beta");
  if (!j.at("documents").is_null()) {
    const json& d = j.at("documents");
    g.documents = std::make_shared<Documents>(c.B, d.at("T").get<int64_t>(), d.at("cu_seqlens").get<std::vector<int64_t>>(),
                                              d.at("position_reset").get<bool>());
  }
  if (!j.at("positions").is_null()) {
    std::vector<double> v;
    int64_t N = 0;
    for (const json& row : j.at("positions")) {
      const auto r = row.get<std::vector<double>>();
      N = static_cast<int64_t>(r.size());
      v.insert(v.end(), r.begin(), r.end());
    }
    g.positions = Tensor::from_vector(v, {c.B, N}, DType::F64);
  }
  return c;
}

// A row's visible keys as hex: bit j is key j (Tk <= 24 fits a 64-bit integer either side).
std::string hex_row(const std::vector<uint8_t>& bits, int64_t at, int64_t Tk) {
  uint64_t x = 0;
  for (int64_t j = 0; j < Tk; ++j) x |= static_cast<uint64_t>(bits[at + j] != 0) << j;
  char buf[24];
  std::snprintf(buf, sizeof buf, "%0*llx", static_cast<int>((Tk + 3) / 4), static_cast<unsigned long long>(x));
  return buf;
}

// What the table holds per row: the bitmap, r_i, and over the visible keys the sums of the reference's
// coef (r_i a_t) and bias (m_t - slope_h t), summed in key order.
struct Rows {
  std::vector<std::string> visible;
  std::vector<double> factor, coef_sum, bias_sum;
};
Rows oracle_rows(const Call& c) {
  const ReferenceMask m = reference_visibility(c.cfg, c.B, c.H, c.Tq, c.Tk);
  Rows r;
  for (int64_t row = 0; row < c.B * c.H * c.Tq; ++row) {
    r.visible.push_back(hex_row(m.visible, row * c.Tk, c.Tk));
    r.factor.push_back(m.row_factor[row]);
    double cs = 0, bs = 0;
    for (int64_t j = 0; j < c.Tk; ++j)
      if (m.visible[row * c.Tk + j]) {
        cs += m.coef[row * c.Tk + j];
        bs += m.bias[row * c.Tk + j];
      }
    r.coef_sum.push_back(cs);
    r.bias_sum.push_back(bs);
  }
  return r;
}

// ---- drawing the table (HZ_REGEN_ORACLE=1) ---------------------------------------------------------
Call draw(std::mt19937_64& rng, std::string& mask, int64_t& scope_T) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto coin = [&](int percent) { return uni(0, 99) < percent; };
  auto pick = [&](std::initializer_list<double> v) { return *(v.begin() + uni(0, static_cast<int64_t>(v.size()) - 1)); };
  Call c;
  AttnConfig& g = c.cfg;
  c.B = uni(1, 2);
  c.Hkv = uni(1, 2);
  c.H = c.Hkv * uni(1, 2);  // GQA 2:1 in half the cases
  c.Tk = uni(1, kMaxT);
  c.Tq = coin(40) ? c.Tk : uni(1, c.Tk);
  // windows: causal, one window, SCOPE's scopes for some length, or any per-head mix
  scope_T = 0;
  switch (uni(0, 3)) {
    case 0: mask = "causal"; g.window.assign(c.H, 0); break;
    case 1: mask = "window"; g.window.assign(c.H, uni(1, 12)); break;
    case 2: mask = "scope"; scope_T = uni(2, 64); g.window = scope_windows(c.H, scope_T); break;
    default:
      mask = "heads";
      for (int64_t h = 0; h < c.H; ++h) g.window.push_back(coin(30) ? 0 : uni(1, 12));
  }
  // A third of the calls in the form HorizonForCausalLM makes them (tests/hf/oracle_test.py checks
  // those): the queries last, no key limits but left pads, documents with position reset, whole in the call.
  const bool hf_form = coin(35);
  const LogitKind logit = static_cast<LogitKind>(uni(0, static_cast<int64_t>(LogitKind::Count) - 1));
  // alignment and key limits
  if (!hf_form && coin(25)) g.q_offset = uni(0, c.Tk - c.Tq);  // queries placed explicitly, not last
  if (coin(20)) g.key_begin = uni(0, c.Tk - 1);
  if (!hf_form && coin(25)) g.key_end = uni(1, c.Tk);
  const int64_t off = g.q_offset < 0 ? c.Tk - c.Tq : g.q_offset;
  if (coin(25)) g.key_position = uni(1, 8);
  if (coin(logit == LogitKind::Temperature ? 70 : 35)) {  // packed documents: random cuts in each sequence
    if (hf_form) {
      g.key_position = 0;
      g.key_begin = 0;
    }
    // the keys may start inside the documents' sequences (a context-parallel halo buffer)
    const int64_t T = g.key_position + c.Tk + (!hf_form && coin(30) ? uni(1, 4) : 0);
    std::vector<int64_t> cu{0};
    for (int64_t b = 0; b < c.B; ++b) {
      for (int64_t t = 1; t < T; ++t)
        if (coin(18)) cu.push_back(b * T + t);
      cu.push_back((b + 1) * T);
    }
    g.documents = std::make_shared<Documents>(c.B, T, cu, hf_form || coin(50));
  } else if (!hf_form && coin(15)) {
    g.min_distance = uni(1, 3);
  }
  if (g.min_distance == 0 && coin(25)) g.chunk = uni(1, 8);
  if (coin(25)) g.sink_tokens = uni(1, 4);
  const int64_t ke = g.key_end < 0 ? c.Tk : g.key_end;
  if (g.min_distance == 0 && coin(20) && c.Tq <= ke) {  // prefix-LM: keys from 0, the queries last among them
    g.key_begin = 0;
    g.q_offset = ke - c.Tq;
    g.prefix = uni(1, 10);
  }
  // logit terms
  g.logit = logit;
  g.tau = pick({1.0, 3.0, 10.0});
  g.swan_a = pick({2.0, 5.0, 362.0});
  g.beta = pick({0.7, 1.0, 1.3});
  g.logn_position = coin(40);
  if (g.logit == LogitKind::Temperature && coin(70)) {  // DroPE's per-document beta (documents only)
    g.temp_c = pick({0.2, 0.5});
    g.train_len = uni(2, 10);
  }
  if (coin(30)) g.alibi_slope = alibi_slopes(c.H);
  if (coin(25)) {  // Llama 4's position temperature, with beta small enough that floor((P + 1) / beta) moves
    g.qtemp_alpha = pick({0.1, 0.5});
    g.qtemp_beta = pick({1.0, 2.5, 4.0});
  }
  if (!hf_form && !g.documents && coin(30)) {  // drawn token positions (PoSE's jumps, or real-valued)
    const int64_t N = g.key_position + std::max(c.Tk, off + c.Tq) + uni(0, 2);
    std::vector<double> v;
    const bool real = coin(40);
    for (int64_t b = 0; b < c.B; ++b) {
      double p = static_cast<double>(uni(0, 5));
      for (int64_t n = 0; n < N; ++n) {
        v.push_back(p);
        p += real ? static_cast<double>(uni(1, 16)) / 8.0 : static_cast<double>(coin(20) ? uni(2, 6) : 1);
      }
    }
    g.positions = Tensor::from_vector(v, {c.B, N}, DType::F64);
  }
  return c;
}

std::string regenerate() {
  std::mt19937_64 rng(55);
  std::string out = "{\"about\": \"attention's float64 oracle (attention/reference.h reference_visibility) on drawn calls: "
                    "visible[(b * H + h) * Tq + i] is row i's bitmap in hex (bit j = key j), factor its r_i without "
                    "LogN's c_h, coef_sum and bias_sum the sums of r_i a_t and m_t - slope_h t over its visible keys. "
                    "Written by HZ_REGEN_ORACLE=1 build/hz_test_attention --gtest_filter='Oracle.*'; read by "
                    "tests/attention/oracle_test.cpp and tests/hf/oracle_test.py\",\n\"cases\": [\n";
  int made = 0;
  while (made < kCases) {
    std::string mask;
    int64_t scope_T = 0;
    Call c = draw(rng, mask, scope_T);
    c.id = made;
    try {  // a call the op would refuse (e.g. documents the queries overrun) is drawn again
      make_kernel_params(c.cfg, c.B, c.H, c.Hkv, c.Tq, c.Tk, 8);
    } catch (const Error&) {
      continue;
    }
    json j = to_json(c, mask, scope_T);
    const Rows r = oracle_rows(c);
    j["visible"] = r.visible;
    j["factor"] = r.factor;
    j["coef_sum"] = r.coef_sum;
    j["bias_sum"] = r.bias_sum;
    out += (made ? ",\n" : "") + j.dump();
    ++made;
  }
  return out + "\n]}\n";
}

// ---- reading ---------------------------------------------------------------------------------------
// The table, regenerated first when HZ_REGEN_ORACLE=1. A missing or damaged table fails naming the file.
const json& table() {
  static json t = [] {
    const char* regen = std::getenv("HZ_REGEN_ORACLE");
    if (regen && std::string(regen) == "1") write_file_atomic(kTable, regenerate());
    std::string text;
    const std::string why = read_file_capped(kTable, 8u << 20, text);
    if (!why.empty())
      throw ValueError(kTable + ": " + why + " (regenerate: HZ_REGEN_ORACLE=1 build/hz_test_attention --gtest_filter='Oracle.*')");
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.contains("cases") || !j["cases"].is_array())
      throw ValueError(kTable + ": not the oracle table (a JSON object with a \"cases\" array)");
    return j;
  }();
  return t;
}

bool close(double got, double want) {
  if (got == want) return true;
  return std::fabs(got - want) <= 1e-12 * std::max(std::fabs(got), std::fabs(want));
}

std::string where(const Call& c, int64_t b, int64_t h, int64_t i) {
  return "case " + std::to_string(c.id) + " (b " + std::to_string(b) + ", h " + std::to_string(h) + ", row " +
         std::to_string(i) + ")";
}

}  // namespace

TEST(Oracle, TableMatchesOracle) {
  const json& t = table();
  ASSERT_GE(t["cases"].size(), 200u);
  for (const json& j : t["cases"]) {
    const Call c = from_json(j);
    const Rows r = oracle_rows(c);
    ASSERT_EQ(j.at("visible").size(), r.visible.size()) << "case " << c.id;
    for (size_t row = 0; row < r.visible.size(); ++row) {
      const int64_t i = static_cast<int64_t>(row) % c.Tq, bh = static_cast<int64_t>(row) / c.Tq;
      const std::string at = where(c, bh / c.H, bh % c.H, i);
      ASSERT_EQ(r.visible[row], j["visible"][row].get<std::string>()) << at << ": visible keys";
      ASSERT_TRUE(close(r.factor[row], j["factor"][row].get<double>())) << at << ": r_i " << r.factor[row];
      ASSERT_TRUE(close(r.coef_sum[row], j["coef_sum"][row].get<double>())) << at << ": coefficients";
      ASSERT_TRUE(close(r.bias_sum[row], j["bias_sum"][row].get<double>())) << at << ": additive terms";
    }
  }
}

TEST(Oracle, TilingMatchesTable) {
  for (const json& j : table()["cases"]) {
    const Call c = from_json(j);
    const AttnKernelParams P = make_kernel_params(c.cfg, c.B, c.H, c.Hkv, c.Tq, c.Tk, 8);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h) {
        std::vector<uint8_t> bits(c.Tq * c.Tk, 0);
        for (int64_t i = 0; i < c.Tq; ++i) {
          const size_t row = static_cast<size_t>((b * c.H + h) * c.Tq + i);
          const IndexRange kr = key_range(P, b, h, i), sr = sink_range(P, b, h, i);
          const double r = row_factor<double>(P, b, h, i);
          double cs = 0, bs = 0;
          int64_t n = 0;
          for (int64_t j2 = 0; j2 < c.Tk; ++j2) {
            if (!in_ranges(kr, sr, j2)) continue;
            bits[i * c.Tk + j2] = 1;
            ++n;
            const LogitCoef<double> lc = logit_coef<double>(P, h, r, pair_distance<double>(P, b, P.q_offset + i, j2));
            cs += lc.mul;
            bs += lc.add;
          }
          const std::string at = where(c, b, h, i);
          ASSERT_EQ(hex_row(bits, i * c.Tk, c.Tk), j["visible"][row].get<std::string>()) << at << ": key_range / sink_range";
          ASSERT_EQ(visible_count(P, b, h, i), n) << at << ": visible_count";
          ASSERT_TRUE(close(r, j["factor"][row].get<double>())) << at << ": row_factor " << r;
          ASSERT_TRUE(close(cs, j["coef_sum"][row].get<double>())) << at << ": logit_coef's mul";
          ASSERT_TRUE(close(bs, j["bias_sum"][row].get<double>())) << at << ": logit_coef's add";
        }
        // the transpose: the rows that see key j (query_range's interval and sink_rows') are the table's column j
        for (int64_t k = 0; k < c.Tk; ++k) {
          const IndexRange qr = query_range(P, b, h, k), sq = sink_rows(P, b, h, k);
          for (int64_t i = 0; i < c.Tq; ++i)
            ASSERT_EQ(in_ranges(qr, sq, i), bits[i * c.Tk + k] != 0)
                << where(c, b, h, i) << " key " << k << ": query_range / sink_rows";
        }
      }
  }
}

TEST(Oracle, FusedOpMatchesTable) {
  // v_j = e_j (head dim Tk): out[b, h, i, j] is row i's weight on key j, positive exactly where visible
  Generator gen(55);
  for (const json& j : table()["cases"]) {
    const Call c = from_json(j);
    const int64_t D = c.Tk;
    std::vector<double> onehot(c.B * c.Hkv * c.Tk * D, 0.0);
    for (int64_t x = 0; x < c.B * c.Hkv; ++x)
      for (int64_t k = 0; k < c.Tk; ++k) onehot[(x * c.Tk + k) * D + k] = 1.0;
    const Tensor v = Tensor::from_vector(onehot, {c.B, c.Hkv, c.Tk, D}, DType::F64);
    const ag::Variable q(gen.normal({c.B, c.H, c.Tq, D}, 0, 1, DType::F64)), k(gen.normal({c.B, c.Hkv, c.Tk, D}, 0, 1, DType::F64));
    AttnTerms terms;
    if (c.cfg.logit == LogitKind::LogN) terms.logn_c = ag::Variable(Tensor::ones({c.H}, DType::F64));
    const std::vector<double> w = fused_attention(q, k, ag::Variable(v), c.cfg, terms).out.value().to_vector();
    for (int64_t row = 0; row < c.B * c.H * c.Tq; ++row) {
      std::vector<uint8_t> bits(c.Tk);
      for (int64_t k2 = 0; k2 < c.Tk; ++k2) bits[k2] = w[row * D + k2] > 0.0;
      ASSERT_EQ(hex_row(bits, 0, c.Tk), j["visible"][row].get<std::string>())
          << where(c, row / (c.H * c.Tq), row / c.Tq % c.H, row % c.Tq) << ": the fused op's weights";
    }
  }
}

TEST(Oracle, TableCoversEveryField) {
  std::map<std::string, int> n;
  for (const char* m : {"causal", "window", "scope", "heads"}) n[std::string("mask ") + m] = 0;
  for (int l = 0; l < static_cast<int>(LogitKind::Count); ++l) n[std::string("logit ") + name(static_cast<LogitKind>(l))] = 0;
  for (const json& j : table()["cases"]) {
    const Call c = from_json(j);
    const AttnConfig& g = c.cfg;
    const int64_t off = g.q_offset < 0 ? c.Tk - c.Tq : g.q_offset;
    n["mask " + j["mask"].get<std::string>()]++;
    n["logit " + std::string(name(g.logit))]++;
    n["GQA"] += c.H > c.Hkv;
    n["two sequences"] += c.B == 2;
    n["4 heads"] += c.H == 4;
    n["chunk"] += g.chunk > 0;
    n["sink_tokens"] += g.sink_tokens > 0;
    n["prefix"] += g.prefix > 0;
    n["min_distance"] += g.min_distance > 0;
    n["documents with position reset"] += g.documents && g.documents->position_reset();
    n["documents without position reset"] += g.documents && !g.documents->position_reset();
    n["documents with chunks"] += g.documents && g.chunk > 0;
    n["documents with sink tokens"] += g.documents && g.sink_tokens > 0;
    n["documents with a prefix"] += g.documents && g.prefix > 0;
    n["key_begin"] += g.key_begin > 0;
    n["key_end"] += g.key_end >= 0 && g.key_end < c.Tk;
    n["queries not last"] += off + c.Tq < c.Tk;
    n["Tq < Tk"] += c.Tq < c.Tk;
    n["key_position"] += g.key_position > 0;
    n["token positions"] += g.positions.defined();
    n["logn_position"] += g.logit == LogitKind::LogN && g.logn_position;
    n["logn by visible keys"] += g.logit == LogitKind::LogN && !g.logn_position;
    n["temperature with temp_c"] += g.logit == LogitKind::Temperature && g.temp_c != 0.0 && g.documents != nullptr;
    n["alibi"] += !g.alibi_slope.empty();
    n["qtemp"] += g.qtemp_alpha != 0.0;
  }
  for (const auto& [what, count] : n) EXPECT_GE(count, 8) << what;
}
