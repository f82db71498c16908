#include "data/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "data/bpe.h"
#include "data/hf_pipeline.h"
#include "data/unicode.h"

namespace hz::data {

namespace {

using json = nlohmann::json;
namespace uc = unicode;

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& path);

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> out;
    encode_into(text, out);
    return out;
  }
  std::vector<int32_t> encode_with_specials(const std::string& text) const override {
    std::vector<int32_t> out(prefix_);
    encode_into(text, out);
    out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
  }
  std::string decode(const std::vector<int32_t>& ids) const override { return decode_impl(ids, true); }
  std::string decode_with_specials(const std::vector<int32_t>& ids) const override { return decode_impl(ids, false); }
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  int32_t bos() const override { return bos_; }
  int32_t eos() const override { return eos_; }
  int32_t pad() const override { return pad_; }
  std::string id_to_token(int32_t id) const override {
    const std::string* t = token_of(id);
    HZ_CHECK(t != nullptr, ValueError, path_, ": no token has id ", id, " (ids run from 0 to ", vocab_size() - 1, ")");
    return *t;
  }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (const auto id = added_.id_of(std::string(token))) return id;
    return model_->token_to_id(token);
  }
  bool is_special(int32_t id) const override {
    const std::string* t = token_of(id);
    return t != nullptr && added_.is_special_content(*t);
  }
  std::vector<int32_t> special_ids() const override { return special_ids_; }
  std::string name() const override { return path_; }
  std::string fingerprint() const override { return fingerprint_; }

 private:
  void encode_into(std::string_view text, std::vector<int32_t>& out) const;
  const std::string* token_of(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(tokens_.size()) || !has_token_[static_cast<size_t>(id)]) return nullptr;
    return &tokens_[static_cast<size_t>(id)];
  }
  std::string decode_impl(const std::vector<int32_t>& ids, bool skip_special) const;
  void resolve_roles(const hf::JsonReader& rd, const std::string& config_path);

  std::string path_, fingerprint_;
  hf::Normalizers normalizers_;
  hf::PreTokenizers pre_;
  std::unique_ptr<BpeModel> model_;
  hf::Decoders decoders_;
  bool has_decoder_ = false;
  std::vector<int32_t> prefix_, suffix_;  // post-processor, single sequence

  hf::AddedVocabulary added_;

  std::vector<std::string> tokens_;  // id -> token (model vocab, then added tokens)
  std::vector<std::string> decode_form_;  // id -> the string decode() feeds the decoder
  std::vector<char> has_token_;
  std::vector<int32_t> special_ids_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1;
};

HfTokenizer::HfTokenizer(const std::string& path) : path_(path) {
  const json root = hf::parse_json_file(path);
  const hf::JsonReader rd{path};
  if (!root.is_object()) rd.fail("(top level)", "expected a JSON object (a tokenizer.json)");
  if (root.contains("version") && !(root["version"].is_string() && root["version"] == "1.0"))
    rd.fail("version", "unknown tokenizer.json version " + root["version"].dump() + " (Horizon reads version 1.0)");

  // model
  const json& m = rd.at(root, "model", "(top level)");
  if (!m.is_object()) rd.fail("model", "expected an object");
  const std::string mtype = m.contains("type") ? rd.str(m, "type", "model") : (m.contains("merges") ? "BPE" : "?");
  if (mtype != "BPE")
    rd.unsupported("model", "model " + mtype, "BPE models; give a SentencePiece .model file for Unigram models");
  if (m.contains("dropout") && !m["dropout"].is_null() && !m["dropout"].is_number())
    rd.fail("model.dropout", "expected a number or null");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    rd.fail("model.dropout", "BPE dropout " + m["dropout"].dump() + " makes encoding random; set it to null");
  BpeConfig cfg;
  const json& vocab = rd.at(m, "vocab", "model");
  if (!vocab.is_object()) rd.fail("model.vocab", "expected an object {token: id}");
  cfg.vocab.reserve(vocab.size());
  // Ids index the id -> token tables, so they are bounded by what the file holds: below
  // 2 x (vocabulary entries + added tokens) + 1024 (real files: dense, below entries + added).
  const size_t n_added = root.contains("added_tokens") && root["added_tokens"].is_array() ? root["added_tokens"].size() : 0;
  const int64_t id_bound =
      std::min<int64_t>(INT32_MAX, 2 * static_cast<int64_t>(vocab.size() + n_added) + 1024);
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    cfg.vocab.emplace(it.key(), rd.id(it.value(), "model.vocab." + it.key(), id_bound));
  const json& merges = rd.at(m, "merges", "model");
  if (!merges.is_array()) rd.fail("model.merges", "expected a list");
  cfg.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& x = merges[i];
    if (x.is_string()) {  // legacy "a b" (a "#version" line is skipped, as the library does)
      const std::string s = x.get<std::string>();
      if (s.rfind("#version", 0) == 0) continue;
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        rd.fail("model.merges[" + std::to_string(i) + "]", "'" + s + "' is not two tokens separated by one space");
      cfg.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
      cfg.merges.emplace_back(x[0].get<std::string>(), x[1].get<std::string>());
    } else {
      rd.fail("model.merges[" + std::to_string(i) + "]", "expected \"a b\" or [\"a\", \"b\"], got " + x.dump());
    }
  }
  cfg.unk_token = rd.opt_str(m, "unk_token", "model");
  cfg.continuing_subword_prefix = rd.opt_str(m, "continuing_subword_prefix", "model");
  cfg.end_of_word_suffix = rd.opt_str(m, "end_of_word_suffix", "model");
  cfg.fuse_unk = rd.flag(m, "fuse_unk", false, "model");
  cfg.byte_fallback = rd.flag(m, "byte_fallback", false, "model");
  cfg.ignore_merges = rd.flag(m, "ignore_merges", false, "model");
  model_ = std::make_unique<BpeModel>(std::move(cfg), path);

  // pipeline
  if (root.contains("normalizer")) normalizers_.read(rd, root["normalizer"], "normalizer");
  if (root.contains("pre_tokenizer")) pre_.read(rd, root["pre_tokenizer"], "pre_tokenizer");
  has_decoder_ = root.contains("decoder") && !root["decoder"].is_null();
  if (has_decoder_) decoders_.read(rd, root["decoder"], "decoder");

  // added tokens: ids as the library assigns them on load
  int64_t next_id = model_->size();
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const json& list = root["added_tokens"];
    if (!list.is_array()) rd.fail("added_tokens", "expected a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string p = "added_tokens[" + std::to_string(i) + "]";
      hf::AddedToken t;
      t.content = rd.str(list[i], "content", p);
      t.special = rd.flag(list[i], "special", false, p);
      t.single_word = rd.flag(list[i], "single_word", false, p);
      t.lstrip = rd.flag(list[i], "lstrip", false, p);
      t.rstrip = rd.flag(list[i], "rstrip", false, p);
      t.normalized = rd.flag(list[i], "normalized", !t.special, p);
      if (t.content.empty()) continue;
      if (uc::invalid_utf8_offset(t.content) != uc::npos) rd.fail(p + ".content", "is not valid UTF-8");
      if (const auto existing = added_.id_of(t.content)) {
        t.id = *existing;
      } else if (const auto mid = model_->token_to_id(t.content)) {
        t.id = *mid;
      } else {
        t.id = static_cast<int32_t>(next_id++);
      }
      bool unused = true;
      t.match = t.normalized && !normalizers_.empty() ? normalizers_.apply(t.content, unused) : t.content;
      added_.add(t);
    }
  }
  added_.build();

  // id -> token tables
  int32_t max_id = model_->max_id();
  for (const hf::AddedToken& t : added_.tokens()) max_id = std::max(max_id, t.id);
  tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  decode_form_ = tokens_;
  has_token_.assign(static_cast<size_t>(max_id + 1), 0);
  for (int32_t id = 0; id <= model_->max_id(); ++id)
    if (const std::string* tok = model_->id_to_token(id)) {
      tokens_[id] = decode_form_[id] = *tok;
      has_token_[id] = 1;
    }
  for (const hf::AddedToken& t : added_.tokens()) {
    tokens_[t.id] = t.content;
    decode_form_[t.id] = t.normalized ? t.match : t.content;
    has_token_[t.id] = 1;
  }
  for (int32_t id = 0; id <= max_id; ++id)
    if (has_token_[id] && added_.is_special_content(tokens_[id])) special_ids_.push_back(id);

  // post-processor (single sequence)
  std::function<void(const json&, const std::string&)> read_post = [&](const json& j, const std::string& p) {
    if (j.is_null()) return;
    const std::string t = rd.type(j, p);
    std::vector<int32_t> pre, suf;
    if (t == "Sequence") {
      const json& list = rd.at(j, "processors", p);
      for (size_t i = 0; i < list.size(); ++i) read_post(list[i], p + ".processors[" + std::to_string(i) + "]");
      return;
    } else if (t == "ByteLevel") {
      return;
    } else if (t == "TemplateProcessing") {
      const json& single = rd.at(j, "single", p);
      const json& specials = rd.at(j, "special_tokens", p);
      bool seen_a = false;
      for (size_t i = 0; i < single.size(); ++i) {
        const json& item = single[i];
        const std::string ip = p + ".single[" + std::to_string(i) + "]";
        if (item.contains("Sequence")) {
          if (rd.str(item["Sequence"], "id", ip + ".Sequence") != "A" || seen_a)
            rd.fail(ip, "a single-sequence template must hold the sequence $A exactly once");
          seen_a = true;
        } else if (item.contains("SpecialToken")) {
          const std::string name = rd.str(item["SpecialToken"], "id", ip + ".SpecialToken");
          if (!specials.contains(name)) rd.fail(p + ".special_tokens", "has no entry for '" + name + "'");
          const json& ids = rd.at(specials[name], "ids", p + ".special_tokens." + name);
          if (!ids.is_array()) rd.fail(p + ".special_tokens." + name + ".ids", "expected a list of token ids");
          for (const json& id : ids)
            (seen_a ? suf : pre).push_back(rd.id(id, p + ".special_tokens." + name + ".ids", static_cast<int64_t>(tokens_.size())));
        } else {
          rd.fail(ip, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        }
      }
      if (!seen_a) rd.fail(p + ".single", "the template has no $A");
    } else if (t == "RobertaProcessing" || t == "BertProcessing") {
      const json& cls = rd.at(j, "cls", p);
      const json& sep = rd.at(j, "sep", p);
      if (!cls.is_array() || cls.size() != 2 || !sep.is_array() || sep.size() != 2)
        rd.fail(p, "cls and sep must be [token, id] pairs");
      pre.push_back(rd.id(cls[1], p + ".cls[1]", static_cast<int64_t>(tokens_.size())));
      suf.push_back(rd.id(sep[1], p + ".sep[1]", static_cast<int64_t>(tokens_.size())));
    } else {
      rd.unsupported(p, "post-processor " + t,
                     "ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing and Sequence");
    }
    prefix_.insert(prefix_.begin(), pre.begin(), pre.end());
    suffix_.insert(suffix_.end(), suf.begin(), suf.end());
  };
  if (root.contains("post_processor")) read_post(root["post_processor"], "post_processor");
  for (int32_t id : prefix_) HZ_CHECK(token_of(id), ValueError, path, ": post_processor adds id ", id, ", which has no token");
  for (int32_t id : suffix_) HZ_CHECK(token_of(id), ValueError, path, ": post_processor adds id ", id, ", which has no token");

  const std::filesystem::path fp(path);
  const std::string config = fp.filename() == "tokenizer.json" ? (fp.parent_path() / "tokenizer_config.json").string() : "";
  resolve_roles(rd, config);
  fingerprint_ = "hf-bpe-" + file_fingerprint(path);
  if (!config.empty() && std::filesystem::exists(config)) fingerprint_ += "-" + file_fingerprint(config).substr(0, 8);
}

void HfTokenizer::resolve_roles(const hf::JsonReader& rd, const std::string& config_path) {
  const auto id_of = [&](const std::string& t) -> int32_t {
    const auto id = token_to_id(t);
    return id ? *id : -1;
  };
  if (!config_path.empty() && std::filesystem::exists(config_path)) {
    const json cfg = hf::parse_json_file(config_path);
    const hf::JsonReader crd{config_path};
    const auto role = [&](const char* key, int32_t& slot) {
      if (!cfg.is_object() || !cfg.contains(key) || cfg[key].is_null()) return;
      const json& v = cfg[key];
      const std::string name = v.is_object() ? crd.str(v, "content", key) : v.is_string() ? v.get<std::string>() : "";
      if (!v.is_object() && !v.is_string()) crd.fail(key, "expected a token string or {\"content\": ...}");
      slot = id_of(name);
      if (slot < 0) crd.fail(key, "'" + name + "' is not a token of " + path_);
    };
    role("bos_token", bos_);
    role("eos_token", eos_);
    role("pad_token", pad_);
  }
  const auto by_name = [&](std::initializer_list<const char*> names) -> int32_t {
    for (const char* n : names) {
      const int32_t id = id_of(n);
      if (id >= 0 && is_special(id)) return id;
    }
    return -1;
  };
  if (eos_ < 0) eos_ = by_name({"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>", "<|eot_id|>", "[SEP]"});
  if (bos_ < 0) bos_ = by_name({"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>", "[CLS]"});
  if (pad_ < 0) pad_ = by_name({"<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>"});
  if (eos_ < 0 && !suffix_.empty()) eos_ = suffix_.back();
  if (eos_ < 0 && special_ids_.size() == 1) eos_ = special_ids_[0];
  if (bos_ < 0 && !prefix_.empty()) bos_ = prefix_.front();
  if (eos_ < 0) eos_ = bos_;
  if (eos_ < 0)
    rd.fail("added_tokens", "no special token can serve as end-of-document (EOS): Horizon separates documents with "
                            "EOS. Add one when building the tokenizer (e.g. special_tokens=[\"<|endoftext|>\"]) or "
                            "name it as eos_token in a tokenizer_config.json next to tokenizer.json");
  if (bos_ < 0) bos_ = eos_;
  if (pad_ < 0) pad_ = eos_;
}

void HfTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  const size_t bad = uc::invalid_utf8_offset(text);
  HZ_CHECK(bad == uc::npos, ValueError, "text is not valid UTF-8 at byte ", bad, " (tokenizer ", path_,
           " works on Unicode text; re-encode the input as UTF-8)");
  std::vector<hf::AddedVocabulary::Piece> raw, norm;
  const bool byte_level = pre_.byte_level();
  const std::function<void(std::string_view)> word = [&](std::string_view w) { model_->encode_word(w, byte_level, out); };
  added_.split(text, false, raw);
  for (const auto& p : raw) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    bool at_origin = p.b == 0;
    std::string_view s = text.substr(p.b, p.e - p.b);
    std::string buf;
    if (!normalizers_.empty()) {
      buf = normalizers_.apply(s, at_origin);
      s = buf;
    }
    added_.split(s, true, norm);
    for (const auto& q : norm) {
      if (q.id >= 0) out.push_back(q.id);
      else pre_.split(s.substr(q.b, q.e - q.b), at_origin && q.b == 0, word);
    }
  }
}

std::string HfTokenizer::decode_impl(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> toks;
  std::vector<char> literal;
  toks.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    const std::string* t = token_of(id);
    HZ_CHECK(t != nullptr, ValueError, path_, ": id ", id, " at position ", i, " is not a token (the vocabulary is [0, ",
             vocab_size(), ")); were these ids made by another tokenizer?");
    if (skip_special && added_.is_special_content(*t)) continue;
    toks.push_back(decode_form_[static_cast<size_t>(id)]);
    literal.push_back(model_->id_to_token(id) == nullptr);
  }
  if (!has_decoder_) {
    std::string s;
    for (size_t i = 0; i < toks.size(); ++i) s += (i ? " " : "") + toks[i];
    return s;
  }
  return decoders_.decode(std::move(toks), literal);
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  try {
    return std::make_unique<HfTokenizer>(path);
  } catch (const nlohmann::json::exception& e) {  // a value of the wrong JSON type somewhere
    throw ValueError(detail::concat_msg(path, ": malformed tokenizer.json (", e.what(), ")"));
  }
}

}  // namespace hz::data
