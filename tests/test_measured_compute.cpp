// tests/test_measured_compute.cpp — cluster.compute "measured" and "trace": the
// calibration's timing loop (an injected clock: exact), the trace's draws (closed form,
// reuse, byte-identical across threads and re-runs, the staleness law of independent
// workers), per-worker traces (arrival order, worker count), the cost it measures (LeNet-5 over the MLP, against the
// same gradients timed in bulk as bench's bare side times them), bad traces (exit 2
// naming the file) and validate's notes and warnings.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>
#include <set>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include "experiments/run/calibration.h"
#include "experiments/run/run_parts.h"
#include "sim/base/errors.h"
#include "sim/timing/measured_trace.h"
#include "test_helpers.h"

using namespace asgd;
using namespace asgd::testing;
using nlohmann::json;

namespace {

const json kMlp = {{"type", "mlp"}, {"hidden", {128}}};
const json kMlpData = {
    {"type", "synthetic"}, {"features", 784}, {"classes", 10}, {"train_samples", 256}, {"test_samples", 64}};
const json kCnn = {{"type", "cnn"}, {"arch", "lenet5"}};
const json kCnnData = {
    {"type", "synthetic"}, {"image", {1, 28, 28}}, {"classes", 10}, {"train_samples", 256}, {"test_samples", 64}};

json measured_config(const std::string& name, int workers, json engines, json compute_extra = json::object()) {
  json compute = {{"dist", "measured"}, {"seconds", 0.05}, {"steps", 20}, {"warmup", 1}};
  compute.update(compute_extra);
  return {{"name", name},
          {"model", kMlp},
          {"data", kMlpData},
          {"train", {{"batch_size", 16}, {"lr", 0.05}}},
          {"cluster", {{"workers", workers}, {"compute", compute}}},
          {"stop", {{"updates", 40}}},
          {"eval", {{"every", 10}, {"unit", "updates"}, {"train_samples", 64}, {"test_samples", 64}}},
          {"engines", engines}};
}

std::string trace_path(const Experiment& e, const std::string& out) {
  const RunSpec& r = e.runs.front();
  return out + "/" + r.config["name"].get<std::string>() + "/" +
         measured_trace_name(r.config["model"], r.config["data"], r.settings.batch_size);
}

// The model of `model_cfg` on its data, as a run builds it.
struct Built {
  std::shared_ptr<LoadedData> data;
  std::unique_ptr<Model> model;
};
Built build(const json& model_cfg, const json& data_cfg) {
  json cfg = measured_config("b", 1, json::array({{{"type", "async"}}}));
  cfg["model"] = model_cfg;
  cfg["data"] = data_cfg;
  Experiment e = resolve_experiment(cfg, "test", ".");
  Built b;
  b.data = load_data(e.runs[0], ".");
  b.model = build_model(*e.runs[0].bound_model, *b.data);
  return b;
}

}  // namespace

// The budget is honoured exactly: a clock that advances 1 ms a reading makes every timed
// step 1 ms; 10.5 ms of budget ends after the 11th step, 4 steps at most
// after the 4th, and a step longer than the whole budget is still timed once.
TEST(MeasuredCompute, TimingStopsAtTheBudgetWithAnInjectedClock) {
  Built b = build(kMlp, kMlpData);
  double t = 0;
  auto clock = [&t] { return t += 0.001; };
  std::vector<double> steps =
      time_gradient_steps(*b.model, &b.data->train, b.data->train.n, 16, {0.0105, 100, 2}, clock);
  ASSERT_EQ(steps.size(), 11u);
  for (double s : steps) EXPECT_NEAR(s, 0.001, 1e-12);
  EXPECT_EQ(time_gradient_steps(*b.model, &b.data->train, b.data->train.n, 16, {10, 4, 0}, clock).size(), 4u);
  EXPECT_EQ(time_gradient_steps(*b.model, &b.data->train, b.data->train.n, 16, {1e-6, 100, 0}, clock).size(), 1u);
}

// min_steps: a budget of 10.5 ms stops at the 11th step of 1 ms unless at least 20 are
// asked (then 20), and never beyond `steps` (15 of at least 20 asked: 15).
TEST(MeasuredCompute, TimingTakesAtLeastMinStepsAndAtMostSteps) {
  Built b = build(kMlp, kMlpData);
  double t = 0;
  auto clock = [&t] { return t += 0.001; };
  auto timed = [&](CalibrationBudget budget) {
    return time_gradient_steps(*b.model, &b.data->train, b.data->train.n, 16, budget, clock).size();
  };
  EXPECT_EQ(timed({0.0105, 100, 2, 20}), 20u);
  EXPECT_EQ(timed({0.0105, 15, 2, 20}), 15u);
  EXPECT_EQ(timed({0.0105, 100, 2, 5}), 11u);
  // the key's default: at least 30
  json cfg = measured_config("d", 1, json::array({{{"type", "async"}}}));
  cfg["cluster"]["compute"].erase("steps");
  const json resolved = resolve_experiment(cfg, "test", ".").runs[0].config["cluster"]["compute"];
  EXPECT_EQ(calibration_budget(*bind_distribution(resolved)).min_steps, 30);
}

// The calibration cache (ASGDSIM_CACHE_DIR): a second experiment folder copies the first's
// trace and times nothing (the clock is never read); compute_model says it came from the
// cache, with the measurement's date. Another model's shapes, another batch, or the cache
// off ("off") measure anew; --recalibrate measures anew and replaces the cache's trace.
TEST(MeasuredCompute, ASecondExperimentReplaysTheFirstsTraceFromTheCache) {
  const std::string out = temp_dir("calcache");
  const char* before = std::getenv("ASGDSIM_CACHE_DIR");
  const std::string saved = before ? before : "";
  ::setenv("ASGDSIM_CACHE_DIR", (out + "/cache").c_str(), 1);
  int readings = 0;
  double t = 0;
  CalibrationOptions opts{false, true, [&] { return ++readings, t += 0.001; }};
  const Experiment e = resolve_experiment(measured_config("c", 1, json::array({{{"type", "async"}}})), "test", ".");
  const Experiment a = with_measured_compute(e, out + "/a/c", opts);
  EXPECT_GT(readings, 0);
  const json ma = a.runs[0].settings.compute_model;
  EXPECT_FALSE(ma.contains("from_cache")) << ma.dump();
  readings = 0;
  const Experiment b = with_measured_compute(e, out + "/b/c", opts);
  EXPECT_EQ(readings, 0);
  const json mb = b.runs[0].settings.compute_model;
  ASSERT_TRUE(mb.contains("from_cache")) << mb.dump();
  EXPECT_EQ(mb["from_cache"].get<std::string>().rfind(out + "/cache/calibration/mlp-b16-", 0), 0u) << mb.dump();
  EXPECT_EQ(mb["date"], ma["date"]);
  EXPECT_EQ(read_measured_trace(out + "/b/c/" + ma["trace"].get<std::string>()).step_seconds,
            read_measured_trace(out + "/a/c/" + ma["trace"].get<std::string>()).step_seconds);
  auto measured_anew = [&](json cfg, const std::string& folder, bool recalibrate = false) {
    readings = 0;
    CalibrationOptions o = opts;
    o.recalibrate = recalibrate;
    const Experiment x = with_measured_compute(resolve_experiment(cfg, "test", "."), out + "/" + folder, o);
    return readings > 0 && !x.runs[0].settings.compute_model.contains("from_cache");
  };
  json shapes = measured_config("c", 1, json::array({{{"type", "async"}}}));
  shapes["model"]["hidden"] = {64};
  EXPECT_TRUE(measured_anew(shapes, "c/c"));
  json batch = measured_config("c", 1, json::array({{{"type", "async"}}}));
  batch["train"]["batch_size"] = 8;
  EXPECT_TRUE(measured_anew(batch, "d/c"));
  EXPECT_TRUE(measured_anew(measured_config("c", 1, json::array({{{"type", "async"}}})), "e/c", true));
  ::setenv("ASGDSIM_CACHE_DIR", "off", 1);
  EXPECT_TRUE(measured_anew(measured_config("c", 1, json::array({{{"type", "async"}}})), "f/c"));
  ::setenv("ASGDSIM_CACHE_DIR", saved.c_str(), 1);
  if (!before) ::unsetenv("ASGDSIM_CACHE_DIR");
}

// A trace already in the experiment folder is used as it is (nothing is measured): one
// async worker's k-th step lasts speed x (trace[i_k] + overhead), i_k the draw of the step's
// own stream (seed, ComputeTime, worker, k), so 9 updates end at 2 x (sum of the drawn
// steps + 9 x 0.5 ms); summary.json's compute_model names the trace, its header, its
// median and how it is replayed.
TEST(MeasuredCompute, AnExistingTraceIsDrawnFromStepByStep) {
  json cfg = measured_config("replay", 1, json::array({{{"type", "async"}}}), {{"overhead", 0.0005}});
  cfg["cluster"]["speeds"] = {2.0};
  cfg["stop"] = {{"updates", 9}};
  cfg["eval"] = {{"every", 100}, {"unit", "updates"}, {"train_samples", 64}, {"test_samples", 64}};
  const std::string out = temp_dir("measured");
  Experiment e = resolve_experiment(cfg, "test", ".");
  MeasuredTrace trace;
  trace.header = {{"machine", "elsewhere"}, {"batch", 16}, {"commit", "abc"}};
  trace.step_seconds = {0.0010, 0.0037, 0.0021, 0.0055};
  const std::string path = trace_path(e, out);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << format_measured_trace(trace);
  RunnerOptions opts;
  opts.out_dir = out;
  opts.quiet = true;
  ASSERT_EQ(run_experiment(e, opts), 0);
  double steps = 0;
  std::set<double> drawn;
  for (uint32_t k = 0; k < 9; ++k) {
    Rng rng(e.runs[0].seed, RngPurpose::ComputeTime, 0, k);
    steps += trace.step_seconds[rng.below(4)];
    drawn.insert(trace.step_seconds[Rng(e.runs[0].seed, RngPurpose::ComputeTime, 0, k).below(4)]);
  }
  EXPECT_GT(drawn.size(), 1u) << "9 draws from 4 values";
  json s = summary_at(out + "/replay/async-seed1");
  EXPECT_NEAR(s["time"].get<double>(), 2 * (steps + 9 * 0.0005), 1e-9) << s.dump(1);
  EXPECT_EQ(s["compute_model"]["dist"], "measured");
  EXPECT_EQ(s["compute_model"]["replay"], "draw");
  EXPECT_EQ(s["compute_model"]["machine"], "elsewhere");
  EXPECT_EQ(s["compute_model"]["steps"], 4);
  EXPECT_DOUBLE_EQ(s["compute_model"]["median_step_seconds"].get<double>(), 0.0029);
  EXPECT_EQ(read_file(path), format_measured_trace(trace));  // reused, not measured again
}

// Workers that draw their steps from one measured trace are independent workers, not a
// lockstep replay: with a trace of exponential step times (the quantiles of Exp(1 ms)), an
// async gradient's staleness is the number of the other N - 1 workers' arrivals during its
// step, geometric with P(k) = (1/N)(1 - 1/N)^k (memoryless steps), mean N - 1. Replayed in
// order from one start, every worker would arrive with every other: staleness N - 1 at
// every update (total variation 0.58 from that law at N = 4).
TEST(MeasuredCompute, AsyncStalenessFollowsTheLawOfIndependentWorkers) {
  const int workers = 4, updates = reduced_size() ? 4000 : 20000;
  json cfg = measured_config("law", workers, json::array({{{"type", "async"}}}));
  cfg["model"] = {{"type", "quadratic"}, {"dim", 4}};
  cfg.erase("data");
  cfg["stop"] = {{"updates", updates}};
  cfg["eval"] = {{"every", updates}, {"unit", "updates"}};
  const std::string out = temp_dir("measured");
  Experiment e = resolve_experiment(cfg, "test", ".");
  MeasuredTrace trace;
  trace.header = {{"machine", "planted"}};
  for (int i = 0; i < 1000; ++i) trace.step_seconds.push_back(-0.001 * std::log(1 - (i + 0.5) / 1000));
  const std::string path = trace_path(e, out);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << format_measured_trace(trace);
  RunnerOptions opts;
  opts.out_dir = out;
  opts.quiet = true;
  ASSERT_EQ(run_experiment(e, opts), 0);
  std::map<int, double> seen;
  double total = 0, mean = 0;
  std::ifstream in(out + "/law/async-seed1/staleness.csv");
  std::string line;
  std::getline(in, line);  // staleness,count
  while (std::getline(in, line)) {
    const int tau = std::stoi(line.substr(0, line.find(','))), count = std::stoi(line.substr(line.find(',') + 1));
    seen[tau] += count;
    total += count;
    mean += double(tau) * count;
  }
  ASSERT_EQ(total, updates);
  double tv = 0, p = 1.0 / workers, covered = 0;
  for (int k = 0; k < 200; ++k) {
    const double law = p * std::pow(1 - p, k);
    covered += law;
    tv += std::fabs(seen[k] / total - law);
  }
  tv = 0.5 * (tv + (1 - covered));
  std::printf("staleness: mean %.3f (law %d), P(N-1) %.3f (law %.3f), total variation from the law %.4f\n",
              mean / total, workers - 1, seen[workers - 1] / total, p * std::pow(1 - p, workers - 1), tv);
  EXPECT_NEAR(mean / total, workers - 1, reduced_size() ? 0.25 : 0.1);
  EXPECT_LT(tv, reduced_size() ? 0.05 : 0.03);
}

// A per-worker trace (worker,step,seconds) replays each worker's own steps, so the run's
// arrival order is the one the durations make: worker w's k-th gradient arrives at the sum
// of its first k durations (free network, async: the next step starts on arrival). The
// compute spans of trace.json end in exactly the order of those sums, and summary.json
// says the trace is replayed per worker. (The first 12 of the 13 arrivals: the steps under
// way when the 13th ends the run show up cut off at that moment.)
TEST(MeasuredCompute, APerWorkerTraceReproducesItsArrivalOrder) {
  const std::string out = temp_dir("perworker");
  const std::vector<std::vector<double>> d = {{0.0031, 0.0017, 0.0029, 0.0010, 0.0044},
                                              {0.0023, 0.0041, 0.0012, 0.0036, 0.0008},
                                              {0.0050, 0.0005, 0.0019, 0.0027, 0.0033}};
  std::string rows = "worker,step,seconds\n";
  std::vector<std::tuple<double, int, int>> arrivals;  // (time, worker, step)
  for (int w = 0; w < 3; ++w) {
    double t = 0;
    for (int k = 0; k < 5; ++k) {
      rows += std::to_string(w) + "," + std::to_string(k + 1) + "," + std::to_string(d[w][k]) + "\n";
      arrivals.emplace_back(t += d[w][k], w, k);
    }
  }
  std::sort(arrivals.begin(), arrivals.end());
  write_text(out + "/steps.csv", rows);
  json cfg = measured_config("order", 3, json::array({{{"type", "async"}}}));
  cfg["model"] = {{"type", "quadratic"}, {"dim", 4}};
  cfg.erase("data");
  cfg["cluster"]["compute"] = {{"dist", "trace"}, {"file", out + "/steps.csv"}, {"per", "step"}};
  cfg["stop"] = {{"updates", 13}};  // the 13th ends the run: steps under way then are cut off there
  cfg["trace"] = true;
  const std::string run = run_config(cfg, out) + "/async-seed1";
  EXPECT_EQ(summary_at(run)["compute_model"], (json{{"dist", "trace"}, {"replay", "per_worker"}}));
  json events = json::parse(read_file(run + "/trace.json"));
  std::vector<std::tuple<double, int, int>> computed;  // (end, worker, step) of each compute span
  for (const auto& ev : events["traceEvents"])
    if (ev.value("name", "") == "compute")
      computed.emplace_back(ev["ts"].get<double>() + ev["dur"].get<double>(), ev["tid"].get<int>() - 1,
                            ev["args"]["step"].get<int>());
  std::sort(computed.begin(), computed.end());
  ASSERT_GE(computed.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(std::get<1>(computed[i]), std::get<1>(arrivals[i])) << "arrival " << i;
    EXPECT_EQ(std::get<2>(computed[i]), std::get<2>(arrivals[i])) << "arrival " << i;
    EXPECT_NEAR(std::get<0>(computed[i]) * 1e-6, std::get<0>(arrivals[i]), 1e-9) << "arrival " << i;
  }
}

// A per-worker trace must give every worker of the run its sequence: a run with more or
// fewer workers than the file's is refused (exit 2) naming the file and both counts.
TEST(MeasuredCompute, APerWorkerTraceOfAnotherWorkerCountIsRefused) {
  const std::string out = temp_dir("perworker");
  write_text(out + "/steps.csv", "w0,w1\n0.001,0.002\n");
  json cfg = measured_config("count", 3, json::array({{{"type", "async"}}}));
  cfg["model"] = {{"type", "quadratic"}, {"dim", 4}};
  cfg.erase("data");
  cfg["cluster"]["compute"] = {{"dist", "trace"}, {"file", out + "/steps.csv"}, {"per", "step"}};
  write_text(out + "/c.json", cfg.dump());
  CommandResult r = run_cli("validate " + out + "/c.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const char* said : {"cluster.compute.file", "steps.csv", "holds 2 workers' sequences", "the run has 3 workers"})
    EXPECT_NE(r.output.find(said), std::string::npos) << said << " not in: " << r.output;
  cfg["cluster"]["workers"] = 2;
  write_text(out + "/c.json", cfg.dump());
  EXPECT_EQ(run_cli("validate " + out + "/c.json").exit_code, 0);
}

// Measured once, the trace makes every run the same bytes: with 1 or 2 threads, and again.
TEST(MeasuredCompute, ReplayIsByteIdenticalAcrossThreadsAndReruns) {
  json cfg = measured_config("bytes", 4, json::array({{{"type", "async"}}, {{"type", "sync"}}}));
  cfg["cluster"]["speeds"] = {{"dist", "uniform"}, {"low", 0.8}, {"high", 1.2}};
  const std::string out = temp_dir("measured");
  Experiment e = resolve_experiment(cfg, "test", ".");
  RunnerOptions opts;
  opts.out_dir = out;
  opts.quiet = true;
  opts.threads = 1;
  ASSERT_EQ(run_experiment(e, opts), 0);
  const std::string path = trace_path(e, out);
  const std::string trace = read_file(path);
  ASSERT_FALSE(read_measured_trace(path).step_seconds.empty());
  std::vector<std::string> first;
  for (const char* run : {"async-seed1", "sync-seed1"}) {
    first.push_back(read_file(out + "/bytes/" + run + "/metrics.csv"));
    EXPECT_EQ(summary_at(out + "/bytes/" + run)["compute_model"]["trace"],
              measured_trace_name(e.runs[0].config["model"], e.runs[0].config["data"], 16));
  }
  for (int threads : {2, 1}) {
    opts.threads = threads;
    opts.replace.rerun = true;
    ASSERT_EQ(run_experiment(e, opts), 0);
    EXPECT_EQ(read_file(path), trace);
    EXPECT_EQ(read_file(out + "/bytes/async-seed1/metrics.csv"), first[0]) << threads << " threads";
    EXPECT_EQ(read_file(out + "/bytes/sync-seed1/metrics.csv"), first[1]) << threads << " threads";
  }
}

// The trace follows the model: LeNet-5's median step over the MLP's, against the same
// gradients timed in bulk (bench's bare loop: GradientLoop, gradients back to back, the
// calibration's clock read at each end of a chunk; the median chunk), both measured here, alternated so that a slow
// phase of a shared machine hits both alike. A generous bound: the two must agree within a factor of 2, and LeNet-5
// must cost clearly more than the MLP (about 17x here in CPU time on one OMP thread).
TEST(MeasuredCompute, LeNetOverMlpStepRatioMatchesBulkTiming) {
  Built mlp = build(kMlp, kMlpData), cnn = build(kCnn, kCnnData);
  auto bulk = [](const Built& b, int n) {
    double seconds = 0;
    std::thread t([&] {
      kernels_use_one_thread_here();
      std::vector<float> init;
      b.model->init_params(1, init);
      GradientLoop loop(*b.model, &b.data->train, init, b.data->train.n, 32, 1, 16);
      loop.gradient(0, {1, 0, 0});
      loop.ctx.synchronize();
      std::vector<double> chunks;  // a chunk's mean: the median of 5 keeps out a preempted chunk
      for (int chunk = 0, k = 0; chunk < 5; ++chunk) {
        const double t0 = calibration_clock_seconds();
        for (int i = 0; i < n; ++i, ++k) loop.gradient(uint64_t(k), {1, 0, uint32_t(k)});
        loop.ctx.synchronize();
        chunks.push_back((calibration_clock_seconds() - t0) / n);
      }
      seconds = median_of(chunks);
    });
    t.join();
    return seconds;
  };
  std::vector<double> traced, bulked;
  for (int round = 0; round < 3; ++round) {
    const CalibrationBudget budget{0.1, 40, 2};
    double m = median_of(time_gradient_steps(*mlp.model, &mlp.data->train, mlp.data->train.n, 32, budget));
    double c = median_of(time_gradient_steps(*cnn.model, &cnn.data->train, cnn.data->train.n, 32, budget));
    double bm = bulk(mlp, 8), bc = bulk(cnn, 4);
    traced.push_back(c / m);
    bulked.push_back(bc / bm);
  }
  const double r = median_of(traced), b = median_of(bulked);
  std::printf("LeNet-5 / MLP step time at batch 32: calibration median %.2f, bulk %.2f\n", r, b);
  EXPECT_GT(r, 2.0);
  EXPECT_GT(r, b / 2);
  EXPECT_LT(r, b * 2);
}

// A malformed trace in the experiment folder is invalid input (exit 2) naming the file and
// the line; a config pointing dist "trace" at a missing file is exit 2 naming it.
TEST(MeasuredCompute, MalformedOrMissingTraceIsExit2NamingIt) {
  json cfg = measured_config("bad", 1, json::array({{{"type", "async"}}}));
  const std::string out = temp_dir("measured");
  Experiment e = resolve_experiment(cfg, "test", ".");
  const std::string path = trace_path(e, out);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << "# asgdsim measured compute trace\n0.001\nfast\n";
  RunnerOptions opts;
  opts.out_dir = out;
  opts.quiet = true;
  try {
    run_experiment(e, opts);
    ADD_FAILURE() << "a malformed trace was replayed";
  } catch (const DataError& err) {
    EXPECT_EQ(exit_code_of(std::current_exception()), 2);
    EXPECT_NE(std::string(err.what()).find(std::filesystem::absolute(path).lexically_normal().string() + " line 3"),
              std::string::npos)
        << err.what();
  }
  std::ofstream(path) << "# asgdsim measured compute trace\n# machine here\n0.001\n";
  EXPECT_THROW(run_experiment(e, opts), DataError);  // a header line that is not KEY: JSON

  json other = cfg;
  other["cluster"]["compute"] = {{"dist", "trace"}, {"file", out + "/elsewhere.trace"}, {"per", "step"}};
  const std::string file = out + "/other.json";
  std::ofstream(file) << other.dump();
  CommandResult r = run_cli("run " + file + " --quiet --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(out + "/elsewhere.trace: cannot be opened"), std::string::npos) << r.output;
}

// validate times nothing: it says what run will do; a sweep over the model with a fixed
// draw is warned about, one with a measured (or flops) draw or over another key is not.
TEST(MeasuredCompute, ValidateSaysWhatMeasuredDoesAndWarnsOfFixedDrawsInModelSweeps) {
  json cfg = measured_config("plan", 2, json::array({{{"type", "async"}}}));
  cfg["sweep"] = {{"model.hidden", {{64}, {128}}}};
  Experiment e = resolve_experiment(cfg, "test", ".");
  ASSERT_EQ(e.runs.size(), 2u);
  EXPECT_TRUE(e.warnings.empty());
  ASSERT_EQ(e.notes.size(), 2u);  // one trace per model
  EXPECT_NE(e.notes[0].find("calibration/mlp-b16-"), std::string::npos) << e.notes[0];
  EXPECT_FALSE(e.runs[0].settings.step_cost.per_sample);
  EXPECT_FALSE(e.runs[0].settings.compute_model.contains("median_step_seconds"));

  cfg["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", 0.001}};
  Experiment fixed = resolve_experiment(cfg, "test", ".");
  ASSERT_EQ(fixed.warnings.size(), 1u);
  EXPECT_NE(fixed.warnings[0].find("sweep.model.hidden"), std::string::npos) << fixed.warnings[0];
  cfg["sweep"] = {{"train.batch_size", {16, 32}}};
  EXPECT_EQ(resolve_experiment(cfg, "test", ".").warnings.size(), 1u);
  cfg["sweep"] = {{"train.lr", {0.1, 0.2}}};
  EXPECT_TRUE(resolve_experiment(cfg, "test", ".").warnings.empty());
}
