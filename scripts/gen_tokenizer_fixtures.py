#!/usr/bin/env python3
"""Regenerates the tokenizer and corpus fixtures of tests/data/fixtures/ (committed; the build and
the tests never run this script).

    PY=$(scripts/venv.sh); HZ_VENV=/work/venv "$PY" scripts/gen_tokenizer_fixtures.py

What it writes, all from the King James Bible (assets/kjv/kjv.txt.gz, Horizon's embedded corpus)
plus a few multilingual sentences, with the reference libraries from PyPI (`tokenizers`,
`sentencepiece`):

  tokenizers/<style>/tokenizer.json   byte-level BPE tokenizers trained with `tokenizers`, one per
                                      pipeline layout Horizon reads (see STYLES below)
  tokenizers/llama3_style/tokenizer_config.json   bos/eos/pad roles the way transformers saves them
  tokenizers/spm_bpe.model, spm_unigram.model     SentencePiece models trained with `sentencepiece`
  tokenizers/cases.json               held-out texts (Unicode, digits, whitespace runs, contractions,
                                      special tokens in the text, empty input, random strings) and,
                                      per tokenizer, the reference ids with and without the
                                      post-processor's specials and the reference decodes
  corpus/docs.jsonl                   a small JSONL corpus ({"id": .., "text": ..} per line)
  corpus/gpt2_style.llmc.bin          its documents as ids of gpt2_style in llm.c's GPT-2 format
                                      (256 int32 header: magic 20240520, version 1, token count;
                                      uint16 tokens; <|endoftext|> before every document)
  corpus/llama3_style.llmc.bin        ids of llama3_style in llm.c's Llama 3 format (magic 20240801,
                                      version 7, uint32 tokens; <|begin_of_text|> before every document)
  corpus/gpt2_style.nanogpt.bin       nanoGPT's format: raw uint16 ids, <|endoftext|> after every document
  corpus/expected.json                the ids of each corpus document per tokenizer

A larger random sample (not committed) checks more of Unicode against the same fixtures:

    "$PY" scripts/gen_tokenizer_fixtures.py --fuzz 20000 /tmp/cases.json
    HZ_TOKENIZER_CASES=/tmp/cases.json build/hz_test_data --gtest_filter='Fixtures*'

Random code points are drawn from every plane except unassigned ones (Python's Unicode 14 tables:
Debian 12's PCRE2 knows Unicode 14 while the library's Oniguruma knows 16, so characters assigned
since then may be split differently), and texts are dropped where the library's own older tables
(its NFC / NFKC / StripAccents and Punctuation use Unicode 9-era crates) disagree with Python's
unicodedata, which is what utf8proc follows.
"""
import gzip
import json
import os
import random
import struct
import sys

import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "fixtures")
TOK_DIR = os.path.join(OUT, "tokenizers")
CORPUS_DIR = os.path.join(OUT, "corpus")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


KJV_GZ = os.path.join(ROOT, "assets", "kjv", "kjv.txt.gz")
_kjv_books = {}


def bible_book(name):
    """The book's verses joined by '\n', as Horizon's load_bible_kjv() returns it: read from
    assets/kjv/kjv.txt.gz ("## <name>" header lines, then one verse per line; assets/kjv/README.md)."""
    if not _kjv_books:
        with gzip.open(KJV_GZ, "rb") as f:
            lines = f.read().decode("utf-8").split("\n")[:-1]
        for line in lines:
            if line.startswith("## "):
                verses = _kjv_books.setdefault(line[3:], [])
            else:
                verses.append(line)
    return "\n".join(_kjv_books[name])


MULTILINGUAL = [
    "Au commencement, Dieu créa les cieux et la terre. L'été, où ça? Ça coûte 12,50 €.",
    "Im Anfang schuf Gott Himmel und Erde. Größe, Straße, Äpfel und Öl für 3½ Mark.",
    "Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν. Σίσυφος ΣΊΣΥΦΟΣ.",
    "В начале сотворил Бог небо и землю. Привет, как дела? Ёлка 2024 года.",
    "起初，神创造天地。地是空虚混沌，渊面黑暗。日本語のテキスト、カタカナとひらがな。",
    "בְּרֵאשִׁית בָּרָא אֱלֹהִים. في البدء خلق الله السماوات والأرض. 한국어 문장입니다.",
    "Emoji 😀😃 👍🏽 👨‍👩‍👧‍👦 🇫🇷 and symbols ∑∫√ ≠ ≤ → ★ ♥ © ® ™ ½ ¾ ² ³.",
    "Code: def f(x): return x**2 + 1  # comment\n\tif (a && b) { c += 1; }\r\n",
    "Numbers 3.14159, 1,000,000 and 42; phone +1 (555) 123-4567; version v2.10.3-rc1.",
]

# Held-out texts: the tokenizers must agree with the reference library on each of them.
CRAFTED = [
    "",
    " ",
    "a",
    "  ",
    "\n",
    "\n\n\n",
    "\t\t x",
    "Hello world",
    " Hello world",
    "Hello  world   with   runs    of     spaces",
    "trailing spaces   ",
    "   leading spaces",
    "line one\nline two\r\nline three\rend",
    "tabs\tand\t\tmixed \t \n whitespace \n\n  \t",
    "don't can't won't I'm you're they've we'll he'd it's",
    "DON'T CAN'T I'M YOU'RE THEY'VE WE'LL HE'D IT'S",
    "O'Neil's rock'n'roll 'quoted' ''double'' 'tis y'all",
    "curly apostrophes: don’t it’s ‘quoted’ “double”",
    "0 1 12 123 1234 12345 123456 1234567890",
    "3.14159 2,718 1e10 -42 +7 0x1F 007 ½ ² ٣٤٥ १२३",
    "In the year 1611, 66 books; verse 3:16.",
    "café cafe\u0301 naïve nai\u0308ve Ångström A\u030angstro\u0308m ﬁne ﬀ Ⅷ ①",
    "Ἐν ἀρχῇ ἦν ὁ λόγος ΣΊΣΥΦΟΣ",
    "Привет мир! Ёжик",
    "中文字符和日本語のテキスト한국어",
    "مرحبا بالعالم שלום עולם",
    "emoji 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇩🇪 ✝️",
    "nbsp\u00a0here, ideographic\u3000space, thin\u2009space, nel\u0085here",
    "line\u2028separator\u2029paragraph, zwsp\u200bhere, bom\ufeffhere, mvs\u180ehere",
    "nul\x00byte and \x01\x02\x1f controls \x7f del",
    "<|endoftext|>",
    "<|endoftext|><|endoftext|>",
    "In the beginning<|endoftext|>God created",
    "word<|endoftext|>word",
    " <|endoftext|> spaced ",
    "<|endoftext",
    "<|begin_of_text|>Hello<|end_of_text|>",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant",
    "the <mask> token and  <mask>  with spaces",
    "the Lord God said, The LORD GOD; lord god",
    "amen amen, Amen. amend amenity samen amen",
    "JESUS Jesus jesus",
    "<s>hello</s> <pad> <unk>",
    "https://example.com/path?q=1&b=two#frag user@example.org",
    "    def f(x):\n        return x  # four-space indent\n",
    "a" * 300,
    "abc" * 100,
    " " * 257,
    "\n" * 40 + "x",
    "word " * 60,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "!!!???...,,,;;;:::---___***&&&%%%$$$###@@@",
    "((([[[{{{}}}]]])))<<<>>>",
    "x\u0301\u0302\u0303 combining on x",
    "\u0451\u043b\u043a\u0430 \u0435\u0308\u043b\u043a\u0430 \u0401\u043b\u043a\u0430",
    "it'\u017f and 'K' and I'M and '\u017f 'S \u212a's",
]

FUZZ_PIECES = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    + list(" \t\n\r.,;:!?'\"-_()[]{}<>/\\|@#$%^&*+=~`")
    + [" ", "  ", "   ", "\n\n", "\r\n", " \n", "'s", "'S", "'ll", "'ve", "n't", "'re", "'d", "'m"]
    + ["the", " the", " LORD", " God", " and", "And", " unto", " thee", " thou", "eth", "ing", " shall"]
    + ["é", "e\u0301", "ß", "Σ", "σ", "ς", "λόγος", "мир", "中", "日本", "한", "ש", "ع", "😀", "👍🏽", "‍", "🇫🇷"]
    + ["\u00a0", "\u3000", "\u2009", "\u0085", "\u2028", "\u200b", "\ufeff", "\u180e", "\x0b", "\x0c", "\x00"]
    + ["½", "²", "٣", "१", "Ⅷ", "①", "ﬁ", "ſ", "K", "İ", "ǅ"]
    + ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<mask>",
       "<|endoftext", "<|", "|>", "<s>", "</s>", "Lord God", "amen", "Jesus", "JESUS"]
)


def fuzz_texts(n, seed=20240520):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        out.append("".join(rng.choice(FUZZ_PIECES) for _ in range(k)))
    return out


def train_corpus():
    books = ["Genesis", "Exodus", "Matthew", "Ruth", "Jonah"]
    texts = [bible_book(b) for b in books]
    return texts + MULTILINGUAL * 20


def heldout_bible():
    return [bible_book("Psalms")[:1500], bible_book("John")[:1500], bible_book("Revelation")[-1000:]]


def byte_level_trainer(vocab, specials):
    return trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=specials,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)


def gpt2_style(corpus):
    """GPT-2 layout: ByteLevel pre-tokenizer with its built-in regex, no prefix space, ByteLevel
    decoder and post-processor, one special <|endoftext|>; merges written in the legacy "a b" form."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(corpus, byte_level_trainer(1000, ["<|endoftext|>"]))
    return tok


def llama3_style(corpus):
    """Llama 3 layout: Split with the Llama 3 regex + ByteLevel without regex, ignore_merges, a
    TemplateProcessing post-processor adding <|begin_of_text|>, merges as [a, b] arrays."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|eot_id|>"]
    tok.train_from_iterator(corpus, byte_level_trainer(1100, specials))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))]),
    ])
    return tok


def qwen2_style(corpus):
    """Qwen2 layout: NFC normalizer, Split with the Qwen2 regex (single digits) + ByteLevel, and added
    tokens of every kind: special and not, normalized and not, lstrip/rstrip, single_word."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(corpus, byte_level_trainer(900, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False, special=True)])
    tok.add_tokens([
        AddedToken("Lord God", normalized=True, special=False),
        AddedToken("amen", single_word=True, normalized=True, special=False),
        AddedToken("\u0435\u0308\u043b\u043a\u0430", normalized=True, special=False),  # matched as its NFC form "ёлка"
    ])
    return tok


def roberta_style(corpus):
    """RoBERTa-like layout: Lowercase + NFKC normalizers, Digits (individual) then ByteLevel with a
    prefix space, RobertaProcessing (<s> A </s>), a lowercase-normalized added token."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, byte_level_trainer(800, ["<s>", "<pad>", "</s>", "<unk>"]))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")), True, True)
    tok.add_tokens([AddedToken("Jesus", normalized=True, special=False)])  # matched as "jesus"
    return tok


def llama2_style(corpus):
    """Llama 2 / Mistral tokenizer.json layout (not byte-level): Prepend + Replace normalizers,
    no pre-tokenizer, BPE with byte_fallback and a fused <unk>, Replace/ByteFallback/Fuse/Strip
    decoders, TemplateProcessing adding <s>. The <0xXX> byte tokens sit in the model vocabulary."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    # English text only: every other character goes through byte_fallback
    tok.train_from_iterator([t for t in corpus if t not in MULTILINGUAL], trainer)
    # put the 256 byte tokens right after the specials, as Llama 2 does, and keep the rest in order
    js = json.loads(tok.to_str())
    old = js["model"]["vocab"]
    order = sorted(old.items(), key=lambda kv: kv[1])
    vocab = {}
    for name, _ in order[:3]:
        vocab[name] = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for name, _ in order[3:]:
        if name not in vocab:
            vocab[name] = len(vocab)
    js["model"]["vocab"] = vocab
    for t in js["added_tokens"]:
        t["id"] = vocab[t["content"]]
    tok = Tokenizer.from_str(json.dumps(js))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def metaspace_style(corpus):
    """Newer Llama / Mistral layout (not byte-level): NFD + StripAccents normalizers, a Metaspace
    pre-tokenizer (prepend_scheme "first", split), BPE with byte_fallback, Metaspace + ByteFallback
    + Fuse decoders."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="first"),
                                     decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=[f"<0x{b:02X}>" for b in range(256)], show_progress=False)
    tok.train_from_iterator([t for t in corpus if t not in MULTILINGUAL], trainer)
    return tok


def clip_style(corpus):
    """Word-level splitting with end-of-word suffixes (CLIP / original GPT): NFC, Replace(\\s+ -> " "),
    Strip and Lowercase normalizers; WhitespaceSplit, Punctuation, Split(Removed, inverted) and
    ByteLevel pre-tokenizers; BPE with end_of_word_suffix "</w>"; BPEDecoder then ByteLevel."""
    tok = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Strip(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Split(Regex(r"[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.Sequence([decoders.BPEDecoder(suffix="</w>"), decoders.ByteLevel()])
    trainer = trainers.BpeTrainer(vocab_size=800, min_frequency=2, special_tokens=["<|startoftext|>", "<|endoftext|>"],
                                  end_of_word_suffix="</w>", initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return tok


STYLES = {"gpt2_style": gpt2_style, "llama3_style": llama3_style, "qwen2_style": qwen2_style,
          "roberta_style": roberta_style, "llama2_style": llama2_style, "metaspace_style": metaspace_style,
          "clip_style": clip_style}


def save_tokenizer(name, tok):
    d = os.path.join(TOK_DIR, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    if name == "gpt2_style":  # legacy merges: "a b" strings, as older tokenizer.json files have them
        js = json.load(open(path, encoding="utf-8"))
        js["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in js["model"]["merges"]]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(js, f, ensure_ascii=False, indent=2)
        assert Tokenizer.from_file(path).to_str() == tok.to_str(), "legacy merges changed the tokenizer"
    if name == "llama3_style":
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "pad_token": None,
                       "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
    return Tokenizer.from_file(path)


def train_spm(corpus, model_type, vocab):
    prefix = os.path.join(TOK_DIR, f"spm_{model_type}")
    text = os.path.join(TOK_DIR, "_spm_train.txt")
    with open(text, "w", encoding="utf-8") as f:
        for doc in corpus:
            for line in doc.split("\n"):
                if line.strip():
                    f.write(line + "\n")
    spm.SentencePieceTrainer.train(
        input=text, model_prefix=prefix, model_type=model_type, vocab_size=vocab, character_coverage=1.0,
        byte_fallback=(model_type == "bpe"), normalization_rule_name="identity", num_threads=2,
        user_defined_symbols=["<sep>"], pad_id=3, minloglevel=2)
    os.remove(text)
    os.remove(prefix + ".vocab")
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def special_affixes(ids, ids_special):
    """The post-processor's specials for one sequence are a fixed prefix and suffix: check it on every
    case and store them once."""
    i = next(i for i, x in enumerate(ids) if x)
    n = len(ids_special[i]) - len(ids[i])
    k = next(k for k in range(n + 1) if ids_special[i][k:k + len(ids[i])] == ids[i])
    prefix, suffix = ids_special[i][:k], ids_special[i][k + len(ids[i]):]
    for a, b in zip(ids, ids_special):
        assert b == prefix + a + suffix, "post-processor output is not prefix + ids + suffix"
    return prefix, suffix


def decodes(texts, plain, special):
    """Reference decodes, stored only where they differ (null: same as the text / as the plain decode)."""
    return {"decoded": [None if d == t else d for d, t in zip(plain, texts)],
            "decoded_special": [None if s == d else s for s, d in zip(special, plain)]}


def random_texts(n, seed):
    """Texts of 1..30 random code points (any plane, weighted towards text) and fuzz pieces."""
    import unicodedata
    rng = random.Random(seed)
    spaces = " \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000\u180e\u200b\ufeff"
    ranges = [(0.35, 0x20, 0x7E), (0.55, 0xA0, 0x24F), (0.65, 0x300, 0x36F), (0.85, 0x370, 0xFFFF),
              (0.95, 0x1F300, 0x1FAFF), (1.0, 0, 0x10FFFF)]

    def cp():
        while True:
            r = rng.random()
            if r < 0.1:
                return rng.choice(spaces)
            lo, hi = next((lo, hi) for p, lo, hi in ranges if r < p)
            c = rng.randint(lo, hi)
            if not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)) != "Cn":
                return chr(c)
    texts = ["".join(rng.choice(FUZZ_PIECES) if rng.random() < 0.2 else cp() for _ in range(rng.randint(1, 30)))
             for _ in range(n)]
    punct = pre_tokenizers.Punctuation()
    strip = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()])

    def same(t):  # the library's older Unicode tables (normalization, punctuation, marks) agree here
        return (normalizers.NFC().normalize_str(t) == unicodedata.normalize("NFC", t)
                and normalizers.NFKC().normalize_str(t) == unicodedata.normalize("NFKC", t)
                and normalizers.Lowercase().normalize_str(t) == "".join("i\u0307" if c == "\u0130" else c.lower() for c in t)
                and strip.normalize_str(t) == "".join(c for c in unicodedata.normalize("NFD", t)
                                                      if not unicodedata.category(c).startswith("M"))
                and all((len(punct.pre_tokenize_str("a" + c + "a")) == 3) ==
                        (c.isascii() and not c.isalnum() and c.isprintable() and c != " " or unicodedata.category(c).startswith("P"))
                        for c in t))
    return [t for t in texts if same(t)]


def reference_cases(texts, toks, sps):
    """The reference ids and decodes of every tokenizer for `texts` (the layout of cases.json)."""
    cases = {"texts": texts, "tokenizers": {}}
    for name, tok in toks.items():
        enc = tok.encode_batch(texts, add_special_tokens=False)
        enc_sp = tok.encode_batch(texts, add_special_tokens=True)
        ids = [e.ids for e in enc]
        prefix, suffix = special_affixes(ids, [e.ids for e in enc_sp])
        cases["tokenizers"][name] = {
            "file": f"{name}/tokenizer.json",
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "ids": ids,
            "special_prefix": prefix,
            "special_suffix": suffix,
            **decodes(texts, tok.decode_batch(ids, skip_special_tokens=True),
                      tok.decode_batch(ids, skip_special_tokens=False)),
            "specials": sorted(t.content for t in tok.get_added_tokens_decoder().values() if t.special),
        }
    for model_type, sp in sps.items():
        ids = [sp.encode(t) for t in texts]
        cases["tokenizers"][f"spm_{model_type}"] = {
            "file": f"spm_{model_type}.model",
            "vocab_size": sp.get_piece_size(),
            "ids": ids,
            "special_prefix": [sp.bos_id()],  # Horizon's convention for .model files: BOS first
            "special_suffix": [],
            **decodes(texts, [sp.decode(x) for x in ids], [sp.decode(x) for x in ids]),
            "specials": sorted(sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.is_control(i)),
            "bos": sp.bos_id(), "eos": sp.eos_id(), "pad": sp.pad_id(), "unk": sp.unk_id(),
        }
    return cases


def fuzz_main(n, out):
    toks = {name: Tokenizer.from_file(os.path.join(TOK_DIR, name, "tokenizer.json")) for name in STYLES}
    sps = {m: spm.SentencePieceProcessor(model_file=os.path.join(TOK_DIR, f"spm_{m}.model")) for m in ("bpe", "unigram")}
    texts = random_texts(n, seed=n)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(reference_cases(texts, toks, sps), f, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {len(texts)} random cases to {out}", file=sys.stderr)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--fuzz":
        return fuzz_main(int(sys.argv[2]), sys.argv[3])
    os.makedirs(TOK_DIR, exist_ok=True)
    os.makedirs(CORPUS_DIR, exist_ok=True)
    corpus = train_corpus()
    texts = CRAFTED + heldout_bible() + MULTILINGUAL + fuzz_texts(150)
    toks = {name: save_tokenizer(name, make(corpus)) for name, make in STYLES.items()}
    sps = {m: train_spm(corpus, m, 600) for m in ("bpe", "unigram")}
    cases = reference_cases(texts, toks, sps)
    with open(os.path.join(TOK_DIR, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, separators=(",", ":"))

    # ---- corpora: JSONL and the same documents pre-tokenized in llm.c / nanoGPT formats ----------
    docs = [v for v in bible_book("Ruth").split("\n")] + MULTILINGUAL
    rng = random.Random(7)
    docs = ["\n".join(docs[i:i + rng.randint(1, 4)]) for i in range(0, len(docs), 3)]
    with open(os.path.join(CORPUS_DIR, "docs.jsonl"), "w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "text": d, "meta": {"source": "kjv"}}, ensure_ascii=False) + "\n")
    expected = {}
    g = toks["gpt2_style"]
    eot = g.token_to_id("<|endoftext|>")
    g_ids = [e.ids for e in g.encode_batch(docs, add_special_tokens=False)]
    expected["gpt2_style"] = g_ids
    stream = []
    for x in g_ids:  # llm.c (dev/data/fineweb.py): the delimiter comes before every document
        stream += [eot] + x
    write_llmc(os.path.join(CORPUS_DIR, "gpt2_style.llmc.bin"), stream, 20240520, 1, "<H")
    stream = []
    for x in g_ids:  # nanoGPT (data/openwebtext/prepare.py): the delimiter comes after every document
        stream += x + [eot]
    with open(os.path.join(CORPUS_DIR, "gpt2_style.nanogpt.bin"), "wb") as f:
        f.write(struct.pack(f"<{len(stream)}H", *stream))
    l3 = toks["llama3_style"]
    bos = l3.token_to_id("<|begin_of_text|>")
    l_ids = [e.ids for e in l3.encode_batch(docs, add_special_tokens=False)]
    expected["llama3_style"] = l_ids
    stream = []
    for x in l_ids:
        stream += [bos] + x
    write_llmc(os.path.join(CORPUS_DIR, "llama3_style.llmc.bin"), stream, 20240801, 7, "<I")
    with open(os.path.join(CORPUS_DIR, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, separators=(",", ":"))
    print(f"wrote {len(STYLES)} tokenizer.json, 2 SentencePiece models, {len(texts)} cases, "
          f"{len(docs)} corpus documents under {os.path.relpath(OUT, ROOT)}", file=sys.stderr)


def write_llmc(path, tokens, magic, version, fmt):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"{fmt[0]}{len(tokens)}{fmt[1]}", *tokens))


if __name__ == "__main__":
    main()
