// tests/test_helpers.h — running small experiments from tests: a temp folder per test,
// the library path (resolve_experiment + run_experiment) and the CLI binary, and readers
// for the run-folder files.
#pragma once
#include <unistd.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <gtest/gtest.h>
#include "experiments/config.h"
#include "experiments/runner.h"

namespace asgd::testing {

inline std::string temp_dir(const std::string& tag) {
  std::string base = std::filesystem::temp_directory_path().string() + "/asgd_" + tag + "_" +
                     std::to_string(::getpid()) + "_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  return base;
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

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_cli(const std::string& args) {
  CommandResult r;
  std::string cmd = std::string(ASGD_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace asgd::testing
