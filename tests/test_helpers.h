// tests/test_helpers.h — running small experiments from tests: a temp folder per test,
// the library path (resolve_experiment + run_experiment) and the CLI binary, and readers
// for the run-folder files.
#pragma once
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <gtest/gtest.h>
#include "experiments/config/config.h"
#include "experiments/run/runner.h"
#include "tests/test_paths.h"
#include "kernels/exec.h"

namespace asgd::testing {

// Tests measure in their own folders: the calibration cache (experiments/run/calibration.h)
// is off unless the environment names one (the cache's own tests set it per test), so no
// test reads a trace another test or an earlier run of the suite left, nor writes one to ~.
[[maybe_unused]] static const bool kCalibrationCacheOff = ::setenv("ASGDSIM_CACHE_DIR", "off", /*overwrite=*/0) == 0;

inline std::string temp_dir(const std::string& tag) {
  std::string base = std::filesystem::temp_directory_path().string() + "/asgd_" + tag + "_" +
                     std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  return base;
}

// Whether this build's kernels are CUDA's, and how much longer a wall-clock bound on a
// child run may be there: ctest's parallel tests share one GPU by time-slicing its
// contexts, and a tiny model's steps are bound by kernel launches. On an H100, hardening
// rows that pass alone in about 10 s took over 60 s beside 15 other tests, and a
// 40,000-update run took 109 s.
inline bool on_cuda() { return std::string(kernels_backend()) == "CUDA"; }
inline double shared_device_slack() { return on_cuda() ? 4.0 : 1.0; }

// Whether slow tests run at their reduced size: in a sanitizer build (scripts/sanitize.sh:
// ASan+UBSan or TSan), where code runs 5 to 15 times slower, unless ASGD_TEST_SIZE says
// "full" or "reduced". A test that trains or sweeps for long runs the same code at a
// reduced size and leaves the assertions that need the full size (an accuracy) to the
// Release build, which ctest runs at full size. docs/ci.md lists these tests and how the
// reduced size was checked to execute the same code (scripts/reduced_coverage.sh).
inline bool reduced_size() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  bool sanitized = true;
#else
  bool sanitized = false;
#endif
#else
  bool sanitized = false;
#endif
  const char* size = std::getenv("ASGD_TEST_SIZE");
  if (size && std::string(size) == "full") return false;
  if (size && std::string(size) == "reduced") return true;
  return sanitized;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a config through the library; returns the experiment folder.
inline std::string run_config(const nlohmann::json& cfg, const std::string& out, int threads = 2) {
  Experiment exp = resolve_experiment(cfg, "test", ".");
  RunnerOptions opts;
  opts.out_dir = out;
  opts.threads = threads;
  opts.quiet = true;
  EXPECT_EQ(run_experiment(exp, opts), 0);
  return out + "/" + cfg.at("name").get<std::string>();
}

// The one run of `cfg` (one engine, no sweep), run into a fresh folder: the run's folder.
inline std::string run_one(const nlohmann::json& cfg, const std::string& tag, int threads = 2) {
  std::string dir = run_config(cfg, temp_dir(tag), threads);
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_directory()) return entry.path().string();
  ADD_FAILURE() << "no run folder in " << dir;
  return dir;
}

// A run folder's summary.json.
inline nlohmann::json summary_at(const std::string& run_dir) {
  return nlohmann::json::parse(read_file(run_dir + "/summary.json"));
}

// metrics.csv as a column -> values map.
struct Metrics {
  std::vector<std::string> header;
  std::vector<std::vector<double>> rows;
  std::vector<double> column(const std::string& name) const {
    size_t c = 0;
    while (c < header.size() && header[c] != name) ++c;
    std::vector<double> out;
    if (c == header.size()) return out;
    for (const auto& r : rows) out.push_back(r[c]);
    return out;
  }
};

inline Metrics read_metrics(const std::string& path) {
  Metrics m;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::stringstream hs(line);
  for (std::string f; std::getline(hs, f, ',');) m.header.push_back(f);
  while (std::getline(in, line)) {
    std::stringstream ls(line);
    std::vector<double> row;
    for (std::string f; std::getline(ls, f, ',');) row.push_back(std::strtod(f.c_str(), nullptr));
    m.rows.push_back(row);
  }
  return m;
}

// f(w) = 1/2 sum_i h_i w_i^2 (starting at w = 1), 512 nominal samples per epoch, batch 8,
// every compute time exactly 10 ms, one row per update.
inline nlohmann::json quadratic_config(const std::string& name, const std::vector<double>& h, int workers, double lr,
                                       double noise = 0.0) {
  return nlohmann::json{
      {"name", name},
      {"seed", 3},
      {"model", {{"type", "quadratic"}, {"dim", h.size()}, {"curvature", h}, {"noise", noise}, {"init", 1.0}}},
      {"data", {{"type", "none"}, {"samples", 512}}},
      {"train", {{"batch_size", 8}, {"lr", lr}}},
      {"stop", {{"updates", 30}}},
      {"eval", {{"every", 1}, {"unit", "updates"}}},
      {"cluster", {{"workers", workers}, {"compute", {{"dist", "constant"}, {"value", 0.01}, {"per", "step"}}}}},
      {"engines", nlohmann::json::array({nlohmann::json{{"type", "async"}}})}};
}

inline double quadratic_loss(const std::vector<double>& h, const std::vector<double>& w) {
  double f = 0;
  for (size_t i = 0; i < h.size(); ++i) f += 0.5 * h[i] * w[i] * w[i];
  return f;
}

// The issues of a config that must not validate, as "path: message" lines.
inline std::string config_issues(const nlohmann::json& c) {
  try {
    resolve_experiment(c, "t", ".");
  } catch (const ConfigError& e) {
    std::string out;
    for (const auto& i : e.issues()) out += i.path + ": " + i.message + "\n";
    return out;
  }
  ADD_FAILURE() << "the config validated: " << c.dump();
  return "";
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// What the shell command line `cmd` prints on stdout, and its exit status.
inline CommandResult run_shell(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The asgdsim under test with `args` (a shell command line's arguments), stdout and stderr together.
inline CommandResult run_cli(const std::string& args) {
  return run_shell(std::string(asgd::testing::binary()) + " " + args + " 2>&1");
}
// A shell command line, stdout and stderr together.
inline CommandResult run_command(const std::string& command) { return run_shell("{ " + command + "\n} 2>&1"); }

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// The asgdsim binary as a child process, for tests that signal it or limit its resources
// (run_cli above goes through a shell and waits). The child is forked at construction but
// execs only on start(), so a test can first prepare files named after pid(). `in_child`
// runs in the child just before exec: async-signal-safe calls only (setrlimit, sigaction).
// stdout and stderr go to one pipe, read while waiting. A child still running when this is
// destroyed is killed (SIGKILL) and reaped.
class CliProcess {
 public:
  explicit CliProcess(const std::vector<std::string>& args, void (*in_child)() = nullptr) {
    std::vector<std::string> all = {asgd::testing::binary()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;  // built before fork: the child must not allocate
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2], gate[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(gate, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ < 0) {
      for (int fd : {out[0], out[1], gate[0], gate[1]}) ::close(fd);
      return;
    }
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(out[1], STDERR_FILENO);
      char go = 0;
      if (::read(gate[0], &go, 1) != 1) ::_exit(127);  // the test gave up before start()
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);  // exec keeps the mask: start clean
      if (in_child) in_child();
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(gate[0]);
    out_fd_ = out[0];
    gate_fd_ = gate[1];
    ::fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  }
  CliProcess(const CliProcess&) = delete;
  CliProcess& operator=(const CliProcess&) = delete;
  ~CliProcess() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (gate_fd_ >= 0) ::close(gate_fd_);
    if (out_fd_ >= 0) ::close(out_fd_);
  }

  pid_t pid() const { return pid_; }
  void start() {
    char go = 1;
    if (gate_fd_ >= 0 && ::write(gate_fd_, &go, 1) == 1) {
      ::close(gate_fd_);
      gate_fd_ = -1;
    }
  }
  // Reaps the child if it has exited; false then (and when it never started).
  bool running() {
    drain();
    if (pid_ <= 0 || exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
    exited_ = true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    drain();
    return false;
  }
  // Waits up to `seconds` for the child to exit; true when it has.
  bool wait_exit(double seconds) {
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (running()) {
      if (std::chrono::steady_clock::now() > until) return false;
      ::usleep(5000);
    }
    return exited_;
  }
  // As run_cli reports it: the exit status, or 128 + the signal that ended it; -1 before.
  int exit_code() const { return exit_code_; }
  const std::string& output() {
    drain();
    return output_;
  }

 private:
  void drain() {
    char buf[4096];
    ssize_t n;
    while (out_fd_ >= 0 && (n = ::read(out_fd_, buf, sizeof(buf))) > 0) output_.append(buf, size_t(n));
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, gate_fd_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  std::string output_;
};

}  // namespace asgd::testing
