#include "data/sp_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "data/unicode.h"

namespace hz::data {

namespace {

constexpr uintmax_t kMaxModelBytes = 256ull << 20;

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    // a regular file (core/file.h) before libsentencepiece opens it: a FIFO would keep it waiting
    const std::string why = input_problem(path);
    HZ_CHECK(why.rfind("cannot open", 0) != 0, ValueError, "cannot open SentencePiece model '", path, "'",
             std::filesystem::path(path).is_relative() ? " (relative to " + std::filesystem::current_path().string() + ")" : "",
             "; give data.tokenizer as byte, a path to a tokenizer.json or to a SentencePiece .model");
    HZ_CHECK(why.empty(), ValueError, "SentencePiece model '", path, "': ", why);
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    HZ_CHECK(!ec && bytes <= kMaxModelBytes, ValueError, path, ": the file holds ", ec ? 0 : bytes,
             " bytes; a SentencePiece .model must hold at most ", kMaxModelBytes,
             " (real ones: a few MB); refused as corrupt or not a .model");
    sentencepiece::util::Status st;
    try {
      st = sp_.Load(path);
    } catch (const std::exception& e) {  // libsentencepiece's own parsers throw (e.g. darts-clone's)
      throw ValueError(detail::concat_msg("'", path, "' is not a SentencePiece model that libsentencepiece can load: ",
                                          e.what()));
    }
    HZ_CHECK(st.ok(), ValueError, "'", path, "' is not a SentencePiece model that libsentencepiece can load: ",
             st.ToString());
    const int n = sp_.GetPieceSize();
    for (int id = 0; id < n; ++id)
      if (sp_.IsControl(id)) specials_.push_back(id);
    bos_ = sp_.bos_id();
    eos_ = sp_.eos_id();
    pad_ = sp_.pad_id();
    if (eos_ < 0) eos_ = bos_;
    HZ_CHECK(eos_ >= 0, ValueError, "SentencePiece model '", path,
             "' has neither an EOS nor a BOS piece; Horizon separates documents with EOS: train it with eos_id >= 0");
    if (bos_ < 0) bos_ = eos_;
    if (pad_ < 0) pad_ = eos_;
    fingerprint_ = "sentencepiece-" + file_fingerprint(path);
  }

  std::vector<int32_t> encode(const std::string& text) const override {
    check_utf8(text);
    std::vector<int> ids;
    const auto st = sp_.Encode(text, &ids);
    HZ_CHECK(st.ok(), ValueError, path_, ": SentencePiece could not encode the text: ", st.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  std::vector<int32_t> encode_with_specials(const std::string& text) const override {
    std::vector<int32_t> ids = encode(text);
    if (sp_.bos_id() >= 0) ids.insert(ids.begin(), sp_.bos_id());
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override { return decode_impl(ids, true); }
  std::string decode_with_specials(const std::vector<int32_t>& ids) const override { return decode_impl(ids, false); }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  int32_t bos() const override { return bos_; }
  int32_t eos() const override { return eos_; }
  int32_t pad() const override { return pad_; }
  std::string id_to_token(int32_t id) const override {
    check_id(id, 0);
    return sp_.IdToPiece(id);
  }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const int id = sp_.PieceToId(token);
    if (id < 0 || (id == sp_.unk_id() && sp_.IdToPiece(id) != token)) return std::nullopt;  // unknown piece -> unk id
    return id;
  }
  bool is_special(int32_t id) const override { return id >= 0 && id < sp_.GetPieceSize() && sp_.IsControl(id); }
  std::vector<int32_t> special_ids() const override { return specials_; }
  std::string name() const override { return path_; }
  std::string fingerprint() const override { return fingerprint_; }

 private:
  void check_utf8(const std::string& text) const {
    const size_t bad = unicode::invalid_utf8_offset(text);
    HZ_CHECK(bad == unicode::npos, ValueError, "text is not valid UTF-8 at byte ", bad, " (tokenizer ", path_,
             " works on Unicode text; re-encode the input as UTF-8)");
  }
  void check_id(int32_t id, size_t pos) const {
    HZ_CHECK(id >= 0 && id < sp_.GetPieceSize(), ValueError, path_, ": id ", id, " at position ", pos,
             " is outside the vocabulary [0, ", sp_.GetPieceSize(), "); were these ids made by another tokenizer?");
  }
  std::string decode_impl(const std::vector<int32_t>& ids, bool skip_special) const {
    std::vector<int> v(ids.begin(), ids.end());
    for (size_t i = 0; i < v.size(); ++i) check_id(v[i], i);
    // per-piece surfaces: the library's own text, split by the piece each part comes from
    const sentencepiece::ImmutableSentencePieceText spt = sp_.DecodeIdsAsImmutableProto(v);
    HZ_CHECK(spt.pieces_size() == v.size(), Error, path_, ": SentencePiece decoded ", v.size(), " ids into ",
             spt.pieces_size(), " pieces");
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
      const int id = v[i];
      if (sp_.IsByte(id)) {
        const std::string& piece = sp_.IdToPiece(id);  // "<0xXX>"
        out.push_back(static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
      } else if (sp_.IsControl(id)) {
        if (!skip_special) out += sp_.IdToPiece(id);
      } else {
        out += spt.pieces(static_cast<int>(i)).surface();
      }
    }
    return out;
  }

  std::string path_, fingerprint_;
  sentencepiece::SentencePieceProcessor sp_;
  std::vector<int32_t> specials_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace hz::data
