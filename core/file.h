// Horizon: writing a result file so that it is complete or absent.
//
// write_file_atomic(path, content) writes `path + ".tmp"`, checks every byte reached the file
// (a full disk is an error, not a short file), and renames it over `path`: a reader (or a second
// writer) sees the previous file or the new one, never a mix or a truncated one. On failure the
// ".tmp" is removed, `path` is untouched, and an hz::Error names the file and the reason.
// Several parts (a header and a payload) are written one after the other, without joining them.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>

namespace hz {

void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts);
inline void write_file_atomic(const std::string& path, const std::string& content) {
  write_file_atomic(path, {std::string_view(content)});
}

}  // namespace hz
