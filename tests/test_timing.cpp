// tests/test_timing.cpp — the simulation's timing models seen through whole runs: the
// shared server link saturates, shards spread the load, 16-bit transfers round values
// exactly as fp16/bf16 do, stragglers and failures change timing (and never deadlock an
// engine), bad timing input is rejected, and everything stays byte-deterministic.
#include <cmath>
#include <nlohmann/json.hpp>
#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/model.h"
#include "kernels/ops_ref.h"
#include "experiments/run/run_parts.h"
#include "sim/data/sample_stream.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;

namespace {

// A 100,000-parameter quadratic (400 kB a message in fp32), constant 10 ms compute.
json link_config(int workers, double bandwidth, int shards = 1, const std::string& precision = "fp32") {
  return json{{"name", "link"},
              {"model", {{"type", "quadratic"}, {"dim", 100000}, {"curvature", {{"min", 0.01}, {"max", 1.0}}}}},
              {"train", {{"lr", 0.001}}},  // small: 32 workers give gradients ~31 updates stale
              {"stop", {{"time", 2.0}}},
              {"eval", {{"every", 1.0}, {"unit", "time"}}},
              {"cluster",
               {{"workers", workers},
                {"compute", {{"dist", "constant"}, {"value", 0.01}, {"per", "step"}}},
                {"network", {{"bandwidth", bandwidth}, {"latency", 0.001}, {"shards", shards}, {"precision", precision}}}}},
              {"engines", json::array({json{{"type", "async"}}})}};
}

json summary_of(const json& cfg, const std::string& run, int threads = 2) {
  std::string dir = run_config(cfg, temp_dir("timing"), threads);
  return json::parse(read_file(dir + "/" + run + "/summary.json"));
}

double updates(const json& cfg) {
  json s = summary_of(cfg, "async-seed1");
  EXPECT_EQ(s["status"], "completed");
  return s["updates"].get<double>();
}

}  // namespace

// Past some number of workers the shared link, not the compute, sets the pace.
TEST(Network, SharedLinkSaturatesAsyncThroughput) {
  const double bw = 4e7;  // 400 kB / 4e7 B/s = 10 ms a message, each direction
  double u1 = updates(link_config(1, bw)), u2 = updates(link_config(2, bw));
  double u8 = updates(link_config(8, bw)), u32 = updates(link_config(32, bw));
  // one worker: pull 11 ms + compute 10 ms + push 11 ms per update
  EXPECT_NEAR(u1, 2.0 / 0.032, 2);
  EXPECT_GT(u2 / u1, 1.8);        // still compute-bound: nearly linear
  EXPECT_LT(u32 / u8, 1.05);      // saturated: more workers add nothing
  EXPECT_NEAR(u32, 2.0 / 0.010, 6);  // the link's rate: one 10 ms message per direction at a time
}

TEST(Network, ShardsSpreadTheLoadAndSixteenBitHalvesTheBytes) {
  const double bw = 4e7;
  double one = updates(link_config(32, bw, 1)), four = updates(link_config(32, bw, 4));
  EXPECT_NEAR(four / one, 4.0, 0.3);
  double half = updates(link_config(32, bw, 1, "bf16"));
  EXPECT_NEAR(half / one, 2.0, 0.15);
}

// fp16/bf16 transfers: the worker computes on the parameters rounded through the format
// and its gradient is rounded before the server applies it.
TEST(Network, SixteenBitTransfersRoundLikeTheFormat) {
  const std::vector<float> h{1.0f, 0.5f, 2.0f, 0.3f};
  const float lr = 0.1f;
  for (std::string precision : {"fp16", "bf16"}) {
    json c = {{"name", "round"},
              {"model", {{"type", "quadratic"}, {"dim", 4}, {"curvature", h}, {"init", 1.0}}},
              {"train", {{"lr", lr}}},
              {"stop", {{"updates", 20}}},
              {"eval", {{"every", 1}, {"unit", "updates"}}},
              {"cluster", {{"workers", 1}, {"network", {{"precision", precision}}}}},
              {"engines", json::array({json{{"type", "async"}}})}};
    Metrics m = read_metrics(run_config(c, temp_dir("round")) + "/async-seed1/metrics.csv");
    auto round = [&](float v) { return precision == "fp16" ? ops_ref::round_fp16(v) : ops_ref::round_bf16(v); };
    std::vector<float> w(4, 1.0f), exact(4, 1.0f);
    auto loss = [&](const std::vector<float>& x) {
      double f = 0;
      for (size_t i = 0; i < 4; ++i) f += 0.5f * h[i] * x[i] * x[i];
      return f;
    };
    auto got = m.column("train_loss");
    ASSERT_EQ(got.size(), 21u) << precision;
    double max_gap = 0;
    for (int t = 0; t <= 20; ++t) {
      EXPECT_NEAR(got[t], loss(w), 1e-7) << precision << " update " << t;
      max_gap = std::max(max_gap, std::fabs(loss(w) - loss(exact)));
      for (size_t i = 0; i < 4; ++i) {
        w[i] = w[i] - lr * round(h[i] * round(w[i]));
        exact[i] = exact[i] - lr * (h[i] * exact[i]);
      }
    }
    EXPECT_GT(max_gap, 1e-5) << precision << ": rounding should change the trajectory";
  }
}

// The worker's 16-bit copy of the parameters lives in its job's workspace beside the
// model's own buffers (activations, deltas), which grow with the depth: 40 hidden layers
// must not overwrite it. By hand: one async worker computes each gradient at the rounded
// current parameters, on the next batch of the sample stream, and the server applies it
// rounded; the run's train_loss must follow.
TEST(Network, SixteenBitCopyOfADeepModelsParametersIsNotOverwritten) {
  const float lr = 0.05f;
  const size_t batch = 32, updates = 6;
  json c = {{"name", "deep16"},
            {"seed", 1},
            {"model", {{"type", "mlp"}, {"hidden", std::vector<int>(40, 16)}}},
            {"data", {{"type", "synthetic"}, {"classes", 4}, {"features", 6}, {"train_samples", 256}, {"test_samples", 64}}},
            {"train", {{"batch_size", batch}, {"lr", lr}}},
            {"stop", {{"updates", updates}}},
            {"eval", {{"every", 1}, {"unit", "updates"}, {"train_samples", 0}}},
            {"cluster", {{"workers", 1}, {"network", {{"precision", "fp16"}}}}},
            {"engines", json::array({json{{"type", "async"}}})}};
  Metrics m = read_metrics(run_config(c, temp_dir("deep16")) + "/async-seed1/metrics.csv");
  auto got = m.column("train_loss");
  ASSERT_EQ(got.size(), updates + 1);

  // The run's data and model, built as the run built them.
  const Experiment resolved_exp = resolve_experiment(c, "test", ".");
  auto data = load_data(resolved_exp.runs.front(), ".");
  const DeviceDataset& train = data->train;
  auto model = build_model(*resolved_exp.runs.front().bound_model, *data);
  ASSERT_EQ(model->num_params(), 6u * 16 + 16 + 39u * (16 * 16 + 16) + 16 * 4 + 4);
  std::vector<float> w;
  model->init_params(1, w);
  SampleStream stream(train.n, 1);
  ExecContext ctx;
  DeviceArray<float> dw, g(w.size());
  double max_change = 0;
  for (size_t t = 0; t <= updates; ++t) {
    dw.upload(w);
    EvalSums s = model->evaluate(ctx, dw.data(), &train, 0, train.n);
    EXPECT_NEAR(got[t], s.loss_sum / double(s.count), 1e-6 * s.loss_sum / double(s.count)) << "after update " << t;
    max_change = std::max(max_change, std::fabs(got[t] - got[0]));
    std::vector<int32_t> ids;
    stream.next(batch, ids);
    std::vector<float> rounded = w;
    for (float& v : rounded) v = ops_ref::round_fp16(v);
    dw.upload(rounded);
    model->loss_grad(ctx, dw.data(), &train, ids.data(), ids.size(), {}, g.data());
    std::vector<float> gh = g.to_host();
    for (size_t i = 0; i < w.size(); ++i) w[i] = w[i] - lr * ops_ref::round_fp16(gh[i]);
  }
  EXPECT_GT(max_change, 1e-4) << "degenerate test: the loss should move";
}

TEST(Stragglers, TransientAndWindowedSlowdownsStretchVirtualTime) {
  json base = link_config(2, 0);
  base["model"]["dim"] = 10;
  base["stop"] = {{"updates", 100}};
  base["eval"] = {{"every", 50}, {"unit", "updates"}};
  base["cluster"]["network"] = json::object();
  double t0 = summary_of(base, "async-seed1")["time"];
  json slow = base;
  slow["cluster"]["stragglers"] = {{"probability", 1.0}, {"factor", 3.0}};
  EXPECT_NEAR(summary_of(slow, "async-seed1")["time"].get<double>(), 3 * t0, 1e-6);

  json window = base;
  window["cluster"]["stragglers"] = {{"slow", json::array({json{{"worker", 0}, {"factor", 4.0}, {"from", 0.0}, {"to", 0.2}}})}};
  std::string dir = run_config(window, temp_dir("win"));
  Metrics wk = read_metrics(dir + "/async-seed1/workers.csv");
  auto grads = wk.column("gradients");
  EXPECT_LT(grads[0], grads[1]);  // worker 0 was slow for the first 0.2 s
}

TEST(Failures, SyncGoesOnWithTheLiveWorkers) {
  json c = link_config(4, 0);
  c["model"]["dim"] = 10;
  c["stop"] = {{"updates", 60}};
  c["eval"] = {{"every", 10}, {"unit", "updates"}};
  c["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", 0.01}};
  c["cluster"]["failures"] = {{"events", json::array({json{{"worker", 1}, {"at", 0.05}},
                                                      json{{"worker", 2}, {"at", 0.1}, {"down_for", 0.2}}})}};
  for (std::string engine : {"sync", "sync_backup", "async", "easgd"}) {
    c["engines"] = json::array({json{{"type", engine}}});
    json s = summary_of(c, engine + "-seed1");
    EXPECT_EQ(s["status"], "completed") << engine;
    EXPECT_EQ(s["worker_failures"], 2) << engine;
    EXPECT_NE(s["note"].get<std::string>().find("worker failure"), std::string::npos) << engine;
    if (engine != "easgd") {  // easgd's updates count exchanges
      EXPECT_EQ(s["updates"], 60) << engine;
    }
  }
}

TEST(Failures, EveryWorkerLostEndsTheRunInsteadOfHanging) {
  json c = link_config(3, 0);
  c["model"]["dim"] = 10;
  c["stop"] = {{"updates", 100000}};
  c["eval"] = {{"every", 0.05}, {"unit", "time"}};  // time-based evaluation must not run forever
  c["cluster"]["failures"] = {{"rate", 20.0}};       // never come back
  for (std::string engine : {"sync", "async", "easgd"}) {
    c["engines"] = json::array({json{{"type", engine}}});
    json s = summary_of(c, engine + "-seed1");
    EXPECT_EQ(s["worker_failures"], 3) << engine;
    EXPECT_NE(s["note"].get<std::string>().find("no work left"), std::string::npos) << engine << ": " << s["note"];
    EXPECT_LT(s["updates"].get<int>(), 100000) << engine;
  }
}

TEST(Failures, RateFailuresWithRecoveryLoseGradients) {
  json c = link_config(4, 0);
  c["model"]["dim"] = 10;
  c["stop"] = {{"time", 5.0}};
  c["cluster"]["failures"] = {{"rate", 2.0}, {"down_time", 0.1}};
  json s = summary_of(c, "async-seed1");
  EXPECT_GT(s["worker_failures"].get<int>(), 10);
  EXPECT_GT(s["lost_gradients"].get<int>(), 0);
  EXPECT_LE(s["lost_gradients"].get<int>(), s["worker_failures"].get<int>());  // at most one in flight per failure
}

TEST(TimingInput, BadTimingInputExitsTwoNamingThePlace) {
  std::string dir = temp_dir("bad");
  json base = link_config(4, 0);
  base["model"]["dim"] = 10;
  write_text(dir + "/bad_trace.csv", "0.01\n0.02\nfast\n");
  struct Case {
    std::function<void(json&)> edit;
    std::vector<std::string> mention;
  };
  std::vector<Case> cases = {
      {[](json& c) { c["cluster"]["failures"] = {{"events", json::array({json{{"worker", 9}, {"at", 1.0}}})}}; },
       {"cluster.failures.events[0].worker", "does not exist"}},
      {[](json& c) { c["cluster"]["stragglers"] = {{"slow", json::array({json{{"worker", 4}, {"factor", 2.0}}})}}; },
       {"cluster.stragglers.slow[0].worker"}},
      {[](json& c) { c["cluster"]["compute"] = {{"dist", "trace"}, {"file", "/nonexistent/trace.csv"}}; },
       {"cluster.compute.file", "/nonexistent/trace.csv"}},
      {[&](json& c) { c["cluster"]["compute"] = {{"dist", "trace"}, {"file", dir + "/bad_trace.csv"}}; },
       {"line 3", "fast"}},
      {[](json& c) { c["cluster"]["compute"] = {{"dist", "lognormal"}, {"mean", 0.01}, {"sigma", -1}}; },
       {"cluster.compute.sigma"}},
      {[](json& c) { c["cluster"]["network"] = {{"precision", "fp8"}}; }, {"cluster.network.precision", "bf16"}},
      {[](json& c) { c["cluster"]["network"] = {{"bandwidth", -5}}; }, {"cluster.network.bandwidth"}},
      {[](json& c) { c["cluster"]["speeds"] = {{"dist", "pareto"}, {"scale", 1.0}}; }, {"cluster.speeds.alpha", "missing"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    json c = base;
    cases[i].edit(c);
    std::string path = dir + "/c" + std::to_string(i) + ".json";
    write_text(path, c.dump());
    CommandResult r = run_cli("run " + path + " --quiet --out " + dir + "/out");
    EXPECT_EQ(r.exit_code, 2) << "case " << i << ":\n" << r.output;
    for (const auto& m : cases[i].mention) EXPECT_NE(r.output.find(m), std::string::npos) << "case " << i << " lacks " << m << ":\n" << r.output;
  }
}

// DESIGN.md determinism with every timing model switched on at once.
TEST(Determinism, EveryTimingModelOnStillByteIdenticalAcrossThreads) {
  json c = {{"name", "all"},
            {"model", {{"type", "mlp"}, {"hidden", {12}}}},
            {"data", {{"type", "synthetic"}, {"classes", 3}, {"features", 8}, {"train_samples", 400}, {"test_samples", 100}}},
            {"train", {{"batch_size", 8}, {"lr", 0.1}}},
            {"stop", {{"epochs", 4}}},
            {"eval", {{"every", 0.5}}},
            {"trace", true},
            {"cluster",
             {{"workers", 6},
              {"compute", {{"dist", "pareto"}, {"scale", 0.01}, {"alpha", 2.5}}},
              {"speeds", {{"dist", "uniform"}, {"low", 0.5}, {"high", 2.0}}},
              {"network", {{"bandwidth", 5e4}, {"latency", 0.002}, {"shards", 2}, {"precision", "fp16"}}},
              {"stragglers", {{"probability", 0.2}, {"factor", 5.0}, {"slow", json::array({json{{"worker", 2}, {"factor", 3.0}, {"from", 0.1}, {"to", 0.5}}})}}},
              {"failures", {{"rate", 1.0}, {"down_time", 0.05}, {"events", json::array({json{{"worker", 5}, {"at", 0.2}}})}}}}},
            {"staleness", {{"mode", "geometric"}, {"mean", 1.5}}},
            {"engines", json::array({json{{"type", "async"}}, json{{"type", "sync_backup"}, {"backups", 1}}, json{{"type", "easgd"}}})}};
  std::string d1 = run_config(c, temp_dir("all1"), 1), d2 = run_config(c, temp_dir("all2"), 2);
  for (const char* run : {"async-seed1", "sync_backup-seed1", "easgd-seed1"}) {
    for (const char* file : {"metrics.csv", "staleness.csv", "workers.csv", "trace.json"}) {
      std::string a = read_file(d1 + "/" + run + "/" + file);
      EXPECT_FALSE(a.empty());
      EXPECT_EQ(a, read_file(d2 + "/" + run + "/" + file)) << run << "/" << file;
    }
    json s = json::parse(read_file(d1 + "/" + run + "/summary.json"));
    EXPECT_GT(s["worker_failures"].get<int>(), 0) << run;
  }
  std::string trace = read_file(d1 + "/async-seed1/trace.json");
  for (const char* span : {"\"pull\"", "\"compute\"", "\"push\"", "\"down\"", "\"update\""})
    EXPECT_NE(trace.find(span), std::string::npos) << span;
  // the sync family waits at its barrier: visible as wait spans
  EXPECT_NE(read_file(d1 + "/sync_backup-seed1/trace.json").find("\"wait\""), std::string::npos);
}
