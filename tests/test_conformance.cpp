// tests/test_conformance.cpp — the promises every engine keeps, checked over one table of
// engine forms (forms(): an engine's JSON, the config it needs, and what it supports), so
// that a new engine gets its tests from one row, and a registered engine without a row
// fails here (EveryRegisteredEngineHasARow). Each property is a parameterized suite, one
// test per form (named after it): the same files for --threads 1 and 2; for
// batched_gradients as unbatched; a failure, a straggler and a lost cluster end each run
// with a defined outcome (never a hang), also during the single-replica warm-up; a sparse
// model's sparse server updates give the bits of dense ones; a run interrupted and made
// again gives the uninterrupted run's files. A form that does not support a property is
// checked to refuse it (or, for resume, to say it has no checkpoint). Tiny runs: an MLP
// of 244 parameters or a 2-parameter quadratic, 30 updates or one 512-sample epoch. The
// engines' closed forms and equivalences stay in tests/test_engines.cpp; features under
// several engines (optimizers, compression, staleness) in their own suites.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "engines/engine_registry.h"
#include "kernels/model.h"
#include "sim/core/parameter_store.h"
#include "sim/core/runtime.h"
#include "sim/core/simulation.h"
#include "sim/core/worker_pool.h"
#include "sim/run/recorder.h"
#include "sim/run/run_outcome.h"
#include "run_checks.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;

namespace {

struct EngineForm {
  std::string name;             // the tests' name: the type, or the type and what this form sets
  json engine;                  // the engines[] entry
  json patch = json::object();  // what the form needs of the rest of the config (a JSON merge patch)
  // "": it runs with cluster.failures; else the key its refusal names
  std::string refuses_failures_at = "";
  // "": it trains a sparse model; else the key its refusal names
  std::string refuses_sparse_at = "";
  bool resume = true;  // an interrupted run leaves a checkpoint (false: it says it has none)
  bool failures() const { return refuses_failures_at.empty(); }
};

std::ostream& operator<<(std::ostream& os, const EngineForm& f) { return os << f.name << " " << f.engine.dump(); }

// The federated engines' population: 30 clients of traced speeds, drawn by the size of
// their non-IID parts.
const json kPopulation = {
    {"data", {{"partition", "dirichlet_mix"}, {"partition_alpha", 0.3}}},
    {"clients",
     {{"count", 30}, {"sampling", "size"}, {"speeds", {{"dist", "lognormal"}, {"mean", 1.0}, {"sigma", 0.5}}}}}};

// Every engine type of engines/registry.cpp, and the forms whose state or path differs
// (late "cancel" or "drop", the collectives, the staleness weights, the look-ahead).
const std::vector<EngineForm>& forms() {
  static const std::vector<EngineForm> f = {
      {"async", {{"type", "async"}}},
      {"async_dc",
       {{"type", "async"}, {"delay_compensation", 0.04}, {"lr_staleness", "divide"}},
       {{"train", {{"momentum", 0}}}}},  // DC-ASGD is plain SGD
      {"async_weighted", {{"type", "async"}, {"staleness_weight", "hinge"}}},
      {"sync", {{"type", "sync"}}},
      {"sync_allreduce", {{"type", "sync"}, {"comm", "allreduce"}}},
      {"sync_powersgd",
       {{"type", "sync"}, {"comm", "allreduce"}},
       {{"cluster", {{"network", {{"compression", {{"type", "powersgd"}, {"rank", 2}, {"error_feedback", true}}}}}}}},
       "",
       /*refuses_sparse_at=*/"cluster.network.compression.type"},
      {"sync_backup", {{"type", "sync_backup"}, {"backups", 1}}},
      {"sync_backup_cancel", {{"type", "sync_backup"}, {"backups", 2}, {"late", "cancel"}}},
      {"ssp", {{"type", "ssp"}, {"bound", 2}, {"staleness_weight", "inverse_sqrt"}}},
      {"k_batch_sync", {{"type", "k_batch_sync"}, {"k", 3}, {"late", "cancel"}}},
      {"k_batch_sync_drop", {{"type", "k_batch_sync"}, {"k", 3}, {"late", "drop"}}},
      {"k_async", {{"type", "k_async"}, {"k", 2}, {"staleness_weight", "polynomial"}}},
      {"k_async_batch", {{"type", "k_async"}, {"k", 3}, {"batch", true}, {"staleness_weight", "inverse_sqrt"}}},
      {"local_sgd", {{"type", "local_sgd"}, {"steps", 3}, {"outer_momentum", 0.5}, {"outer_nesterov", true}}},
      {"easgd", {{"type", "easgd"}, {"period", 3}}},
      {"easgd_sync", {{"type", "easgd"}, {"mode", "sync"}, {"period", 2}, {"order", "paper"}}},
      {"eamsgd", {{"type", "easgd"}, {"period", 2}, {"delta", 0.9}}},
      {"diloco",
       {{"type", "diloco"}, {"steps", 3}},
       {{"train", {{"optimizer", "adamw"}, {"lr", 0.002}, {"momentum", nullptr}}}}},
      {"ringmaster", {{"type", "ringmaster"}, {"delay_threshold", 3}}},
      {"ringmaster_cancel", {{"type", "ringmaster"}, {"delay_threshold", 3}, {"late", "cancel"}}},
      {"mindflayer", {{"type", "mindflayer"}, {"trials", 2}, {"budget", 0.0015}}},
      {"async_local_sgd",
       {{"type", "async_local_sgd"}, {"steps", 3}, {"nesterov_period", 4}, {"dynamic_local_updates", true}},
       {{"train", {{"optimizer", "adamw"}, {"lr", 0.002}, {"momentum", nullptr}}}}},
      {"streaming_diloco",
       {{"type", "streaming_diloco"}, {"steps", 4}, {"fragments", 2}, {"overlap", 1}, {"quantize", true}},
       json::object(),
       /*refuses_failures_at=*/"cluster.failures"},
      {"fedavg", {{"type", "fedavg"}, {"local_steps", 3}, {"report", 3}}, kPopulation},
      {"fedbuff", {{"type", "fedbuff"}, {"local_steps", 3}, {"k", 2}}, kPopulation},
      {"fedasync", {{"type", "fedasync"}, {"local_steps", 2}}, kPopulation},
  };
  return f;
}

const uint64_t kUpdates = 30;  // the MLP runs' stop.updates

// `base` with the form's patch and the form as its one engine.
json with_form(json base, const EngineForm& f) {
  base.merge_patch(f.patch);
  base["engines"] = json::array({f.engine});
  return base;
}

// The run folder's name of the form's one run in a config of seed `seed`.
std::string run_name(const EngineForm& f, int seed) {
  return f.engine.value("name", f.engine.at("type").get<std::string>()) + "-seed" + std::to_string(seed);
}

// The small MLP run (tests/run_checks.h), 30 updates, evaluated every 10 on 100 training
// and 100 test samples (evaluation would otherwise cost more than the training).
json mlp_config(const EngineForm& f) {
  json c = small_mlp_config(json::object(), kUpdates);
  c["eval"] = {{"every", 10}, {"unit", "updates"}, {"train_samples", 100}, {"test_samples", 100}};
  return with_form(c, f);
}

json failure_events(const json& events) { return {{"events", events}}; }

// The form's reference run: the small MLP run in 16-bit transfers and, where the form
// takes failures, worker 1 down from 4 to 10 ms and worker 3 lost at 12 ms (their
// gradients in flight lost, the live workers going on).
json reference_config(const EngineForm& f) {
  json c = mlp_config(f);
  c["cluster"]["network"]["precision"] = "fp16";
  if (f.failures())
    c["cluster"]["failures"] =
        failure_events({{{"worker", 1}, {"at", 0.004}, {"down_for", 0.006}}, {{"worker", 3}, {"at", 0.012}}});
  return c;
}

// The reference run made on 2 threads, once per process and form (the properties below
// compare their runs with it): its run folder.
const std::string& reference_run(const EngineForm& f) {
  static std::map<std::string, std::string> made;
  auto it = made.find(f.name);
  if (it == made.end()) {
    const std::string dir = run_config(reference_config(f), temp_dir("ref-" + f.name), 2) + "/" + run_name(f, 5);
    if (f.failures()) {
      EXPECT_EQ(summary_at(dir)["worker_failures"], 2) << dir;
    }
    it = made.emplace(f.name, dir).first;
  }
  return it->second;
}

// The noisy 2-parameter quadratic, 4 workers, every step exactly 1 ms, one epoch of 512
// samples in batches of 8 (tests/test_helpers.h), a row every quarter epoch.
json quadratic_run(const EngineForm& f) {
  json c = quadratic_config("q", {0.5, 2.0}, 4, 0.1, 0.1);
  c["cluster"]["compute"]["value"] = 0.001;
  c["stop"] = {{"epochs", 1}};
  c["eval"] = {{"every", 0.25}, {"unit", "epochs"}};
  c = with_form(c, f);
  c["data"].erase("partition");  // the quadratic's samples have no labels to part by
  c["data"].erase("partition_alpha");
  return c;
}

// The one run of `c` made in memory, as the runner makes it but without its files (the
// failure properties read only its outcome): its outcome. `engine`, when given, makes the
// engine it runs instead of the config's (an engine written for a test).
using EngineFor = std::function<std::unique_ptr<Engine>(const RunSpec&)>;
RunOutcome simulate(const json& c, const EngineFor& engine = nullptr) {
  const Experiment exp = resolve_experiment(c, "test", ".");
  const RunSpec& run = exp.runs.at(0);
  const RunParts parts = make_run_parts(run, run.settings, nullptr, exp.base_dir);
  WorkerPool pool(2, /*caller_computes=*/true);
  Recorder recorder(false);
  const std::unique_ptr<Engine> own = engine ? engine(run) : nullptr;
  return parts.simulation(pool, recorder)->run(own ? *own : *parts.engine);
}

// The config is refused, naming `path`.
void expect_refused(const json& c, const std::string& path) {
  const std::string issues = config_issues(c);
  EXPECT_NE(issues.find(path), std::string::npos) << "expected a refusal at " << path << ", got:\n" << issues;
}

class Conformance : public ::testing::TestWithParam<EngineForm> {};
class Failures : public Conformance {};

std::string form_name(const ::testing::TestParamInfo<EngineForm>& p) { return p.param.name; }

// ------------------------------------------------------------------ the registry

// A new engine (engines/registry.cpp) needs its row above; every row names a registered
// engine, under a name of its own.
TEST(ConformanceTable, EveryRegisteredEngineHasARow) {
  for (const EngineType& t : engine_types()) {
    const bool found =
        std::any_of(forms().begin(), forms().end(), [&](const EngineForm& f) { return f.engine.at("type") == t.name; });
    EXPECT_TRUE(found) << "engine type \"" << t.name
                       << "\" is registered (engines/registry.cpp) but has no row in tests/test_conformance.cpp's "
                          "forms(): add one (its JSON, the config it needs, and whether it takes failures, a "
                          "sparse model and a resume)";
  }
  std::vector<std::string> names;
  for (const EngineForm& f : forms()) {
    EXPECT_NE(find_engine_type(f.engine.at("type").get<std::string>()), nullptr) << f;
    EXPECT_EQ(std::count(names.begin(), names.end(), f.name), 0) << "two rows named " << f.name;
    names.push_back(f.name);
  }
}

// ------------------------------------------------------------------ determinism

// Same config + seed => byte-identical files for --threads 1 and 2 (DESIGN.md): the
// reference run made again on 1 thread.
TEST_P(Conformance, ThreadCountDoesNotChangeABit) {
  const EngineForm& f = GetParam();
  const std::string one = run_config(reference_config(f), temp_dir("threads1"), 1) + "/" + run_name(f, 5);
  expect_same_results(reference_run(f), one, /*with_config=*/true, "(--threads 2 and 1)");
}

// batched_gradients gathers launched jobs and computes each batch with one
// loss_grad_batch call. On CPU backends that gives the same bits per gradient, so every
// file but config.json is the unbatched reference run's: with 16-bit transfers, failures
// that lose gradients still gathering (where the engine takes failures), batches of 3 of
// the 4 workers' jobs (full ones and the rest flushed), on 1 thread. On CUDA a batch's
// GEMMs round their own way (cublasSgemmBatched), so there a batched run gives the files
// of the same batched run on another thread count.
TEST_P(Conformance, BatchedGradientsGiveTheSameFiles) {
  const EngineForm& f = GetParam();
  const bool cpu = std::string(kernels_backend()) != "CUDA";
  json b = reference_config(f);
  b["batched_gradients"] = 3;
  const std::string run = run_name(f, 5);
  const std::string other = cpu ? reference_run(f) : run_config(b, temp_dir("batch-again"), 3) + "/" + run;
  expect_same_results(other, run_config(b, temp_dir("batch"), 1) + "/" + run, /*with_config=*/false,
                      "(batched_gradients 3)");
}

// ------------------------------------------------------------------ failures

// Worker 1 fails at 2.5 ms and is back at 7.5 ms, worker 3 fails at 3.5 ms for good, worker
// 2 computes 3 times slower throughout: the run completes its epoch with the live
// workers, worker 3 computes nothing more, and worker 1 takes part again.
void go_on_with_the_live_workers(const EngineForm& f) {
  json c = quadratic_run(f);
  c["cluster"]["failures"] =
      failure_events({{{"worker", 1}, {"at", 0.0025}, {"down_for", 0.005}}, {{"worker", 3}, {"at", 0.0035}}});
  c["cluster"]["stragglers"] = {{"slow", json::array({{{"worker", 2}, {"factor", 3.0}}})}};
  if (!f.failures()) return expect_refused(c, f.refuses_failures_at);
  const RunOutcome out = simulate(c);
  EXPECT_EQ(out.status, "completed");
  EXPECT_EQ(out.note.rfind("reached stop.epochs", 0), 0u) << out.note;
  EXPECT_EQ(out.failures, 2u);
  ASSERT_EQ(out.workers.size(), 4u);
  EXPECT_LE(out.workers[3].gradients, 4u);
  EXPECT_GT(out.workers[1].gradients, 4 * out.workers[3].gradients) << "worker 1 came back";
}

// The reference run (worker 1 down from 4 to 10 ms, worker 3 lost at 12 ms, exponential
// compute times, a network whose links queue) reaches its stop.updates with the live
// workers: an engine that kept waiting for the lost worker would end early, when no work
// is left.
void reference_run_reaches_its_stop(const EngineForm& f) {
  const RunOutcome out = simulate(reference_config(f));
  EXPECT_TRUE(out.status == "completed" || out.status == "stalled") << out.status;  // (30 updates may not train)
  EXPECT_EQ(out.note.rfind("reached stop.updates", 0), 0u) << out.note;
  EXPECT_EQ(out.updates, kUpdates);
}

// Every worker lost for good: the run ends when no work is left (time-based evaluation
// included), well before its stop.updates, instead of waiting forever.
void every_worker_lost_ends_the_run(const EngineForm& f) {
  json c = quadratic_run(f);
  c["cluster"]["workers"] = 3;
  c["stop"] = {{"updates", 100000}};
  c["eval"] = {{"every", 0.005}, {"unit", "time"}};
  c["cluster"]["failures"] = {{"rate", 200.0}};  // never come back
  if (!f.failures()) return expect_refused(c, f.refuses_failures_at);
  const RunOutcome out = simulate(c);
  EXPECT_EQ(out.failures, 3u);
  EXPECT_NE(out.note.find("no work left (every worker was lost)"), std::string::npos) << out.note;
  EXPECT_LT(out.updates, 100000u);
}

// Failures during the single-replica warm-up: the replica moves to the next live worker
// when its worker fails, and the engine starts on the live workers only (a worker that
// is down computes nothing): worker 2 fails before the engine starts, worker 0 (the
// replica) during the warm-up, with one gradient in flight.
void warm_up_failures_neither_hang_nor_wake_the_dead(const EngineForm& f) {
  json c = quadratic_run(f);
  c["train"]["single_replica_epochs"] = 0.25;
  c["cluster"]["failures"] = failure_events({{{"worker", 2}, {"at", 0.0005}}, {{"worker", 0}, {"at", 0.0015}}});
  if (!f.failures()) return expect_refused(c, f.refuses_failures_at);
  const RunOutcome out = simulate(c);
  EXPECT_EQ(out.status, "completed");
  EXPECT_EQ(out.note.rfind("reached stop.epochs", 0), 0u) << out.note;
  ASSERT_EQ(out.workers.size(), 4u);
  EXPECT_EQ(out.workers[0].gradients, 1u);  // then it failed with one in flight
  EXPECT_EQ(out.workers[0].lost, 1u);
  EXPECT_EQ(out.workers[2].gradients + out.workers[2].lost, 0u);
  EXPECT_GT(out.workers[1].gradients, 16u);  // the rest of the warm-up, then the engine
  EXPECT_GT(out.workers[3].gradients, 8u);   // the engine only
}

// Each failure case above, made in memory (one process per form under ctest).
TEST_P(Failures, AndStragglersEndEachRunWithItsOutcome) {
  const EngineForm& f = GetParam();
  for (const auto& [what, check] : std::vector<std::pair<const char*, void (*)(const EngineForm&)>>{
           {"live workers go on", go_on_with_the_live_workers},
           {"the reference run reaches its stop", reference_run_reaches_its_stop},
           {"every worker lost", every_worker_lost_ends_the_run},
           {"failures in the warm-up", warm_up_failures_neither_hang_nor_wake_the_dead}}) {
    SCOPED_TRACE(what);
    check(f);
  }
}

// ------------------------------------------------------------------ sparse models

// A sparse model (plain SGD: an update touches only its rows) gives the same files with
// the sparse server updates as with every update forced dense.
TEST_P(Conformance, SparseUpdatesGiveTheDenseBits) {
  const EngineForm& f = GetParam();
  json c = mlp_config(f);
  c["model"] = {{"type", "sparse_softmax"}};
  c["data"] = {{"type", "sparse_synthetic"}, {"features", 3000},   {"nnz", 8}, {"classes", 3},
               {"train_samples", 600},       {"test_samples", 200}};
  c["train"]["momentum"] = 0;
  if (!f.refuses_sparse_at.empty()) return expect_refused(c, f.refuses_sparse_at);
  const std::string run = run_name(f, 5);
  const std::string sparse = run_config(c, temp_dir("sparse"), 2) + "/" + run;
  g_force_dense_updates = true;
  const std::string dense = run_config(c, temp_dir("dense"), 2) + "/" + run;
  g_force_dense_updates = false;
  expect_same_results(sparse, dense, /*with_config=*/false, "(sparse and forced dense updates)");
}

// ------------------------------------------------------------------ checkpoints

// Interrupted at a random update (printed; ASGD_TEST_SEED fixes it) and made again: the
// reference run's files, byte for byte.
TEST_P(Conformance, ResumesByteIdentical) {
  const EngineForm& f = GetParam();
  const json c = reference_config(f);
  if (f.resume) return expect_resume_identical(c, draw_update(1, kUpdates - 1), f.name, reference_run(f));
  const std::string out = temp_dir("nock");
  EXPECT_EQ(run_into(c, out, 10), 130);
  EXPECT_FALSE(std::filesystem::exists(run_dir_of(out, c) + "/checkpoint.bin"));
}

INSTANTIATE_TEST_SUITE_P(Engines, Conformance, ::testing::ValuesIn(forms()), form_name);
INSTANTIATE_TEST_SUITE_P(Engines, Failures, ::testing::ValuesIn(forms()), form_name);

}  // namespace

namespace {

// An engine that goes round without work: each timer schedules two more at the same
// instant (as fedavg did on no population: a slot that found no client waited for one at
// time 0, every slot at every wake-up).
class GoesRound final : public Engine {
 public:
  std::string type() const override { return "goes_round"; }
  void start(Runtime& sim) override {
    store_ = std::make_unique<ParameterStore>(sim.initial_params(), sim.history_needed(), sim.model().row_layout());
    sim.schedule_timer(sim.now(), 0, 1);
  }
  void on_gradient(Runtime&, std::unique_ptr<GradientJob>) override {}
  void on_timer(Runtime& sim, const Timer&) override {
    sim.schedule_timer(sim.now(), 0, 1);
    sim.schedule_timer(sim.now(), 0, 1);
  }
  Snapshot model_of_record() const override { return store_->current(); }

 private:
  std::unique_ptr<ParameterStore> store_;
};

// An async engine that stops handling gradients after its 5th (async: its 5th update): each
// gradient that comes later is dropped, and its worker is never given another step (an engine stuck
// waiting for something that never comes).
class StopsAfterFiveUpdates final : public Engine {
 public:
  explicit StopsAfterFiveUpdates(std::unique_ptr<Engine> inner) : inner_(std::move(inner)) {}
  std::string type() const override { return "stops_after_five"; }
  void start(Runtime& sim) override { inner_->start(sim); }
  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override {
    if (++gradients_ <= 5) inner_->on_gradient(sim, std::move(job));
  }
  Snapshot model_of_record() const override { return inner_->model_of_record(); }

 private:
  std::unique_ptr<Engine> inner_;
  int gradients_ = 0;
};

}  // namespace

// The no-progress rule under any stop limit: so many events in a row at one instant with
// no gradient arriving and no update applied end the run with NoProgress (exit 2), instead
// of a queue that grows until memory runs out.
TEST(NoProgressRule, AnEngineGoingRoundWithoutWorkEndsTheRunUnderAnyLimit) {
  const json c = {{"model", {{"type", "quadratic"}, {"dim", 4}}},
                  {"data", {{"type", "none"}}},
                  {"stop", {{"updates", 100}}},
                  {"cluster", {{"workers", 2}}},
                  {"engines", json::array({json{{"type", "async"}}})}};
  try {
    simulate(c, [](const RunSpec&) { return std::make_unique<GoesRound>(); });
    ADD_FAILURE() << "the run ended without NoProgress";
  } catch (const NoProgress& e) {
    EXPECT_NE(std::string(e.what()).find("no gradient arriving and no update applied"), std::string::npos) << e.what();
  }
}

// An engine that gives its live workers no step, with nothing under way, before any stop
// limit is stuck: the run ends "stalled", naming it, though it trained (5 updates of the
// quadratic at rate 0.1 bring its loss well below its start). Before, it ended "completed".
TEST(NoWorkLeft, AStuckEngineEndsTheRunStalled) {
  const json c = {{"model", {{"type", "quadratic"}, {"dim", 4}}},
                  {"data", {{"type", "none"}}},
                  {"train", {{"lr", 0.1}}},
                  {"stop", {{"updates", 100}}},
                  {"eval", {{"every", 1}, {"unit", "updates"}}},
                  {"cluster", {{"workers", 2}}},
                  {"engines", json::array({json{{"type", "async"}}})}};
  const RunOutcome out = simulate(
      c, [](const RunSpec& run) { return std::make_unique<StopsAfterFiveUpdates>(make_engine(*run.bound_engine)); });
  EXPECT_EQ(out.updates, 5u);
  EXPECT_EQ(out.status, "stalled") << out.note;
  EXPECT_NE(out.note.find("the engine gave none of its 2 live workers a step, with nothing under way, after 5 "
                          "updates and before any stop limit: the engine is stuck"),
            std::string::npos)
      << out.note;
}

// Failures without updates: DiLoCo's rounds (4 workers x 500 inner steps) never finish
// when a worker fails every 20 ms on average (back 2 ms later): the run would go on
// computing forever under stop.updates. After 100 failures per worker with no update it
// ends "stalled", naming it, in about 2 virtual s, long before its stop.time bound
// (without the rule it ran to stop.time: "reached stop.time", then stalled for its 0
// updates).
TEST(NoWorkLeft, RoundsThatNeverFinishEndTheRunStalled) {
  const json c = {{"model", {{"type", "quadratic"}, {"dim", 8}}},
                  {"data", {{"type", "none"}}},
                  {"train", {{"lr", 0.05}}},
                  {"stop", {{"updates", 200}, {"time", 5000.0}}},
                  {"eval", {{"every", 10}, {"unit", "updates"}}},
                  {"cluster", {{"workers", 4}, {"failures", {{"rate", 50.0}, {"down_time", 0.002}}}}},
                  {"engines", json::array({json{{"type", "diloco"}}})}};
  const RunOutcome out = simulate(c);
  EXPECT_EQ(out.status, "stalled") << out.note;
  EXPECT_EQ(out.updates, 0u);
  EXPECT_EQ(out.note.rfind("no update of the model of record in the last 401 worker failures (100 per worker), "
                           "after 0 updates: the failures end every round of the engine before it finishes",
                           0),
            0u)
      << out.note;
  EXPECT_EQ(out.failures, 401u);
  EXPECT_LT(sim_to_seconds(out.time), 10.0);
}
