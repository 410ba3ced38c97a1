// sim/run/file_lock.cpp — flock on a regular file, never through a link, closed in forked children.
#include "sim/run/file_lock.h"
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include "sim/base/errors.h"
#include "sim/run/atomic_file.h"

namespace asgd {
namespace {

// The lock files this process holds open. A forked child shares each one's open file
// description, and with it the flock: if the child outlived this process (a daemon a
// model factory started), the lock would stay taken. The child closes its copies at once
// (closing a copy never releases the parent's lock; flock(LOCK_UN) would).
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::set<int>& registry() {
  static std::set<int> fds;
  return fds;
}
void before_fork() { registry_mutex().lock(); }
void after_fork_in_parent() { registry_mutex().unlock(); }
void after_fork_in_child() {
  for (int fd : registry()) ::close(fd);
  registry().clear();
  registry_mutex().unlock();
}
void register_fd(int fd) {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().insert(fd);
}
void unregister_and_close(int fd) {
  std::lock_guard<std::mutex> lock(registry_mutex());  // not between a fork's prepare and its parent handler
  registry().erase(fd);
  ::close(fd);
}

}  // namespace

FileLock::FileLock(const std::string& path) : path_(path) {
  // O_NONBLOCK: a FIFO planted at the path must not block open() (it is refused below).
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0 && errno == ELOOP)
    throw IoError(path +
                  " is a symbolic link: asgdsim never writes or deletes through a link inside the output "
                  "folder (only --out itself may be one); remove the link, or choose another --out");
  if (fd < 0) throw IoError("cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(path + " is not a regular file (" + file_type_name(st.st_mode) +
                  "): asgdsim keeps its lock there; remove it, or choose another --out");
  }
  register_fd(fd);
  fd_ = fd;
}

FileLock::~FileLock() {
  if (fd_ >= 0) unregister_and_close(fd_);
}

bool FileLock::try_lock(Mode mode) {
  const int op = (mode == Mode::Exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB;
  for (;;) {
    if (::flock(fd_, op) == 0) return true;
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return false;
    throw IoError("cannot lock " + path_ + ": " + std::strerror(errno));
  }
}

void FileLock::unlock() { ::flock(fd_, LOCK_UN); }

std::string FileLock::text() const {
  std::string s(4096, '\0');
  const ssize_t n = ::pread(fd_, &s[0], s.size(), 0);
  s.resize(n > 0 ? size_t(n) : 0);
  return s;
}

void FileLock::set_text(const std::string& text) {
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, text.data(), text.size(), 0) < 0) {
    // informational only: the lock holds without it
  }
}

}  // namespace asgd
