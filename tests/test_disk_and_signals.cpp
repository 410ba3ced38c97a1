// tests/test_disk_and_signals.cpp — a full disk and a second signal, tested against the real thing:
// (1) a full disk, or a file-size limit, fails a run with exit 2 and an error naming the
// file and the reason, leaves no file that looks complete (no summary.json, no truncated
// metrics.csv, no temporary file) and loses nothing written before; (2) a second SIGINT
// ends asgdsim at once, even while the graceful stop of the first is still writing.
// Not here: the graceful interrupt itself (tests/test_config.cpp) and write_file_atomic's
// plain cases (tests/test_sim.cpp).
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <nlohmann/json.hpp>
#include "sim/run/atomic_file.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;
namespace fs = std::filesystem;

namespace {

// ---- a small disk, and what is on it ----

// A tmpfs of `size` mounted at `dir`, in a mount namespace of this process's own where it
// can have one (so nothing stays mounted if the test dies); ok() is false, with why(),
// where mounting is not permitted (not root, no CAP_SYS_ADMIN, a seccomp filter).
class SmallDisk {
 public:
  SmallDisk(const std::string& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    if (::unshare(CLONE_NEWNS) == 0) ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);  // mounts stay here
    if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, ("size=" + size).c_str()) != 0) {
      why_ = std::string("mount -t tmpfs -o size=") + size + " failed: " + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_; }

  // Writes `name` until the disk is full to the byte; returns its path.
  std::string fill(const std::string& name = "filler") const {
    std::string path = dir_ + "/" + name;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
    std::string chunk(4096, 'f');
    for (size_t len = chunk.size(); len > 0;) {
      ssize_t n = ::write(fd, chunk.data(), len);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        EXPECT_EQ(errno, ENOSPC) << std::strerror(errno);
        break;
      }
      if (size_t(n) < len) len = 1;  // the last page: byte by byte until ENOSPC
    }
    ::close(fd);
    return path;
  }

 private:
  std::string dir_;
  std::string why_;
  bool mounted_ = false;
};

// Every regular file under `dir`, by path relative to it, with its bytes; not the
// experiment lock's file, whose content (who holds it) each process rewrites.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != ".lock")
      files[fs::relative(e.path(), dir).string()] = read_file(e.path().string());
  return files;
}

// Files under `dir` named like write_file_atomic's temporary files.
std::vector<std::string> temp_files(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) found.push_back(e.path().string());
  return found;
}

// Prints a file map's names for a failure message.
std::string names(const std::map<std::string, std::string>& files) {
  std::string out;
  for (const auto& [name, bytes] : files) out += "  " + name + " (" + std::to_string(bytes.size()) + " bytes)\n";
  return out;
}

// The files that differ between two snapshots ("" when none), for EXPECT_EQ(..., "").
std::string changed_files(const std::map<std::string, std::string>& before,
                          const std::map<std::string, std::string>& after) {
  std::string out;
  for (const auto& [name, bytes] : before) {
    auto it = after.find(name);
    if (it == after.end())
      out += "  gone: " + name + "\n";
    else if (it->second != bytes)
      out += "  changed: " + name + " (" + std::to_string(bytes.size()) + " -> " + std::to_string(it->second.size()) +
             " bytes)\n";
  }
  for (const auto& [name, bytes] : after)
    if (!before.count(name)) out += "  new: " + name + " (" + std::to_string(bytes.size()) + " bytes)\n";
  return out;
}

// A tiny experiment sweeping stop.updates with a row per update: the 20-update run writes
// files of under 2 KB, the 40000-update run a metrics.csv of about 2.5 MB.
json sweep_updates(const std::vector<int>& updates) {
  return {{"name", "full"},
          {"model", {{"type", "quadratic"}, {"dim", 4}}},
          {"train", {{"lr", 0.01}}},
          {"stop", {{"updates", 20}}},
          {"eval", {{"every", 1}, {"unit", "updates"}}},
          {"cluster", {{"workers", 2}}},
          {"sweep", {{"stop.updates", updates}}},
          {"engines", json::array({json{{"type", "async"}}})}};
}
const std::string kSmallRun = "async-updates=20-seed1";
const std::string kBigRun = "async-updates=40000-seed1";

// What the failed experiment `exp` (kSmallRun completed before, kBigRun failed writing
// metrics.csv) must hold: kSmallRun as it was, nothing of kBigRun that looks complete, no
// temporary file, and an index.csv and experiment.json that are whole.
void expect_nothing_lost_nothing_half_written(const std::string& exp,
                                              const std::map<std::string, std::string>& before) {
  auto after = snapshot(exp);
  size_t kept = 0;
  for (const auto& [name, bytes] : before) {
    if (name.rfind(kSmallRun + "/", 0) != 0) continue;
    ++kept;
    auto it = after.find(name);
    EXPECT_TRUE(it != after.end() && it->second == bytes) << name << " of the completed run changed or went";
  }
  EXPECT_TRUE(before.count(kSmallRun + "/metrics.csv") && before.count(kSmallRun + "/summary.json")) << names(before);
  EXPECT_GT(kept, 2u) << names(before);
  json big_summary;  // a failed run is marked (summary.json says failed), never complete
  if (fs::exists(exp + "/" + kBigRun + "/summary.json")) {
    big_summary = json::parse(read_file(exp + "/" + kBigRun + "/summary.json"));
    EXPECT_EQ(big_summary.value("status", ""), "failed") << big_summary.dump(2);
  }
  EXPECT_FALSE(fs::exists(exp + "/" + kBigRun + "/metrics.csv")) << names(after);
  EXPECT_EQ(temp_files(exp), std::vector<std::string>{});

  std::string index = read_file(exp + "/index.csv");
  ASSERT_FALSE(index.empty());
  EXPECT_EQ(index.back(), '\n') << index;
  EXPECT_EQ(std::count(index.begin(), index.end(), '\n'), 3) << index;
  EXPECT_NE(index.find("\n" + kSmallRun + ",async,20,1,completed,"), std::string::npos) << index;
  size_t big = index.find("\n" + kBigRun + ",");
  ASSERT_NE(big, std::string::npos) << index;
  EXPECT_EQ(index.find(",completed,", big), std::string::npos) << index;
  json resolved = json::parse(read_file(exp + "/experiment.json"));  // whole JSON, or this throws
  EXPECT_EQ(resolved["sweep"]["stop.updates"], json::array({20, 40000}));
}

// The file-size limit of the FileSizeLimit tests. Not much lower: TSan's runtime maps a
// file of its own (/tmp/tsan.rodata.PID) and dies of SIGBUS under a 64 KiB limit.
constexpr rlim_t kFileSizeLimit = 1 << 20;

// In the child before exec (async-signal-safe calls only): files may grow to
// kFileSizeLimit, and a write past that fails with EFBIG instead of killing the process
// with SIGXFSZ.
void limit_file_size() {
  struct rlimit limit = {kFileSizeLimit, kFileSizeLimit};
  ::setrlimit(RLIMIT_FSIZE, &limit);
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ignore, nullptr);
}

}  // namespace

// ---- write_file_atomic against a full folder ----

TEST(FullDisk, WriteFileAtomicKeepsTheOldFileAndLeavesNoTemp) {
  std::string dir = temp_dir("fulldisk");
  SmallDisk disk(dir + "/disk", "64k");
  if (!disk.ok()) GTEST_SKIP() << disk.why() << " (needs root or CAP_SYS_ADMIN; FileSizeLimit* cover the rest)";
  const std::string target = disk.path() + "/target.csv";
  write_file_atomic(target, "old,complete\n1,2\n");
  std::string filler = disk.fill();

  try {
    write_file_atomic(target, "new,content\n3,4\n");
    ADD_FAILURE() << "wrote to a full disk";
  } catch (const IoError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(target), std::string::npos) << what;
    EXPECT_NE(what.find("No space left on device"), std::string::npos) << what;
  }
  EXPECT_EQ(read_file(target), "old,complete\n1,2\n");
  EXPECT_EQ(temp_files(disk.path()), std::vector<std::string>{});

  fs::remove(filler);  // with room again, the same write goes through
  write_file_atomic(target, "new,content\n3,4\n");
  EXPECT_EQ(read_file(target), "new,content\n3,4\n");
}

TEST(FullDisk, WriteFileAtomicPastTheFileSizeLimitKeepsTheOldFile) {
  std::string dir = temp_dir("fsize");
  const std::string target = dir + "/target.csv";
  write_file_atomic(target, "old,complete\n");
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct sigaction ignore = {}, saved_action;
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ignore, &saved_action);
  struct rlimit limit = {kFileSizeLimit, saved.rlim_max};
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  std::string error;
  try {
    write_file_atomic(target, std::string(kFileSizeLimit + 4096, 'x'));  // up to the limit, then EFBIG
  } catch (const IoError& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::sigaction(SIGXFSZ, &saved_action, nullptr);
  EXPECT_NE(error.find(target), std::string::npos) << "'" << error << "'";
  EXPECT_NE(error.find("File too large"), std::string::npos) << "'" << error << "'";
  std::string now = read_file(target);
  EXPECT_TRUE(now == "old,complete\n") << now.size() << " bytes: '" << now.substr(0, 40) << "...'";
  EXPECT_EQ(temp_files(dir), std::vector<std::string>{});
}

// ---- asgdsim on a disk that fills up ----

// On a 256 KiB disk: a first invocation completes the small run; a second adds a run whose
// 2.5 MB metrics.csv cannot fit, and fails on it; a third, on a disk already full to the
// byte, fails on its first file and changes nothing at all.
TEST(FullDisk, RunFailsNamingTheFileAndLosesNothingWrittenBefore) {
  std::string dir = temp_dir("fulldisk");
  SmallDisk disk(dir + "/disk", "256k");
  if (!disk.ok()) GTEST_SKIP() << disk.why() << " (needs root or CAP_SYS_ADMIN; FileSizeLimit* cover the rest)";
  write_text(dir + "/small.json", sweep_updates({20}).dump());
  write_text(dir + "/both.json", sweep_updates({20, 40000}).dump());
  const std::string out = disk.path() + "/out", exp = out + "/full";

  CommandResult first = run_cli("run " + dir + "/small.json --quiet --threads 2 --out " + out);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto before = snapshot(exp);

  CommandResult second = run_cli("run " + dir + "/both.json --quiet --threads 2 --out " + out);
  EXPECT_EQ(second.exit_code, 2) << second.output;
  const std::string expected =
      "asgdsim: run " + kBigRun + ": cannot write " + exp + "/" + kBigRun + "/metrics.csv: No space left on device";
  EXPECT_NE(second.output.find(expected), std::string::npos) << "wanted: " << expected << "\ngot: " << second.output;
  expect_nothing_lost_nothing_half_written(exp, before);

  auto full_before = snapshot(exp);
  disk.fill();
  CommandResult third = run_cli("run " + dir + "/both.json --quiet --threads 2 --out " + out);
  EXPECT_EQ(third.exit_code, 2) << third.output;
  EXPECT_NE(third.output.find("cannot write " + exp + "/"), std::string::npos) << third.output;
  EXPECT_NE(third.output.find("No space left on device"), std::string::npos) << third.output;
  EXPECT_EQ(changed_files(full_before, snapshot(exp)), "");
  EXPECT_EQ(temp_files(disk.path()), std::vector<std::string>{});
}

// The same story without privileges: the second invocation runs with RLIMIT_FSIZE at
// 1 MiB, so writing the 2.5 MB metrics.csv fails with EFBIG.
TEST(FullDisk, FileSizeLimitFailsTheRunTheSameWay) {
  std::string dir = temp_dir("fsize");
  write_text(dir + "/small.json", sweep_updates({20}).dump());
  write_text(dir + "/both.json", sweep_updates({20, 40000}).dump());
  const std::string out = dir + "/out", exp = out + "/full";

  CommandResult first = run_cli("run " + dir + "/small.json --quiet --threads 2 --out " + out);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto before = snapshot(exp);

  CliProcess second({"run", dir + "/both.json", "--quiet", "--threads", "2", "--out", out}, limit_file_size);
  ASSERT_GT(second.pid(), 0) << std::strerror(errno);
  second.start();
  ASSERT_TRUE(second.wait_exit(120 * shared_device_slack())) << second.output();
  EXPECT_EQ(second.exit_code(), 2) << second.output();
  const std::string expected =
      "asgdsim: run " + kBigRun + ": cannot write " + exp + "/" + kBigRun + "/metrics.csv: File too large";
  EXPECT_NE(second.output().find(expected), std::string::npos)
      << "wanted: " << expected << "\ngot: " << second.output();
  expect_nothing_lost_nothing_half_written(exp, before);
}

// ---- the second signal ----

namespace {

// A run that takes minutes unless interrupted.
json long_run() {
  return {{"name", "long"},
          {"model", {{"type", "quadratic"}, {"dim", 4}}},
          {"train", {{"lr", 0.01}}},
          {"stop", {{"updates", 100000000}}},
          {"eval", {{"every", 100}, {"unit", "updates"}}},
          {"cluster", {{"workers", 2}}},
          {"engines", json::array({json{{"type", "async"}}})}};
}

bool wait_for(const std::function<bool()>& done, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Whether SIGINT is pending for process `pid` (sent, not yet taken by a thread).
bool sigint_pending(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  unsigned long long pending = 0;
  for (std::string line; std::getline(status, line);)
    if (line.rfind("ShdPnd:", 0) == 0 || line.rfind("SigPnd:", 0) == 0)
      pending |= std::stoull(line.substr(line.find(':') + 1), nullptr, 16);
  return pending & (1ull << (SIGINT - 1));
}

// Blocks the graceful stop of an asgdsim writing into `exp_dir` at its last step: after
// a run's files are written, index.csv is written under an exclusive flock on
// exp_dir/.index.lock (run_parts.cpp, write_index), which this holds until release().
// (The temporary files of write_file_atomic cannot be stood in the way of any more:
// their names are unpredictable and they are created with O_EXCL.)
class BlockedIndexWrite {
 public:
  explicit BlockedIndexWrite(const std::string& exp_dir) {
    fs::create_directories(exp_dir);
    const std::string lock = exp_dir + "/.index.lock";
    fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      why_ = lock + ": " + std::strerror(errno);
      release();
    }
  }
  ~BlockedIndexWrite() { release(); }
  bool ok() const { return fd_ >= 0; }
  const std::string& why() const { return why_; }
  void release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string why_;
};

// Starts asgdsim on long_run() with its graceful stop blocked, and waits until its signal
// handlers are installed (meta.json is written after that, as the simulation starts).
// The index lock is taken once meta.json is there: before its first run asgdsim writes
// index.csv too (its runs pending), under the same lock, which must not be blocked.
struct BlockedRun {
  std::string out, run_dir;
  std::unique_ptr<CliProcess> process;
  std::unique_ptr<BlockedIndexWrite> block;

  explicit BlockedRun(const std::string& dir) : out(dir + "/out"), run_dir(out + "/long/async-seed1") {
    write_text(dir + "/long.json", long_run().dump());
    process = std::make_unique<CliProcess>(
        std::vector<std::string>{"run", dir + "/long.json", "--quiet", "--threads", "2", "--out", out});
  }
  // Empty when started; else what went wrong.
  std::string start() {
    if (process->pid() <= 0) return std::string("fork: ") + std::strerror(errno);
    process->start();
    if (!wait_for([&] { return fs::exists(run_dir + "/meta.json") || !process->running(); }, 60))
      return "no meta.json after 60 s";
    if (!process->running()) return "exited early: " + std::to_string(process->exit_code()) + " " + process->output();
    block = std::make_unique<BlockedIndexWrite>(out + "/long");
    if (!block->ok()) return "cannot block the graceful stop: " + block->why();
    return "";
  }
  // Sends SIGINT and waits until a thread has taken it: two SIGINTs pending at once are one.
  void interrupt() {
    ASSERT_EQ(::kill(process->pid(), SIGINT), 0) << std::strerror(errno);
    ASSERT_TRUE(wait_for([&] { return !sigint_pending(process->pid()); }, 30)) << "SIGINT still pending after 30 s";
  }
};

}  // namespace

// The first SIGINT starts the graceful stop, which here can never finish; the second must
// end the process by itself, with 130, without writing what the graceful stop writes.
TEST(SecondSignal, ExitsAtOnceWhileTheGracefulStopIsBlocked) {
  BlockedRun run(temp_dir("sig"));
  std::string failed = run.start();
  ASSERT_EQ(failed, "");
  run.interrupt();
  // The run's own files are written; the graceful stop then waits for the index lock.
  ASSERT_TRUE(wait_for([&] { return fs::exists(run.run_dir + "/summary.json") || !run.process->running(); }, 30));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(run.process->running()) << "the first SIGINT alone ended it: exit " << run.process->exit_code() << "\n"
                                      << run.process->output();

  auto sent = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(run.process->pid(), SIGINT), 0);
  ASSERT_TRUE(run.process->wait_exit(5)) << "still running 5 s after the second SIGINT";
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  EXPECT_EQ(run.process->exit_code(), 130) << run.process->output();
  std::cerr << "exited " << took << " s after the second SIGINT\n";
  // Left from the handler: nothing of what the graceful stop writes after the block
  // (index.csv is the one written before the run started: the run pending).
  const std::string index = read_file(run.out + "/long/index.csv");
  EXPECT_NE(index.find("\nasync-seed1,async,1,pending,"), std::string::npos) << index;
}

// The control for the test above: after one SIGINT the process stays, and what it is
// blocked on is the graceful stop's last step: released, it writes index.csv and exits 130.
TEST(SecondSignal, FirstSignalAloneWaitsForTheGracefulStop) {
  BlockedRun run(temp_dir("sig"));
  std::string failed = run.start();
  ASSERT_EQ(failed, "");
  run.interrupt();
  ASSERT_TRUE(wait_for([&] { return fs::exists(run.run_dir + "/summary.json") || !run.process->running(); }, 30));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ASSERT_TRUE(run.process->running()) << "exit " << run.process->exit_code() << "\n" << run.process->output();
  EXPECT_NE(read_file(run.out + "/long/index.csv").find(",pending,"), std::string::npos);  // not yet rewritten
  run.block->release();
  ASSERT_TRUE(run.process->wait_exit(30)) << "still running 30 s after the index lock was released";
  EXPECT_EQ(run.process->exit_code(), 130) << run.process->output();
  std::string index = read_file(run.out + "/long/index.csv");
  EXPECT_NE(index.find("\nasync-seed1,async,1,interrupted,"), std::string::npos) << index;
}
