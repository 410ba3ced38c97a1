// sim/run/atomic_file.cpp — temp file (exclusive, unpredictable name) + fsync + rename.
#include "sim/run/atomic_file.h"
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace asgd {
namespace {

// 64 random bits as hex: from getrandom, else from the clock and a counter (still unique
// within the process, and O_EXCL catches any clash).
std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  uint64_t bits = 0;
  if (::getrandom(&bits, sizeof(bits), GRND_NONBLOCK) != ssize_t(sizeof(bits)))
    bits = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9e3779b97f4a7c15ull;
  bits ^= counter.fetch_add(1) * 0xbf58476d1ce4e5b9ull;
  char s[17];
  std::snprintf(s, sizeof(s), "%016llx", static_cast<unsigned long long>(bits));
  return s;
}

}  // namespace

std::string atomic_temp_prefix(const std::string& path) { return path + ".tmp."; }

void write_file_atomic(const std::string& path, const std::string& content) {
  std::string tmp;
  int fd = -1;
  // O_EXCL: the name must be new (a planted file or symlink is never opened); O_NOFOLLOW
  // as well, so a symlink in the way fails even on file systems that bend O_EXCL.
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = atomic_temp_prefix(path) + std::to_string(long(::getpid())) + "." + random_suffix();
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || attempt >= 16))
      throw IoError("cannot write " + path + ": " + std::strerror(errno));
  }
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
  // rename replaces whatever is at `path` (a symlink included) without following it.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + path + ": " + std::strerror(err));
  }
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir, const std::vector<std::string>& targets) {
  std::vector<std::string> removed;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return removed;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const auto& name : names)
    for (const auto& target : targets) {
      const std::string prefix = atomic_temp_prefix(target);
      if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
        const std::string full = dir + "/" + name;
        if (::unlink(full.c_str()) == 0) removed.push_back(full);  // a symlink: the link itself
        break;
      }
    }
  return removed;
}

bool read_file_limited(const std::string& path, size_t max_bytes, std::string& out) {
  out.clear();
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char buf[1 << 16];
  while (out.size() <= max_bytes) {
    size_t n = std::fread(buf, 1, std::min(sizeof(buf), max_bytes + 1 - out.size()), f);
    if (n == 0) break;
    out.append(buf, n);
  }
  std::fclose(f);
  return true;
}

const char* file_type_name(unsigned st_mode) {
  return S_ISFIFO(st_mode)  ? "a FIFO"
         : S_ISDIR(st_mode) ? "a folder"
         : S_ISREG(st_mode) ? "a file"
                            : "a device or socket";
}

int open_output_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return -1;
    throw IoError("cannot read " + path + ": " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(path + " is not a regular file (" + file_type_name(st.st_mode) +
                  "): only asgdsim writes files there; remove it, or choose another --out");
  }
  return fd;
}

bool read_output_file_limited(const std::string& path, size_t max_bytes, std::string& out) {
  out.clear();
  const int fd = open_output_file(path);
  if (fd < 0) return false;
  char buf[1 << 16];
  while (out.size() <= max_bytes) {
    const ssize_t n = ::read(fd, buf, std::min(sizeof(buf), max_bytes + 1 - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return true;
}

void make_directories(const std::string& path) {
  if (path.empty()) throw IoError("cannot create a folder with an empty name");
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw IoError("cannot create folder " + path + ": " + ec.message());
  if (::access(path.c_str(), W_OK) != 0) throw IoError("folder " + path + " is not writable: " + std::strerror(errno));
}

}  // namespace asgd
