// tests/test_checkpoint.cpp — checkpoints (docs/reliability.md, "Checkpoints"). A run
// interrupted at an update (the path SIGINT takes: --interrupt-after-updates raises the
// same flag the handler does) and made again resumes from its checkpoint and writes the
// files an uninterrupted run writes, byte for byte (summary.json but wall_seconds): for
// async, sync and diloco, and under the features whose state is the hardest to carry
// (momentum and Adam state, jobs waiting on busy links, server costs, failures, forced
// staleness, compression's residuals, the warm-up, traces). Also: a real SIGINT at a
// random moment and a kill -9 between periodic checkpoints; what is refused and said; a
// checkpoint of another build or config is not resumed, a damaged one fails the run and
// is removed; the archive's own checks. The interruption point of each case is drawn at
// random (printed; ASGD_TEST_SEED fixes the draw).
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>
#include <nlohmann/json.hpp>
#include "experiments/run/run_parts.h"
#include "sim/base/interrupt.h"
#include "sim/base/state_archive.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;
namespace fs = std::filesystem;

namespace {

// An MLP on synthetic data, 4 workers with exponential compute times over a network
// whose links queue (so pulls wait to be served), momentum, a row every 7 updates.
json config(const json& engine, uint64_t updates = 120) {
  return {{"name", "ck"},
          {"seed", 5},
          {"model", {{"type", "mlp"}, {"hidden", {16}}}},
          {"data", {{"type", "synthetic"}, {"classes", 4}, {"features", 10}, {"train_samples", 600}, {"test_samples", 200}}},
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
std::mt19937_64& draws() {
  static std::mt19937_64 rng = [] {
    const char* s = std::getenv("ASGD_TEST_SEED");
    const uint64_t seed = s ? std::strtoull(s, nullptr, 10) : std::random_device{}();
    std::printf("test_checkpoint: interruption points drawn with ASGD_TEST_SEED=%llu\n", (unsigned long long)seed);
    return std::mt19937_64(seed);
  }();
  return rng;
}
uint64_t draw_update(uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(draws()); }

// Runs `cfg` into `out` through the library; the exit code. The interruption flag is
// cleared afterwards (asgdsim would have exited; the next run of this process must not
// see it).
int run_into(const json& cfg, const std::string& out, uint64_t interrupt_after = 0,
             double every = kDefaultCheckpointSeconds) {
  Experiment exp = resolve_experiment(cfg, "test", ".");
  RunnerOptions opts;
  opts.out_dir = out;
  opts.threads = 2;
  opts.quiet = true;
  opts.interrupt_after_updates = interrupt_after;
  opts.checkpoint_every = every;
  const int code = run_experiment(exp, opts);
  interrupt_count().store(0);
  return code;
}

// A run folder's result files, summary.json without wall_seconds.
std::map<std::string, std::string> results(const std::string& run_dir) {
  std::map<std::string, std::string> files;
  for (const char* f : {"metrics.csv", "staleness.csv", "workers.csv", "trace.json", "partition.csv"})
    if (fs::exists(run_dir + "/" + f)) files[f] = read_file(run_dir + "/" + f);
  json s = summary_at(run_dir);
  s.erase("wall_seconds");
  files["summary.json"] = s.dump(1);
  return files;
}

std::string run_dir_of(const std::string& out, const json& cfg) {
  const std::string exp = out + "/" + cfg.at("name").get<std::string>();
  for (const auto& e : fs::directory_iterator(exp))
    if (e.is_directory() && fs::exists(e.path() / "config.json")) return e.path().string();
  return exp;
}

void expect_same_results(const std::string& a, const std::string& b) {
  const auto ra = results(a), rb = results(b);
  ASSERT_EQ(ra.size(), rb.size());
  for (const auto& [name, bytes] : ra) EXPECT_TRUE(bytes == rb.at(name)) << name << " differs between " << a << " and " << b;
}

// Interrupted after `at` updates, then made again: the files of the uninterrupted run.
void expect_resume_identical(const json& cfg, uint64_t at, const std::string& tag) {
  SCOPED_TRACE(tag + ", interrupted after " + std::to_string(at) + " updates");
  const std::string ref = temp_dir("ck-ref-" + tag), out = temp_dir("ck-" + tag);
  ASSERT_EQ(run_into(cfg, ref), 0);
  ASSERT_EQ(run_into(cfg, out, at), 130);
  const std::string dir = run_dir_of(out, cfg);
  ASSERT_TRUE(fs::exists(dir + "/checkpoint.bin"));
  const json stopped = summary_at(dir);
  EXPECT_EQ(stopped["status"], "interrupted");
  const uint64_t stopped_at = stopped["updates"].get<uint64_t>();
  EXPECT_GE(stopped_at, at);  // (the first point with no server update under way)
  ASSERT_EQ(run_into(cfg, out), 0);
  EXPECT_FALSE(fs::exists(dir + "/checkpoint.bin")) << "a finished run keeps no checkpoint";
  json meta;
  ASSERT_TRUE(read_json(dir + "/meta.json", meta));
  EXPECT_EQ(meta["resumed"]["updates"].get<uint64_t>(), stopped_at);
  expect_same_results(run_dir_of(ref, cfg), dir);
}

TEST(Checkpoint, AsyncResumesByteIdentical) {
  expect_resume_identical(config({{"type", "async"}}), draw_update(1, 119), "async");
}

TEST(Checkpoint, SyncResumesByteIdentical) {
  expect_resume_identical(config({{"type", "sync"}}), draw_update(1, 119), "sync");
}

TEST(Checkpoint, DilocoResumesByteIdentical) {
  json c = config({{"type", "diloco"}, {"steps", 4}}, 40);
  c["train"] = {{"batch_size", 8}, {"lr", 0.002}, {"optimizer", "adamw"}};
  expect_resume_identical(c, draw_update(1, 39), "diloco");
}

// The engines' other members and forms, and the state features carry.
TEST(Checkpoint, EngineFormsResumeByteIdentical) {
  const std::vector<std::pair<std::string, json>> engines = {
      {"sync_backup_cancel", {{"type", "sync_backup"}, {"backups", 1}, {"late", "cancel"}}},
      {"sync_allreduce", {{"type", "sync"}, {"comm", "allreduce"}}},
      {"powersgd", {{"type", "sync"}, {"comm", "allreduce"}}},
      {"dc_asgd", {{"type", "async"}, {"delay_compensation", 0.04}}},
      {"ringmaster", {{"type", "ringmaster"}, {"delay_threshold", 3}, {"late", "cancel"}}},
      {"local_sgd", {{"type", "local_sgd"}, {"steps", 3}}},
      {"ssp", {{"type", "ssp"}, {"bound", 2}}},
      {"k_batch_sync", {{"type", "k_batch_sync"}, {"k", 3}, {"late", "cancel"}}},
      {"k_async", {{"type", "k_async"}, {"k", 2}}},
      {"k_async_batch", {{"type", "k_async"}, {"k", 3}, {"batch", true}}},
      {"mindflayer", {{"type", "mindflayer"}, {"trials", 2}, {"budget", 0.0015}}},
      {"streaming_diloco", {{"type", "streaming_diloco"}, {"steps", 4}, {"fragments", 2}}},
      {"easgd", {{"type", "easgd"}, {"period", 3}}},
      {"easgd_sync_paper", {{"type", "easgd"}, {"mode", "sync"}, {"period", 2}, {"order", "paper"}}},
      {"eamsgd", {{"type", "easgd"}, {"period", 2}, {"delta", 0.9}}},
      {"async_local_sgd", {{"type", "async_local_sgd"}, {"steps", 3}}}};
  for (const auto& [tag, engine] : engines) {
    json c = config(engine, 60);
    if (tag == "dc_asgd") c["train"]["momentum"] = 0;
    if (tag == "powersgd") c["cluster"]["network"]["compression"] = {{"type", "powersgd"}, {"error_feedback", true}};
    expect_resume_identical(c, draw_update(1, 59), tag);
  }
}

// A population of clients (section clients) with non-IID parts and traced speeds, under
// the three federated engines (FedAvg with over-selection cancels).
TEST(Checkpoint, FederatedPopulationResumesByteIdentical) {
  const std::vector<std::pair<std::string, json>> engines = {
      {"fedavg", {{"type", "fedavg"}, {"local_steps", 3}, {"report", 3}}},
      {"fedbuff", {{"type", "fedbuff"}, {"local_steps", 3}, {"k", 2}}},
      {"fedasync", {{"type", "fedasync"}, {"local_steps", 2}}}};
  for (const auto& [tag, engine] : engines) {
    json c = config(engine, 30);
    c["data"]["partition"] = "dirichlet_mix";
    c["data"]["partition_alpha"] = 0.3;
    c["clients"] = {{"count", 30}, {"sampling", "size"}, {"speeds", {{"dist", "lognormal"}, {"mean", 1.0}, {"sigma", 0.5}}}};
    expect_resume_identical(c, draw_update(1, 29), tag);
  }
}

TEST(Checkpoint, RunStateFeaturesResumeByteIdentical) {
  struct Case {
    std::string tag;
    json engine;
    std::function<void(json&)> set;
  };
  const json async = {{"type", "async"}}, sync = {{"type", "sync"}};
  const std::vector<Case> cases = {
      {"server_costs", async,
       [](json& c) { c["cluster"]["server"] = {{"update_seconds", 0.0004}, {"send_seconds", 0.00005}}; }},
      {"sync_server_costs", sync, [](json& c) { c["cluster"]["server"] = {{"update_seconds", 0.0004}}; }},
      {"failures", async,
       [](json& c) { c["cluster"]["failures"] = {{"rate", 20}, {"down_time", 0.005}}; }},
      {"sync_failures", sync,
       [](json& c) { c["cluster"]["failures"] = {{"rate", 10}, {"down_time", 0.005}}; }},
      {"adam", async, [](json& c) { c["train"] = {{"batch_size", 8}, {"lr", 0.002}, {"optimizer", "adam"}}; }},
      {"forced_staleness", async, [](json& c) { c["staleness"] = {{"mode", "uniform"}, {"tau", 4}}; }},
      {"staleness_at_apply", async, [](json& c) { c["staleness"] = {{"mode", "fixed"}, {"tau", 2}, {"at", "apply"}}; }},
      {"compression", async,
       [](json& c) {
         c["train"]["momentum"] = 0;
         c["cluster"]["network"]["compression"] = {{"type", "topk"}, {"ratio", 0.1}, {"error_feedback", true}};
       }},
      {"non_iid_batched", sync,
       [](json& c) {
         c["data"]["partition"] = "dirichlet";
         c["batched_gradients"] = 3;
       }},
      {"warm_up", async, [](json& c) { c["train"]["single_replica_epochs"] = 0.2; }},
      {"trace", async, [](json& c) { c["trace"] = true; }},
      {"sparse_adam", sync,
       [](json& c) {
         c["model"] = {{"type", "sparse_softmax"}};
         c["data"] = {{"type", "sparse_synthetic"}, {"features", 3000}, {"nnz", 8}, {"classes", 3},
                      {"train_samples", 600}, {"test_samples", 200}};
         c["train"] = {{"batch_size", 8}, {"lr", 0.01}, {"optimizer", "adam"}};
       }},
      {"sparse_dc_asgd", {{"type", "async"}, {"delay_compensation", 0.04}},
       [](json& c) {
         c["model"] = {{"type", "sparse_softmax"}};
         c["data"] = {{"type", "sparse_synthetic"}, {"features", 3000}, {"nnz", 8}, {"classes", 3},
                      {"train_samples", 600}, {"test_samples", 200}};
         c["train"]["momentum"] = 0;
       }}};
  for (const Case& k : cases) {
    json c = config(k.engine, 60);
    k.set(c);
    expect_resume_identical(c, draw_update(1, 59), k.tag);
  }
}

// `asgdsim run CONFIG --out OUT --quiet [extra]` as a child process; `signal` goes to it
// a random 0..jitter_ms after `file` appears (within 60 s). Its wait status.
int signalled_run(const std::string& config, const std::string& out, const std::vector<std::string>& extra,
                  const std::string& file, int signal, uint64_t jitter_ms) {
  std::vector<std::string> args = {binary(), "run", config, "--out", out, "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(file) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(draw_update(0, jitter_ms)));
  ::kill(pid, signal);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// A periodic checkpoint survives kill -9: the run made again from it writes the same
// files. The asgdsim binary, checkpointing every millisecond, is killed once its
// checkpoint is there.
TEST(Checkpoint, KilledRunResumesFromItsLastPeriodicCheckpoint) {
  const json cfg = config({{"type", "async"}}, reduced_size() ? 3000 : 20000);
  const std::string dir = temp_dir("ck-kill"), ref = temp_dir("ck-kill-ref");
  write_text(dir + "/c.json", cfg.dump());
  ASSERT_EQ(run_into(cfg, ref), 0);
  const std::string run = dir + "/out/ck/async-seed5";
  const int status = signalled_run(dir + "/c.json", dir + "/out", {"--checkpoint-every", "0.001"},
                                   run + "/checkpoint.bin", SIGKILL, 50);
  if (WIFEXITED(status)) GTEST_SKIP() << "the run ended before it was killed";  // (too fast a machine)
  ASSERT_TRUE(fs::exists(run + "/checkpoint.bin"));
  EXPECT_FALSE(fs::exists(run + "/summary.json"));
  const CommandResult again = run_cli("run " + dir + "/c.json --out " + dir + "/out");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("resuming from its checkpoint at update"), std::string::npos) << again.output;
  expect_same_results(ref + "/ck/async-seed5", run);
}

// SIGINT itself, at a random moment of a run.
TEST(Checkpoint, SigintAtARandomMomentResumesByteIdentical) {
  const json cfg = config({{"type", "sync"}}, reduced_size() ? 2000 : 15000);
  const std::string dir = temp_dir("ck-sigint"), ref = temp_dir("ck-sigint-ref");
  write_text(dir + "/c.json", cfg.dump());
  ASSERT_EQ(run_into(cfg, ref), 0);
  const std::string run = dir + "/out/ck/sync-seed5";
  const int status = signalled_run(dir + "/c.json", dir + "/out", {}, run + "/metrics.csv", SIGINT, 200);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 0) GTEST_SKIP() << "the run ended before the signal";
  ASSERT_EQ(WEXITSTATUS(status), 130);
  ASSERT_TRUE(fs::exists(run + "/checkpoint.bin"));
  const CommandResult again = run_cli("run " + dir + "/c.json --out " + dir + "/out");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  expect_same_results(ref + "/ck/sync-seed5", run);
}

// A run that cannot be checkpointed says why when interrupted, and a re-run starts it
// over: a saturated server (never idle: its queued updates are closures, not state), and
// --checkpoint-every 0. A negative interval is refused.
TEST(Checkpoint, WhatHasNoCheckpointSaysSoWhenInterrupted) {
  json cfg = config({{"type", "async"}}, 200000);
  cfg["cluster"]["workers"] = 8;
  cfg["cluster"]["server"] = {{"update_seconds", 0.1}};  // a dozen steps' time: never idle
  const std::string dir = temp_dir("ck-refused");
  write_text(dir + "/c.json", cfg.dump());
  const CommandResult r = run_cli("run " + dir + "/c.json --out " + dir + "/out --interrupt-after-updates 20");
  EXPECT_EQ(r.exit_code, 130) << r.output;
  EXPECT_NE(r.output.find("no checkpoint (for 100000 events after the interruption the server had an update under "
                          "way, or a batch of gradients was being gathered): a re-run starts it over"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir + "/out/ck/async-seed5/checkpoint.bin"));
  const CommandResult off = run_cli("run " + dir + "/c.json --out " + dir + "/off --checkpoint-every 0 "
                                    "--interrupt-after-updates 20 --set cluster.server.update_seconds=0");
  EXPECT_EQ(off.exit_code, 130) << off.output;
  EXPECT_NE(off.output.find("checkpoints are off (--checkpoint-every 0)"), std::string::npos) << off.output;
  EXPECT_FALSE(fs::exists(dir + "/off/ck/async-seed5/checkpoint.bin"));
  const CommandResult bad = run_cli("run " + dir + "/c.json --out " + dir + "/bad --checkpoint-every -1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--checkpoint-every -1: give the wall seconds between a run's checkpoints"),
            std::string::npos)
      << bad.output;
}

// A checkpoint is resumed only by the build and config that wrote it; a damaged one
// fails the run (naming the file) and is removed, so the next attempt starts over.
TEST(Checkpoint, AnotherBuildsOrADamagedCheckpointIsNotResumed) {
  const json cfg = config({{"type", "async"}}, 60);
  const std::string ref = temp_dir("ck-id-ref"), out = temp_dir("ck-id");
  ASSERT_EQ(run_into(cfg, ref), 0);
  const std::string dir = run_dir_of(ref, cfg);
  // Interrupted into OUT/tag, its checkpoint then edited by `edit`; the run's folder.
  auto interrupted = [&](const std::string& tag, const std::function<void(std::string&)>& edit) {
    const std::string o = out + "/" + tag;
    EXPECT_EQ(run_into(cfg, o, 30), 130);
    const std::string run = run_dir_of(o, cfg);
    std::string text = read_file(run + "/checkpoint.bin");
    edit(text);
    write_text(run + "/checkpoint.bin", text);
    write_text(o + "/c.json", cfg.dump());
    return run;
  };
  // The CLI makes OUT/tag's experiment again.
  auto again = [&](const std::string& tag) { return run_cli("run " + out + "/" + tag + "/c.json --out " + out + "/" + tag); };
  {  // another commit in the header: starts over, says why, and ends as the reference
    const std::string run = interrupted("build", [](std::string& text) {
      const size_t at = text.find("\"git_commit\":\"");
      ASSERT_NE(at, std::string::npos);
      text[at + 14] = text[at + 14] == '0' ? '1' : '0';
    });
    const CommandResult r = again("build");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("cannot be resumed from: it was written by another build or for another config (git_commit"),
              std::string::npos)
        << r.output;
    json meta;
    ASSERT_TRUE(read_json(run + "/meta.json", meta));
    EXPECT_FALSE(meta.contains("resumed"));
    expect_same_results(dir, run);
  }
  {  // a header without the run's place (a hand-edited file): starts over, saying so
    const std::string run = interrupted("header", [](std::string& text) {
      const size_t at = text.find("\"time\":");
      ASSERT_NE(at, std::string::npos);
      text.replace(at, 7, "\"tine\":");
    });
    const CommandResult r = again("header");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("cannot be resumed from: its header is not readable; starting the run over"),
              std::string::npos)
        << r.output;
    expect_same_results(dir, run);
  }
  {  // the state cut short: the run fails naming the file, which is gone; the next one starts over
    const std::string run = interrupted("damaged", [](std::string& text) { text.resize(text.size() - 100); });
    const CommandResult r = again("damaged");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("checkpoint.bin: truncated"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("removed it: a re-run starts the run over"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(run + "/checkpoint.bin"));
    EXPECT_EQ(again("damaged").exit_code, 0);
    expect_same_results(dir, run);
  }
}

// --rerun makes a run from its start: its checkpoint is not read, and is removed.
TEST(Checkpoint, RerunStartsOverAndRemovesTheCheckpoint) {
  const json cfg = config({{"type", "sync"}}, 60);
  const std::string out = temp_dir("ck-rerun");
  ASSERT_EQ(run_into(cfg, out, 25), 130);
  const std::string run = run_dir_of(out, cfg);
  ASSERT_TRUE(fs::exists(run + "/checkpoint.bin"));
  Experiment exp = resolve_experiment(cfg, "test", ".");
  RunnerOptions opts;
  opts.out_dir = out;
  opts.quiet = true;
  opts.replace.rerun = true;
  ASSERT_EQ(run_experiment(exp, opts), 0);
  json meta;
  ASSERT_TRUE(read_json(run + "/meta.json", meta));
  EXPECT_FALSE(meta.contains("resumed"));
  EXPECT_FALSE(fs::exists(run + "/checkpoint.bin"));
}

TEST(StateArchive, RoundTripsAndRefusesWhatItCannotRead) {
  std::string bytes;
  {
    StateArchive a(&bytes);
    a.tag("part");
    uint64_t n = 7;
    std::string s = "text";
    std::vector<float> v = {1.5f, -2.0f};
    std::vector<bool> b = {true, false, true};
    std::map<uint64_t, uint64_t> m = {{1, 2}, {3, 4}, {5, 6}};
    std::vector<std::vector<int32_t>> nested = {{1}, {}, {2, 3}};
    a.io(n), a.io(s), a.io(v), a.io(b), a.io(m), a.io(nested);
  }
  {
    StateArchive a(bytes, "x.bin");
    a.tag("part");
    uint64_t n = 0;
    std::string s;
    std::vector<float> v;
    std::vector<bool> b;
    std::map<uint64_t, uint64_t> m;
    std::vector<std::vector<int32_t>> nested;
    a.io(n), a.io(s), a.io(v), a.io(b), a.io(m), a.io(nested);
    EXPECT_TRUE(a.done());
    EXPECT_EQ(n, 7u);
    EXPECT_EQ(s, "text");
    EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
    EXPECT_EQ(b, (std::vector<bool>{true, false, true}));
    EXPECT_EQ(m, (std::map<uint64_t, uint64_t>{{1, 2}, {3, 4}, {5, 6}}));
    EXPECT_EQ(nested, (std::vector<std::vector<int32_t>>{{1}, {}, {2, 3}}));
  }
  {  // another part where this one was written
    StateArchive a(bytes, "x.bin");
    try {
      a.tag("other");
      FAIL() << "no error";
    } catch (const CheckpointError& e) {
      EXPECT_STREQ(e.what(), "x.bin: expected the part \"other\", found \"part\" (written by another layout)");
    }
  }
  {  // cut short: a count larger than the bytes left is refused before anything is allocated
    const std::string cut = bytes.substr(0, bytes.size() - 5);
    StateArchive a(cut, "x.bin");
    a.tag("part");
    uint64_t n;
    std::string s;
    std::vector<float> v;
    std::vector<bool> b;
    std::map<uint64_t, uint64_t> m;
    std::vector<std::vector<int32_t>> nested;
    a.io(n), a.io(s), a.io(v), a.io(b), a.io(m);
    EXPECT_THROW(a.io(nested), CheckpointError);
  }
}

}  // namespace
