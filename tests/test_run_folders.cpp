// tests/test_run_folders.cpp — what `asgdsim run` does with what earlier processes left in
// an experiment folder, and the folder's index (issue 32, "no silent traps"): --supersede
// tidies (moves other configs' run folders aside) and re-runs nothing, --rerun re-runs,
// the old --force is refused naming both; run ids name each swept key by its shortest
// unambiguous suffix; `asgdsim index` rebuilds index.csv from the run folders present,
// also after shards' folders from several disks are copied together (the Slurm example,
// scripts/slurm_sweep.sbatch and scripts/slurm_merge.sh, run here without Slurm); the
// records asgdsim reads back from a folder (sim/config/record.h) refuse what was cut or
// edited, naming the key.
#include <sys/stat.h>
#include <filesystem>
#include <map>
#include <regex>
#include <nlohmann/json.hpp>
#include "experiments/config/config.h"
#include "experiments/config/records.h"
#include "experiments/run/run_parts.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;
namespace fs = std::filesystem;

namespace {

// Two engines x two learning rates: four short runs.
json swept() {
  return json::parse(R"({"name": "base", "model": {"type": "quadratic", "dim": 10}, "cluster": {"workers": 2},
    "stop": {"updates": 200}, "engines": [{"type": "async"}, {"type": "sync"}],
    "sweep": {"train.lr": [0.1, 0.05]}})");
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = 0; (pos = text.find(what, pos)) != std::string::npos; pos += what.size()) ++n;
  return n;
}

// A run folder's summary.json as it is on disk: its bytes and its modification time (ns).
struct Stamp {
  std::string bytes;
  long long mtime_ns = 0;
  bool operator==(const Stamp& o) const { return bytes == o.bytes && mtime_ns == o.mtime_ns; }
};
Stamp stamp(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return {read_file(path), (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec};
}

std::vector<std::string> superseded_folders(const std::string& exp_dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(exp_dir))
    if (e.path().filename().string().rfind("superseded-", 0) == 0) out.push_back(e.path().string());
  return out;
}

}  // namespace

// Narrowing a sweep and tidying the folder with --supersede: the runs that stay were done
// and are skipped (summary.json bytes and mtime unchanged, no run line printed), the runs
// of the wider sweep move aside whole; nothing is made.
TEST(Supersede, TidyingAFolderRunsNothingThatWasDone) {
  std::string dir = temp_dir("supersede");
  write_text(dir + "/c.json", swept().dump());
  ASSERT_EQ(run_cli("run " + dir + "/c.json --out " + dir + "/out").exit_code, 0);
  const std::string exp_dir = dir + "/out/base";
  std::map<std::string, Stamp> before;
  for (const char* id : {"async-lr=0.1-seed1", "sync-lr=0.1-seed1"})
    before[id] = stamp(exp_dir + "/" + id + "/summary.json");
  const std::string moved_metrics = read_file(exp_dir + "/async-lr=0.05-seed1/metrics.csv");

  CommandResult r = run_cli("run " + dir + "/c.json --out " + dir + "/out --set 'sweep.train.lr=[0.1]' --supersede");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "completed earlier, skipped"), 2u) << r.output;
  EXPECT_EQ(count_of(r.output, ": completed ("), 0u) << r.output;  // no run made
  EXPECT_NE(r.output.find("moved 2 run folders of another config into"), std::string::npos) << r.output;
  for (const auto& [id, s] : before) EXPECT_TRUE(stamp(exp_dir + "/" + id + "/summary.json") == s) << id;
  std::vector<std::string> aside = superseded_folders(exp_dir);
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(read_file(aside[0] + "/async-lr=0.05-seed1/metrics.csv"), moved_metrics);
  EXPECT_TRUE(fs::exists(aside[0] + "/sync-lr=0.05-seed1/summary.json"));
  EXPECT_TRUE(fs::exists(aside[0] + "/experiment.json"));
  std::string index = read_file(exp_dir + "/index.csv");
  EXPECT_EQ(std::count(index.begin(), index.end(), '\n'), 3) << index;
  EXPECT_EQ(count_of(index, ",completed,"), 2u) << index;
}

// A run folder of the same run id but another config (a key changed): --supersede moves it
// aside (its results kept), then makes the run; without it, refused naming --supersede.
TEST(Supersede, AChangedConfigsRunFolderMovesAsideWhole) {
  std::string dir = temp_dir("supersede");
  json c = swept();
  c.erase("sweep");
  write_text(dir + "/c.json", c.dump());
  ASSERT_EQ(run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out").exit_code, 0);
  const std::string run_dir = dir + "/out/base/async-seed1";
  const std::string old_metrics = read_file(run_dir + "/metrics.csv");

  CommandResult refused = run_cli("run " + dir + "/c.json --out " + dir + "/out --set train.lr=0.05 --rerun");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("holds a run of a different config (train.lr: 0.1 there, 0.05 now)"), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("--supersede"), std::string::npos) << refused.output;
  EXPECT_EQ(read_file(run_dir + "/metrics.csv"), old_metrics);

  CommandResult r = run_cli("run " + dir + "/c.json --out " + dir + "/out --set train.lr=0.05 --supersede");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("async-seed1: its folder holds a run of a different config"), std::string::npos) << r.output;
  EXPECT_EQ(count_of(r.output, ": completed ("), 2u) << r.output;  // the new config's runs
  EXPECT_NE(read_file(run_dir + "/config.json").find("0.05"), std::string::npos);
  std::vector<std::string> aside = superseded_folders(dir + "/out/base");
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(read_file(aside[0] + "/async-seed1/metrics.csv"), old_metrics);  // kept, not overwritten
}

// --rerun makes the runs already done again (their summary.json rewritten), and says so.
TEST(Rerun, MakesTheRunsAlreadyDoneAgain) {
  std::string dir = temp_dir("rerun");
  write_text(dir + "/c.json", swept().dump());
  ASSERT_EQ(run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out").exit_code, 0);
  const std::string summary = dir + "/out/base/async-lr=0.1-seed1/summary.json";
  const Stamp before = stamp(summary);
  CommandResult r = run_cli("run " + dir + "/c.json --out " + dir + "/out --rerun");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "completed earlier, re-running it (--rerun)"), 4u) << r.output;
  EXPECT_EQ(count_of(r.output, ": completed ("), 4u) << r.output;
  EXPECT_FALSE(stamp(summary) == before);  // written again (the wall-clock field and mtime differ)
  EXPECT_TRUE(superseded_folders(dir + "/out/base").empty());
}

// The old --force did both; it is refused (exit 2, before anything is written) with an
// answer that names the two flags that replace it.
TEST(Rerun, TheOldForceIsRefusedNamingBothFlags) {
  std::string dir = temp_dir("rerun");
  write_text(dir + "/c.json", swept().dump());
  for (const std::string cmd : {"run", "validate", "cluster"}) {
    CommandResult r = run_cli(cmd + " " + dir + "/c.json --out " + dir + "/out --force");
    EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("--force is gone"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--supersede"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--rerun"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

// ---- run ids: each swept key by its shortest suffix no other swept key ends with ----

TEST(RunIds, EachKeyIsNamedByItsShortestUnambiguousSuffix) {
  using V = std::vector<std::string>;
  EXPECT_EQ(run_id_key_names({"train.lr"}), V({"lr"}));
  EXPECT_EQ(run_id_key_names({"model.type"}), V({"type"}));
  EXPECT_EQ(run_id_key_names({"data.type", "model.type"}), V({"data.type", "model.type"}));
  EXPECT_EQ(run_id_key_names({"cluster.network.bandwidth", "cluster.topology.inter.bandwidth", "train.lr"}),
            V({"network.bandwidth", "inter.bandwidth", "lr"}));
  // a key that is another's suffix keeps its whole name; the other is named past it
  EXPECT_EQ(run_id_key_names({"a.b.lr", "b.lr"}), V({"a.b.lr", "b.lr"}));
  EXPECT_EQ(run_id_key_names({"staleness", "train.lr"}), V({"staleness", "lr"}));
}

// The earlier rule (last part, the whole key only while two shared it) named
// cluster.topology.inter.bandwidth "bandwidth" once cluster.network.bandwidth had taken its
// whole name: two bandwidths, and the id said one.
TEST(RunIds, NoTwoSweptKeysShareANameInARunId) {
  json c = json::parse(R"({"name": "k", "model": {"type": "quadratic", "dim": 4}, "stop": {"updates": 10},
    "cluster": {"topology": {"boxes": 2, "per_box": 2}}, "engines": [{"type": "async"}],
    "sweep": {"cluster.network.bandwidth": [1e9], "cluster.topology.inter.bandwidth": [2e9],
              "cluster.topology.inter.latency": [0.003], "cluster.topology.intra.latency": [0.002],
              "train.lr": [0.1]}})");
  Experiment exp = resolve_experiment(c, "test", ".");
  ASSERT_EQ(exp.runs.size(), 1u);
  EXPECT_EQ(exp.runs[0].run_id,
            "async-network.bandwidth=1000000000.0-inter.bandwidth=2000000000.0-inter.latency=0.003-"
            "intra.latency=0.002-lr=0.1-seed1");
}

// ---- asgdsim index OUT/NAME ----

TEST(IndexCommand, RebuildingAfterDeletingGivesTheRunnersIndex) {
  std::string dir = temp_dir("index");
  json c = swept();
  c["repeats"] = 2;
  c["engines"] = json::parse(R"([{"type": "async"}, {"type": "sync_backup"}])");
  c["sweep"]["engine.backups"] = {0, 1};  // a key only sync_backup has: async's rows leave it empty
  write_text(dir + "/c.json", c.dump());
  ASSERT_EQ(run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out").exit_code, 0);
  const std::string exp_dir = dir + "/out/base";
  const std::string runners = read_file(exp_dir + "/index.csv");
  ASSERT_EQ(std::count(runners.begin(), runners.end(), '\n'), 1 + 4 + 8) << runners;
  fs::remove(exp_dir + "/index.csv");
  CommandResult r = run_cli("index " + exp_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(exp_dir + "/index.csv"), runners);
  EXPECT_NE(r.output.find("lists 12 runs (12 completed)"), std::string::npos) << r.output;
  // a stale index (a summary changed after it was written) is replaced, trailing slash or not
  json s = json::parse(read_file(exp_dir + "/sync_backup-backups=1-lr=0.05-seed2/summary.json"));
  s["status"] = "diverged";
  write_text(exp_dir + "/sync_backup-backups=1-lr=0.05-seed2/summary.json", s.dump());
  ASSERT_EQ(run_cli("index " + exp_dir + "/ --quiet").output, "");
  EXPECT_NE(
      read_file(exp_dir + "/index.csv").find("\nsync_backup-backups=1-lr=0.05-seed2,sync_backup,1,0.05,2,diverged,"),
      std::string::npos);
}

// Two shards made on two disks (--shard 0/2 and 1/2 into their own --out), their run
// folders copied into one folder: index lists every run, as one run of the whole would.
TEST(IndexCommand, MergingTwoShardsFoldersGivesTheFullIndex) {
  std::string dir = temp_dir("index");
  json c = swept();
  c["repeats"] = 2;
  write_text(dir + "/c.json", c.dump());
  ASSERT_EQ(run_cli("run " + dir + "/c.json --quiet --out " + dir + "/whole").exit_code, 0);
  const std::string whole = read_file(dir + "/whole/base/index.csv");
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(run_cli("run " + dir + "/c.json --quiet --shard " + std::to_string(i) + "/2 --out " + dir + "/disk" +
                      std::to_string(i))
                  .exit_code,
              0);
  const std::string shard0 = read_file(dir + "/disk0/base/index.csv");
  EXPECT_EQ(count_of(shard0, ",pending,"), 4u) << shard0;  // shard 1's runs, from where shard 0 stands
  const std::string merged = dir + "/merged/base";
  fs::create_directories(merged);
  for (int i = 0; i < 2; ++i)
    for (const auto& e : fs::directory_iterator(dir + "/disk" + std::to_string(i) + "/base"))
      if (e.is_directory())
        fs::copy(e.path(), merged + "/" + e.path().filename().string(), fs::copy_options::recursive);
  fs::copy_file(dir + "/disk0/base/experiment.json", merged + "/experiment.json");
  CommandResult r = run_cli("index " + merged);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(merged + "/index.csv"), whole);
  EXPECT_FALSE(fs::exists(merged + "/index.csv.tmp"));
}

// Refused with exit 2, writing nothing: not a folder, no experiment.json (OUT instead of
// OUT/NAME), no run folder, a run folder of another experiment (a stray copy).
TEST(IndexCommand, RefusesAFolderThatIsNoExperimentFolder) {
  std::string dir = temp_dir("index");
  write_text(dir + "/c.json", swept().dump());
  ASSERT_EQ(run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out").exit_code, 0);
  const std::string exp_dir = dir + "/out/base";
  const std::string index = read_file(exp_dir + "/index.csv");
  struct Case {
    std::string args, words;
  };
  const std::vector<Case> cases = {
      {dir + "/nowhere", "no such folder"},
      {dir + "/out", "is not an experiment folder: it has no readable experiment.json"},
      {"", "index takes one experiment folder"},
      {exp_dir + " " + exp_dir, "index takes one experiment folder"},
  };
  for (const auto& c : cases) {
    CommandResult r = run_cli("index " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.words), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/out/index.csv"));

  fs::copy(exp_dir + "/async-lr=0.1-seed1", exp_dir + "/copy", fs::copy_options::recursive);  // a stray copy
  CommandResult stray = run_cli("index " + exp_dir);
  EXPECT_EQ(stray.exit_code, 2) << stray.output;
  EXPECT_NE(stray.output.find("holds 1 run folder that its experiment.json does not make: copy (its config.json is run "
                              "\"async-lr=0.1-seed1\")"),
            std::string::npos)
      << stray.output;
  fs::remove_all(exp_dir + "/copy");
  json other = json::parse(read_file(exp_dir + "/sync-lr=0.05-seed1/config.json"));
  other["run"]["sweep"]["train.lr"] = 0.2;  // a value the sweep does not have
  write_text(exp_dir + "/sync-lr=0.05-seed1/config.json", other.dump());
  CommandResult foreign = run_cli("index " + exp_dir);
  EXPECT_EQ(foreign.exit_code, 2) << foreign.output;
  EXPECT_NE(foreign.output.find("train.lr=0.2 is not in its sweep"), std::string::npos) << foreign.output;
  EXPECT_EQ(read_file(exp_dir + "/index.csv"), index);  // nothing written

  const std::string empty = dir + "/empty/base";
  fs::create_directories(empty);
  fs::copy_file(exp_dir + "/experiment.json", empty + "/experiment.json");
  CommandResult none = run_cli("index " + empty);
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("holds no run folder"), std::string::npos) << none.output;
  EXPECT_FALSE(fs::exists(empty + "/index.csv"));
}

// While an `asgdsim run` (no --shard) makes the experiment, index is refused naming it, or
// with --wait waits for it to end; then the index lists what the run wrote.
TEST(IndexCommand, ARunningRunHoldsTheFolder) {
  std::string dir = temp_dir("index");
  json c = swept();
  c.erase("sweep");
  c["engines"] = json::parse(R"([{"type": "async"}])");
  c["stop"]["updates"] = 100000000;
  c["eval"] = {{"every", 100000}, {"unit", "updates"}};
  write_text(dir + "/c.json", c.dump());
  const std::string bin = asgd::testing::binary();
  // the run in the background, once it holds OUT/base (its first run folder is written)
  auto start = [&](const std::string& out) {
    return bin + " run " + dir + "/c.json --quiet --out " + out +
           " & P=$!\n"
           "for i in $(seq 1 1200); do [ -e " +
           out + "/base/async-seed1/config.json ] && break; sleep 0.05; done\n";
  };
  CommandResult refused =
      run_command(start(dir + "/a") + bin + " index " + dir + "/a/base; rc=$?\nkill -INT $P; wait $P; exit $rc");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("is in use by pid"), std::string::npos) << refused.output;
  CommandResult waited = run_command(start(dir + "/b") + "(sleep 1; kill -INT $P) &\n" + bin + " index " + dir +
                                     "/b/base --wait; rc=$?\nwait $P; exit $rc");
  EXPECT_EQ(waited.exit_code, 0) << waited.output;
  EXPECT_NE(waited.output.find("waiting for"), std::string::npos) << waited.output;
  EXPECT_NE(waited.output.find("lists 1 run (1 interrupted)"), std::string::npos) << waited.output;
}

// docs/slurm.md's example as a Slurm job array would run it: each array task makes its
// share of the runs on its own disk ($TMPDIR) and copies its run folders into the shared
// folder; the merge step indexes them and checks the count against validate.
TEST(SlurmExample, ArrayTasksOnTheirOwnDisksThenIndexGiveTheWholeExperiment) {
  std::string dir = temp_dir("slurm");
  write_text(dir + "/c.json", swept().dump());
  ASSERT_EQ(run_cli("run " + dir + "/c.json --quiet --out " + dir + "/whole").exit_code, 0);
  const std::string src = asgd::testing::source_dir();
  const std::string env =
      "ASGDSIM=" + std::string(asgd::testing::binary()) + " SLURM_ARRAY_JOB_ID=77 SLURM_ARRAY_TASK_COUNT=3 ";
  for (int task = 0; task < 3; ++task) {
    const std::string disk = dir + "/node" + std::to_string(task);
    fs::create_directories(disk);
    CommandResult r = run_command(env + "SLURM_ARRAY_TASK_ID=" + std::to_string(task) + " TMPDIR=" + disk + " bash " +
                                  src + "/scripts/slurm_sweep.sbatch " + dir + "/c.json " + dir + "/shared --quiet");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // the merge checks the count: before the last task's folders arrive it says which are missing
  CommandResult merge = run_command("ASGDSIM=" + std::string(asgd::testing::binary()) + " bash " + src +
                                    "/scripts/slurm_merge.sh " + dir + "/c.json " + dir + "/shared");
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  EXPECT_EQ(read_file(dir + "/shared/base/index.csv"), read_file(dir + "/whole/base/index.csv"));
  fs::remove_all(dir + "/shared/base/sync-lr=0.05-seed1");
  CommandResult short_one = run_command("ASGDSIM=" + std::string(asgd::testing::binary()) + " bash " + src +
                                        "/scripts/slurm_merge.sh " + dir + "/c.json " + dir + "/shared");
  EXPECT_NE(short_one.exit_code, 0) << short_one.output;
  EXPECT_NE(short_one.output.find("sync-lr=0.05-seed1"), std::string::npos) << short_one.output;
}

// ---- the records asgdsim reads back (sim/config/record.h) ----

namespace {

const json kRemoved = "(removed)";  // a case's value: the key is taken out

// `doc` with the value at JSON pointer `at` replaced by `value` (kRemoved: taken out).
json edited(json doc, const std::string& at, const json& value) {
  const json::json_pointer p(at);
  if (value == kRemoved)
    doc.at(p.parent_pointer()).erase(p.back());
  else
    doc[p] = value;
  return doc;
}

// What is put where in a readable document, and words the refusal says.
struct Edit {
  std::string at;
  json value;
  std::string words;
};

template <class S>
void expect_refused(const Section<S>& record, const json& readable, const std::vector<Edit>& edits) {
  for (const Edit& e : edits) {
    const auto read = read_record(record, edited(readable, e.at, e.value));
    EXPECT_FALSE(read) << e.at << " = " << e.value.dump();
    EXPECT_NE(read.why.find(e.words), std::string::npos) << e.at << " = " << e.value.dump() << ": " << read.why;
  }
}

}  // namespace

// A run's config.json as the runner writes it reads back as its run (the keys it does not
// declare let be); its run record is exactly what the runner writes, so it could write it;
// a record cut or edited by hand is refused naming the key.
TEST(Records, AConfigJsonsRunRecordReadsBackOrIsRefusedNamingTheKey) {
  json c = swept();
  c["repeats"] = 2;
  const Experiment exp = resolve_experiment(c, "test", ".");
  json config = exp.runs.back().config;
  config["run"]["mode"] = "cluster";  // (asgdsim cluster's mark: a key the record does not declare)
  const auto read = read_record(run_config_record(), config);
  ASSERT_TRUE(read) << read.why;
  const RunRecord& run = read->run;
  EXPECT_EQ(run.run_id, "sync-lr=0.05-seed2");
  EXPECT_EQ(run.experiment, "base");
  EXPECT_EQ(run.engine, "sync");
  EXPECT_EQ(run.sweep, json({{"train.lr", 0.05}}));
  EXPECT_EQ(run.seed, 2u);
  EXPECT_EQ(run.repeat, 1);
  EXPECT_EQ(get_fields(run_record().fields, run), exp.runs.back().config["run"]);
  expect_refused(run_config_record(), config,
                 {{"/run/seed", kRemoved, "run.seed: missing required key (an integer in [0, "},
                  {"/run/seed", -1, "run.seed: expected an integer in [0, 1000000000050000], got -1 (integer)"},
                  {"/run/seed", "x", "run.seed: expected an integer in [0, 1000000000050000], got \"x\" (string)"},
                  {"/run/repeat", 1.5, "run.repeat: expected an integer in [0, 2147483647], got 1.5 (number)"},
                  {"/run/engine", 5, "run.engine: expected a string, got 5 (integer)"},
                  {"/run/run_id", nullptr, "run.run_id: expected a string, got null (null)"},
                  {"/run/experiment", kRemoved, "run.experiment: missing required key (a string: "},
                  {"/run/sweep", json::array({1}), "run.sweep: expected an object, got [1]"},
                  {"/run", kRemoved, "run: missing required key"},
                  {"/run", "r", "run: expected an object, got \"r\""},
                  {"", json::array(), "expected an object, got [] (list)"}});
}

// experiment.json as the runner writes it reads back as the run order's members; one cut
// or edited by hand is refused naming the key; a seed it lacks is the config's default.
TEST(Records, ExperimentJsonReadsBackOrIsRefusedNamingTheKey) {
  json c = swept();
  c["repeats"] = 3;
  c["seed"] = 7;
  const json resolved = resolve_experiment(c, "test", ".").resolved;
  const auto read = read_record(experiment_record(), resolved);
  ASSERT_TRUE(read) << read.why;
  EXPECT_EQ(read->name, "base");
  ASSERT_EQ(read->engines.size(), 2u);
  EXPECT_EQ(read->engines[0].name, "async");
  EXPECT_EQ(read->engines[1].name, "sync");
  EXPECT_EQ(read->sweep, json::parse(R"({"train.lr": [0.1, 0.05]})"));
  EXPECT_EQ(read->seed, 7u);
  EXPECT_EQ(read->repeats, 3u);
  const auto no_seed = read_record(experiment_record(), edited(resolved, "/seed", kRemoved));
  ASSERT_TRUE(no_seed) << no_seed.why;
  EXPECT_EQ(no_seed->seed, 1u);
  expect_refused(experiment_record(), resolved,
                 {{"/name", kRemoved, "name: missing required key (a string: "},
                  {"/engines", json::object(), "engines: expected a list of objects, got {}"},
                  {"/engines/0", "async", "engines[0]: expected an object, got \"async\" (string)"},
                  {"/engines/1/name", kRemoved, "engines[1].name: missing required key (a string: "},
                  {"/engines/0/name", 3, "engines[0].name: expected a string, got 3 (integer)"},
                  {"/sweep", json::array(), "sweep: expected an object, got []"},
                  {"/sweep/train.lr", 0.1, "sweep.train.lr: expected a list, got 0.1"},
                  {"/seed", -1, "seed: expected an integer in [0, 1e+15], got -1 (integer)"},
                  {"/repeats", 0, "repeats: expected an integer in [1, 50000], got 0 (integer)"}});
}

// `asgdsim index` says which key of a record it cannot read: a run folder's run record,
// experiment.json's; it writes nothing.
TEST(IndexCommand, NamesTheKeyOfARecordItCannotRead) {
  std::string dir = temp_dir("index-records");
  write_text(dir + "/c.json", swept().dump());
  ASSERT_EQ(run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out").exit_code, 0);
  const std::string exp_dir = dir + "/out/base", config_json = exp_dir + "/sync-lr=0.05-seed1/config.json";
  const std::string config = read_file(config_json), experiment = read_file(exp_dir + "/experiment.json"),
                    index = read_file(exp_dir + "/index.csv");
  write_text(config_json, edited(json::parse(config), "/run/seed", -1).dump());
  CommandResult run = run_cli("index " + exp_dir);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("sync-lr=0.05-seed1 (its config.json has no run record (run.seed: expected an integer in "
                            "[0, 1000000000050000], got -1 (integer)))"),
            std::string::npos)
      << run.output;
  write_text(config_json, config);
  write_text(exp_dir + "/experiment.json", edited(json::parse(experiment), "/engines/1/name", kRemoved).dump());
  CommandResult exp = run_cli("index " + exp_dir);
  EXPECT_EQ(exp.exit_code, 2) << exp.output;
  EXPECT_NE(exp.output.find("is not an experiment folder: it has no readable experiment.json (engines[1].name: "
                            "missing required key"),
            std::string::npos)
      << exp.output;
  EXPECT_EQ(read_file(exp_dir + "/index.csv"), index);
}

// A run's results are whole only when summary.json and config.json read back: a record cut or
// edited by hand makes them incomplete (named), so `asgdsim run` re-runs the run and the index
// does not list it as done; a summary without a readable status lists as "unknown".
TEST(Records, ResultsWhoseRecordsCannotBeReadAreIncomplete) {
  json c = swept();
  c.erase("sweep");
  c["engines"] = json::parse(R"([{"type": "async"}])");
  const Experiment exp = resolve_experiment(c, "test", ".");
  const std::string exp_dir = run_config(c, temp_dir("records-results")), dir = exp_dir + "/async-seed1";
  const json config = json::parse(read_file(dir + "/config.json")), summary = summary_at(dir);
  ASSERT_EQ(incomplete_results(dir, config, summary), "");
  for (const Edit& e : std::vector<Edit>{
           {"/updates", "x",
            "summary.json is not readable (updates: expected an integer in [0, 1e+15], got \"x\" (string))"},
           {"/run_id", kRemoved, "summary.json is not readable (run_id: missing required key"},
           {"/run_id", "other", "summary.json is another run's"},
           {"/updates", 7, "metrics.csv does not end at the summary's 7 updates"}})
    EXPECT_EQ(incomplete_results(dir, config, edited(summary, e.at, e.value)).find(e.words), 0u) << e.words;
  for (const Edit& e : std::vector<Edit>{
           {"/run/run_id", 5, "config.json has no run record (run.run_id: expected a string, got 5 (integer))"},
           {"/cluster/workers", kRemoved, "config.json is not readable (cluster.workers: missing required key"},
           {"/trace", "yes", "config.json is not readable (trace: expected true or false, got \"yes\" (string))"},
           {"/cluster/workers", 3, "workers.csv does not end with worker 2's whole row"}})
    EXPECT_EQ(incomplete_results(dir, edited(config, e.at, e.value), summary).find(e.words), 0u) << e.words;

  json listed;
  EXPECT_EQ(listed_status(exp_dir, exp.runs[0], listed), "completed");
  EXPECT_TRUE(earlier_run(dir, config, {}, "tag").done);
  write_text(dir + "/summary.json", edited(summary, "/updates", "x").dump());
  EXPECT_EQ(listed_status(exp_dir, exp.runs[0], listed), "incomplete");
  const EarlierRun cut = earlier_run(dir, config, {}, "tag");
  EXPECT_FALSE(cut.done);
  EXPECT_NE(cut.line.find("completed earlier, but summary.json is not readable (updates: "), std::string::npos)
      << cut.line;
  write_text(dir + "/summary.json", edited(summary, "/status", 5).dump());
  EXPECT_EQ(listed_status(exp_dir, exp.runs[0], listed), "unknown");
  const EarlierRun odd = earlier_run(dir, config, {}, "tag");
  EXPECT_FALSE(odd.done);
  EXPECT_EQ(odd.line, "");
}
