// tests/test_checkpoint.cpp — checkpoints (docs/reliability.md, "Checkpoints"). A run
// interrupted at an update (the path SIGINT takes: --interrupt-after-updates raises the
// same flag the handler does) and made again resumes from its checkpoint and writes the
// files an uninterrupted run writes, byte for byte (summary.json but wall_seconds): every
// engine form in tests/test_conformance.cpp; here, under the features whose state is the
// hardest to carry (momentum and Adam state, jobs waiting on busy links, server costs,
// failures, forced staleness, compression's residuals, the warm-up, traces). Also: a real
// SIGINT at a random moment and a kill -9 between periodic checkpoints; what is refused
// and said; a checkpoint of another build or config is not resumed, a damaged one fails
// the run and is removed; the archive's own checks. The interruption point of each case is drawn at
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
#include "sim/base/state_archive.h"
#include "run_checks.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;
namespace fs = std::filesystem;

namespace {

TEST(Checkpoint, RunStateFeaturesResumeByteIdentical) {
  struct Case {
    std::string tag;
    json engine;
    std::function<void(json&)> set;
  };
  const json async = {{"type", "async"}}, sync = {{"type", "sync"}};
  const std::vector<Case> cases = {
      {"server_costs", async,
       [](json& c) {
         c["cluster"]["server"] = {{"update_seconds", 0.0004}, {"send_seconds", 0.00005}};
       }},
      {"sync_server_costs", sync,
       [](json& c) {
         c["cluster"]["server"] = {{"update_seconds", 0.0004}};
       }},
      {"failures", async,
       [](json& c) {
         c["cluster"]["failures"] = {{"rate", 20}, {"down_time", 0.005}};
       }},
      {"sync_failures", sync,
       [](json& c) {
         c["cluster"]["failures"] = {{"rate", 10}, {"down_time", 0.005}};
       }},
      {"adam", async,
       [](json& c) {
         c["train"] = {{"batch_size", 8}, {"lr", 0.002}, {"optimizer", "adam"}};
       }},
      {"forced_staleness", async,
       [](json& c) {
         c["staleness"] = {{"mode", "uniform"}, {"tau", 4}};
       }},
      {"staleness_at_apply", async,
       [](json& c) {
         c["staleness"] = {{"mode", "fixed"}, {"tau", 2}, {"at", "apply"}};
       }},
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
         c["data"] = {{"type", "sparse_synthetic"}, {"features", 3000},   {"nnz", 8}, {"classes", 3},
                      {"train_samples", 600},       {"test_samples", 200}};
         c["train"] = {{"batch_size", 8}, {"lr", 0.01}, {"optimizer", "adam"}};
       }},
      {"sparse_dc_asgd", {{"type", "async"}, {"delay_compensation", 0.04}}, [](json& c) {
         c["model"] = {{"type", "sparse_softmax"}};
         c["data"] = {{"type", "sparse_synthetic"}, {"features", 3000},   {"nnz", 8}, {"classes", 3},
                      {"train_samples", 600},       {"test_samples", 200}};
         c["train"]["momentum"] = 0;
       }}};
  for (const Case& k : cases) {
    json c = small_mlp_config(k.engine, 60);
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
  const json cfg = small_mlp_config({{"type", "async"}}, reduced_size() ? 3000 : 20000);
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
  const json cfg = small_mlp_config({{"type", "sync"}}, reduced_size() ? 2000 : 15000);
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
  json cfg = small_mlp_config({{"type", "async"}}, 200000);
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
  const CommandResult off = run_cli("run " + dir + "/c.json --out " + dir +
                                    "/off --checkpoint-every 0 "
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
  const json cfg = small_mlp_config({{"type", "async"}}, 60);
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
  auto again = [&](const std::string& tag) {
    return run_cli("run " + out + "/" + tag + "/c.json --out " + out + "/" + tag);
  };
  {  // another commit in the header: starts over, says why, and ends as the reference
    const std::string run = interrupted("build", [](std::string& text) {
      const size_t at = text.find("\"git_commit\":\"");
      ASSERT_NE(at, std::string::npos);
      text[at + 14] = text[at + 14] == '0' ? '1' : '0';
    });
    const CommandResult r = again("build");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(
        r.output.find("cannot be resumed from: it was written by another build or for another config (git_commit"),
        std::string::npos)
        << r.output;
    json meta;
    ASSERT_TRUE(read_json(run + "/meta.json", meta));
    EXPECT_FALSE(meta.contains("resumed"));
    expect_same_results(dir, run);
  }
  {  // a header without the run's place (a hand-edited file): starts over, saying which key
    const std::string run = interrupted("header", [](std::string& text) {
      const size_t at = text.find("\"time\":");
      ASSERT_NE(at, std::string::npos);
      text.replace(at, 7, "\"tine\":");
    });
    const CommandResult r = again("header");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("cannot be resumed from: its header is not readable (time: missing required key (a "
                            "number >= 0: virtual seconds when it was written)); starting the run over"),
              std::string::npos)
        << r.output;
    expect_same_results(dir, run);
  }
  {  // a header line that is not an object, then one with a negative update count: the same
    const std::string run = interrupted("list", [](std::string& text) {
      const size_t first = text.find('\n'), second = text.find('\n', first + 1);
      ASSERT_NE(second, std::string::npos);
      text.replace(first + 1, second - first - 1, "[1]");
    });
    const CommandResult r = again("list");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("cannot be resumed from: its header is not readable (expected an object, got [1] (list)); "
                            "starting the run over"),
              std::string::npos)
        << r.output;
    expect_same_results(dir, run);
    interrupted("negative", [](std::string& text) {
      const size_t at = text.find("\"updates\":");
      ASSERT_NE(at, std::string::npos);
      text.replace(at, 10, "\"updates\":-");
    });
    const CommandResult n = again("negative");
    EXPECT_NE(n.output.find("cannot be resumed from: its header is not readable (updates: expected an integer in [0, "
                            "1e+15], got -"),
              std::string::npos)
        << n.output;
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
  const json cfg = small_mlp_config({{"type", "sync"}}, 60);
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
