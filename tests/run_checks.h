// tests/run_checks.h — whole runs compared file by file: a run folder's result files, the
// same config on other thread counts (DESIGN.md: byte-identical for any --threads), and a
// run interrupted and made again against the uninterrupted run (docs/reliability.md,
// "Checkpoints"). Used by the engine conformance suite (tests/test_conformance.cpp) and
// by the feature tests that check the same promises under their own configs.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "experiments/run/run_parts.h"
#include "sim/base/interrupt.h"
#include "test_helpers.h"

namespace asgd::testing {

// A small run: an MLP on synthetic data, 4 workers with exponential compute times (1 ms)
// over a network whose links queue (so pulls wait to be served), momentum, a row every 7
// updates; the experiment "ck", seed 5, one engine.
inline nlohmann::json small_mlp_config(const nlohmann::json& engine, uint64_t updates = 120) {
  using nlohmann::json;
  return {{"name", "ck"},
          {"seed", 5},
          {"model", {{"type", "mlp"}, {"hidden", {16}}}},
          {"data",
           {{"type", "synthetic"}, {"classes", 4}, {"features", 10}, {"train_samples", 600}, {"test_samples", 200}}},
          {"train", {{"batch_size", 8}, {"lr", 0.05}, {"momentum", 0.9}}},
          {"stop", {{"updates", updates}}},
          {"eval", {{"every", 7}, {"unit", "updates"}}},
          {"cluster",
           {{"workers", 4},
            {"compute", {{"dist", "exponential"}, {"mean", 0.001}}},
            {"network", {{"latency", 0.0002}, {"bandwidth", 2e6}}}}},
          {"engines", json::array({engine})}};
}

// The draw of the interruption points: ASGD_TEST_SEED, else a fresh seed (printed).
inline std::mt19937_64& interruption_draws() {
  static std::mt19937_64 rng = [] {
    const char* s = std::getenv("ASGD_TEST_SEED");
    const uint64_t seed = s ? std::strtoull(s, nullptr, 10) : std::random_device{}();
    std::printf("interruption points drawn with ASGD_TEST_SEED=%llu\n", (unsigned long long)seed);
    return std::mt19937_64(seed);
  }();
  return rng;
}
// An interruption point in [lo, hi].
inline uint64_t draw_update(uint64_t lo, uint64_t hi) {
  return std::uniform_int_distribution<uint64_t>(lo, hi)(interruption_draws());
}

// Runs `cfg` into `out` through the library; the exit code. The interruption flag is
// cleared afterwards (asgdsim would have exited; the next run of this process must not
// see it).
inline int run_into(const nlohmann::json& cfg, const std::string& out, uint64_t interrupt_after = 0,
                    double every = kDefaultCheckpointSeconds, int threads = 2) {
  Experiment exp = resolve_experiment(cfg, "test", ".");
  RunnerOptions opts;
  opts.out_dir = out;
  opts.threads = threads;
  opts.quiet = true;
  opts.interrupt_after_updates = interrupt_after;
  opts.checkpoint_every = every;
  const int code = run_experiment(exp, opts);
  interrupt_count().store(0);
  return code;
}

// A run folder's result files that exist, summary.json without wall_seconds (and, with
// `with_config`, config.json).
inline std::map<std::string, std::string> results(const std::string& run_dir, bool with_config = false) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> files;
  for (const char* f : {"metrics.csv", "staleness.csv", "workers.csv", "trace.json", "partition.csv"})
    if (fs::exists(run_dir + "/" + f)) files[f] = read_file(run_dir + "/" + f);
  if (with_config) files["config.json"] = read_file(run_dir + "/config.json");
  nlohmann::json s = summary_at(run_dir);
  s.erase("wall_seconds");
  files["summary.json"] = s.dump(1);
  return files;
}

// The folder of the one run of `cfg` in the experiment folder under `out`.
inline std::string run_dir_of(const std::string& out, const nlohmann::json& cfg) {
  namespace fs = std::filesystem;
  const std::string exp = out + "/" + cfg.at("name").get<std::string>();
  for (const auto& e : fs::directory_iterator(exp))
    if (e.is_directory() && fs::exists(e.path() / "config.json")) return e.path().string();
  return exp;
}

// The same result files, byte for byte (`what` says what differs between the two).
inline void expect_same_results(const std::string& a, const std::string& b, bool with_config = false,
                                const std::string& what = "") {
  const auto ra = results(a, with_config), rb = results(b, with_config);
  ASSERT_TRUE(ra.count("metrics.csv")) << a << " has no metrics.csv";
  ASSERT_EQ(ra.size(), rb.size()) << a << " and " << b << " hold other files " << what;
  for (const auto& [name, bytes] : ra)
    EXPECT_TRUE(bytes == rb.at(name)) << name << " differs between " << a << " and " << b << " " << what;
}

// --threads 1: the run's own thread computes everything; 2: it and one pool thread; 3: it
// and two (more threads than a 2-core machine has). Every run of `c` (`runs`: the run
// folders' names) gives the same files on 1 thread as on each of `others`.
inline void expect_thread_count_invariant(const nlohmann::json& c, const std::vector<std::string>& runs,
                                          const std::vector<int>& others = {2, 3}) {
  const std::string d1 = run_config(c, temp_dir("det1"), 1);
  for (int threads : others) {
    const std::string d2 = run_config(c, temp_dir("det" + std::to_string(threads)), threads);
    for (const auto& run : runs)
      expect_same_results(d1 + "/" + run, d2 + "/" + run, /*with_config=*/true,
                          "(--threads 1 and " + std::to_string(threads) + ")");
  }
}

// Interrupted after `at` updates, then made again: the files of the uninterrupted run
// (`reference`: its run folder, made on 2 threads; "": made here).
inline void expect_resume_identical(const nlohmann::json& cfg, uint64_t at, const std::string& tag,
                                    std::string reference = "") {
  namespace fs = std::filesystem;
  SCOPED_TRACE(tag + ", interrupted after " + std::to_string(at) + " updates");
  const std::string out = temp_dir("ck-" + tag);
  if (reference.empty()) {
    const std::string ref = temp_dir("ck-ref-" + tag);
    ASSERT_EQ(run_into(cfg, ref), 0);
    reference = run_dir_of(ref, cfg);
  }
  ASSERT_EQ(run_into(cfg, out, at), 130);
  const std::string dir = run_dir_of(out, cfg);
  ASSERT_TRUE(fs::exists(dir + "/checkpoint.bin"));
  const nlohmann::json stopped = summary_at(dir);
  EXPECT_EQ(stopped["status"], "interrupted");
  const uint64_t stopped_at = stopped["updates"].get<uint64_t>();
  EXPECT_GE(stopped_at, at);  // (the first point with no server update under way)
  ASSERT_EQ(run_into(cfg, out), 0);
  EXPECT_FALSE(fs::exists(dir + "/checkpoint.bin")) << "a finished run keeps no checkpoint";
  nlohmann::json meta;
  ASSERT_TRUE(read_json(dir + "/meta.json", meta));
  EXPECT_EQ(meta["resumed"]["updates"].get<uint64_t>(), stopped_at);
  expect_same_results(reference, dir);
}

}  // namespace asgd::testing
