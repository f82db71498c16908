// Horizon data: raw text corpora.
//
// A corpus is a list of Documents (a name and its text). The default corpus is the King James
// Bible (public domain), embedded in the binary (assets/kjv/kjv.txt.gz, made from Debian's
// bible-kjv by scripts/fixtures/make_kjv_asset.py), one document per book, so a train/validation split by
// document never cuts a book in half.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace hz::data {

struct Document {
  std::string name;
  std::string text;
};

// The 66 books of the King James Bible in canonical order (Genesis .. Revelation), each named by
// its book ("Genesis", "1 Samuel", "Song of Solomon", ...) with its verses joined by '\n' (verse
// references stripped, no trailing newline): byte for byte what Debian's `bible -f` printed.
// Decompresses and parses the text embedded in the binary on the first call (later calls return a
// copy of that; thread-safe); needs no file or program at run time. Throws hz::Error when the
// embedded text is corrupt (a build from a damaged assets/kjv/kjv.txt.gz).
std::vector<Document> load_bible_kjv();

// The documents of a King James Bible text in the format of assets/kjv/kjv.txt (uncompressed;
// see assets/kjv/README.md): for each of the 66 books, in the order of bible_book_names(), a line
// "## <name>" then its verses, one per line, every line ending with '\n'. Strict: a missing,
// extra, renamed or reordered book, a book without verses, a blank line, a '\r' line end or a
// missing final newline throws hz::Error naming the line. load_bible_kjv() uses it.
std::vector<Document> parse_kjv_text(std::string_view text);

// The English names of the 66 books, in the order load_bible_kjv() returns them.
const std::vector<std::string>& bible_book_names();

// The regular files matched by any of the glob(3) patterns, sorted, each once. A pattern that
// matches no regular file throws hz::ValueError naming the pattern (`what` names the kind of
// file in the message: "text files", "JSONL files", ...).
std::vector<std::string> expand_globs(const std::vector<std::string>& globs, const std::string& what);

// One document per regular file matched by any of the glob(3) patterns, named by its path and
// sorted by path (a file matched by two patterns appears once); the text is the file's bytes.
// A pattern that matches no regular file throws hz::ValueError naming the pattern.
std::vector<Document> load_text_files(const std::vector<std::string>& globs);

// JSON Lines: one document per non-blank line of each file matched by the globs (files sorted by
// path, lines in order), the text being the string value of the top-level key `text_field` of
// the line's object; named "<path>:<line>" (1-based). Other keys are ignored. Throws
// hz::ValueError naming the file and line for a line that is not a JSON object, lacks the field,
// or holds something other than a string there (the message lists the keys the line has).
std::vector<Document> load_jsonl(const std::vector<std::string>& globs, const std::string& text_field);

}  // namespace hz::data
