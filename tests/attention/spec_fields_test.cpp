// The field table of an attention layer kind (attention/spec_fields.h): one row per member of the spec's
// structs, each row's stock-export words where it is refused, and describe()'s toggles read from it.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "attention/spec_fields.h"

using namespace hz;
using namespace hz::attn;

namespace {

// The number of members of an aggregate: the most initialisers T{...} takes, each an object that converts
// to a reference of any type (so a member that is itself an aggregate takes one, without brace elision).
struct AnyMember {
  template <class T>
  operator T&() const;  // unevaluated only
};
template <class T, class... A>
constexpr auto takes(int) -> decltype(T{std::declval<A>()...}, true) {
  return true;
}
template <class T, class... A>
constexpr bool takes(...) {
  return false;
}
template <class T, class... A>
constexpr int members() {
  if constexpr (takes<T, A..., AnyMember>(0)) return members<T, A..., AnyMember>();
  else return static_cast<int>(sizeof...(A));
}

struct Rows {
  std::vector<std::string> names;
  std::vector<SpecField> fields;
  template <class T>
  void operator()(const std::string& p, T&, const SpecField& f) {
    names.push_back(p.substr(p.rfind('.') + 1));
    fields.push_back(f);
  }
  template <class E, class P, class N>
  void enumeration(const std::string& p, E&, const SpecField& f, P, N) {
    names.push_back(p.substr(p.rfind('.') + 1));
    fields.push_back(f);
  }
};

Rows rows() {
  Rows r;
  AttentionSpec s;
  visit_spec_fields("k", s, r);
  return r;
}

}  // namespace

TEST(SpecFields, OneRowPerMemberOfTheSpec) {
  // the counting itself, on structs of known shape
  struct Three {
    int a;
    std::vector<double> b;
    PositionSpec c;
  };
  static_assert(members<Three>() == 3);
  // AttentionSpec's members pos, mask and logit are the three structs, counted member by member
  const int n = members<PositionSpec>() + members<MaskSpec>() + members<LogitSpec>() + members<AttentionSpec>() - 3;
  EXPECT_EQ(static_cast<int>(rows().names.size()), n - kSpecMembersNotFields)
      << "a member of PositionSpec / MaskSpec / LogitSpec / AttentionSpec without a row in attention/spec_fields.h "
         "(or a row too many)";
}

TEST(SpecFields, EveryRowSaysWhatStockArchitecturesDoWithIt) {
  const Rows r = rows();
  const std::set<std::string> names(r.names.begin(), r.names.end());
  EXPECT_EQ(names.size(), r.names.size()) << "two rows share a name";
  for (size_t i = 0; i < r.fields.size(); ++i) {
    const SpecField& f = r.fields[i];
    SCOPED_TRACE(r.names[i]);
    switch (f.stock) {
      case Stock::Refused: {
        ASSERT_TRUE(f.refusal || f.value_refusals);
        const std::string words = f.refusal ? f.refusal : "";
        if (f.refusal) {
          EXPECT_NE(words.find(": "), std::string::npos) << "words are '<what>: <why>'";
        }
        break;
      }
      case Stock::Via: ASSERT_TRUE(f.via); EXPECT_TRUE(names.count(f.via)) << f.via; break;
      case Stock::Expressed: EXPECT_FALSE(f.refusal || f.value_refusals || f.via); break;
    }
  }
}

// describe()'s output is quoted by reports and docs (docs/study/): the toggles it reads from the table
// print exactly as they did when it named them by hand.
TEST(SpecFields, DescribeShowsTheToggles) {
  AttentionSpec s;
  EXPECT_EQ(s.describe(), "rope(base=10000) causal identity");
  s.mask.kind = MaskKind::Window;
  s.mask.window = 128;
  s.mask.sink_tokens = 4;
  EXPECT_EQ(s.describe(), "rope(base=10000) window(128) sink_tokens(4) identity");
  s.mask.chunk = 64;
  s.mask.prefix = 8;
  s.qk_norm = QKNorm::PerHead;
  s.gate = OutputGate::Element;
  s.sink = true;
  s.forget = true;
  s.forget_bias = 2.5;
  s.logit.qtemp_alpha = 0.1;
  s.logit.qtemp_beta = 64;
  EXPECT_EQ(s.describe(),
            "rope(base=10000) window(128) chunk(64) sink_tokens(4) prefix(8) identity qtemp(alpha=0.1, beta=64) "
            "qk_norm=per_head gate=element sink fox(b=2.5)");
  s.forget = false;
  s.diff = true;
  s.qk_norm = QKNorm::Full;
  s.pos.kind = PosKind::None;
  EXPECT_EQ(s.describe(),
            "none window(128) chunk(64) sink_tokens(4) prefix(8) identity qtemp(alpha=0.1, beta=64) qk_norm=full "
            "gate=element sink diff");
  s.forget = true;
  s.forget_bias = 0;
  s.sink = false;
  s.gate = OutputGate::None;
  s.mask = MaskSpec{};
  EXPECT_EQ(s.describe(), "none causal identity qtemp(alpha=0.1, beta=64) qk_norm=full fox(b=0) diff");
}
