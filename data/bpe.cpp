#include "data/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "data/unicode.h"

namespace hz::data {

namespace {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A fast 64-bit hash of short byte strings (words of a few bytes), 8 bytes per step.
inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t k;
    std::memcpy(&k, p, 8);
    h = mix64(h ^ k);
    p += 8;
    n -= 8;
  }
  uint64_t k = 0;
  std::memcpy(&k, p, n);
  return mix64(h ^ k ^ 0x1234567ull);
}

// Word -> ids, open addressing, keys and values in two arenas (no allocation per entry). When it
// holds kMaxEntries words it starts over: the cache only saves time, never changes a result.
class WordCache {
 public:
  static constexpr size_t kMaxEntries = size_t(1) << 17;

  bool find(std::string_view key, uint64_t h, std::vector<int32_t>& out) const {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return false;
      if (s.hash == h && s.key_len == key.size() && std::memcmp(keys_.data() + s.key_off, key.data(), key.size()) == 0) {
        out.insert(out.end(), vals_.begin() + s.val_off, vals_.begin() + s.val_off + s.val_len);
        return true;
      }
    }
  }

  void insert(std::string_view key, uint64_t h, const int32_t* ids, size_t n) {
    if (count_ >= kMaxEntries || keys_.size() > (size_t(32) << 20)) clear();
    if (2 * (count_ + 1) > slots_.size()) grow();
    Slot s{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()),
           static_cast<uint32_t>(vals_.size()), static_cast<uint32_t>(n)};
    keys_.append(key.data(), key.size());
    vals_.insert(vals_.end(), ids, ids + n);
    place(s);
    ++count_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty (stored hashes are never 0)
    uint32_t key_off = 0, key_len = 0, val_off = 0, val_len = 0;
  };
  void place(const Slot& s) {
    size_t i = s.hash & mask_;
    while (slots_[i].hash != 0) i = (i + 1) & mask_;
    slots_[i] = s;
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const Slot& s : old)
      if (s.hash != 0) place(s);
  }
  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    vals_.clear();
    count_ = 0;
  }
  std::vector<Slot> slots_ = std::vector<Slot>(1 << 12);
  size_t mask_ = (1 << 12) - 1;
  std::string keys_;
  std::vector<int32_t> vals_;
  size_t count_ = 0;
};

// The calling thread's cache for model `id`: a few models per thread, least recently used replaced
// (ids are never reused, so a cache never serves a model it was not filled by).
WordCache& thread_cache(uint64_t id) {
  struct Entry {
    uint64_t id = 0;
    uint64_t used = 0;
    std::unique_ptr<WordCache> cache;
  };
  thread_local Entry entries[4];
  thread_local uint64_t clock = 0;
  ++clock;
  Entry* victim = &entries[0];
  for (Entry& e : entries) {
    if (e.cache && e.id == id) {
      e.used = clock;
      return *e.cache;
    }
    if (!e.cache || e.used < victim->used) victim = &e;
  }
  victim->id = id;
  victim->used = clock;
  victim->cache = std::make_unique<WordCache>();
  return *victim->cache;
}

std::atomic<uint64_t> g_next_model_id{1};
constexpr size_t kMaxCachedWord = 256;  // bytes; longer words are rare and rarely repeat

}  // namespace

// (a, b) -> (rank, merged id), open addressing on the 64-bit pair key.
struct BpeModel::PairMap {
  struct Slot {
    uint64_t key = 0;  // (a << 32 | b) + 1; 0: empty
    uint32_t rank = 0;
    int32_t id = 0;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;

  explicit PairMap(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 2) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t key(int32_t a, int32_t b) {
    return ((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b)) + 1;
  }
  void put(int32_t a, int32_t b, uint32_t rank, int32_t id) {  // a later merge of the same pair wins, as in the library
    const uint64_t k = key(a, b);
    for (uint64_t i = mix64(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == 0 || slots[i].key == k) {
        slots[i] = {k, rank, id};
        return;
      }
    }
  }
  const Slot* find(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (uint64_t i = mix64(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == 0) return nullptr;
    }
  }
};

BpeModel::BpeModel(BpeConfig cfg, const std::string& where)
    : vocab_(std::move(cfg.vocab)),
      unk_(std::move(cfg.unk_token)),
      prefix_(std::move(cfg.continuing_subword_prefix)),
      suffix_(std::move(cfg.end_of_word_suffix)),
      fuse_unk_(cfg.fuse_unk),
      byte_fallback_(cfg.byte_fallback),
      ignore_merges_(cfg.ignore_merges),
      cache_id_(g_next_model_id.fetch_add(1)) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab_) {
    HZ_CHECK(id >= 0, ValueError, where, ": model.vocab gives token '", tok, "' the negative id ", id);
    max_id = std::max(max_id, id);
  }
  // the id -> token table is sized by the largest id: keep it proportional to the vocabulary
  const int64_t bound = 2 * static_cast<int64_t>(vocab_.size()) + 1024;
  HZ_CHECK(max_id < bound, ValueError, where, ": model.vocab holds ", vocab_.size(), " tokens but an id of ", max_id,
           "; ids must stay below ", bound, " (2 x entries + 1024)");
  vocab_r_.resize(static_cast<size_t>(max_id + 1));
  has_id_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [tok, id] : vocab_) {
    vocab_r_[static_cast<size_t>(id)] = tok;
    has_id_[static_cast<size_t>(id)] = 1;
  }
  if (unk_)
    HZ_CHECK(vocab_.count(*unk_), ValueError, where, ": model.unk_token '", *unk_, "' is not in model.vocab");
  merges_ = std::make_unique<PairMap>(cfg.merges.size());
  const size_t plen = prefix_ ? prefix_->size() : 0;
  for (size_t r = 0; r < cfg.merges.size(); ++r) {
    const auto& [a, b] = cfg.merges[r];
    const auto ia = vocab_.find(a), ib = vocab_.find(b);
    HZ_CHECK(ia != vocab_.end(), ValueError, where, ": merge ", r, " ('", a, "' '", b, "'): '", a,
             "' is not in model.vocab; the file is inconsistent");
    HZ_CHECK(ib != vocab_.end(), ValueError, where, ": merge ", r, " ('", a, "' '", b, "'): '", b,
             "' is not in model.vocab; the file is inconsistent");
    HZ_CHECK(b.size() >= plen, ValueError, where, ": merge ", r, ": '", b, "' is shorter than continuing_subword_prefix");
    const std::string merged = a + b.substr(plen);
    const auto im = vocab_.find(merged);
    HZ_CHECK(im != vocab_.end(), ValueError, where, ": merge ", r, " ('", a, "' '", b, "') makes '", merged,
             "', which is not in model.vocab; the file is inconsistent");
    merges_->put(ia->second, ib->second, static_cast<uint32_t>(r), im->second);
  }
  const auto& b2c = unicode::byte_to_codepoint();
  bool all = true;
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    unicode::append_utf8(ch, b2c[b]);
    const auto it = vocab_.find(ch);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
    all = all && it != vocab_.end();
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    const auto f = vocab_.find(hex);
    fallback_ids_[b] = f == vocab_.end() ? -1 : f->second;
  }
  fast_bytes_ = all && !prefix_ && !suffix_;
}

BpeModel::~BpeModel() = default;

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_r_.size() || !has_id_[static_cast<size_t>(id)]) return nullptr;
  return &vocab_r_[static_cast<size_t>(id)];
}

void BpeModel::encode_word(std::string_view word, bool byte_level, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() > kMaxCachedWord) {
    encode_uncached(word, byte_level, out);
    return;
  }
  WordCache& cache = thread_cache(cache_id_);
  const uint64_t h = hash_bytes(word.data(), word.size()) | 1;
  if (cache.find(word, h, out)) return;
  const size_t before = out.size();
  encode_uncached(word, byte_level, out);
  cache.insert(word, h, out.data() + before, out.size() - before);
}

void BpeModel::encode_uncached(std::string_view word, bool byte_level, std::vector<int32_t>& out) const {
  thread_local std::vector<int32_t> ids;
  thread_local std::string mapped;
  ids.clear();
  std::string_view text = word;  // what the model sees: the ByteLevel characters for byte-level words
  if (byte_level && (!fast_bytes_ || ignore_merges_)) {
    mapped.clear();
    const auto& b2c = unicode::byte_to_codepoint();
    for (unsigned char b : word) unicode::append_utf8(mapped, b2c[b]);
    text = mapped;
  }
  if (ignore_merges_) {
    const auto it = vocab_.find(std::string(text));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (byte_level && fast_bytes_) {
    for (unsigned char b : word) ids.push_back(byte_ids_[b]);
  } else {
    int32_t unk_id = -1;  // a pending unknown (fused with the next when fuse_unk)
    const int32_t unk = unk_ ? vocab_.at(*unk_) : -1;
    std::string s;
    for (size_t i = 0; i < text.size();) {
      const size_t start = i;
      i += unicode::sequence_length(static_cast<unsigned char>(text[i]));
      s.assign(text.data() + start, i - start);
      if (start > 0 && prefix_) s.insert(0, *prefix_);
      if (i == text.size() && suffix_) s += *suffix_;
      const auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        if (unk_id >= 0) ids.push_back(unk_id);
        unk_id = -1;
        ids.push_back(it->second);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char b : s) all = all && fallback_ids_[b] >= 0;
        if (all) {  // as the library: a pending unknown stays pending across byte tokens
          for (unsigned char b : s) ids.push_back(fallback_ids_[b]);
          continue;
        }
      }
      if (unk >= 0) {
        if (unk_id >= 0 && !fuse_unk_) ids.push_back(unk_id);
        unk_id = unk;
      }
    }
    if (unk_id >= 0) ids.push_back(unk_id);
  }
  merge_symbols(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::merge_symbols(std::vector<int32_t>& ids) const {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  struct Symbol {
    int32_t c;
    int prev, next;
    bool alive;
  };
  struct Merge {
    uint32_t rank;
    int pos;
    int32_t new_id;
  };
  // min-heap on (rank, pos)
  const auto later = [](const Merge& a, const Merge& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Merge> heap;
  sym.resize(static_cast<size_t>(n));
  heap.clear();
  for (int i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  for (int i = 0; i + 1 < n; ++i)
    if (const PairMap::Slot* m = merges_->find(ids[i], ids[i + 1])) heap.push_back({m->rank, i, m->id});
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Merge top = heap.back();
    heap.pop_back();
    Symbol& cur = sym[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const Symbol right = sym[cur.next];
    const PairMap::Slot* m = merges_->find(cur.c, right.c);
    if (m == nullptr || m->id != top.new_id) continue;  // a stale entry
    sym[cur.next].alive = false;
    cur.c = top.new_id;
    cur.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const PairMap::Slot* p = merges_->find(sym[cur.prev].c, cur.c)) {
        heap.push_back({p->rank, cur.prev, p->id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
    if (cur.next >= 0) {
      if (const PairMap::Slot* q = merges_->find(cur.c, sym[cur.next].c)) {
        heap.push_back({q->rank, top.pos, q->id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
  }
  ids.clear();
  for (int i = 0; i < n; ++i)
    if (sym[i].alive) ids.push_back(sym[i].c);
}

}  // namespace hz::data
