#!/usr/bin/env python3
"""Makes assets/kjv/kjv.txt.gz, the King James Bible that Horizon embeds in its binaries
(data/kjv_blob.cpp, read by data/corpus.cpp load_bible_kjv()), from Debian's `bible` program
(package bible-kjv). Standard library only; the build never runs this script.

    python3 scripts/make_kjv_asset.py            # (re)writes assets/kjv/kjv.txt.gz
    python3 scripts/make_kjv_asset.py --check    # compares the committed file instead; exit 1 if it differs

Format of the uncompressed text (UTF-8, '\\n' line ends, ends with a '\\n'): for each of the 66
books in canonical order, a header line "## <Book name>" followed by the book's verses, one per
line, in order, without their references ("Ge1:1 "). A book's Document text is its verse lines
joined by '\\n', exactly what load_bible_kjv() built from `bible -f` before the text was embedded:
the C++ reader splits on '\\n' and starts a book at each "## " line, so the script checks that no
verse starts with "## " (and that every book has verses and starts at 1:1).

Each book is read with `bible -f "<query>1:1-<query>999:999"` and every output line must be
"<prefix><chapter>:<verse> <text>"; blank lines are skipped and one trailing '\\r' is dropped, as
the C++ reader did (its table kBooks held the same (name, query, prefix) triples as BOOKS below).

The gzip is deterministic (level 9, mtime 0, no file name), so re-running gives the same bytes
(with the same zlib). The script prints the SHA-256 of the uncompressed text (assets/kjv/README.md
quotes it) and the FNV-1a 64 / SHA-256 of the 66 book texts concatenated without separators
(tests/data/corpus_test.cpp asserts the FNV-1a 64), both computed from the program's output.
"""
import argparse
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "assets", "kjv", "kjv.txt.gz")

# (name, query, prefix): the Document name; the abbreviation given to `bible`; the reference prefix
# `bible -f` prints before "<chapter>:<verse>". Verified with bible-kjv 4.38 (Debian 12).
BOOKS = [
    ("Genesis", "Gen", "Ge"), ("Exodus", "Exod", "Exo"), ("Leviticus", "Lev", "Lev"),
    ("Numbers", "Num", "Num"), ("Deuteronomy", "Deut", "Deu"), ("Joshua", "Josh", "Josh"),
    ("Judges", "Judg", "Jdgs"), ("Ruth", "Ruth", "Ruth"), ("1 Samuel", "1Sam", "1Sm"),
    ("2 Samuel", "2Sam", "2Sm"), ("1 Kings", "1Kgs", "1Ki"), ("2 Kings", "2Kgs", "2Ki"),
    ("1 Chronicles", "1Chr", "1Chr"), ("2 Chronicles", "2Chr", "2Chr"), ("Ezra", "Ezra", "Ezra"),
    ("Nehemiah", "Neh", "Neh"), ("Esther", "Esth", "Est"), ("Job", "Job", "Job"),
    ("Psalms", "Ps", "Psa"), ("Proverbs", "Prov", "Prv"), ("Ecclesiastes", "Eccl", "Eccl"),
    ("Song of Solomon", "Song", "SSol"), ("Isaiah", "Isa", "Isa"), ("Jeremiah", "Jer", "Jer"),
    ("Lamentations", "Lam", "Lam"), ("Ezekiel", "Ezek", "Eze"), ("Daniel", "Dan", "Dan"),
    ("Hosea", "Hos", "Hos"), ("Joel", "Joel", "Joel"), ("Amos", "Amos", "Amos"),
    ("Obadiah", "Obad", "Obad"), ("Jonah", "Jonah", "Jonah"), ("Micah", "Mic", "Mic"),
    ("Nahum", "Nah", "Nahum"), ("Habakkuk", "Hab", "Hab"), ("Zephaniah", "Zeph", "Zep"),
    ("Haggai", "Hag", "Hag"), ("Zechariah", "Zech", "Zec"), ("Malachi", "Mal", "Mal"),
    ("Matthew", "Matt", "Mat"), ("Mark", "Mark", "Mark"), ("Luke", "Luke", "Luke"),
    ("John", "John", "John"), ("Acts", "Acts", "Acts"), ("Romans", "Rom", "Rom"),
    ("1 Corinthians", "1Cor", "1Cor"), ("2 Corinthians", "2Cor", "2Cor"), ("Galatians", "Gal", "Gal"),
    ("Ephesians", "Eph", "Eph"), ("Philippians", "Phil", "Phi"), ("Colossians", "Col", "Col"),
    ("1 Thessalonians", "1Thess", "1Th"), ("2 Thessalonians", "2Thess", "2Th"),
    ("1 Timothy", "1Tim", "1Tim"), ("2 Timothy", "2Tim", "2Tim"), ("Titus", "Titus", "Titus"),
    ("Philemon", "Phlm", "Phmn"), ("Hebrews", "Heb", "Heb"), ("James", "Jas", "Jas"),
    ("1 Peter", "1Pet", "1Pet"), ("2 Peter", "2Pet", "2Pet"), ("1 John", "1John", "1Jn"),
    ("2 John", "2John", "2Jn"), ("3 John", "3John", "3Jn"), ("Jude", "Jude", "Jude"),
    ("Revelation", "Rev", "Rev"),
]
assert len(BOOKS) == 66

HEADER = b"## "


def fnv1a64(data, h=0xCBF29CE484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def read_book(prog, name, query, prefix):
    """The book's verses (bytes, references stripped) as `bible -f` prints them."""
    ref = f"{query}1:1-{query}999:999"
    proc = subprocess.run([prog, "-f", ref], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)  # merged, as the C++ reader's `2>&1` did
    if proc.returncode != 0:
        sys.exit(f"`{prog} -f {ref}` failed (status {proc.returncode}): {proc.stdout[:200]!r}")
    pattern = re.compile(re.escape(prefix.encode()) + rb"[0-9]+:[0-9]+ ")
    verses = []
    for line in proc.stdout.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue
        m = pattern.match(line)
        if not m:
            sys.exit(f"{name}: unexpected line from `bible -f {ref}` (expected '{prefix}1:1 <text>'): {line[:120]!r}")
        if not verses and not line.startswith(prefix.encode() + b"1:1 "):
            sys.exit(f"{name}: `bible -f {ref}` does not start at {prefix}1:1 but at {line[:40]!r}")
        text = line[m.end():]
        if text.startswith(HEADER):
            sys.exit(f"{name}: a verse starts with {HEADER!r}, which the asset format reserves for book headers")
        verses.append(text)
    if not verses:
        sys.exit(f"`bible -f {ref}` printed no verses for {name}")
    return verses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="the .gz to write (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args()

    prog = shutil.which("bible")
    if not prog:
        sys.exit("the `bible` program is not on PATH: install Debian's package bible-kjv (only this script needs it)")

    text = bytearray()
    books = []
    verses = 0
    for name, query, prefix in BOOKS:
        v = read_book(prog, name, query, prefix)
        verses += len(v)
        books.append(b"\n".join(v))
        text += HEADER + name.encode() + b"\n" + books[-1] + b"\n"
    text = bytes(text)
    joined = b"".join(books)

    buf = io.BytesIO()
    # filename "" and mtime 0: the header holds no name or time, so the bytes depend only on the text
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=buf, mtime=0) as gz:
        gz.write(text)
    blob = buf.getvalue()
    assert gzip.decompress(blob) == text

    print(f"books {len(books)}  verses {verses}  book text bytes {len(joined)}  "
          f"uncompressed {len(text)}  gzip {len(blob)}")
    print(f"sha256 of the uncompressed text:        {hashlib.sha256(text).hexdigest()}")
    print(f"sha256 of the 66 book texts, joined:    {hashlib.sha256(joined).hexdigest()}")
    print(f"fnv1a64 of the 66 book texts, joined:   0x{fnv1a64(joined):016x}")
    print(f"sha256 of the gzip:                     {hashlib.sha256(blob).hexdigest()}")

    if args.check:
        try:
            with open(args.out, "rb") as f:
                old = f.read()
        except OSError as e:
            sys.exit(f"cannot read {args.out}: {e}")
        if old != blob:
            same_text = gzip.decompress(old) == text
            sys.exit(f"{args.out} differs from the `bible` program's output"
                     + (" (same text, other gzip bytes: another zlib?)" if same_text else ""))
        print(f"{args.out}: identical")
        return
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(blob)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
