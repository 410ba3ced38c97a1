// sim/atomic_file.cpp — temp file + fsync + rename.
#include "sim/atomic_file.h"
#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace asgd {

std::string atomic_temp_path(const std::string& path, long pid) { return path + ".tmp." + std::to_string(pid); }

void write_file_atomic(const std::string& path, const std::string& content) {
  std::string tmp = atomic_temp_path(path, long(::getpid()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot write " + path + ": " + std::strerror(errno));
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw IoError("cannot write " + path + ": " + std::strerror(err));
    }
    p += n;
    left -= size_t(n);
  }
  // Some file systems report a full disk only here (delayed allocation, NFS). The file is
  // closed whether or not fsync fails, so a failure leaks no descriptor.
  int err = ::fsync(fd) == 0 ? 0 : errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + path + ": " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + path + ": " + std::strerror(err));
  }
}

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw IoError("cannot create folder " + path + ": " + ec.message());
  if (::access(path.c_str(), W_OK) != 0)
    throw IoError("folder " + path + " is not writable: " + std::strerror(errno));
}

}  // namespace asgd
