// sim/atomic_file.h — files written whole or not at all: content goes to a temporary file
// in the same folder, is flushed and fsync'd, then renamed over the target. Any failure
// (unwritable folder, full disk) throws IoError naming the path and the reason, and
// leaves the previous file (if any) untouched.
#pragma once
#include <stdexcept>
#include <string>

namespace asgd {

class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void write_file_atomic(const std::string& path, const std::string& content);
// The temporary file write_file_atomic(path, ...) uses in process `pid`: "PATH.tmp.PID".
// Public so a test can stand in its way (tests/test_reliability.cpp blocks a write there).
std::string atomic_temp_path(const std::string& path, long pid);
// Creates the directory and its parents; throws IoError when it cannot.
void make_directories(const std::string& path);

}  // namespace asgd
