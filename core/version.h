// Horizon's version, from one place: project(... VERSION) in CMakeLists.txt (compile definition
// HZ_VERSION on hz_core, public). `horizon --version` prints it; checkpoints record it.
#pragma once

namespace hz {
inline const char* version() { return HZ_VERSION; }
}  // namespace hz
