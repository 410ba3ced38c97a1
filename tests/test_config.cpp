// tests/test_config.cpp — the config contract seen from the command line: bad input exits
// 2 with a message naming the problem and leaves no complete-looking run folder; sweeps,
// repeats, run ids, index.csv, resume; every shipped config validates.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <nlohmann/json.hpp>
#include "engines/engine_registry.h"
#include "experiments/config/resources.h"
#include "experiments/run/runner.h"
#include "sim/base/interrupt.h"
#include "sim/data/sparse_synthetic.h"
#include "sim/net/catalog.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;
namespace fs = std::filesystem;

namespace {

json tiny() {
  return json{
      {"name", "tiny"},
      {"model", {{"type", "softmax"}}},
      {"data", {{"type", "synthetic"}, {"classes", 3}, {"features", 6}, {"train_samples", 128}, {"test_samples", 64}}},
      {"train", {{"batch_size", 8}, {"lr", 0.1}}},
      {"stop", {{"updates", 10}}},
      {"eval", {{"every", 5}, {"unit", "updates"}}},
      {"cluster", {{"workers", 2}}},
      {"engines", json::array({json{{"type", "async"}}})}};
}

struct BadCase {
  std::string what;
  std::string config_text;  // written to the file as is
  std::string extra_args;
  std::vector<std::string> must_mention;
};

}  // namespace

TEST(ConfigCli, BadInputExitsTwoNamingTheProblem) {
  std::string dir = temp_dir("cfg");
  auto with = [](const std::function<void(json&)>& edit) {
    json c = tiny();
    edit(c);
    return c.dump();
  };
  std::vector<BadCase> cases = {
      {"malformed JSON", "{\"name\": \"x\",\n  \"seed\": 1,,\n}", "", {"line 2", "column"}},
      {"unknown key", with([](json& c) { c["colour"] = "red"; }), "", {"colour", "unknown key"}},
      {"misspelled key", with([](json& c) { c["train"]["lrr"] = 0.1; }), "", {"train.lrr", "did you mean 'lr'"}},
      {"wrong type", with([](json& c) { c["train"]["batch_size"] = "big"; }), "", {"train.batch_size", "integer"}},
      {"negative lr", with([](json& c) { c["train"]["lr"] = -0.1; }), "", {"train.lr", "> 0"}},
      {"empty staleness window",
       with([](json& c) {
         c["staleness"] = {{"mode", "fixed"}, {"tau", 2}, {"from_epoch", 3}, {"until_epoch", 1}};
       }),
       "",
       {"staleness.until_epoch", "not after staleness.from_epoch"}},
      {"staleness at what",
       with([](json& c) {
         c["staleness"] = {{"mode", "fixed"}, {"tau", 2}, {"at", "push"}};
       }),
       "",
       {"staleness.at", "read", "apply"}},
      {"workers = 0", with([](json& c) { c["cluster"]["workers"] = 0; }), "", {"cluster.workers", "[1, 1000000]"}},
      {"empty engines", with([](json& c) { c["engines"] = json::array(); }), "", {"engines", "non-empty"}},
      {"unknown engine",
       with([](json& c) { c["engines"][0]["type"] = "asyncc"; }),
       "",
       {"engines[0].type", "did you mean 'async'", "sync_backup"}},
      {"sweep over a missing key",
       with([](json& c) {
         c["sweep"] = {{"train.lrate", json::array({0.1, 0.2})}};
       }),
       "",
       {"sweep.train.lrate", "unknown key"}},
      {"backups < 0",
       with([](json& c) {
         c["engines"][0] = {{"type", "sync_backup"}, {"backups", -1}};
       }),
       "",
       {"engines[0].backups", "in [0, 2147483647]"}},
      {"backups >= workers",
       with([](json& c) {
         c["engines"][0] = {{"type", "sync_backup"}, {"backups", 2}};
       }),
       "",
       {"engines[0].backups", "< cluster.workers"}},
      {"period < 1",
       with([](json& c) {
         c["engines"][0] = {{"type", "easgd"}, {"period", 0}};
       }),
       "",
       {"engines[0].period", "in [1, 2147483647]"}},
      {"alpha out of range",
       with([](json& c) {
         c["engines"][0] = {{"type", "easgd"}, {"alpha", 1.5}};
       }),
       "",
       {"engines[0].alpha", "[0, 1]"}},
      {"negative distribution parameter",
       with([](json& c) {
         c["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", -1}};
       }),
       "",
       {"cluster.compute.mean", "in (0, 1000000000]"}},
      {"missing distribution parameter",
       with([](json& c) {
         c["cluster"]["compute"] = {{"dist", "pareto"}, {"scale", 1}};
       }),
       "",
       {"cluster.compute.alpha", "missing"}},
      {"model/data mismatch",
       with([](json& c) {
         c["model"] = {{"type", "linear"}};
       }),
       "",
       {"data", "regression"}},
      {"bad --set", tiny().dump(), "--set train.lr", {"KEY.PATH=VALUE"}},
      {"--set to a bad value", tiny().dump(), "--set train.momentum=2", {"train.momentum"}},
      {"batched_gradients = 0", tiny().dump(), "--set batched_gradients=0", {"batched_gradients", "[1, 1024]"}},
      {"unwritable --out", tiny().dump(), "--out /proc/asgd_cannot_write", {"/proc/asgd_cannot_write"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    std::string path = dir + "/case" + std::to_string(i) + ".json";
    write_text(path, c.config_text);
    std::string out = dir + "/out" + std::to_string(i);
    std::string args =
        c.extra_args.find("--out") == std::string::npos ? "--out " + out + " " + c.extra_args : c.extra_args;
    CommandResult r = run_cli("run " + path + " --quiet " + args);
    EXPECT_EQ(r.exit_code, 2) << c.what << ":\n" << r.output;
    for (const auto& m : c.must_mention)
      EXPECT_NE(r.output.find(m), std::string::npos) << c.what << ": message lacks '" << m << "':\n" << r.output;
    // nothing that looks like a finished run
    if (fs::exists(out)) {
      for (const auto& e : fs::recursive_directory_iterator(out)) {
        EXPECT_NE(e.path().filename(), "summary.json") << c.what;
      }
    }
  }
}

TEST(ConfigCli, AllErrorsOfAConfigAreReportedAtOnce) {
  std::string dir = temp_dir("cfg");
  json c = tiny();
  c["train"]["lr"] = -1;
  c["cluster"]["workers"] = 0;
  c["eval"]["unitt"] = "time";
  write_text(dir + "/c.json", c.dump());
  CommandResult r = run_cli("validate " + dir + "/c.json");
  EXPECT_EQ(r.exit_code, 2);
  for (const char* m : {"train.lr", "cluster.workers", "eval.unitt"})
    EXPECT_NE(r.output.find(m), std::string::npos) << m;
}

TEST(ConfigCli, MissingDataFolderIsInvalidInput) {
  std::string dir = temp_dir("cfg");
  json c = tiny();
  c["model"] = {{"type", "mlp"}, {"hidden", {8}}};
  c["data"] = {{"type", "fashion_mnist"}, {"path", dir + "/nowhere"}};
  write_text(dir + "/c.json", c.dump());
  // refused before any run (validate checks the data's files), naming the key and folder
  for (const char* cmd : {"validate ", "run "}) {
    CommandResult r = run_cli(cmd + dir + "/c.json --quiet --out " + dir + "/out");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("data.path"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("nowhere"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/out/tiny")) << "nothing is written for a config that is refused";
}

TEST(ConfigCli, SweepTimesRepeatsTimesEnginesMakesEveryRunOnce) {
  std::string dir = temp_dir("cfg");
  json c = tiny();
  c["repeats"] = 2;
  c["engines"] = json::array({json{{"type", "async"}}, json{{"type", "sync"}}});
  c["sweep"] = {{"train.lr", json::array({0.05, 0.1, 0.2})}};
  write_text(dir + "/c.json", c.dump());

  CommandResult v = run_cli("validate " + dir + "/c.json");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("12 run(s)"), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("sync-lr=0.2-seed2"), std::string::npos) << v.output;

  CommandResult r = run_cli("run " + dir + "/c.json --out " + dir + "/out --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string index = read_file(dir + "/out/tiny/index.csv");
  size_t lines = std::count(index.begin(), index.end(), '\n');
  EXPECT_EQ(lines, 13u) << index;  // header + 12
  EXPECT_EQ(index.rfind("run_id,engine,train.lr,seed,status,", 0), 0u) << index;
  std::regex completed(",completed,");
  EXPECT_EQ(std::distance(std::sregex_iterator(index.begin(), index.end(), completed), std::sregex_iterator()), 12);

  // Resume: remove two runs' summaries (as if killed half-way); a re-run completes only those.
  std::string one = dir + "/out/tiny/async-lr=0.1-seed1", two = dir + "/out/tiny/sync-lr=0.2-seed2";
  fs::remove(one + "/summary.json");
  fs::remove(two + "/summary.json");
  std::string untouched = read_file(dir + "/out/tiny/async-lr=0.05-seed1/summary.json");
  CommandResult again = run_cli("run " + dir + "/c.json --out " + dir + "/out");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(std::count(again.output.begin(), again.output.end(), '\n') - 2, 12) << again.output;  // - results, report
  size_t skipped = 0, pos = 0;
  while ((pos = again.output.find("skipped", pos)) != std::string::npos) ++skipped, ++pos;
  EXPECT_EQ(skipped, 10u) << again.output;
  EXPECT_TRUE(fs::exists(one + "/summary.json"));
  EXPECT_TRUE(fs::exists(two + "/summary.json"));
  EXPECT_EQ(read_file(dir + "/out/tiny/async-lr=0.05-seed1/summary.json"), untouched);
}

TEST(ConfigCli, ADifferentConfigNeverOverwritesARunFolderSilently) {
  std::string dir = temp_dir("cfg");
  write_text(dir + "/c.json", tiny().dump());
  ASSERT_EQ(run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out").exit_code, 0);
  std::string before = read_file(dir + "/out/tiny/async-seed1/metrics.csv");
  CommandResult r = run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out --set train.lr=0.3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("different config"), std::string::npos) << r.output;
  // and says which keys differ, with both values
  EXPECT_NE(r.output.find("(train.lr: 0.1 there, 0.3 now)"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir + "/out/tiny/async-seed1/metrics.csv"), before);
  EXPECT_EQ(run_cli("run " + dir + "/c.json --quiet --supersede --out " + dir + "/out --set train.lr=0.3").exit_code,
            0);
  EXPECT_NE(read_file(dir + "/out/tiny/async-seed1/metrics.csv"), before);
}

// ---- trace.json: a process per run; spans carry step, staleness and bytes ----

TEST(Trace, EachRunIsAProcessAndSpansCarryStepStalenessAndBytes) {
  std::string dir = temp_dir("trace");
  json c = tiny();
  c["repeats"] = 2;
  c["cluster"]["workers"] = 3;
  c["stop"]["updates"] = 30;
  c["cluster"]["network"] = {{"latency", 0.001}};  // messages take time: pull and push spans
  write_text(dir + "/c.json", c.dump());
  CommandResult r = run_cli("run " + dir + "/c.json --quiet --trace --out " + dir + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int k = 0; k < 2; ++k) {
    const std::string run_dir = dir + "/out/tiny/async-seed" + std::to_string(k + 1);
    json trace = json::parse(read_file(run_dir + "/trace.json"));
    json summary = json::parse(read_file(run_dir + "/summary.json"));
    std::map<uint64_t, uint64_t> traced_staleness;
    int named = 0;
    std::map<std::pair<int, int64_t>, int> spans_of_step;
    for (const auto& e : trace["traceEvents"]) {
      EXPECT_EQ(e["pid"], k + 1) << e.dump();  // the run's index in the experiment, 1-based
      if (e["ph"] == "M" && e["name"] == "process_name") {
        EXPECT_EQ(e["args"]["name"], "async-seed" + std::to_string(k + 1));
        ++named;
      }
      if (e["ph"] != "X") continue;
      const std::string name = e["name"];
      if (name == "pull" || name == "compute" || name == "push") {
        ASSERT_TRUE(e.contains("args") && e["args"].contains("step")) << e.dump();
        spans_of_step[{e["tid"].get<int>(), e["args"]["step"].get<int64_t>()}]++;
        EXPECT_EQ(e["args"].contains("bytes"), name != "compute") << e.dump();
        if (name != "compute") {  // a parameter-sized message: softmax 6 features x 3 classes + 3 biases, fp32
          EXPECT_EQ(e["args"]["bytes"], (6 * 3 + 3) * 4) << e.dump();
        }
        if (name == "compute" && e["args"].contains("staleness"))
          traced_staleness[e["args"]["staleness"].get<uint64_t>()]++;
      }
    }
    EXPECT_EQ(named, 1);
    // a step's pull, compute and push (the last steps may be cut off by the run's end)
    int whole = 0;
    for (const auto& [key, n] : spans_of_step) {
      EXPECT_LE(n, 3) << "worker track " << key.first << " step " << key.second;
      whole += n == 3;
    }
    EXPECT_GE(whole, 30);
    // every applied gradient's compute span carries its staleness: the histogram is staleness.csv's
    std::map<uint64_t, uint64_t> hist;
    std::istringstream csv(read_file(run_dir + "/staleness.csv"));
    std::string line;
    std::getline(csv, line);
    while (std::getline(csv, line))
      hist[std::stoull(line.substr(0, line.find(',')))] = std::stoull(line.substr(line.find(',') + 1));
    EXPECT_EQ(traced_staleness, hist);
    EXPECT_GT(hist.size(), 1u);  // 3 async workers: gradients of several staleness values
  }
}

// ---- sweeps as Hydra-style tools do them ----

TEST(Sweeps, SetSweepKeyAddsOneKeyBesideTheOthers) {
  std::string dir = temp_dir("sweep");
  json c = tiny();
  c["sweep"] = {{"cluster.workers", json::array({2, 4})}};
  write_text(dir + "/c.json", c.dump());
  CommandResult r = run_cli("validate " + dir + "/c.json --set 'sweep.train.lr=[0.05,0.1]'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4 run(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("async-workers=4-lr=0.05-seed1"), std::string::npos) << r.output;
  // again: replaces that key's values, keeps the others
  r = run_cli("validate " + dir + "/c.json --set 'sweep.train.lr=[0.05,0.1]' --set 'sweep.train.lr=[0.2]'");
  EXPECT_NE(r.output.find("2 run(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("async-workers=2-lr=0.2-seed1"), std::string::npos) << r.output;
}

TEST(Sweeps, AnEngineKeyAppliesOnlyToEnginesThatHaveIt) {
  std::string dir = temp_dir("sweep");
  json c = tiny();
  c["engines"] = json::array({json{{"type", "async"}}, json{{"type", "sync_backup"}}});
  c["sweep"] = {{"engine.backups", json::array({0, 1})}, {"train.lr", json::array({0.05, 0.1})}};
  write_text(dir + "/c.json", c.dump());
  CommandResult r = run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // async: a run per lr, without the key; sync_backup: every point
  std::string index = read_file(dir + "/out/tiny/index.csv");
  EXPECT_EQ(std::count(index.begin(), index.end(), '\n'), 1 + 2 + 4) << index;
  EXPECT_EQ(index.rfind("run_id,engine,engine.backups,train.lr,seed,", 0), 0u) << index;
  EXPECT_NE(index.find("\nasync-lr=0.05-seed1,async,,0.05,1,completed,"), std::string::npos) << index;
  EXPECT_NE(index.find("\nsync_backup-backups=1-lr=0.1-seed1,sync_backup,1,0.1,1,completed,"), std::string::npos)
      << index;
  json async_cfg = json::parse(read_file(dir + "/out/tiny/async-lr=0.05-seed1/config.json"));
  EXPECT_EQ(async_cfg["run"]["sweep"], json({{"train.lr", 0.05}}));
  EXPECT_FALSE(async_cfg["engine"].contains("backups"));

  // A key no engine has: one error naming the key and the engines that have it.
  c["sweep"] = {{"engine.backup", json::array({0, 1})}, {"train.lr", json::array({0.05, 0.1})}};
  write_text(dir + "/d.json", c.dump());
  CommandResult bad = run_cli("validate " + dir + "/d.json");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("sweep.engine.backup: no engine of this experiment (async, sync_backup) has the parameter "
                            "'backup'"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 2) << bad.output;  // header + one
}

TEST(Sweeps, AnObjectSweptGivesReadableRunIds) {
  std::string dir = temp_dir("sweep");
  json c = tiny();
  c["sweep"] = {{"model", json::array({json{{"type", "mlp"}, {"hidden", {32, 16}}}, json{{"type", "softmax"}}})}};
  write_text(dir + "/c.json", c.dump());
  CommandResult r = run_cli("validate " + dir + "/c.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("async-model=mlp_hidden32x16-seed1 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("async-model=softmax-seed1 "), std::string::npos) << r.output;
}

TEST(Sweeps, AnUnknownKeyIsReportedOnceWithoutInternalKeys) {
  std::string dir = temp_dir("sweep");
  json c = tiny();
  c["sweep"] = {{"train.lr", json::array({0.05, 0.1})}};
  write_text(dir + "/c.json", c.dump());
  CommandResult r = run_cli("validate " + dir + "/c.json --set foo=1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 2) << r.output;  // header + one
  EXPECT_NE(r.output.find("foo: unknown key"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" run,"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" engine,"), std::string::npos) << r.output;
  CommandResult s = run_cli("validate " + dir + "/c.json --set 'sweep.foo=[1,2]'");
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_EQ(std::count(s.output.begin(), s.output.end(), '\n'), 2) << s.output;
  EXPECT_NE(s.output.find("sweep.foo: unknown key"), std::string::npos) << s.output;
  EXPECT_EQ(s.output.find(" run,"), std::string::npos) << s.output;
}

TEST(ConfigCli, RunFolderHasTheContractFiles) {
  std::string dir = temp_dir("cfg");
  write_text(dir + "/c.json", tiny().dump());
  ASSERT_EQ(run_cli("run " + dir + "/c.json --quiet --trace --out " + dir + "/out").exit_code, 0);
  std::string run = dir + "/out/tiny/async-seed1";
  for (const char* f :
       {"config.json", "meta.json", "metrics.csv", "summary.json", "staleness.csv", "workers.csv", "trace.json"})
    EXPECT_TRUE(fs::exists(run + "/" + f)) << f;
  json summary = json::parse(read_file(run + "/summary.json"));
  for (const char* k : {"status", "engine", "seed", "final", "time", "updates", "gradients", "dropped_gradients",
                        "staleness", "wall_seconds"})
    EXPECT_TRUE(summary.contains(k)) << k;
  json config = json::parse(read_file(run + "/config.json"));
  EXPECT_EQ(config["train"]["momentum"], 0.0);  // defaults are filled in
  EXPECT_EQ(config["engine"]["type"], "async");
  json trace = json::parse(read_file(run + "/trace.json"));
  EXPECT_GT(trace["traceEvents"].size(), 10u);
  Metrics m = read_metrics(run + "/metrics.csv");
  for (const char* col : {"time", "updates", "gradients", "samples", "epoch", "lr", "train_loss", "test_loss",
                          "test_accuracy", "worker_loss", "mean_staleness"})
    EXPECT_FALSE(m.column(col).empty()) << col;
}

TEST(ConfigCli, EveryShippedConfigValidates) {
  for (const auto& e : fs::directory_iterator(std::string(asgd::testing::source_dir()) + "/experiments/configs")) {
    if (e.path().extension() != ".json") continue;
    CommandResult r = run_cli("validate " + e.path().string());
    EXPECT_EQ(r.exit_code, 0) << e.path() << "\n" << r.output;
  }
}

TEST(ConfigCli, ListNamesEveryEngineModelAndDistribution) {
  CommandResult r = run_cli("list");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* name :
       {"async", "sync", "sync_backup", "easgd", "quadratic", "linear", "logistic", "softmax", "mlp", "cnn",
        "fashion_mnist", "synthetic", "exponential", "pareto", "lognormal", "trace", "geometric"})
    EXPECT_NE(r.output.find(name), std::string::npos) << name;
}

TEST(ConfigCli, UsageErrorsExitTwo) {
  EXPECT_EQ(run_cli("").exit_code, 2);
  EXPECT_EQ(run_cli("frobnicate").exit_code, 2);
  EXPECT_EQ(run_cli("run").exit_code, 2);
  EXPECT_EQ(run_cli("run x.json --no-such-flag").exit_code, 2);
  EXPECT_EQ(run_cli("run /nonexistent/c.json").exit_code, 2);
}

// ---- the command line explains itself ----

// Every command answers --help, -h and `asgdsim help COMMAND` alike, exit 0, and names
// every option it takes.
TEST(CliHelp, EveryCommandDescribesEveryOption) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"run",
       {"--set", "--out", "--threads", "--jobs", "--shard", "--rerun", "--supersede", "--wait", "--quiet", "--trace",
        "--help"}},
      {"validate", {"--set", "--help"}},
      {"cluster", {"--set", "--out", "--rerun", "--supersede", "--quiet", "--trace", "--help"}},
      {"index", {"--quiet", "--wait", "--help"}},
      {"list", {"--markdown", "--help"}},
      {"bench", {"--threads", "--quick", "--only", "--json", "--repeats", "--data", "--batched-gradients", "--help"}}};
  for (const auto& [cmd, options] : commands) {
    CommandResult help = run_cli(cmd + " --help");
    EXPECT_EQ(help.exit_code, 0) << cmd << "\n" << help.output;
    EXPECT_EQ(help.output.rfind("usage: ", 0), 0u) << help.output;
    for (const auto& o : options)
      EXPECT_NE(help.output.find(o), std::string::npos) << cmd << " " << o << "\n" << help.output;
    for (const std::string& other : {cmd + " -h", "help " + cmd, cmd + " x.json --jobs 2 --help"}) {
      CommandResult r = run_cli(other);
      EXPECT_EQ(r.exit_code, 0) << other;
      EXPECT_EQ(r.output, help.output) << other;
    }
  }
  // cluster's help leaves out what it refuses (--threads, --jobs, --shard, --wait)
  EXPECT_EQ(run_cli("cluster --help").output.find("  --jobs"), std::string::npos);
  EXPECT_EQ(run_cli("help frobnicate").exit_code, 2);
  EXPECT_EQ(run_cli("frobnicate --help").exit_code, 2);
}

TEST(CliHelp, TopLevelHelpListsTheCommands) {
  for (const char* form : {"--help", "-h", "help"}) {
    CommandResult r = run_cli(form);
    EXPECT_EQ(r.exit_code, 0) << form;
    for (const char* cmd : {"run", "cluster", "validate", "index", "list", "bench"})
      EXPECT_NE(r.output.find(std::string("\n  ") + cmd + " "), std::string::npos) << form << " " << cmd << "\n"
                                                                                   << r.output;
    EXPECT_NE(r.output.find("COMMAND --help"), std::string::npos);
  }
}

// ---- progress: the experiment as a whole on a terminal, nothing on a pipe ----

TEST(Progress, FormatShowsRunsDoneAndTheOverallEta) {
  EXPECT_EQ(experiment_progress(0, 4, 0.0, 0.0), "runs 0/4 done    0%");
  // 1.5 of 4 runs' work in 30 s: 2.5 more at that rate is 50 s
  EXPECT_EQ(experiment_progress(1, 4, 1.5, 30.0), "runs 1/4 done   38%  ETA 50s");
  EXPECT_EQ(experiment_progress(2, 10, 2.5, 100.0), "runs 2/10 done   25%  ETA 5m00s");
  EXPECT_EQ(experiment_progress(1, 100, 1.0, 3600.0), "runs 1/100 done    1%  ETA 99h00m");
  EXPECT_EQ(experiment_progress(4, 4, 4.0, 12.0), "runs 4/4 done  100%");
}

TEST(Progress, NotATerminalGetsNoProgressAndQuietStillSaysWhere) {
  std::string dir = temp_dir("progress");
  write_text(dir + "/c.json", tiny().dump());
  CommandResult r = run_cli("run " + dir + "/c.json --set repeats=3 --jobs 2 --out " + dir + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\033'), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ETA"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[3/3] async-seed3: completed"), std::string::npos) << r.output;
  CommandResult quiet = run_cli("run " + dir + "/c.json --set repeats=3 --quiet --rerun --out " + dir + "/out");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output, "results: " + dir + "/out/tiny\n");
}

TEST(Progress, ATerminalSeesTheExperimentAsAWhole) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1) to make a terminal";
  std::string dir = temp_dir("progress_tty");
  write_text(dir + "/c.json", tiny().dump());
  // script(1) runs the command on a pseudo-terminal: stderr is a terminal there.
  std::string cmd = "script -qec '" + std::string(asgd::testing::binary()) + " run " + dir +
                    "/c.json --set repeats=3 --jobs 2 --out " + dir + "/out' /dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  // two lanes may both end a run before either line is drawn
  EXPECT_TRUE(out.find("runs 1/3 done") != std::string::npos || out.find("runs 2/3 done") != std::string::npos) << out;
  EXPECT_NE(out.find("runs 3/3 done  100%"), std::string::npos) << out;
  EXPECT_NE(out.find("results: "), std::string::npos) << out;
}

// Every shipped study runs end to end at a reduced size: a sliver of an epoch, one seed,
// 500 images for each evaluation (the full test set of the CNN studies' 80 runs took over
// 30 minutes under ASan).
// Every shipped config runs at a reduced size: exit 0 and no run left pending. One test
// per config (ctest and the sanitizer lanes spread them over the cores). A Fashion-MNIST
// config without its own data.train_limit trains on the first 6000 images for 0.2 epochs:
// the 1200 samples that 0.02 epochs of the whole set are, without loading 60000 images
// per process (the full set's loading is FashionMnistTest.RealDataset's and the golden
// runs' business).
std::vector<std::string> shipped_configs() {
  std::vector<std::string> stems;
  for (const auto& e : fs::directory_iterator(std::string(asgd::testing::source_dir()) + "/experiments/configs"))
    if (e.path().extension() == ".json") stems.push_back(e.path().stem().string());
  std::sort(stems.begin(), stems.end());
  return stems;
}

class ShippedConfig : public ::testing::TestWithParam<std::string> {};

TEST_P(ShippedConfig, RunsAtReducedSize) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "Fashion-MNIST not installed";
  const std::string path = std::string(asgd::testing::source_dir()) + "/experiments/configs/" + GetParam() + ".json";
  const json config = json::parse(read_file(path));
  std::string size = " --set stop.epochs=0.02";
  const json data = config.value("data", json::object());
  if (data.value("type", "") == "fashion_mnist" && !data.contains("train_limit"))
    size = " --set stop.epochs=0.2 --set data.train_limit=6000";
  const std::string dir = temp_dir("cfg");
  CommandResult r = run_cli("run " + path + " --quiet --out " + dir + size +
                            " --set repeats=1 --set eval.test_samples=500 --set eval.train_samples=500");
  EXPECT_EQ(r.exit_code, 0) << path << "\n" << r.output;
  std::string index = read_file(dir + "/" + GetParam() + "/index.csv");
  EXPECT_EQ(index.find(",pending,"), std::string::npos) << index;
}

// Every run of every shipped config reads back from its typed parts as its config.json
// holds it: each settings key with a getter (Field::get) from RunSettings, and the engine,
// model and data objects from their bound configs (keys()). What config.json shows is
// what the run computes with, key by key (numbers compare by value: 1 and 1.0 are equal).
TEST_P(ShippedConfig, ReadsBackFromItsTypedParts) {
  const std::string path = std::string(asgd::testing::source_dir()) + "/experiments/configs/" + GetParam() + ".json";
  const Experiment e = resolve_experiment(json::parse(read_file(path)), path, fs::path(path).parent_path().string());
  ASSERT_FALSE(e.runs.empty());
  size_t compared = 0;
  for (const RunSpec& run : e.runs) {
    for (const char* name : {"top", "train", "stop", "eval", "cluster", "cluster.compute", "cluster.network",
                             "cluster.network.compression", "cluster.server", "cluster.stragglers", "cluster.failures",
                             "real", "clients"}) {
      json at = run.config;  // the section's object in config.json ("top": the config itself)
      if (std::string(name) != "top")
        for (std::string rest = name; !rest.empty();) {
          const size_t dot = rest.find('.');
          at = at.value(rest.substr(0, dot), json::object());
          rest = dot == std::string::npos ? "" : rest.substr(dot + 1);
        }
      for (const auto& f : settings_section(name).fields) {
        if (!f.get) continue;
        ASSERT_TRUE(at.contains(f.info.name)) << run.run_id << ": " << name << "." << f.info.name;
        EXPECT_EQ(f.get(run.settings), at[f.info.name]) << run.run_id << ": " << name << "." << f.info.name;
        ++compared;
      }
    }
    for (const auto& [what, keys] : {std::pair<const char*, json>{"engine", run.bound_engine->keys()},
                                     {"model", run.bound_model->keys()},
                                     {"data", run.bound_data->keys()}})
      for (const auto& [key, value] : keys.items()) {
        EXPECT_EQ(value, run.config[what].value(key, json())) << run.run_id << ": " << what << "." << key;
        ++compared;
      }
  }
  EXPECT_GT(compared, 0u);
}

INSTANTIATE_TEST_SUITE_P(Configs, ShippedConfig, ::testing::ValuesIn(shipped_configs()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string name = p.param;  // a gtest name: letters, digits, '_'
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

// A diverged run is a result: status "diverged", exit 0, its rows kept, the next run goes on.
TEST(Reliability, DivergenceIsAResultNotACrash) {
  std::string dir = temp_dir("rel");
  json c = {{"name", "div"},
            {"model", {{"type", "quadratic"}, {"dim", 10}, {"curvature", 1.0}}},
            {"train", {{"lr", 3.0}}},
            {"stop", {{"updates", 1000}}},
            {"eval", {{"every", 5}, {"unit", "updates"}, {"divergence_bound", 1e4}}},
            {"cluster", {{"workers", 1}}},
            {"engines", json::array({json{{"type", "async"}}, json{{"type", "sync"}}})}};
  write_text(dir + "/c.json", c.dump());
  CommandResult r = run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* run : {"async-seed1", "sync-seed1"}) {
    json s = json::parse(read_file(dir + "/out/div/" + std::string(run) + "/summary.json"));
    EXPECT_EQ(s["status"], "diverged") << run;
    Metrics m = read_metrics(dir + "/out/div/" + std::string(run) + "/metrics.csv");
    ASSERT_GE(m.rows.size(), 2u);
    EXPECT_GT(m.column("train_loss").back(), 1e4);
    EXPECT_LT(m.column("updates").back(), 1000);
  }
}

// SIGINT flushes the rows so far, marks the run interrupted, exits 130; a re-run of the
// experiment runs the unfinished run again instead of skipping it.
TEST(Reliability, InterruptMarksTheRunAndARerunRedoesIt) {
  std::string dir = temp_dir("rel");
  json c = {
      {"name", "intr"},
      {"model", {{"type", "quadratic"}, {"dim", 20000}, {"curvature", {{"min", 0.01}, {"max", 1.0}}}, {"noise", 0.01}}},
      {"train", {{"lr", 0.01}}},
      {"stop", {{"updates", 1000000000}}},
      {"eval", {{"every", 200}, {"unit", "updates"}}},
      {"cluster", {{"workers", 4}}},
      {"engines", json::array({json{{"type", "async"}}})}};
  write_text(dir + "/c.json", c.dump());
  auto run_and_interrupt = [&](const std::string& flags) {
    // The signal comes 3 s after the run has started (its meta.json is written), not
    // after the process has; on a GPU the CUDA context is made after meta.json, which took
    // over 1.5 s on an H100. The run cannot finish first: 10^9 updates take minutes.
    const std::string meta = dir + "/out/intr/async-seed1/meta.json";
    std::string cmd = "rm -f " + meta + "; " + std::string(asgd::testing::binary()) + " run " + dir + "/c.json " +
                      flags + " --out " + dir + "/out & pid=$!; for i in $(seq 300); do [ -e " + meta +
                      " ] && break; sleep 0.1; done; sleep 3; kill -INT $pid; wait $pid; echo rc=$?";
    FILE* p = ::popen(("bash -c '" + cmd + "' 2>&1").c_str(), "r");
    std::string out;
    char buf[512];
    while (p && std::fgets(buf, sizeof(buf), p)) out += buf;
    if (p) ::pclose(p);
    return out;
  };
  std::string first = run_and_interrupt("--quiet");
  EXPECT_NE(first.find("rc=130"), std::string::npos) << first;
  std::string run = dir + "/out/intr/async-seed1";
  json s = json::parse(read_file(run + "/summary.json"));
  EXPECT_EQ(s["status"], "interrupted");
  Metrics m = read_metrics(run + "/metrics.csv");
  EXPECT_GE(m.rows.size(), 2u);
  EXPECT_EQ(m.column("updates").back(), s["updates"].get<double>());
  EXPECT_LT(s["updates"].get<int64_t>(), 1000000000);
  EXPECT_NE(read_file(dir + "/out/intr/index.csv").find(",interrupted,"), std::string::npos);

  std::string second = run_and_interrupt("");
  EXPECT_EQ(second.find("skipped"), std::string::npos) << second;
  EXPECT_NE(second.find("rc=130"), std::string::npos) << second;
}

// ---- --jobs: runs side by side ----

namespace {

// Runs `bash -c script` and returns its stdout and stderr together.
std::string shell(const std::string& script) {
  FILE* p = ::popen(("bash -c '" + script + "' 2>&1").c_str(), "r");
  std::string out;
  char buf[512];
  while (p && std::fgets(buf, sizeof(buf), p)) out += buf;
  if (p) ::pclose(p);
  return out;
}

}  // namespace

// 2 engines x 2 sweep values x 2 repeats, run one at a time and three at a time: every
// run file is the same bytes (summary.json but for wall_seconds), and so is index.csv.
TEST(Jobs, SideBySideRunsWriteTheSameBytes) {
  std::string dir = temp_dir("jobs");
  json c = tiny();
  c["repeats"] = 2;
  c["stop"] = {{"updates", 60}};
  c["engines"] = json::array({json{{"type", "async"}}, json{{"type", "sync_backup"}, {"backups", 1}}});
  c["sweep"] = {{"train.lr", json::array({0.05, 0.2})}};
  c["cluster"]["workers"] = 3;
  write_text(dir + "/c.json", c.dump());
  CommandResult one = run_cli("run " + dir + "/c.json --trace --jobs 1 --threads 2 --out " + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  CommandResult three = run_cli("run " + dir + "/c.json --trace --jobs 3 --threads 2 --out " + dir + "/three");
  ASSERT_EQ(three.exit_code, 0) << three.output;

  // Each run's line is whole: 8 of them, in some order, then the results line.
  std::regex run_line(R"(\[[1-8]/8\] [a-z_]+-lr=0\.(05|2)-seed[12]: completed \(.*\), train_loss .*, [0-9.]+ s wall)");
  std::stringstream lines(three.output);
  std::vector<std::string> seen;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("results: ", 0) == 0 || line.rfind("report: ", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(line, run_line)) << "not a whole run line: '" << line << "'\n" << three.output;
    seen.push_back(line.substr(0, line.find(':')));
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()) - seen.begin(), 8) << three.output;

  size_t runs = 0;
  for (const auto& e : fs::directory_iterator(dir + "/one/tiny")) {
    if (!e.is_directory()) continue;
    ++runs;
    std::string a = e.path().string(), b = dir + "/three/tiny/" + e.path().filename().string();
    for (const char* f : {"config.json", "metrics.csv", "staleness.csv", "workers.csv", "trace.json"})
      EXPECT_EQ(read_file(a + "/" + f), read_file(b + "/" + f)) << e.path().filename() << "/" << f;
    json sa = json::parse(read_file(a + "/summary.json")), sb = json::parse(read_file(b + "/summary.json"));
    sa.erase("wall_seconds");
    sb.erase("wall_seconds");
    EXPECT_EQ(sa.dump(2), sb.dump(2)) << e.path().filename();
    EXPECT_EQ(json::parse(read_file(b + "/meta.json"))["jobs"], 3);
  }
  EXPECT_EQ(runs, 8u);
  EXPECT_EQ(read_file(dir + "/one/tiny/index.csv"), read_file(dir + "/three/tiny/index.csv"));
}

// A run that fails at run time is named by its run id and keeps its exit code (missing
// data: 2); the runs before it complete, and index.csv is written.
TEST(Jobs, AFailingRunNamesItsRunId) {
  std::string dir = temp_dir("jobs");
  json c = tiny();
  json good = {{"type", "synthetic"}, {"classes", 3}, {"features", 6}, {"train_samples", 128}, {"test_samples", 64}};
  // files that exist (validation passes) but are no IDX files: the run fails reading them
  fs::create_directories(dir + "/bad");
  for (const char* f :
       {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    write_text(dir + "/bad/" + f, "not an IDX file");
  json bad = {{"type", "fashion_mnist"}, {"path", dir + "/bad"}};
  c.erase("data");
  c["sweep"] = {{"data", json::array({good, bad})}};
  c["repeats"] = 2;  // runs: good seed1, good seed2, bad seed1, bad seed2
  c["stop"] = {{"updates", 2000}};
  write_text(dir + "/c.json", c.dump());
  CommandResult v = run_cli("validate " + dir + "/c.json");
  ASSERT_EQ(v.exit_code, 0) << v.output;
  std::string bad_id;
  {
    std::smatch m;
    std::regex id(R"((async-data=\S*bad\S*-seed1))");
    ASSERT_TRUE(std::regex_search(v.output, m, id)) << v.output;
    bad_id = m[1];
  }
  CommandResult r = run_cli("run " + dir + "/c.json --jobs 2 --threads 2 --out " + dir + "/out");
  EXPECT_EQ(r.exit_code, 2) << r.output;  // corrupt data is invalid input, as with --jobs 1
  EXPECT_NE(r.output.find("run " + bad_id + ": "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bad/"), std::string::npos) << r.output;
  std::string index = read_file(dir + "/out/tiny/index.csv");
  EXPECT_EQ(std::count(index.begin(), index.end(), '\n'), 5) << index;
  EXPECT_EQ(json::parse(read_file(dir + "/out/tiny/" + bad_id + "/summary.json"))["status"], "failed");
  EXPECT_NE(index.find(",failed,"), std::string::npos) << index;
  EXPECT_NE(index.find(bad_id + ",async,\"{\"\"path\"\":"), std::string::npos) << index;  // a swept object, quoted
  std::regex completed(",completed,");
  EXPECT_EQ(std::distance(std::sregex_iterator(index.begin(), index.end(), completed), std::sregex_iterator()), 2)
      << index;
}

// SIGINT: every run under way ends as interrupted (rows kept), none new starts, index.csv
// is written, exit 130.
TEST(Jobs, InterruptEndsEveryRunUnderWay) {
  std::string dir = temp_dir("jobs");
  json c = {
      {"name", "intr"},
      {"repeats", 3},
      {"model", {{"type", "quadratic"}, {"dim", 20000}, {"curvature", {{"min", 0.01}, {"max", 1.0}}}, {"noise", 0.01}}},
      {"train", {{"lr", 0.01}}},
      {"stop", {{"updates", 400000}}},
      {"eval", {{"every", 200}, {"unit", "updates"}}},
      {"cluster", {{"workers", 4}}},
      {"engines", json::array({json{{"type", "async"}}})}};
  write_text(dir + "/c.json", c.dump());
  std::string out =
      shell(std::string(asgd::testing::binary()) + " run " + dir + "/c.json --quiet --jobs 2 --threads 2 --out " + dir +
            "/out & pid=$!; sleep 1.5; kill -INT $pid; wait $pid; echo rc=$?");
  EXPECT_NE(out.find("rc=130"), std::string::npos) << out;
  for (const char* run : {"async-seed1", "async-seed2"}) {
    std::string folder = dir + "/out/intr/" + run;
    json s = json::parse(read_file(folder + "/summary.json"));
    EXPECT_EQ(s["status"], "interrupted") << run;
    Metrics m = read_metrics(folder + "/metrics.csv");
    ASSERT_GE(m.rows.size(), 1u) << run;
    EXPECT_EQ(m.column("updates").back(), s["updates"].get<double>()) << run;
  }
  EXPECT_FALSE(fs::exists(dir + "/out/intr/async-seed3/summary.json"));
  std::string index = read_file(dir + "/out/intr/index.csv");
  EXPECT_NE(index.find("async-seed1,async,1,interrupted,"), std::string::npos) << index;
  EXPECT_NE(index.find("async-seed2,async,2,interrupted,"), std::string::npos) << index;
  EXPECT_NE(index.find("async-seed3,async,3,pending,"), std::string::npos) << index;
}

TEST(Jobs, JobsBelowOneIsAUsageError) {
  std::string dir = temp_dir("jobs");
  write_text(dir + "/c.json", tiny().dump());
  CommandResult r = run_cli("run " + dir + "/c.json --jobs 0 --out " + dir + "/out");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--jobs"), std::string::npos) << r.output;
}

// ---- docs/config.md is `asgdsim list --markdown`, so the reference cannot drift ----

TEST(ConfigDocs, ConfigMdIsTheOutputOfListMarkdown) {
  CommandResult r = run_cli("list --markdown");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string committed = read_file(std::string(asgd::testing::source_dir()) + "/docs/config.md");
  if (committed == r.output) return;
  std::stringstream a(committed), b(r.output);
  std::string la, lb;
  int line = 1;
  while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
  ADD_FAILURE() << "docs/config.md is out of date (first difference at line " << line << ":\n  committed: " << la
                << "\n  generated: " << lb << ")\nRegenerate it: build/asgdsim list --markdown > docs/config.md";
}

// Inputs the config fuzzer (tests/fuzz/fuzz_config.cpp) found crashing the validator:
// each must be a plain invalid-input error naming the place.
TEST(FuzzFindings, WrongTypesAndHugeNumbersAreInvalidInputNotCrashes) {
  std::string dir = temp_dir("fuzz");
  struct Case {
    std::string text;
    std::vector<std::string> mention;
  };
  const std::string engines = R"("engines": [{"type": "async"}])";
  std::vector<Case> cases = {
      {R"({"model": {"type": 2}, )" + engines + "}", {"model.type"}},
      {R"({"name": 5, "model": {"type": "softmax"}, )" + engines + "}", {"name"}},
      {R"({"model": {"type": "logistic"}, "data": {"type": "synthetic", "classes": "two"}, )" + engines + "}",
       {"data.classes"}},
      {R"({"model": {"type": "quadratic"}, "engines": [{"type": "easgd", "mode": 7}]})", {"engines[0].mode"}},
      {R"({"seed": 7700000000000000001E824712669162, "model": {"type": "quadratic"}, )" + engines + "}",
       {"unreadable JSON", "number overflow"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string path = dir + "/f" + std::to_string(i) + ".json";
    write_text(path, cases[i].text);
    CommandResult r = run_cli("validate " + path);
    EXPECT_EQ(r.exit_code, 2) << cases[i].text << "\n" << r.output;
    for (const auto& m : cases[i].mention)
      EXPECT_NE(r.output.find(m), std::string::npos) << cases[i].text << " lacks " << m << ":\n" << r.output;
  }
  CommandResult r = run_cli("validate " + dir + "/f0.json --set seed=1e999");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("seed"), std::string::npos) << r.output;
}

// model cnn: the conv blocks are checked against the data's images, each error at the key
// of the block at fault; the lenet5 preset fills in its layers; data.image sets features.
TEST(ConfigCli, CnnLayersAreCheckedAgainstTheDatasImages) {
  std::string dir = temp_dir("cfg");
  auto cnn = [](const json& conv) {
    json c = tiny();
    c["model"] = {{"type", "cnn"}, {"conv", conv}, {"hidden", {8}}};
    c["data"]["image"] = {1, 12, 12};
    c["data"].erase("features");
    return c;
  };
  const json two_blocks =
      json::array({json{{"channels", 4}, {"kernel", 5}, {"pool", 2}}, json{{"channels", 8}, {"kernel", 5}}});
  struct Case {
    std::string what;
    json config;
    std::vector<std::string> must_mention;
  };
  json lenet_with_conv = tiny();
  lenet_with_conv["model"] = {{"type", "cnn"}, {"arch", "lenet5"}, {"conv", json::array()}};
  lenet_with_conv["data"] = {{"type", "fashion_mnist"}};
  json flat = tiny();
  flat["model"] = {{"type", "cnn"}};
  json mismatch = cnn(two_blocks);
  mismatch["data"]["features"] = 100;
  json regression = cnn(two_blocks);
  regression["data"]["task"] = "regression";
  std::vector<Case> cases = {
      {"kernel larger than its input",
       cnn(two_blocks),
       {"model.conv[1].kernel", "larger than its input 4x4x4", "12x12x1"}},
      {"pool larger than its input",
       cnn(json::array({json{{"channels", 4}, {"kernel", 3}, {"pool", 11}}})),
       {"model.conv[0].pool", "10x10x4"}},
      {"padding as large as the kernel",
       cnn(json::array({json{{"channels", 4}, {"kernel", 3}, {"padding", 3}}})),
       {"model.conv[0].padding", "smaller than the kernel"}},
      {"misspelled block key",
       cnn(json::array({json{{"channels", 4}, {"kernal", 3}}})),
       {"model.conv[0].kernal", "did you mean 'kernel'", "model.conv[0].kernel"}},
      {"no channels", cnn(json::array({json{{"kernel", 3}}})), {"model.conv[0].channels", "missing"}},
      {"conv not a list", cnn(json{{"channels", 4}}), {"model.conv", "a list"}},
      {"lenet5 with its own layers", lenet_with_conv, {"model.conv", "lenet5"}},
      {"flat synthetic data", flat, {"data.image", "[channels, height, width]"}},
      {"image of two numbers",
       [&] {
         json c = cnn(two_blocks);
         c["data"]["image"] = {12, 12};
         return c;
       }(),
       {"data.image", "[channels, height, width]"}},
      {"features against image", mismatch, {"data.features", "144"}},
      {"regression data", regression, {"data.task", "classifier"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string path = dir + "/cnn" + std::to_string(i) + ".json";
    write_text(path, cases[i].config.dump());
    CommandResult r = run_cli("validate " + path);
    EXPECT_EQ(r.exit_code, 2) << cases[i].what << ":\n" << r.output;
    for (const auto& m : cases[i].must_mention)
      EXPECT_NE(r.output.find(m), std::string::npos) << cases[i].what << ": message lacks '" << m << "':\n" << r.output;
  }

  // What they resolve to: the preset's layers, every block's defaults, features from the image.
  json lenet = tiny();
  lenet["model"] = {{"type", "cnn"}, {"arch", "lenet5"}};
  lenet["data"] = {{"type", "fashion_mnist"}};
  json m = resolve_experiment(lenet, "test", ".").runs.front().config["model"];
  EXPECT_EQ(m["conv"], json::parse(R"([{"channels":6,"kernel":5,"padding":2,"pool":2,"stride":1},
                                         {"channels":16,"kernel":5,"padding":0,"pool":2,"stride":1}])"));
  EXPECT_EQ(m["hidden"], json({120, 84}));
  json ok = cnn(json::array({json{{"channels", 4}, {"kernel", 3}, {"pool", 2}}}));
  json run = resolve_experiment(ok, "test", ".").runs.front().config;
  EXPECT_EQ(run["data"]["features"], 144);
  EXPECT_EQ(run["model"]["conv"][0], json::parse(R"({"channels":4,"kernel":3,"padding":0,"pool":2,"stride":1})"));
  EXPECT_EQ(run["model"]["activation"], "relu");
  EXPECT_EQ(run["model"]["arch"], "custom");
}

// The memory and scale estimates count the parameters of the model the run builds: the
// CNN's conv and dense layers, the sparse model's row per feature (not 0 as when only
// dense layer lists were counted).
TEST(ResourceEstimate, CountsTheParametersOfTheModelTheRunBuilds) {
  auto count = [](json c) {
    const RunSpec run = resolve_experiment(c, "test", ".").runs.front();
    return model_sizes(*run.bound_model, *run.bound_data).params;
  };
  json mlp = tiny();
  mlp["model"] = {{"type", "mlp"}, {"hidden", {5}}};
  EXPECT_EQ(count(mlp), (6 + 1) * 5 + (5 + 1) * 3);
  json lenet = tiny();
  lenet["model"] = {{"type", "cnn"}, {"arch", "lenet5"}};
  lenet["data"] = {
      {"type", "synthetic"}, {"classes", 10}, {"image", {1, 28, 28}}, {"train_samples", 64}, {"test_samples", 16}};
  EXPECT_EQ(count(lenet), 61706);  // LeNet-5 as README.md states it
  json sparse = tiny();
  sparse["model"] = {{"type", "sparse_softmax"}};
  sparse["data"] = {{"type", "sparse_synthetic"}, {"features", 5000},   {"nnz", 10}, {"classes", 3},
                    {"train_samples", 300},       {"test_samples", 100}};
  EXPECT_EQ(count(sparse), 5000 * 3 + 3);
  json quad = tiny();
  quad["model"] = {{"type", "quadratic"}, {"dim", 1000}};
  quad["data"] = {{"type", "none"}};
  EXPECT_EQ(count(quad), 1000);
}

// ---- every default written once (issue 30) ----

namespace {
// A value inside `p`'s range, for a required key (the test gives it; its default is moot).
json some_value(const ParamInfo& p) {
  if (!p.choices.empty()) return p.choices.front();
  switch (p.type) {
    case ParamType::Integer:
      return int64_t(std::max(1.0, p.min + 1));
    case ParamType::String:
      return "x";
    case ParamType::Boolean:
      return true;
    case ParamType::IntegerList:
      return json::array({1});
    case ParamType::NumberList:
      return json::array({1.0});
    default:
      return std::max(1.0, p.min + 1);
  }
}
json required_keys(const std::vector<ParamInfo>& params) {
  json o = json::object();
  for (const auto& p : params)
    if (p.required()) o[p.name] = some_value(p);
  return o;
}
// Every key of `params` that the user did not give (`given`) resolves to its declared
// default, unless `left_out` (the section's value when left out) sets it.
void expect_defaults(const std::vector<ParamInfo>& params, const json& resolved, const json& given,
                     const json& left_out, const std::string& where) {
  ASSERT_TRUE(resolved.is_object()) << where << ": " << resolved.dump();
  for (const auto& p : params) {
    if (p.required() || given.contains(p.name)) continue;
    ASSERT_TRUE(resolved.contains(p.name)) << where << "." << p.name;
    const json expected = left_out.is_object() && left_out.contains(p.name) ? left_out[p.name] : p.default_value;
    EXPECT_EQ(resolved[p.name], expected) << where << "." << p.name << " resolves to " << resolved[p.name].dump()
                                          << ", but its declaration (asgdsim list) says " << expected.dump();
  }
}
json run_config(const json& config) {
  Experiment e = resolve_experiment(config, "defaults test", ".");
  return e.runs.front().config;
}
const json kSmallest = {{"model", {{"type", "softmax"}}}, {"engines", json::array({{{"type", "async"}}})}};
}  // namespace

// What `asgdsim list` shows as each key's default is what a config that leaves the key out
// resolves to: every plain section, list item and family member (engines, models, data
// sets, distributions, staleness modes, lr schedules). The only keys that resolve to
// something else are `name` (the config file's name) and those a section sets when it is
// left out as a whole (Section::left_out: stop.epochs 1, cluster.compute's distribution).
TEST(ConfigDefaults, ListDefaultsAreWhatAConfigThatLeavesThemOutResolvesTo) {
  const json run = run_config(kSmallest);
  for (const auto& s : section_catalog()) {
    if (s.name == "model.conv[]" || s.name.find("[]") != std::string::npos || s.name.rfind("cluster.topology", 0) == 0)
      continue;  // list items and the topology: below, where they are given
    json at = run;
    if (s.name != "top") at = run.at(json::json_pointer("/" + std::regex_replace(s.name, std::regex("\\."), "/")));
    json left_out;
    if (s.name == "stop") left_out = settings_section("stop").when_left_out();
    if (s.name == "cluster.compute") left_out = settings_section("cluster.compute").when_left_out();
    expect_defaults(s.params, at, s.name == "top" ? json{{"name", 1}} : json::object(), left_out, s.name);
  }
  // the topology and its links, list items
  json c = kSmallest;
  c["cluster"] = {{"topology", {{"boxes", 1}, {"per_box", 2}}},
                  {"stragglers", {{"slow", json::array({{{"worker", 0}, {"factor", 2}}})}}},
                  {"failures", {{"events", json::array({{{"worker", 0}, {"at", 1}}})}}}};
  const json r = run_config(c);
  for (const auto& s : section_catalog()) {
    if (s.name == "cluster.topology.intra")
      expect_defaults(s.params, r["cluster"]["topology"]["intra"], {}, {}, s.name);
    if (s.name == "cluster.topology.inter")
      expect_defaults(s.params, r["cluster"]["topology"]["inter"], {}, {}, s.name);
    if (s.name == "cluster.stragglers.slow[]")
      expect_defaults(s.params, r["cluster"]["stragglers"]["slow"][0], {}, {}, s.name);
    if (s.name == "cluster.failures.events[]")
      expect_defaults(s.params, r["cluster"]["failures"]["events"][0], {}, {}, s.name);
  }
  // every engine
  for (const auto& e : engine_catalog()) {
    json cfg = kSmallest;
    cfg["engines"] = json::array({{{"type", e.name}}});
    if (find_engine_type(e.name)->needs_population) cfg["clients"] = {{"count", 100}};  // (a population's engines)
    expect_defaults(e.params, run_config(cfg)["engine"], {}, {}, "engines[" + e.name + "]");
  }
  // every topology, its required keys given
  for (const auto& t : topology_catalog()) {
    json cfg = kSmallest, given = required_keys(t.params);
    cfg["cluster"]["topology"] = given;
    cfg["cluster"]["topology"]["type"] = t.name;
    expect_defaults(t.params, run_config(cfg)["cluster"]["topology"], given, {}, "cluster.topology." + t.name);
  }
  // every staleness mode and lr schedule, their required keys given
  for (const auto& m : staleness_catalog()) {
    json cfg = kSmallest, given = required_keys(m.params);
    cfg["staleness"] = given;
    cfg["staleness"]["mode"] = m.name;
    expect_defaults(m.params, run_config(cfg)["staleness"], given, {}, "staleness." + m.name);
  }
  for (const auto& m : lr_schedule_catalog()) {
    json cfg = kSmallest, given = required_keys(m.params);
    cfg["train"]["lr_schedule"] = given;
    cfg["train"]["lr_schedule"]["type"] = m.name;
    expect_defaults(m.params, run_config(cfg)["train"]["lr_schedule"], given, {}, "train.lr_schedule." + m.name);
  }
  // every distribution, as cluster.compute
  for (const auto& d : distribution_catalog()) {
    json cfg = kSmallest, given = required_keys(d.params);
    if (d.name == "trace") given["values"] = json::array({0.01});
    if (d.name == "uniform") given["high"] = 2.0;
    cfg["cluster"]["compute"] = given;
    cfg["cluster"]["compute"]["dist"] = d.name;
    expect_defaults(d.params, run_config(cfg)["cluster"]["compute"], given, {}, "cluster.compute." + d.name);
  }
  // every model, and every data set, on data it can read
  const std::map<std::string, json> data_for = {{"quadratic", {{"type", "none"}}},
                                                {"linear", {{"type", "synthetic"}, {"task", "regression"}}},
                                                {"logistic", {{"type", "synthetic"}, {"classes", 2}}},
                                                {"softmax", {{"type", "synthetic"}}},
                                                {"mlp", {{"type", "synthetic"}}},
                                                {"cnn", {{"type", "synthetic"}, {"image", {1, 28, 28}}}},
                                                {"sparse_logistic", {{"type", "sparse_synthetic"}}},
                                                {"sparse_softmax", {{"type", "sparse_synthetic"}}},
                                                {"torch", {{"type", "torch"}}}};
  for (const auto& m : model_catalog()) {
    ASSERT_TRUE(data_for.count(m.name)) << "a new model: give it data in this test";
    json cfg = kSmallest, given = required_keys(m.params);
    cfg["model"] = given;
    cfg["model"]["type"] = m.name;
    cfg["data"] = data_for.at(m.name);
    expect_defaults(m.params, run_config(cfg)["model"], given, {}, "model." + m.name);
  }
  const std::map<std::string, std::string> model_for = {
      {"none", "quadratic"},          {"synthetic", "softmax"},
      {"fashion_mnist", "softmax"},   {"sparse_synthetic", "sparse_softmax"},
      {"svmlight", "sparse_softmax"}, {"torch", "torch"}};
  for (const auto& d : data_catalog()) {
    ASSERT_TRUE(model_for.count(d.name)) << "a new data set: give it a model in this test";
    json cfg = kSmallest, given = required_keys(d.params);
    cfg["model"] = {{"type", model_for.at(d.name)}};
    if (d.name == "svmlight") {  // validation checks that the file exists
      given["path"] = temp_dir("defaults") + "/d.svm";
      write_text(given["path"], "+1 1:0.5\n-1 2:1\n");
    }
    cfg["data"] = given;
    cfg["data"]["type"] = d.name;
    expect_defaults(d.params, run_config(cfg)["data"], given, {}, "data." + d.name);
  }
}

// RunSettings binds from the same declarations: default_settings() (every section left
// empty) holds each key's declared default where RunSettings keeps it as it is.
// A distribution object is bound once to its type's typed config and read back from it
// (BoundDistribution::spec: the Field getters): every key as validation resolved it, each
// given a value other than its default (a device's name for dist "flops"; a number of FLOP/s
// reads back as the number). And "flops" and "measured" resolve in their own entries, from
// the run's view: a constant of the model's FLOPs at the device's rate (per step: the
// batch's), and a whole-step draw that waits for its trace.
// A model object is bound once, at validation, into its type's typed config: its keys read
// back from it (every model's defaults, and a value other than the default through every
// getter of its own: quadratic's three curvature forms, cnn's arch and conv blocks), the
// run carries the bound model, and the model's own checks against the data read it.
TEST(ModelKeys, ReadBackFromTheTypedConfigAndCheckTheData) {
  std::vector<json> given;
  for (const ModelType& t : model_types()) given.push_back({{"type", t.name}});
  for (const json& g :
       {json{{"type", "quadratic"}, {"dim", 3}, {"curvature", {0.5, 2.0, 4.0}}, {"noise", 0.25}, {"init", -1.5}},
        json{{"type", "quadratic"}, {"dim", 4}, {"curvature", {{"min", 0.5}, {"max", 8.0}}}},
        json{{"type", "quadratic"}, {"curvature", 2.5}}, json{{"type", "cnn"}, {"arch", "lenet5"}},
        json{{"type", "cnn"},
             {"conv", {{{"channels", 2}, {"kernel", 3}, {"pool", 2}}}},
             {"hidden", {5}},
             {"activation", "tanh"}},
        json{{"type", "mlp"}, {"hidden", {7, 3}}, {"activation", "tanh"}},
        json{{"type", "torch"}, {"module", "m.py:make"}, {"loss", "m.py:loss"}, {"threads", 2}, {"bn_samples", 0}}})
    given.push_back(g);
  for (const json& g : given) {
    Validator v;
    std::shared_ptr<const BoundModel> bound;
    const json resolved = resolve_model(g, v, bound);
    ASSERT_TRUE(v.ok()) << g.dump();
    ASSERT_TRUE(bound) << g.dump();
    EXPECT_EQ(bound->type().name, g["type"]);
    json keys = bound->keys();
    keys["type"] = bound->type().name;
    EXPECT_EQ(keys, resolved) << g.dump();
  }
  {  // an object with an error of its own is not bound
    Validator v;
    std::shared_ptr<const BoundModel> bound;
    resolve_model({{"type", "mlp"}, {"hidden", {0}}}, v, bound);
    EXPECT_FALSE(v.ok());
    EXPECT_FALSE(bound);
  }
  // the run carries it; quadratic's size is its dim, unbuilt
  json q = tiny();
  q["model"] = {{"type", "quadratic"}, {"dim", 7}};
  q["data"] = {{"type", "none"}};
  const Experiment e = resolve_experiment(q, "test", ".");
  ASSERT_TRUE(e.runs.front().bound_model);
  const std::optional<double> unbuilt = e.runs.front().bound_model->params_unbuilt();
  ASSERT_TRUE(unbuilt.has_value());
  EXPECT_EQ(*unbuilt, 7.0);
  EXPECT_FALSE(bind_model(tiny()["model"])->params_unbuilt().has_value());
  // the typed checks against the data: quadratic's list against its dim, cnn's blocks on the images
  q["model"] = {{"type", "quadratic"}, {"dim", 3}, {"curvature", {1.0, 2.0}}};
  EXPECT_EQ(config_issues(q), "model.curvature: list has 2 values but model.dim is 3\n");
  json c = tiny();
  c["model"] = {{"type", "cnn"}, {"conv", {{{"channels", 2}, {"kernel", 5}}}}};
  c["data"].erase("features");
  c["data"]["image"] = {1, 3, 3};
  EXPECT_NE(config_issues(c).find("model.conv[0].kernel: "), std::string::npos) << config_issues(c);
  c["data"].erase("image");
  EXPECT_EQ(config_issues(c),
            "data.image: model 'cnn' reads images: give the samples' shape, [channels, height, width]\n");
}

TEST(DistributionKeys, ReadBackFromTheTypedConfigAndResolveInTheirEntries) {
  const std::map<std::string, json> given = {
      {"constant", {{"value", 0.25}}},
      {"uniform", {{"low", 0.5}, {"high", 2.0}}},
      {"exponential", {{"mean", 0.125}}},
      {"shifted_exponential", {{"shift", 0.5}, {"mean", 0.25}}},
      {"lognormal", {{"mean", 0.5}, {"sigma", 0.75}}},
      {"pareto", {{"scale", 0.5}, {"alpha", 2.5}}},
      {"weibull", {{"scale", 0.5}, {"shape", 1.5}}},
      {"flops", {{"flops", "a100-bf16"}, {"efficiency", 0.5}}},
      {"measured", {{"seconds", 0.5}, {"steps", 7}, {"min_steps", 3}, {"warmup", 2}}},
      {"trace", {{"values", {0.5, 0.25}}, {"file", "steps.csv"}}},
  };
  auto bind = [](json spec) {
    Validator v;
    std::shared_ptr<const BoundDistribution> bound;
    const json resolved = bind_distribution(spec, "cluster.compute", v, bound);
    EXPECT_TRUE(v.ok()) << spec.dump();
    return std::make_pair(resolved, bound);
  };
  for (const auto& d : distribution_catalog()) {
    ASSERT_TRUE(given.count(d.name)) << d.name << ": give its keys values here";
    json spec = given.at(d.name);
    spec["dist"] = d.name;
    const auto [resolved, bound] = bind(spec);
    ASSERT_TRUE(bound) << d.name;
    EXPECT_EQ(bound->type(), d.name);
    EXPECT_EQ(bound->spec(), resolved) << d.name;
    for (const auto& p : d.params) EXPECT_NE(resolved[p.name], p.default_value) << d.name << "." << p.name;
  }
  const auto [rate, by_rate] = bind({{"dist", "flops"}, {"flops", 2e12}});
  ASSERT_TRUE(by_rate);
  EXPECT_EQ(by_rate->spec(), rate);

  ComputeRunView view;
  view.model = "mlp";
  view.batch_size = 4;
  view.per_sample = false;
  view.flops_per_sample = [] { return std::optional<double>(1e9); };
  view.trace_name = [] { return std::string("calibration/t.trace"); };
  json flops = given.at("flops");
  flops["dist"] = "flops";
  const ComputeResolution r = bind(flops).second->resolve(view);
  ASSERT_TRUE(r.draw);
  EXPECT_EQ(r.draw->type(), "constant");
  EXPECT_DOUBLE_EQ(r.draw->make()->mean(), 1e9 / (312e12 * 0.5) * 4);
  EXPECT_EQ(r.model["device_flops"], 312e12);
  EXPECT_FALSE(r.per_step);
  view.flops_per_sample = [] { return std::optional<double>(0.0); };  // a model that counts none
  EXPECT_NE(bind(flops).second->resolve(view).error.find("needs a model that counts its FLOPs"), std::string::npos);
  json measured = given.at("measured");
  measured["dist"] = "measured";
  const ComputeResolution m = bind(measured).second->resolve(view);
  EXPECT_FALSE(m.draw);
  EXPECT_TRUE(m.per_step);
  EXPECT_EQ(m.model, json({{"dist", "measured"}, {"trace", "calibration/t.trace"}}));
  EXPECT_EQ(calibration_budget(*bind(measured).second).steps, 7);
  // every other dist draws itself
  const auto [exp_spec, exponential] = bind({{"dist", "exponential"}, {"mean", 0.5}});
  EXPECT_EQ(exponential->resolve(view).draw, exponential);
}

// dist "flops" names its devices once: every name its key's doc lists resolves to a peak,
// the list is not empty, and a name not on it resolves to nothing.
TEST(Distributions, FlopsDeviceNamesInTheDocAreTheOnesThatResolve) {
  std::string doc;
  for (const auto& d : distribution_catalog())
    for (const auto& p : d.params)
      if (d.name == "flops" && p.name == "flops") doc = p.doc;
  const size_t open = doc.rfind('('), close = doc.rfind(')');
  ASSERT_TRUE(open != std::string::npos && close > open) << doc;
  std::stringstream list(doc.substr(open + 1, close - open - 1));
  int names = 0;
  for (std::string name; std::getline(list, name, ',');) {
    name.erase(0, name.find_first_not_of(' '));
    EXPECT_GT(device_flops(name), 0) << name;
    ++names;
  }
  EXPECT_GE(names, 5);
  EXPECT_EQ(device_flops("h100-fp64"), 0);
  EXPECT_EQ(device_flops("a100-bf16"), 312e12);
}

TEST(ConfigDefaults, DefaultSettingsAreTheDeclaredDefaults) {
  const RunSettings s = default_settings();
  const json run = run_config(kSmallest);
  EXPECT_EQ(s.seed, run["seed"].get<uint64_t>());
  EXPECT_EQ(s.batch_size, run["train"]["batch_size"].get<size_t>());
  EXPECT_EQ(s.lr.lr, run["train"]["lr"].get<double>());
  EXPECT_EQ(s.workers, run["cluster"]["workers"].get<int>());
  EXPECT_EQ(s.eval_every, run["eval"]["every"].get<double>());
  EXPECT_EQ(s.eval_train_samples, run["eval"]["train_samples"].get<size_t>());
  EXPECT_EQ(s.divergence_bound, run["eval"]["divergence_bound"].get<double>());
  EXPECT_EQ(s.sparse_pull, run["cluster"]["network"]["sparse_pull"].get<bool>());
  EXPECT_EQ(s.real_worker_timeout, run["real"]["worker_timeout"].get<double>());
  // the compute distribution, bound to its typed config, reads back as the run config's keys
  ASSERT_TRUE(s.compute_dist);
  const json compute = s.compute_dist->spec();
  for (const auto& [key, value] : compute.items()) EXPECT_EQ(value, run["cluster"]["compute"][key]) << key;
  // and a run's bound settings are what the run config says, key by key where stored as is
  const Experiment e = resolve_experiment(kSmallest, "t", ".");
  const RunSettings& bound = e.runs.front().settings;
  EXPECT_EQ(bound.stop_epochs, run["stop"]["epochs"].get<double>());
  EXPECT_EQ(bound.stop_time, kNever);
  ASSERT_TRUE(bound.compute_dist);
  EXPECT_EQ(bound.compute_dist->spec(), s.compute_dist->spec());
}

// The memory estimate asks the model for its workspace per sample (issue 30/31: it used to
// count dense layers' widths only, so a CNN's activations counted for nothing). LeNet-5's
// forward activations alone are 28x28x6 + 14x14x6 + 10x10x16 + 5x5x16 + 120 + 84 + 10 =
// 8094 floats per sample; training holds at least those.
TEST(MemoryEstimate, CountsTheCnnsActivationsFromTheModel) {
  auto part_for = [](int batch) {
    json c = {{"model", {{"type", "cnn"}, {"arch", "lenet5"}}},
              {"data", {{"type", "synthetic"}, {"image", {1, 28, 28}}, {"train_samples", 64}, {"test_samples", 64}}},
              {"train", {{"batch_size", batch}}},
              {"cluster", {{"workers", 1}}},
              {"stop", {{"updates", 1}}},
              {"engines", json::array({{{"type", "async"}}})}};
    const Experiment e = resolve_experiment(c, "t", ".");
    auto dist = e.runs[0].settings.compute_dist->make();
    const MemoryEstimate m = estimate_run_memory(e.runs[0], *dist);
    for (const auto& p : m.parts)
      if (p.what.find("workspace") != std::string::npos) return p.bytes;
    return 0.0;
  };
  EXPECT_GE(part_for(256), 256.0 * 8094 * 4);
  EXPECT_GE(part_for(1024), 1024.0 * 8094 * 4);
  EXPECT_NEAR(part_for(1024) / part_for(256), 4.0, 0.01);  // grows with the batch
}

// One mapping from error types to exit codes, for run and cluster alike (issue 31:
// TimeOverflow was 2 under run and 1 under cluster, whose own mapping left it out).
TEST(Errors, OneExitCodeForEachErrorType) {
  auto code = [](auto e) { return exit_code_of(std::make_exception_ptr(e)); };
  EXPECT_EQ(code(UsageError("u")), 2);
  EXPECT_EQ(code(ConfigError("c", {{"a", "b"}})), 2);
  EXPECT_EQ(code(DataError("d")), 2);
  EXPECT_EQ(code(IoError("i")), 2);
  EXPECT_EQ(code(TimeOverflow("t")), 2);
  EXPECT_EQ(code(NoProgress("n")), 2);
  EXPECT_EQ(code(std::runtime_error("r")), 1);
  EXPECT_EQ(code(Interrupted("interrupted by a signal while calibrating")), 130);  // issue 42, item 3
  EXPECT_EQ(exit_code_of(nullptr), 0);
  // messages are printable: a NUL in a config key does not cut ConfigError's text short
  const ConfigError e("src", {{std::string("a\0b", 3), "unknown key"}});
  EXPECT_NE(std::string(e.what()).find("a\\x00b: unknown key"), std::string::npos) << e.what();
  EXPECT_EQ(error_message(std::make_exception_ptr(TimeOverflow("x"))), "virtual time overflow: x");
}

// The data family (sim/data/catalog.h): each set's declared sizes, what the memory estimate
// counts before anything is read, are those its loader makes; a set whose sizes come from
// its files reports them through check_sizes; and a type without a loader is an error,
// never another type's loader.
TEST(DataFamily, DeclaredSizesAreWhatTheLoaderMakes) {
  const std::string dir = temp_dir("data_family");
  write_text(dir + "/d.svm", "+1 1:0.5\n-1 3:1\n+1 2:2\n-1 1:1\n");
  const std::vector<json> sets = {
      {{"type", "synthetic"}, {"train_samples", 50}, {"test_samples", 20}, {"features", 7}, {"classes", 3}},
      {{"type", "synthetic"},
       {"task", "regression"},
       {"train_samples", 30},
       {"test_samples", 10},
       {"image", {2, 3, 4}}},
      {{"type", "sparse_synthetic"}, {"train_samples", 40}, {"test_samples", 8}, {"features", 100}, {"nnz", 4}},
      {{"type", "svmlight"}, {"path", "d.svm"}, {"features", 5}, {"classes", 2}}};
  for (const json& user : sets) {
    Validator v;
    std::shared_ptr<const BoundData> bound;
    const json data = resolve_data(user, "", v, bound);
    ASSERT_TRUE(v.ok()) << user.dump();
    ASSERT_TRUE(bound) << user.dump();
    const DataShape shape = bound->shape();
    DataLoadContext ctx;
    ctx.seed = 3;
    ctx.base_dir = dir;
    const DataSplit split = bound->load(ctx);
    EXPECT_EQ(shape.in, double(split.train.dim)) << user.dump();
    EXPECT_EQ(shape.classes, split.train.classes) << user.dump();
    EXPECT_EQ(shape.sparse, split.train.sparse()) << user.dump();
    if (data["type"] != "svmlight") {  // svmlight's sample counts are measured when read
      EXPECT_EQ(shape.train, double(split.train.n)) << user.dump();
      EXPECT_EQ(shape.test, double(split.test.n)) << user.dump();
    }
    if (!shape.sparse) {
      EXPECT_EQ(shape.image.size(), split.train.shape.size()) << user.dump();
    }
  }
  // features and classes left to the file: the loader tells them before a model is built
  Validator v;
  std::shared_ptr<const BoundData> svm;
  resolve_data({{"type", "svmlight"}, {"path", "d.svm"}}, "", v, svm);
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(svm);
  EXPECT_EQ(svm->shape().in, 0);
  size_t told_features = 0;
  int told_classes = 0;
  DataLoadContext ctx;
  ctx.base_dir = dir;
  ctx.check_sizes = [&](size_t features, int classes, const std::string&) {
    told_features = features;
    told_classes = classes;
  };
  const DataSplit split = svm->load(ctx);
  EXPECT_EQ(told_features, split.train.dim);
  EXPECT_EQ(told_features, 3u);
  EXPECT_EQ(told_classes, 2);
  // no samples (the quadratic's nominal data): nothing to load; an unknown type: nothing to bind
  EXPECT_THROW(bind_data({{"type", "none"}, {"samples", 10}})->load(DataLoadContext{}), std::logic_error);
  EXPECT_THROW(bind_data({{"type", "no_such_set"}}), std::invalid_argument);
}

// The data family bound once (issue #44 stage 4): every data set's keys read back from its
// typed config equal to the resolved object (non-default values too: synthetic's task and
// image, the partition keys); an object with an error of its own is not bound; the run
// carries the bound data, and the checks across model and data read it (typed).
TEST(DataKeys, ReadBackFromTheTypedConfigAndCheckTheModel) {
  std::vector<json> given;
  for (const DataType& t : data_types())
    given.push_back(t.name == "svmlight" ? json{{"type", t.name}, {"path", "d.svm"}} : json{{"type", t.name}});
  for (const json& g :
       {json{{"type", "synthetic"},
             {"task", "regression"},
             {"image", {2, 3, 4}},
             {"noise", 0.25},
             {"train_samples", 7},
             {"test_samples", 5}},
        json{{"type", "synthetic"},
             {"classes", 4},
             {"features", 9},
             {"partition", "dirichlet"},
             {"partition_alpha", 0.25}},
        json{{"type", "fashion_mnist"},
             {"path", "here"},
             {"train_limit", 100},
             {"test_limit", 10},
             {"partition", "shards"},
             {"partition_shards", 3}},
        json{{"type", "sparse_synthetic"},
             {"features", 40},
             {"nnz", 4},
             {"zipf", 0.5},
             {"classes", 3},
             {"partition", "dirichlet_mix"}},
        json{{"type", "svmlight"},
             {"path", "a.svm"},
             {"test_path", "b.svm"},
             {"holdout", 0.25},
             {"features", 12},
             {"index_base", 0},
             {"classes", 2}},
        json{{"type", "torch"}, {"module", "d.py:make"}, {"train_limit", 3}, {"test_limit", 2}, {"classes", 5}},
        json{{"type", "none"}, {"samples", 77}}})
    given.push_back(g);
  std::vector<std::shared_ptr<const BoundData>> bound_all;
  for (const json& g : given) {
    Validator v;
    std::shared_ptr<const BoundData> bound;
    const json resolved = resolve_data(g, "", v, bound);
    ASSERT_TRUE(v.ok()) << g.dump();
    ASSERT_TRUE(bound) << g.dump();
    EXPECT_EQ(bound->type().name, g["type"]);
    EXPECT_EQ(bound->object(), resolved) << g.dump();
    bound_all.push_back(bound);
  }
  {  // the typed config's values, as the loader and the checks read them
    std::shared_ptr<const BoundData> b = bound_all[given.size() - 7];
    ASSERT_TRUE(b->config_as<SyntheticSpec>());
    EXPECT_FALSE(b->config_as<SyntheticSpec>()->classification);
    EXPECT_TRUE(regression_data(*b));
    EXPECT_EQ(b->image(), (Shape{3, 4, 2}));
    EXPECT_EQ(b->shape().in, 24);
    EXPECT_FALSE(b->config_as<SparseSyntheticSpec>());
    b = bound_all[given.size() - 6];
    EXPECT_EQ(b->partition().kind, PartitionSpec::Kind::Dirichlet);
    EXPECT_EQ(b->partition().alpha, 0.25);
    // share_key: the object, with the seed for a set drawn from it
    EXPECT_EQ(b->share_key(5)["seed"], 5);
    EXPECT_FALSE(bound_all[given.size() - 5]->share_key(5).contains("seed"));
  }
  {  // an object with an error of its own is not bound
    Validator v;
    std::shared_ptr<const BoundData> bound;
    resolve_data({{"type", "synthetic"}, {"noise", -1}}, "", v, bound);
    EXPECT_FALSE(v.ok());
    EXPECT_FALSE(bound);
  }
  // the run carries it, and the checks across model and data read it
  json c = tiny();
  const Experiment e = resolve_experiment(c, "test", ".");
  ASSERT_TRUE(e.runs.front().bound_data);
  EXPECT_EQ(e.runs.front().bound_data->object(), e.runs.front().config["data"]);
  c["model"] = {{"type", "sparse_logistic"}};
  c["data"] = {{"type", "sparse_synthetic"}, {"features", 10}, {"nnz", 20}, {"classes", 3}};
  EXPECT_EQ(config_issues(c),
            "data.nnz: must be <= data.features (10): each sample takes one feature from each of nnz "
            "fields\ndata.classes: model 'sparse_logistic' is binary: use classes 2, or sparse_softmax\n");
  c["data"] = {{"type", "svmlight"}, {"path", "d.svm"}, {"classes", 3}};
  EXPECT_EQ(
      config_issues(c),
      "data.classes: model 'sparse_logistic' is binary: use classes 0 (from the labels) or 2, or sparse_softmax\n");
  c = tiny();
  c["model"] = {{"type", "linear"}};
  c["data"]["task"] = "regression";
  c["data"]["partition"] = "shards";
  EXPECT_EQ(config_issues(c),
            "data.partition: \"shards\" splits the training set by label: it needs a classification "
            "set that the model reads (use \"iid\")\n");
  c["data"]["classes"] = 2;
  c["data"].erase("partition");
  c["model"] = {{"type", "logistic"}};
  EXPECT_EQ(config_issues(c), "data.task: model 'logistic' is a classifier: use task \"classification\"\n");
  // an own error of the data's and a failing cross check: only its own (the check reads the typed config)
  c["data"]["noise"] = -1;
  EXPECT_EQ(config_issues(c), "data.noise: expected a number >= 0, got -1 (integer)\n");
}

// ---- an engine's own training keys (engines[i].train overrides train.* for that engine) ----

namespace {}  // namespace

TEST(EngineTrain, OverridesReachOnlyThatEnginesRunsAndShowInConfigJson) {
  json c = tiny();
  c["train"]["momentum"] = 0.9;
  c["engines"] =
      json::array({json{{"type", "async"}, {"train", {{"lr", 0.01}, {"momentum", 0.5}}}}, json{{"type", "sync"}},
                   json{{"type", "sync"},
                        {"name", "sync_adam"},
                        {"train", {{"optimizer", "adam"}, {"momentum", 0}, {"beta1", 0.8}}}}});
  const Experiment e = resolve_experiment(c, "t", ".");
  ASSERT_EQ(e.runs.size(), 3u);
  const RunSpec &a = e.runs[0], &s = e.runs[1], &adam = e.runs[2];
  EXPECT_DOUBLE_EQ(a.settings.lr.lr, 0.01);
  EXPECT_DOUBLE_EQ(a.settings.optimizer.momentum, 0.5);
  EXPECT_EQ(a.config["train"]["lr"], 0.01);  // config.json's train is what the run used
  EXPECT_EQ(a.config["engine"]["train"], json({{"lr", 0.01}, {"momentum", 0.5}}));  // and says what the engine changed
  EXPECT_DOUBLE_EQ(s.settings.lr.lr, 0.1);
  EXPECT_DOUBLE_EQ(s.settings.optimizer.momentum, 0.9);
  EXPECT_FALSE(s.config["engine"].contains("train"));  // an engine without overrides: config.json as before
  EXPECT_EQ(adam.settings.optimizer.kind, OptimizerKind::Adam);
  EXPECT_DOUBLE_EQ(adam.settings.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(adam.settings.lr.lr, 0.1);
  EXPECT_EQ(e.resolved["engines"][0]["train"], a.config["engine"]["train"]);  // experiment.json too
  // an lr_schedule of another type replaces train's; null removes a key (back to its default)
  c["train"]["lr_schedule"] = {{"type", "step"}, {"milestones", {1}}, {"gamma", 0.5}};
  c["engines"] = json::array(
      {json{{"type", "async"},
            {"train", {{"lr_schedule", {{"type", "cosine"}, {"total_epochs", 2}}}, {"momentum", nullptr}}}}});
  const RunSpec r = resolve_experiment(c, "t", ".").runs[0];
  EXPECT_EQ(r.config["train"]["lr_schedule"]["type"], "cosine");
  EXPECT_FALSE(r.config["train"]["lr_schedule"].contains("gamma"));
  EXPECT_DOUBLE_EQ(r.settings.optimizer.momentum, 0.0);
}

TEST(EngineTrain, ErrorsNameTheEnginesJsonPath) {
  json c = tiny();
  c["train"]["momentum"] = 0.9;
  c["engines"] =
      json::array({json{{"type", "async"}, {"train", 5}}, json{{"type", "sync"}, {"train", {{"lr", -1}, {"lrr", 2}}}},
                   json{{"type", "sync"}, {"name", "s2"}, {"train", {{"optimizer", "adam"}}}}});
  const std::string issues = config_issues(c);
  EXPECT_NE(issues.find("engines[0].train: expected an object of train keys"), std::string::npos) << issues;
  EXPECT_NE(issues.find("engines[1].train.lr: expected a number > 0"), std::string::npos) << issues;
  EXPECT_NE(issues.find("engines[1].train.lrr: unknown key (did you mean 'lr'?)"), std::string::npos) << issues;
  // train's momentum is wrong only with this engine's optimizer: said with the engine named
  EXPECT_NE(issues.find("train.momentum: train.momentum is sgd's; adam's momentum is train.beta1: set train.momentum "
                        "to 0 (train with this engine's overrides, engines[2].train)"),
            std::string::npos)
      << issues;
}

TEST(EngineTrain, ASweepReachesEveryEnginesOverridesButNotAKeyAnEngineOverrides) {
  json c = tiny();
  c["engines"] = json::array({json{{"type", "async"}, {"train", {{"lr", 0.01}}}}, json{{"type", "sync"}}});
  c["sweep"] = {{"engine.train.momentum", json::array({0, 0.5})}};
  const Experiment e = resolve_experiment(c, "t", ".");
  ASSERT_EQ(e.runs.size(), 4u);  // engine.train.* applies to every engine
  EXPECT_EQ(e.runs[1].run_id, "async-momentum=0.5-seed1");
  EXPECT_DOUBLE_EQ(e.runs[1].settings.optimizer.momentum, 0.5);
  EXPECT_DOUBLE_EQ(e.runs[1].settings.lr.lr, 0.01);  // the engine's own key kept beside the swept one
  EXPECT_DOUBLE_EQ(e.runs[3].settings.optimizer.momentum, 0.5);
  EXPECT_DOUBLE_EQ(e.runs[3].settings.lr.lr, 0.1);
  // a sweep of train.lr would not reach async's runs (its own lr wins): refused, naming both
  c["sweep"] = {{"train.lr", json::array({0.05, 0.1})}};
  const std::string issues = config_issues(c);
  EXPECT_NE(issues.find("engines[0].train.lr: overrides train.lr for this engine, but the sweep sets train.lr"),
            std::string::npos)
      << issues;
  EXPECT_NE(issues.find("sweep engine.train.lr"), std::string::npos) << issues;
}

// ---- stop at a target: the first evaluation that reaches it ends the run, completed ----

TEST(StopAtTarget, TheFirstEvaluationThatReachesItEndsTheRun) {
  json c = tiny();
  c["data"]["train_samples"] = 512;
  c["stop"] = {{"epochs", 20}};
  c["eval"] = {{"every", 0.5}, {"unit", "epochs"}};
  const Metrics whole = read_metrics(run_one(c, "target_off") + "/metrics.csv");
  const std::vector<double> acc = whole.column("test_accuracy"), loss = whole.column("train_loss");
  ASSERT_GT(acc.size(), 10u);
  // targets the uninterrupted run reaches part-way: its first row at or past each
  for (const auto& [key, value] : {std::pair<std::string, double>{"target_accuracy", acc[acc.size() / 2]},
                                   // metrics.csv's 10 digits: the run's own loss may lie a hair above
                                   {"target_loss", loss[loss.size() / 2] * (1 + 1e-9)}}) {
    const std::vector<double>& col = key == "target_accuracy" ? acc : loss;
    size_t first = 0;
    while (key == "target_accuracy" ? col[first] < value : col[first] > value) ++first;
    json t = c;
    t["stop"][key] = value;
    const std::string dir = run_one(t, "target_on");
    const Metrics stopped = read_metrics(dir + "/metrics.csv");
    ASSERT_EQ(stopped.rows.size(), first + 1) << key;  // the same rows up to the crossing, then none
    EXPECT_EQ(stopped.rows.back(), whole.rows[first]) << key;
    const json s = summary_at(dir);
    EXPECT_EQ(s["status"], "completed");
    EXPECT_EQ(s["note"].get<std::string>().rfind("reached stop." + key + " (", 0), 0u) << s["note"];
  }
  // a regression has no accuracy to reach; a target alone is no budget
  json r = tiny();
  r["model"] = {{"type", "linear"}};
  r["data"] = {{"type", "synthetic"}, {"task", "regression"}};
  r["stop"]["target_accuracy"] = 0.5;
  EXPECT_NE(config_issues(r).find("stop.target_accuracy: model 'linear' is a regression"), std::string::npos);
  c["stop"] = {{"epochs", 0}, {"target_loss", 0.1}};
  EXPECT_NE(config_issues(c).find("a target alone may never be reached"), std::string::npos);
}

// ---- warnings where a result would mislead ----

TEST(Warnings, EnginesThatSendDifferentlyOverAFreeNetwork) {
  json c = tiny();
  c["engines"] = json::array({json{{"type", "async"}}, json{{"type", "local_sgd"}, {"steps", 4}}});
  Experiment e = resolve_experiment(c, "t", ".");
  ASSERT_EQ(e.warnings.size(), 1u);
  EXPECT_NE(e.warnings[0].find("the network is free (cluster.network latency 0, bandwidth unlimited) while the engines "
                               "differ in the messages they send per gradient (async 2, local_sgd 0.5)"),
            std::string::npos)
      << e.warnings[0];
  EXPECT_EQ(e.runs[0].notes, std::vector<std::string>{"the network is free: engines that send async 2, local_sgd 0.5 "
                                                      "messages per gradient cost the same here"});
  c["cluster"]["network"] = {{"latency", 1e-4}};  // a network that costs: no warning
  EXPECT_TRUE(resolve_experiment(c, "t", ".").warnings.empty());
  c["cluster"].erase("network");
  c["engines"] = json::array({json{{"type", "async"}}, json{{"type", "sync"}}});  // both 2 a gradient
  EXPECT_TRUE(resolve_experiment(c, "t", ".").warnings.empty());
}

TEST(Warnings, ARoundLongerThanTheStopBudgetIsNamedNotCalledUntrained) {
  json c = tiny();  // 128 samples, batch 8, 2 workers: 16 steps an epoch
  c["stop"] = {{"epochs", 1}};
  c["engines"] = json::array({json{{"type", "diloco"}, {"steps", 50}}});
  const Experiment e = resolve_experiment(c, "t", ".");
  ASSERT_EQ(e.warnings.size(), 1u);
  EXPECT_NE(e.warnings[0].find("engine 'diloco': one round (an update of the model of record) takes 100 gradients, "
                               "more than the about 18 the stop budget allows (stop.epochs 1)"),
            std::string::npos)
      << e.warnings[0];
  const json s = summary_at(run_one(c, "round"));
  EXPECT_EQ(s["status"], "stalled");  // not a result about the engine, never "completed"
  EXPECT_EQ(s["updates"], 0);
  const std::string note = s["note"];
  EXPECT_NE(note.find("no round of the engine finished within the stop budget (0 updates of the model of record)"),
            std::string::npos)
      << note;
  EXPECT_EQ(note.find("did not train"), std::string::npos) << note;
  c["stop"] = {{"epochs", 10}};  // rounds that fit: no warning
  EXPECT_TRUE(resolve_experiment(c, "t", ".").warnings.empty());
}

// Every check across sections runs on the typed settings of the sections it reads, once
// each of them bound with no error of its own: on a config whose sections are each valid
// it reports (the check is called), and while one of its sections has an error of its own
// only that error is reported (the check shows once it is fixed).
TEST(CrossSectionChecks, ReportOnCleanSectionsAndWaitForASectionsOwnError) {
  using Edit = std::function<void(json&)>;
  struct Case {
    Edit set;           // a config whose sections are each valid, and that a check across them refuses
    std::string check;  // the start of that check's line
    Edit own_error;     // then an error in one of the sections it reads
    std::string own;    // the start of that error's line: the only one reported
  };
  auto boxes = [](json& c) { c["cluster"] = {{"topology", {{"type", "boxes"}, {"boxes", 2}, {"per_box", 2}}}}; };
  auto regression = [](json& c) {
    c["model"] = {{"type", "linear"}};
    c["data"]["task"] = "regression";
  };
  auto sparse = [](json& c) {
    c["model"] = {{"type", "sparse_logistic"}};
    c["data"] = {{"type", "sparse_synthetic"}};
  };
  const std::vector<Case> cases = {
      {[](json& c) {
         c["stop"] = {{"updates", 0}};
       },
       "stop: give at least one limit > 0", [](json& c) { c["stop"]["time"] = "x"; }, "stop.time: expected a number"},
      {[&](json& c) {
         regression(c);
         c["stop"]["target_accuracy"] = 0.5;
       },
       "stop.target_accuracy: model 'linear' is a regression", [](json& c) { c["stop"]["time"] = "x"; },
       "stop.time: expected a number"},
      {[](json& c) {
         c["staleness"] = {{"mode", "fixed"}, {"tau", 2}, {"from_epoch", 2}, {"until_epoch", 1}};
       },
       "staleness.until_epoch: 1 is not after", [](json& c) { c["staleness"]["at"] = "x"; }, "staleness.at: 'x'"},
      {[](json& c) {
         c["staleness"] = {{"mode", "per_layer"}, {"tau", json::array()}};
       },
       "staleness.tau: per_layer needs", [](json& c) { c["staleness"]["at"] = "x"; }, "staleness.at: 'x'"},
      {[&](json& c) {
         sparse(c);
         c["staleness"] = {{"mode", "per_layer"}, {"tau", {1}}};
       },
       "staleness.mode: \"per_layer\" reads each layer", [](json& c) { c["staleness"]["bogus"] = 1; },
       "staleness.bogus: unknown key"},
      {[](json& c) { c["train"]["global_batch"] = 7; }, "train.global_batch: 7 does not split evenly over 2",
       [](json& c) { c["train"]["lr"] = -1; }, "train.lr: expected"},
      {[](json& c) { c["train"]["global_batch"] = 7; }, "train.global_batch: 7 does not split evenly over 2",
       [](json& c) { c["cluster"]["bogus"] = 1; }, "cluster.bogus: unknown key"},
      {[](json& c) {
         c["cluster"]["network"] = {{"compression", {{"type", "powersgd"}}}};
       },
       "cluster.network.compression.type: \"powersgd\" compresses the gradients of an all-reduce",
       [](json& c) { c["cluster"]["network"]["compression"]["rank"] = 0; }, "cluster.network.compression.rank: "},
      {[&](json& c) {
         sparse(c);
         c["cluster"]["network"] = {{"compression", {{"type", "topk"}}}};
       },
       "cluster.network.compression.type: compression is for dense models",
       [](json& c) { c["cluster"]["network"]["compression"]["ratio"] = 2; }, "cluster.network.compression.ratio: "},
      {[](json& c) {
         c["clients"] = {{"count", 1}};
       },
       "clients.count: 1 clients for 2 slots", [](json& c) { c["clients"]["sampling"] = "x"; },
       "clients.sampling: 'x'"},
      {[](json& c) {
         c["engines"] = json::array({json{{"type", "easgd"}}});
         c["clients"] = {{"count", 4}};
       },
       "clients.count: engine easgd keeps a state per worker", [](json& c) { c["clients"]["sampling"] = "x"; },
       "clients.sampling: 'x'"},
      {[](json& c) {
         c["cluster"]["speeds"] = {1, 2, 3};
       },
       "cluster.speeds: has 3 factors but cluster.workers is 2", [](json& c) { c["cluster"]["bogus"] = 1; },
       "cluster.bogus: unknown key"},
      {[](json& c) {
         c["cluster"]["failures"] = {{"events", {{{"worker", 5}, {"at", 1}}}}};
       },
       "cluster.failures.events[0].worker: worker 5 does not exist",
       [](json& c) { c["cluster"]["failures"]["rate"] = -1; }, "cluster.failures.rate: "},
      {[](json& c) {
         c["cluster"]["stragglers"] = {{"slow", {{{"worker", 5}, {"factor", 2}}}}};
       },
       "cluster.stragglers.slow[0].worker: worker 5 does not exist",
       [](json& c) { c["cluster"]["stragglers"]["slow"][0]["bogus"] = 1; }, "cluster.stragglers.slow[0].bogus: "},
      {[&](json& c) {
         boxes(c);
         c["cluster"]["workers"] = 3;
       },
       "cluster.workers: must equal cluster.topology boxes x per_box (4)",
       [](json& c) { c["cluster"]["topology"]["bogus"] = 1; }, "cluster.topology.bogus: "},
      {[&](json& c) {
         boxes(c);
         c["cluster"]["network"] = {{"latency", 0.1}};
       },
       "cluster.network.latency: is replaced by cluster.topology.intra",
       [](json& c) { c["cluster"]["network"]["bogus"] = 1; }, "cluster.network.bogus: "},
      {[&](json& c) {
         boxes(c);
         c["cluster"]["placement"] = "host";
       },
       "cluster.placement: \"host\" over more than one box", [](json& c) { c["cluster"]["bogus"] = 1; },
       "cluster.bogus: "},
      {[](json& c) {
         c["engines"] = json::array({json{{"type", "async"}, {"delay_compensation", 0.1}}});
         c["train"]["momentum"] = 0.9;
       },
       "engines[0].delay_compensation: DC-ASGD is implemented for plain SGD", [](json& c) { c["train"]["bogus"] = 1; },
       "train.bogus: "},
      {[](json& c) {
         c["engines"] = json::array({json{{"type", "k_async"}, {"k", 5}}});
       },
       "engines[0].k: must be <=", [](json& c) { c["cluster"]["bogus"] = 1; }, "cluster.bogus: "},
  };
  for (const Case& k : cases) {
    json c = tiny();
    k.set(c);
    const std::string checked = config_issues(c);
    EXPECT_EQ(checked.rfind(k.check, 0), 0u) << "the check was not called on " << c.dump() << ":\n" << checked;
    EXPECT_EQ(std::count(checked.begin(), checked.end(), '\n'), 1) << checked;
    k.own_error(c);
    const std::string own = config_issues(c);
    EXPECT_EQ(own.rfind(k.own, 0), 0u) << c.dump() << ":\n" << own;
    EXPECT_EQ(std::count(own.begin(), own.end(), '\n'), 1) << "more than the section's own error:\n" << own;
  }
}

// A key that takes a number or a word (sim/config/field.h, number_or_word) is checked before
// it is set: any other value is invalid input naming the key, never a crash.
TEST(CrossSectionChecks, ANumberOrAWordKeyRefusesEverythingElse) {
  json c = tiny();
  c["train"]["lr_schedule"] = {{"scale", nullptr}, {"warmup_from", {1}}};
  EXPECT_EQ(config_issues(c),
            "train.lr_schedule.scale: expected a number > 0 or \"workers\", got null\n"
            "train.lr_schedule.warmup_from: expected a number >= 0 or \"lr\", got [1]\n");
  c["train"]["lr_schedule"] = {{"scale", "workers"}, {"warmup_from", 0.01}};
  const Experiment exp = resolve_experiment(c, "t", ".");
  EXPECT_EQ(exp.runs.front().settings.lr.scale, 2.0);  // "workers": 2 of them
  EXPECT_EQ(exp.runs.front().settings.lr.warmup_from, 0.01);
}

// ---- TypeFamily (sim/config/type_family.h): the one registry under the five families ----

namespace {

struct Toy {  // a family's Type: name, doc, params, and a bind hook that says what it bound
  std::string name, doc;
  std::vector<ParamInfo> params;
  std::function<std::string(const Toy& self, const json& object)> bind;
};

Toy toy(const std::string& name) {
  return {name, name + " doc", {keys::num("x", 1.0, "x of " + name)}, [](const Toy& self, const json& o) {
            return self.name + ":" + o.value("x", json(0)).dump();
          }};
}

// The message at() throws for `name` ("" when it throws none).
template <class Type>
std::string unknown_message(const TypeFamily<Type>& family, const std::string& name) {
  try {
    family.at(name);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TypeFamily, FindsCatalogsAndNamesInDeclarationOrder) {
  const TypeFamily<Toy> f("toy type", "kind", {toy("b"), toy("a"), toy("c")});
  ASSERT_EQ(f.types().size(), 3u);
  EXPECT_EQ(f.find("a"), &f.types()[1]);  // the stored entry, not a copy
  EXPECT_EQ(f.find("d"), nullptr);
  EXPECT_EQ(&f.at("c"), &f.types()[2]);
  EXPECT_EQ(f.names(), "b, a, c");  // list order, as declared: not sorted
  EXPECT_EQ(f.names(" or ", [](const Toy& t) { return t.name != "a"; }), "b or c");
  ASSERT_EQ(f.catalog().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f.catalog()[i].name, f.types()[i].name);
    EXPECT_EQ(f.catalog()[i].doc, f.types()[i].doc);
    ASSERT_EQ(f.catalog()[i].params.size(), 1u);
    EXPECT_EQ(f.catalog()[i].params[0].doc, "x of " + f.types()[i].name);
  }
  EXPECT_EQ(&f.catalog(), &f.catalog()) << "built once";
  EXPECT_THROW(TypeFamily<Toy>("toy type", "kind", {toy("a"), toy("b"), toy("a")}), std::logic_error);
}

TEST(TypeFamily, UnknownNameNamesTheFamilyAndTheValidOnes) {
  const TypeFamily<Toy> f("toy type", "kind", {toy("b"), toy("a")});
  EXPECT_EQ(unknown_message(f, "z"), "unknown toy type 'z' (valid: b, a)");
  EXPECT_EQ(unknown_message(f, "a"), "");
  // bind reads the name under the family's type key and hands the type itself to its hook
  EXPECT_EQ(f.bind(json{{"kind", "a"}, {"x", 2}}), "a:2");
  EXPECT_THROW(f.bind(json{{"type", "a"}}), std::invalid_argument);  // another key: no name
  EXPECT_THROW(f.bind(json{{"kind", 3}}), std::invalid_argument);    // not a word
}

// Each of the five families is one TypeFamily: an unknown name in an object built in code
// is refused with the same message, naming the family's valid types in `asgdsim list` order.
TEST(TypeFamily, TheFiveFamiliesShareTheUnknownTypeMessage) {
  EXPECT_EQ(unknown_message(engine_family(), "nope").rfind("unknown engine type 'nope' (valid: async, sync, ", 0), 0u)
      << unknown_message(engine_family(), "nope");
  EXPECT_EQ(unknown_message(model_family(), "nope").rfind("unknown model type 'nope' (valid: quadratic, linear, ", 0),
            0u);
  EXPECT_EQ(unknown_message(data_family(), "nope"),
            "unknown data type 'nope' (valid: none, synthetic, fashion_mnist, sparse_synthetic, svmlight, torch)");
  EXPECT_EQ(unknown_message(topology_family(), "nope"), "unknown topology type 'nope' (valid: star, boxes, racks)");
  EXPECT_THROW(bind_engine(json{{"type", "nope"}}), std::invalid_argument);
  EXPECT_THROW(bind_model(json{{"type", "nope"}}), std::invalid_argument);
  EXPECT_THROW(bind_data(json{{"type", "nope"}}), std::invalid_argument);
  try {
    bind_distribution(json{{"dist", "nope"}});
    ADD_FAILURE() << "an unknown dist was bound";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("unknown distribution 'nope' (valid: constant, uniform, ", 0), 0u)
        << e.what();
  }
  // the bound model and data point at their family's own entry
  EXPECT_EQ(&bind_model(json{{"type", "softmax"}})->type(), find_model_type("softmax"));
  EXPECT_EQ(&bind_data(json{{"type", "synthetic"}})->type(), find_data_type("synthetic"));
}

// ---- keys that take one of several shapes (sim/config/field.h, shaped) ----

namespace {

struct ShapedToy {
  std::string shape;  // the shape whose setter ran
  json value;
};
struct ToyPoint {
  double x = 0;
};

// {"key": value, "map": map} bound against a section of two shaped keys: the typed toy and
// each issue as "path: message\n".
std::pair<ShapedToy, std::string> bind_shaped_toy(const json& value, const json& map = json::object()) {
  using T = ShapedToy;
  static const Section<ToyPoint> point{"toy.key", "", {field(&ToyPoint::x, keys::num("x", 1.0, "x", 0))}};
  auto sets = [](const char* shape) { return [shape](T& t, const json& v) { t = {shape, v}; }; };
  const ParamInfo positive = keys::num("", nullptr, "", 0, true);
  static const Section<T> section{
      "toy",
      "",
      {shaped<T>(
           keys::any("key", 1.0, "a number, a list or an object"),
           {{number_shape<T>(number_check(positive), sets("number")),
             list_shape<T>(number_check(positive, [](double x) { return x > 10 ? "over 10" : ""; }), 1, sets("list")),
             object_shape<T>(
                 [](json& o, const std::string& path, Validator& v) {
                   ToyPoint unused;
                   o = point.bind(o, path, v, unused);
                 },
                 sets("object"))},
            "a number > 0, a non-empty list of them or {x}"}),
       shaped<T>(keys::any("map", json::object(), "names to numbers"),
                 {{map_shape<T>(number_check(positive), [](T&, const json&) {})}, "an object of numbers"})}};
  Validator v;
  T out;
  const json resolved = section.bind({{"key", value}, {"map", map}}, "toy", v, out);
  std::string issues;
  for (const auto& i : v.issues()) issues += i.path + ": " + i.message + "\n";
  if (issues.empty()) out.value = resolved["key"];  // as resolved: an object's defaults filled
  return {out, issues};
}

}  // namespace

TEST(ShapedKeys, EachShapeIsAcceptedAndEveryOtherValueRefusedNamingTheKey) {
  // each shape: its own setter, the value as checked (an object with its defaults filled)
  for (const auto& [value, shape, resolved] :
       std::vector<std::tuple<json, std::string, json>>{{2.5, "number", 2.5},
                                                        {json{1, 2}, "list", json{1, 2}},
                                                        {json::object(), "object", json{{"x", 1.0}}},
                                                        {json{{"x", 3}}, "object", json{{"x", 3}}}}) {
    const auto [toy, issues] = bind_shaped_toy(value);
    EXPECT_EQ(issues, "") << value;
    EXPECT_EQ(toy.shape, shape) << value;
    EXPECT_EQ(toy.value, resolved) << value;
  }
  // a value of no shape's kind, or a list shorter than its shape takes: what the key takes
  for (const json& value : {json("x"), json(true), json(nullptr), json::array()})
    EXPECT_EQ(bind_shaped_toy(value).second,
              "toy.key: expected a number > 0, a non-empty list of them or {x}, got " + value.dump() + "\n");
  // a value of a shape's kind that the shape refuses: at its own path
  const std::vector<std::pair<json, std::string>> refused = {
      {-1, "toy.key: expected a number > 0, got -1\n"},
      {json{1, -2, "y", 11},
       "toy.key[1]: expected a number > 0, got -2\ntoy.key[2]: expected a number > 0, got \"y\"\ntoy.key[3]: over "
       "10\n"},
      {json{{"x", -1}, {"bogus", 1}},
       "toy.key.bogus: unknown key (valid keys: x)\ntoy.key.x: expected a number >= 0, got -1 (integer)\n"},
  };
  for (const auto& [value, issues] : refused) {
    const auto [toy, got] = bind_shaped_toy(value);
    EXPECT_EQ(got, issues) << value;
    EXPECT_EQ(toy.shape, "") << "set from a refused value: " << value;
  }
  // a map: each member at its own path
  EXPECT_EQ(bind_shaped_toy(1, {{"a", 1}, {"b", -1}}).second, "toy.map.b: expected a number > 0, got -1\n");
  EXPECT_EQ(bind_shaped_toy(1, json{1}).second, "toy.map: expected an object of numbers, got [1]\n");
}

// The config's keys of several shapes (cluster.speeds, clients.speeds, model.curvature,
// model.conv, engines, sweep, engines[].train): each shape is accepted and bound; anything
// else is refused at the key's path, saying what it takes.
TEST(ShapedKeys, TheConfigsShapedKeysAcceptEachShapeAndNameTheKeyOtherwise) {
  using Edit = std::function<void(json&)>;
  auto quadratic = [](const json& curvature) -> Edit {
    return [curvature](json& c) {
      c["model"] = {{"type", "quadratic"}, {"dim", 2}, {"curvature", curvature}};
      c["data"] = {{"type", "none"}};
    };
  };
  auto cnn = [](const json& conv) -> Edit {
    return [conv](json& c) {
      c["model"] = {{"type", "cnn"}, {"conv", conv}, {"hidden", json::array()}};
      c["data"]["image"] = {1, 8, 8};
      c["data"].erase("features");
    };
  };
  auto speeds = [](const json& s) -> Edit { return [s](json& c) { c["cluster"]["speeds"] = s; }; };
  auto client_speeds = [](const json& s) -> Edit {
    return [s](json& c) { c["clients"] = {{"count", 4}, {"speeds", s}}; };
  };
  auto engines = [](const json& e) -> Edit { return [e](json& c) { c["engines"] = e; }; };
  auto sweep = [](const json& s) -> Edit { return [s](json& c) { c["sweep"] = s; }; };
  auto engine_train = [](const json& t) -> Edit {
    return [t](json& c) { c["engines"] = json::array({json{{"type", "async"}, {"train", t}}}); };
  };
  const json lognormal = {{"dist", "lognormal"}, {"mean", 1.0}, {"sigma", 0.5}};
  // accepted, with what the run binds of it
  const std::vector<std::tuple<std::string, Edit, std::function<bool(const RunSpec&)>>> accepted = {
      {"speeds list", speeds(json{1.0, 2.0}),
       [](const RunSpec& r) {
         return r.settings.speeds == std::vector<double>{1.0, 2.0} && !r.settings.speeds_dist;
       }},
      {"speeds dist", speeds(lognormal),
       [](const RunSpec& r) { return r.settings.speeds.empty() && r.settings.speeds_dist != nullptr; }},
      {"client speeds", client_speeds(lognormal),
       [&](const RunSpec& r) { return r.settings.clients.speeds->spec() == r.config["clients"]["speeds"]; }},
      {"curvature number", quadratic(2.0),
       [](const RunSpec& r) { return r.bound_model->keys()["curvature"] == json(2.0); }},
      {"curvature list", quadratic(json{1.0, 2.0}),
       [](const RunSpec& r) {
         return r.bound_model->keys()["curvature"] == json{1.0, 2.0};
       }},
      {"curvature range", quadratic(json{{"min", 1.0}, {"max", 2.0}}),
       [](const RunSpec& r) {
         return r.bound_model->keys()["curvature"] == json{{"min", 1.0}, {"max", 2.0}};
       }},
      {"conv blocks", cnn(json::array({json{{"channels", 2}, {"kernel", 3}}})),
       [](const RunSpec& r) {
         return r.bound_model->keys()["conv"] ==
                json::array({json{{"channels", 2}, {"kernel", 3}, {"stride", 1}, {"padding", 0}, {"pool", 1}}});
       }},
      {"engines", engines(json::array({json{{"type", "sync"}, {"name", "s"}}})),
       [](const RunSpec& r) { return r.engine == "s" && r.bound_engine->type() == "sync"; }},
      {"sweep", sweep(json{{"train.lr", {0.05}}}), [](const RunSpec& r) { return r.settings.lr.lr == 0.05; }},
      {"engine train", engine_train(json{{"lr", 0.05}}),
       [](const RunSpec& r) {
         return r.settings.lr.lr == 0.05 && r.bound_engine->train == json{{"lr", 0.05}};
       }},
  };
  for (const auto& [what, edit, bound] : accepted) {
    json c = tiny();
    edit(c);
    try {
      const Experiment exp = resolve_experiment(c, "t", ".");
      ASSERT_EQ(exp.runs.size(), 1u) << what;
      EXPECT_TRUE(bound(exp.runs.front())) << what << ": " << exp.runs.front().config.dump();
    } catch (const ConfigError& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
  // refused: the first issue's line
  const std::vector<std::pair<Edit, std::string>> refused = {
      {speeds("x"), "cluster.speeds: expected a list of factors > 0 or a distribution {\"dist\": ...}, got \"x\""},
      {speeds(3), "cluster.speeds: expected a list of factors > 0 or a distribution {\"dist\": ...}, got 3"},
      {speeds(json{1, 0}), "cluster.speeds[1]: expected a number > 0, got 0"},
      {speeds(json{{"dist", "bogus"}}), "cluster.speeds.dist: unknown dist 'bogus'"},
      {client_speeds(json{1, 2}),
       "clients.speeds: expected a distribution {\"dist\": ...} drawn once per client, got [1,2]"},
      {quadratic("x"),
       "model.curvature: expected a number > 0, a list of them, or {\"min\": a, \"max\": b}, got \"x\""},
      {quadratic(json::array()),
       "model.curvature: expected a number > 0, a list of them, or {\"min\": a, \"max\": b}, got []"},
      {quadratic(-1), "model.curvature: expected a number > 0, got -1"},
      {quadratic(json{1, -1}), "model.curvature[1]: expected a number > 0, got -1"},
      {quadratic(json{1e-50, 1}), "model.curvature[0]: 1e-50 is 0 or infinite in float"},
      {quadratic(json{{"min", 2}}), "model.curvature.max: missing required key"},
      {quadratic(json{{"min", 2}, {"max", 1}}), "model.curvature: curvature.max must be >= curvature.min"},
      {cnn(json{{"channels", 2}}),
       "model.conv: expected a list of {channels, kernel, stride, padding, pool}, got {\"channels\":2}"},
      {cnn(json{5}), "model.conv[0]: expected an object, got 5"},
      {cnn(json::array({json{{"channels", 2}}})), "model.conv[0].kernel: missing required key"},
      {engines(json::array()), "engines: expected a non-empty list of engine objects, got []"},
      {engines(json{{"type", "async"}}), "engines: expected a non-empty list of engine objects, got {\"type\":"},
      {sweep(json{0.1}), "sweep: expected an object {\"dotted.key\": [values...]}, got [0.1]"},
      {sweep(json{{"train.lr", json::array()}}), "sweep.train.lr: expected a non-empty list of values, got []"},
      {sweep(json{{"train.lr", 0.1}}), "sweep.train.lr: expected a non-empty list of values, got 0.1"},
      {engine_train(5), "engines[0].train: expected an object of train keys that override train for this engine"},
  };
  for (const auto& [edit, first] : refused) {
    json c = tiny();
    edit(c);
    const std::string issues = config_issues(c);
    EXPECT_EQ(issues.rfind(first, 0), 0u) << c.dump() << ":\n" << issues;
  }
}
