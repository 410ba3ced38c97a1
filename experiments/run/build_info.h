// experiments/run/build_info.h — build provenance, recorded in every run's meta.json and
// printed by `asgdsim --version`. The values live in a file CMake writes at every build
// (BUILD/generated/asgd/build_info.cpp, from cmake/build_info.cpp.in), so a new commit
// recompiles that one file only.
#pragma once
namespace asgd::build {
extern const char* const version;     // the project's version (CMakeLists.txt)
extern const char* const git_commit;  // 12 hex digits of HEAD, or "unknown"
extern const bool git_dirty;          // tracked files differ from HEAD
extern const char* const backend;     // CUDA, OMP or CPP
extern const char* const build_type;  // Release, RelWithDebInfo, ...
extern const char* const source_dir;  // this source tree (analysis/plot.py is found there)
}  // namespace asgd::build
