// sim/run/atomic_file.h — files written whole or not at all: content goes to a temporary file
// in the same folder, is flushed and fsync'd, then renamed over the target. Any failure
// (unwritable folder, full disk) throws IoError naming the path and the reason, and
// leaves the previous file (if any) untouched. The temporary file's name is
// unpredictable ("PATH.tmp.PID.RANDOM") and it is created with O_EXCL|O_NOFOLLOW, so
// nothing planted in the folder beforehand (a symlink, a FIFO) is ever written through.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>
#include "sim/base/errors.h"  // IoError

namespace asgd {

// What a path that is not a regular file is, for messages: "a FIFO", "a folder", "a device
// or socket" (st_mode from stat).
const char* file_type_name(unsigned st_mode);

void write_file_atomic(const std::string& path, const std::string& content);
// What every temporary file of write_file_atomic(path, ...) starts with: "PATH.tmp.".
std::string atomic_temp_prefix(const std::string& path);
// Removes the temporary files write_file_atomic left in `dir` (a process killed between
// create and rename leaves one), for the targets named in `targets` ("metrics.csv", ...);
// returns the paths removed. Call it only where no other process writes those targets.
std::vector<std::string> remove_stale_temp_files(const std::string& dir, const std::vector<std::string>& targets);
// Reads the file at `path` into `out`, at most `max_bytes` + 1 bytes (so that a caller
// tells "too large" by out.size() > max_bytes without reading /dev/zero or a huge file
// whole). False if it cannot be opened.
bool read_file_limited(const std::string& path, size_t max_bytes, std::string& out);
// The same for a file of the output tree, which only asgdsim writes: opened without
// blocking (a FIFO planted there must not hang the process), and anything but a regular
// file (a FIFO, a device, a folder) throws IoError naming it. False if it does not exist.
bool read_output_file_limited(const std::string& path, size_t max_bytes, std::string& out);
// The output-tree file at `path` opened for reading (a file descriptor, -1 if it does not
// exist), refused as read_output_file_limited refuses it.
int open_output_file(const std::string& path);
// Creates the directory and its parents; throws IoError when it cannot.
void make_directories(const std::string& path);

}  // namespace asgd
