// Horizon: writing a result file so that it is complete or absent.
//
// write_file_atomic(path, content) writes `path + ".tmp.<host>.<pid>.<n>"` (a temporary of its own, so
// two processes may write one file side by side; one a killed writer on this host left is removed by
// the next writer of `path`), checks every byte reached the file
// (a full disk is an error, not a short file), and renames it over `path`: a reader (or a second
// writer) sees the previous file or the new one, never a mix or a truncated one. On failure the
// ".tmp" is removed, `path` is untouched, and an hz::Error names the file and the reason.
// Several parts (a header and a payload) are written one after the other, without joining them.
//
// A result set (several files that belong together: eval.json with its nll_by_position.csv, ...)
// is written with write_files_atomic(dir, files): every file goes to "<name>.set.tmp" first; only
// when all are complete does a journal (dir/.results.pending, the names) appear, then the renames
// follow and the journal goes. A writer stopped before the journal leaves the previous set whole;
// one stopped after it leaves complete files that finish_file_set(dir) renames into place (the
// next writer does it first, and a reader calls it before reading). So readers see the old set or
// the new one, never a mix. `replaces` names every file a set of this kind may hold: those the new
// set does not write are removed with it (the journal lists them as "-name"), so a result the new
// evaluation did not produce (needles.csv after an evaluation without needle tasks) does not stay
// beside it as if it belonged.
//
// Every file Horizon reads as input (recipes, tokenizers, config.json, safetensors and their index,
// token shards and files, corpora, checkpoints, grid files, run directories' own files) is opened
// through open_input (or checked with input_problem first, where a library opens the path itself):
// anything but a regular file (symbolic links followed) is refused before a byte is read. A FIFO
// in place of a file makes open() and read() wait for a writer for ever, a device such as
// /dev/zero never ends, a directory fails obscurely. Commands that document reading standard input
// ("-") handle that themselves, before calling these.
//
// Durability: every file is fsync'd before it is renamed into place and its directory after the
// rename; a set's files and their directory are fsync'd before the journal's rename, and the
// directory again after the set's renames, before the journal goes. A crash (power loss) finds the
// previous file or set, or the journal with whole files, never a journal naming lost data.
#pragma once
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hz {

void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts);
inline void write_file_atomic(const std::string& path, const std::string& content) {
  write_file_atomic(path, {std::string_view(content)});
}

using FileSet = std::vector<std::pair<std::string, std::string>>;  // (name in the directory, content)
void write_files_atomic(const std::string& dir, const FileSet& files, const std::vector<std::string>& replaces = {});
void finish_file_set(const std::string& dir);

// Empty when `path` names a regular file; otherwise what is wrong, e.g. "is a FIFO (a named pipe),
// not a regular file: refused (...)" or "cannot open: No such file or directory". Callers prefix it
// with the file's name.
std::string input_problem(const std::string& path);
// Opens `path` read-only (close-on-exec) after that check, made again on the open descriptor (the
// open never waits: O_NONBLOCK, cleared once the file is known to be regular). -1 with `why` set on
// failure.
int open_input(const std::string& path, std::string& why);
// Reads the whole input at `path` into `out` when it holds at most max_bytes; otherwise returns
// what is wrong (an input_problem, or the size and the cap). Empty on success.
std::string read_file_capped(const std::string& path, uint64_t max_bytes, std::string& out);
// A stream on `path` for readers that parse line by line: throws hz::ValueError naming the file when
// it exists but is not a regular file; a missing file gives a stream that is not open (callers that
// take a missing file as "none yet" test it, as before).
std::ifstream open_input_stream(const std::string& path);
//
namespace detail {
// Called with each path (file or directory) these writers have fsync'd, in order; tests observe the
// order through it. nullptr (the default): nothing is called.
extern void (*on_file_synced)(const std::string& path);
}  // namespace detail

}  // namespace hz
