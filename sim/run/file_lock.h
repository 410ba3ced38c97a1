// sim/run/file_lock.h — the lock files inside the output tree (OUT/<name>/.lock, .index.lock,
// calibration/.lock): an flock on a small regular file that also says who holds it. What
// it guarantees: the file is never opened through a symbolic link (O_NOFOLLOW) nor when it
// is not a regular file (a FIFO planted there would block open() or hold the lock
// forever), and a child this process forks (a model factory calling os.fork, a data
// loader's worker) does not keep it: the child's copy of the descriptor is closed at fork,
// so the lock still ends with this process. What it is not: the policy of who may share
// a lock (ExperimentLock, experiments/run/run_parts.h) or how long to wait (the callers
// poll, so Ctrl-C is heard).
#pragma once
#include <string>

namespace asgd {

class FileLock {
 public:
  enum class Mode { Exclusive, Shared };
  // Opens (creates) `path`. Throws IoError naming it when it is a symbolic link, not a
  // regular file, or cannot be opened.
  explicit FileLock(const std::string& path);
  ~FileLock();  // closes the file, which releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  // One attempt, without waiting: true when the lock is now held in `mode` (converting a
  // lock already held). Throws IoError when flock fails for another reason than "taken".
  bool try_lock(Mode mode);
  void unlock();
  // The file's text (at most 4 KiB), and replacing it (informational: who holds the lock).
  std::string text() const;
  void set_text(const std::string& text);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace asgd
