// Horizon data: raw text corpora.
//
// A corpus is a list of Documents (a name and its text). The default corpus is the King James
// Bible (public domain) read from Debian's package bible-kjv through its `bible` program, one
// document per book, so a train/validation split by document never cuts a book in half.
#pragma once
#include <string>
#include <vector>

namespace hz::data {

struct Document {
  std::string name;
  std::string text;
};

// The 66 books of the King James Bible in canonical order (Genesis .. Revelation), each named by
// its book ("Genesis", "1 Samuel", "Song of Solomon", ...) with its verses joined by '\n' (verse
// references stripped, no trailing newline). Runs `bible -f "<Abbr>1:1-<Abbr>999:999"` once per
// book; nothing is cached on disk. Throws hz::ValueError when `bible` is not on PATH and hz::Error
// when its output is not the expected "<Ref><chapter>:<verse> <text>" lines.
std::vector<Document> load_bible_kjv();

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
