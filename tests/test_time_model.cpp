// tests/test_time_model.cpp — the virtual clock's rules, each pinned by a closed form
// (docs/time-model.md): compute that scales with the batch, the
// topology's FIFO links and NICs, what each engine really sends, the server as a
// resource, the proxy message size, pulls read when served, and counting that means one
// thing for every engine (epochs, stop and evaluation points, workers.csv's split,
// staleness units). Then the timing models seen through whole runs: the shared server
// link saturates, shards spread the load, 16-bit transfers round values exactly as
// fp16/bf16 do, stragglers and failures change timing, bad timing input is rejected, and
// everything stays byte-deterministic. Small models and short runs: the rules, not the
// learning, are tested. (That no engine hangs on failures or stragglers:
// tests/test_conformance.cpp.)
#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/model.h"
#include "kernels/ops_ref.h"
#include "experiments/run/run_parts.h"
#include "sim/data/sample_stream.h"
#include "sim/timing/lr_schedule.h"
#include "sim/net/topology.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;

namespace {

// A 10-parameter quadratic (its learning does not matter here), batch 8, 512 samples an
// epoch, compute `step_seconds` a step, no network unless the test sets one.
json clock_config(const std::string& name, int workers, double step_seconds, const json& engine) {
  return json{{"name", name},
              {"seed", 5},
              {"model", {{"type", "quadratic"}, {"dim", 10}, {"curvature", 1.0}, {"noise", 0.1}}},
              {"data", {{"type", "none"}, {"samples", 512}}},
              {"train", {{"batch_size", 8}, {"lr", 0.01}}},
              {"stop", {{"time", 2.0}}},
              {"eval", {{"every", 1.0}, {"unit", "time"}}},
              {"cluster",
               {{"workers", workers}, {"compute", {{"dist", "constant"}, {"value", step_seconds}, {"per", "step"}}}}},
              {"engines", json::array({engine})}};
}

double rate(const json& s, const char* what) { return s[what].get<double>() / s["time"].get<double>(); }

const double kMs = 1e-3;

// ------------------------------------------------------------ whole runs

// A 100,000-parameter quadratic (400 kB a message in fp32), constant 10 ms compute.
json link_config(int workers, double bandwidth, int shards = 1, const std::string& precision = "fp32") {
  return json{
      {"name", "link"},
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

// ------------------------------------------------------------------ the topology itself

// Uncontended, a message of B bytes takes latency + B / min(S x shard bandwidth, NIC): it
// puts B/S bytes on each shard's link and B on the worker's NIC, all at once.
TEST(Topology, AnUncontendedMessageTakesLatencyPlusBytesOverTheBottleneck) {
  const double bytes = 4e5, shard_bw = 4e7, latency = 0.001;
  for (int shards : {1, 4})
    for (double nic : {0.0, 1e7, 1e9}) {
      NetworkSpec spec;
      spec.latency = latency;
      spec.bandwidth = shard_bw;
      spec.shards = shards;
      spec.worker_bandwidth = nic;
      auto star = make_star_topology(spec, 3);
      double rate = shards * shard_bw;
      if (nic > 0) rate = std::min(rate, nic);
      for (int from_server : {1, 0}) {
        TransferTimes t = from_server ? star->transfer(kServer, 1, bytes, 0) : star->transfer(1, kServer, bytes, 0);
        EXPECT_EQ(t.start, 0);
        EXPECT_NEAR(double(t.arrival), 1e9 * (latency + bytes / rate), 2.0) << shards << " shards, NIC " << nic;
      }
    }
}

// FIFO per link; a transfer starts when every link of its path is free; a fast link is held
// only for its own share, so a slow NIC does not block the server's link for others.
TEST(Topology, LinksQueueInOrderAndAFastLinkIsHeldOnlyForItsShare) {
  NetworkSpec spec;
  spec.bandwidth = 1e8;         // 1 MB: 10 ms on the shard link
  spec.worker_bandwidth = 1e7;  // 100 ms on a NIC
  auto star = make_star_topology(spec, 4);
  const double mb = 1e6;
  TransferTimes a = star->transfer(kServer, 0, mb, 0);   // shard [0, 10], NIC 0 [0, 100]
  TransferTimes b = star->transfer(kServer, 1, mb, 0);   // shard [10, 20], NIC 1 [10, 110]
  TransferTimes c = star->transfer(kServer, 0, mb, 0);   // waits for NIC 0: [100, 200]
  TransferTimes up = star->transfer(0, kServer, mb, 0);  // the other direction: free
  TransferTimes peer = star->transfer(2, 3, mb, 0);      // NIC 2 up, NIC 3 down
  EXPECT_EQ(a.start, 0);
  EXPECT_EQ(a.arrival, seconds_to_sim(0.1));
  EXPECT_EQ(b.start, seconds_to_sim(0.01));
  EXPECT_EQ(b.arrival, seconds_to_sim(0.11));
  EXPECT_EQ(c.start, seconds_to_sim(0.1));
  EXPECT_EQ(c.arrival, seconds_to_sim(0.2));
  EXPECT_EQ(up.start, 0);
  EXPECT_EQ(up.arrival, seconds_to_sim(0.1));
  EXPECT_EQ(peer.arrival, seconds_to_sim(0.1));
  EXPECT_TRUE(star->contended());

  NetworkSpec none;
  none.latency = 0.002;
  auto latency_only = make_star_topology(none, 2);
  EXPECT_FALSE(latency_only->contended());
  EXPECT_FALSE(latency_only->free());
  EXPECT_EQ(latency_only->transfer(kServer, 1, 1e9, 5).arrival, 5 + seconds_to_sim(0.002));
  EXPECT_EQ(message_bytes(none, 1000), 4000.0);
  none.message_bytes = 123;
  EXPECT_EQ(message_bytes(none, 1000), 123.0);
}

// ------------------------------------------------------------------ compute

// DESIGN.md's first fact: sync with 8 workers x 32 computes what 1 worker x 256 does, and
// with compute proportional to the work (constant per sample, no overhead, no network)
// an epoch comes 8 times sooner; the metrics per epoch are the same.
TEST(TimeModel, SyncEightBy32FinishesEachEpochEightTimesSoonerThanOneBy256) {
  json c = {{"name", "n"},
            {"seed", 7},
            {"model", {{"type", "softmax"}}},
            {"data",
             {{"type", "synthetic"}, {"classes", 4}, {"features", 10}, {"train_samples", 1024}, {"test_samples", 256}}},
            {"train", {{"batch_size", 32}, {"lr", 0.2}}},
            {"stop", {{"epochs", 2}}},
            {"eval", {{"every", 0.5}, {"unit", "epochs"}, {"train_samples", 0}}},
            {"cluster", {{"workers", 8}, {"compute", {{"dist", "constant"}, {"value", 1e-4}}}}},
            {"engines", json::array({json{{"type", "sync"}}})}};
  Metrics eight = read_metrics(run_one(c, "n8") + "/metrics.csv");
  c["cluster"]["workers"] = 1;
  c["train"]["batch_size"] = 256;
  Metrics one = read_metrics(run_one(c, "n1") + "/metrics.csv");
  auto t8 = eight.column("time"), t1 = one.column("time");
  ASSERT_EQ(t8.size(), 5u);  // epochs 0, 0.5, ..., 2
  EXPECT_EQ(eight.column("epoch"), one.column("epoch"));
  for (size_t i = 0; i < t8.size(); ++i) {
    EXPECT_NEAR(t1[i], 8 * t8[i], 1e-12) << "row " << i;
    EXPECT_NEAR(t8[i], eight.column("epoch")[i] * 4 * 32 * 1e-4, 1e-12) << "row " << i;  // 4 iterations an epoch
    for (const char* col : {"train_loss", "test_loss"})
      EXPECT_NEAR(eight.column(col)[i], one.column(col)[i], 1e-5 * std::max(1.0, one.column(col)[i])) << col << i;
  }
}

// ------------------------------------------------------------------ what engines send

// On a link that sets the pace, EASGD with period p sends one exchange (a push and the
// reply) per p gradients where async sends a pull and a push per gradient: p times the
// gradients per virtual second.
TEST(TimeModel, EasgdWithPeriodPProcessesPTimesTheGradientsOfAsyncOnASaturatedLink) {
  auto run = [](const json& engine) {
    json c = clock_config("ea", 8, 1e-5, engine);
    c["cluster"]["network"] = {{"bandwidth", 1e7}, {"message_bytes", 1e5}};  // 10 ms a message
    c["stop"] = {{"time", 4.0}};
    return summary_at(run_one(c, "ea"));
  };
  json async = run({{"type", "async"}});
  const double base = rate(async, "gradients");
  EXPECT_NEAR(base, 100.0, 2.0);  // one message per direction per 10 ms, one of each per gradient
  for (int p : {4, 8}) {
    json easgd = run({{"type", "easgd"}, {"period", p}});
    EXPECT_NEAR(rate(easgd, "gradients") / base, double(p), 0.05 * p) << "period " << p;
    // one exchange (a push) per p local steps, its reply, and each worker's first center
    EXPECT_NEAR(easgd["messages"]["to_server"].get<double>(), easgd["gradients"].get<double>() / p, 8.0) << p;
    EXPECT_NEAR(easgd["messages"]["to_workers"].get<double>(), easgd["updates"].get<double>() + 8, 8.0) << p;
  }
}

// Local SGD: a round is a pull per worker, H local steps and a push per worker. On the
// shared link with N workers, message time T and step time c, each round takes exactly
// (N + 1) T + H c (the pulls go one after another, each worker computes as its pull lands,
// its push follows the previous worker's), so H local steps give H N gradients in that.
TEST(TimeModel, LocalSgdRoundCostsOnePullAndOnePushPerWorker) {
  const int n = 4;
  const double t = 0.01, c_step = 1e-4;
  auto run = [&](int steps) {
    json c = clock_config("local", n, c_step, {{"type", "local_sgd"}, {"steps", steps}});
    c["cluster"]["network"] = {{"bandwidth", 1e7}, {"message_bytes", 1e5}};
    c["stop"] = {{"gradients", 640}};
    return summary_at(run_one(c, "local"));
  };
  json one = run(1), eight = run(8);
  EXPECT_NEAR(one["iteration_time"]["mean"].get<double>(), (n + 1) * t + c_step, 1e-9);
  EXPECT_NEAR(eight["iteration_time"]["mean"].get<double>(), (n + 1) * t + 8 * c_step, 1e-9);
  const double expected_ratio = 8 * ((n + 1) * t + c_step) / ((n + 1) * t + 8 * c_step);
  EXPECT_NEAR(rate(eight, "gradients") / rate(one, "gradients"), expected_ratio, 0.02 * expected_ratio);
  // 640 gradients of 8 local steps: 20 rounds of 4 workers, a pull and a push each
  EXPECT_EQ(eight["gradients"], 640);
  EXPECT_EQ(eight["messages"]["to_server"], 80);
  EXPECT_LE(eight["messages"]["to_workers"].get<int>(), 80 + n);  // (the next round's pulls, if begun)
  EXPECT_EQ(one["messages"]["to_server"], 640);
}

// DiLoCo sends what local SGD sends, whatever its inner and outer optimizers: per round a
// pull and a push of the parameters per worker, so on the shared link a round of H inner
// AdamW steps takes (N + 1) T + H c, and with 16-bit transfers (bf16: 2 bytes a value)
// each message takes half as long.
TEST(TimeModel, DilocoRoundCostsOnePullAndOnePushPerWorker) {
  const int n = 4, h = 8;
  const double c_step = 1e-4, kClockParams = 25000;  // 100 KB at fp32: 10 ms a message
  auto run = [&](const char* precision) {
    json c = clock_config("dl", n, c_step, {{"type", "diloco"}, {"steps", h}});
    c["train"]["optimizer"] = "adamw";
    c["train"]["lr"] = 0.01;
    c["train"]["weight_decay"] = 0.1;
    c["model"]["dim"] = int(kClockParams);
    c["cluster"]["network"] = {{"bandwidth", 1e7}, {"precision", precision}};
    c["stop"] = {{"gradients", 640}};
    return summary_at(run_one(c, "dl"));
  };
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    json s = run(precision);
    const double bytes = s["messages"]["bytes_to_server"].get<double>() / s["messages"]["to_server"].get<double>();
    EXPECT_EQ(bytes, std::string(precision) == "fp32" ? 4.0 * kClockParams : 2.0 * kClockParams);
    const double t = bytes / 1e7;
    EXPECT_NEAR(s["iteration_time"]["mean"].get<double>(), (n + 1) * t + h * c_step, 1e-9);
    // 640 gradients of 8 inner steps: 20 rounds of 4 workers, a pull and a push each
    EXPECT_EQ(s["gradients"], 640);
    EXPECT_EQ(s["updates"], 20);
    EXPECT_EQ(s["messages"]["to_server"], 80);
    EXPECT_LE(s["messages"]["to_workers"].get<int>(), 80 + n);
    EXPECT_GE(s["messages"]["to_workers"].get<int>(), 80);
  }
}

// The single-replica warm-up trains one replica alone: no message, no server time.
TEST(TimeModel, TheWarmUpSendsNothing) {
  json c = clock_config("warm", 4, 0.01, {{"type", "async"}});
  c["cluster"]["network"] = {{"bandwidth", 1e7}, {"message_bytes", 1e5}, {"latency", 0.001}};
  c["cluster"]["server"] = {{"update_seconds", 0.005}};
  c["train"]["single_replica_epochs"] = 1;
  c["stop"] = {{"epochs", 1}};
  json s = summary_at(run_one(c, "warm"));
  EXPECT_EQ(s["messages"]["to_server"], 0);
  EXPECT_EQ(s["messages"]["to_workers"], 0);
  EXPECT_EQ(s["server"]["updates"], 0);
  EXPECT_NEAR(s["time"].get<double>(), 64 * 0.01, 1e-9);  // 64 steps of 8 samples, compute only
}

// ------------------------------------------------------------------ links

// One worker pulls and pushes through its NIC: with the NIC the bottleneck, 4 shards give
// it nothing; without one, the shards split each message's time by 4.
TEST(TimeModel, OneWorkerGainsNothingFromShardsWhenItsNicIsTheBottleneck) {
  auto time_of = [](int shards, double nic) {
    json c = clock_config("nic", 1, 0.01, {{"type", "async"}});
    c["cluster"]["network"] = {
        {"bandwidth", 4e7}, {"shards", shards}, {"worker_bandwidth", nic}, {"message_bytes", 4e5}};
    c["stop"] = {{"updates", 20}};
    c["eval"] = {{"every", 10}, {"unit", "updates"}};
    return summary_at(run_one(c, "nic"))["time"].get<double>();
  };
  // NIC 40 ms a message, a shard 10 ms (2.5 ms for a quarter): 20 x (40 + 10 + 40) ms
  EXPECT_NEAR(time_of(1, 1e7), 20 * 0.09, 1e-9);
  EXPECT_NEAR(time_of(4, 1e7), 20 * 0.09, 1e-9);
  EXPECT_NEAR(time_of(1, 0), 20 * 0.03, 1e-9);
  EXPECT_NEAR(time_of(4, 0), 20 * 0.015, 1e-9);
}

// cluster.network.message_bytes is the size of every parameter or gradient message, and
// nothing else: a 10-parameter model with 400 kB messages takes the time of a
// 100,000-parameter one in fp32, and doubling it halves the throughput of a saturated link.
TEST(TimeModel, MessageBytesSetsTheTrafficAndDoublingItHalvesBandwidthBoundThroughput) {
  auto run = [](size_t dim, double bytes) {
    json c = clock_config("bytes", 16, 1e-4, {{"type", "async"}});
    c["model"]["dim"] = dim;
    c["cluster"]["network"] = {{"bandwidth", 2e7}, {"message_bytes", bytes}};
    c["stop"] = {{"time", 4.0}};
    return summary_at(run_one(c, "bytes"));
  };
  json small = run(10, 4e5), doubled = run(10, 8e5), real = run(100000, 0);
  // Saturated: the first gradient arrives after a pull, 0.1 ms of compute and a push, the
  // others one message time T apart on the uplink: 1 + floor((4 s - 2T - 0.1 ms) / T).
  auto saturated = [](double t) { return 1 + std::floor((4.0 - 2 * t - 1e-4) / t); };
  EXPECT_EQ(small["updates"].get<double>(), saturated(0.02));
  EXPECT_EQ(doubled["updates"].get<double>(), saturated(0.04));
  EXPECT_NEAR(rate(doubled, "updates") / rate(small, "updates"), 0.5, 0.01);
  EXPECT_EQ(small["updates"], real["updates"]);
  EXPECT_EQ(small["time"], real["time"]);
  EXPECT_EQ(small["messages"]["bytes_to_server"], real["messages"]["bytes_to_server"]);
}

// A pull reads the parameters when the server serves it, not when it is asked for. Four
// workers, no compute, one shard link of 10 ms a message, 1 ms latency. The first pulls,
// all asked for at 0, are served at 0, 10, 20 and 30 ms; the gradients arrive at 22, 32,
// 42 and 52 ms. Worker 3's pull, served at 30, reads version 1 (applied at 22): its
// gradient, applied after 3 updates, is 2 stale. Worker 0 asks again at 22, is served at
// 40 (version 2), applied at 62 after 4 updates: 2; worker 1 asks at 32, served at 50
// (version 3), applied at 72 after 5: 2. Pulls read when asked for would give 3, 3, 3.
TEST(TimeModel, APullReadsTheParametersWhenTheServerServesIt) {
  json c = clock_config("serve", 4, 0.0, {{"type", "async"}});
  c["cluster"]["network"] = {{"bandwidth", 1e7}, {"message_bytes", 1e5}, {"latency", 0.001}};
  c["stop"] = {{"updates", 6}};
  c["eval"] = {{"every", 1}, {"unit", "updates"}};
  Metrics m = read_metrics(run_one(c, "serve") + "/metrics.csv");
  auto staleness = m.column("mean_staleness"), time = m.column("time");
  ASSERT_EQ(staleness.size(), 7u);
  const std::vector<double> expected{0, 1, 2, 2, 2, 2}, at{22, 32, 42, 52, 62, 72};
  for (size_t u = 0; u < expected.size(); ++u) {
    EXPECT_EQ(staleness[u + 1], expected[u]) << "update " << u + 1;
    EXPECT_NEAR(time[u + 1], at[u] * kMs, 1e-12) << "update " << u + 1;
  }
}

// ------------------------------------------------------------------ the server

// The server applies one update at a time, each taking update_seconds: async throughput
// never exceeds 1 / update_seconds, and with one worker each update adds its time to the
// worker's cycle (it pulls once its gradient is applied).
TEST(TimeModel, AsyncThroughputNeverExceedsOneOverUpdateSeconds) {
  const double u = 0.005;
  json c = clock_config("server", 16, 1e-3, {{"type", "async"}});
  c["cluster"]["server"] = {{"update_seconds", u}};
  json many = summary_at(run_one(c, "server"));
  EXPECT_LE(rate(many, "updates"), 1 / u + 1e-9);
  EXPECT_GE(rate(many, "updates"), 0.98 / u);
  EXPECT_GT(many["server"]["utilisation"].get<double>(), 0.98);
  EXPECT_LE(many["server"]["utilisation"].get<double>(), 1.0);

  json one_cfg = clock_config("server1", 1, 0.005, {{"type", "async"}});
  one_cfg["cluster"]["server"] = {{"update_seconds", u}};
  one_cfg["stop"] = {{"updates", 50}};
  one_cfg["eval"] = {{"every", 10}, {"unit", "updates"}};
  json one = summary_at(run_one(one_cfg, "server1"));
  EXPECT_NEAR(one["time"].get<double>(), 50 * (0.005 + u), 1e-9);
  EXPECT_NEAR(one["server"]["utilisation"].get<double>(), 0.5, 1e-9);
  EXPECT_EQ(one["server"]["updates"], 50);
}

// Every engine's update is one update of the server: a sync iteration is the slowest
// worker plus the aggregate's update; local SGD's averaging and an EASGD exchange likewise.
TEST(TimeModel, EachEnginesUpdatesOccupyTheServer) {
  const double u = 0.004, step = 0.01;
  auto run = [&](const json& engine) {
    json c = clock_config("srv", 4, step, engine);
    c["cluster"]["server"] = {{"update_seconds", u}};
    c["stop"] = {{"updates", 20}};
    c["eval"] = {{"every", 10}, {"unit", "updates"}};
    return summary_at(run_one(c, "srv"));
  };
  json sync = run({{"type", "sync"}}), local = run({{"type", "local_sgd"}, {"steps", 3}}),
       easgd = run({{"type", "easgd"}, {"mode", "sync"}, {"period", 3}});
  // an iteration runs from one last arrival to the next: the first has no update before it
  EXPECT_NEAR(sync["iteration_time"]["mean"].get<double>(), (step + 19 * (step + u)) / 20, 1e-9);
  EXPECT_NEAR(sync["time"].get<double>(), 20 * (step + u), 1e-9);
  EXPECT_NEAR(local["iteration_time"]["mean"].get<double>(), (3 * step + 19 * (3 * step + u)) / 20, 1e-9);
  EXPECT_NEAR(local["time"].get<double>(), 20 * (3 * step + u), 1e-9);
  EXPECT_NEAR(easgd["time"].get<double>(), 20 * (3 * step + u), 1e-9);
  for (const json* s : {&sync, &local, &easgd}) {
    EXPECT_EQ((*s)["server"]["updates"], 20);
    EXPECT_NEAR((*s)["server"]["busy_time"].get<double>(), 20 * u, 1e-9);
  }
}

// The server sends one message at a time (cluster.server.send_seconds, LogP's o), on the
// thread that applies updates: a sync iteration's N parameter messages leave o apart after
// the update, so an iteration is N o + 2 a + c + u, and async's one worker pays o per cycle.
TEST(TimeModel, TheServerSendsOneMessageAtATime) {
  const double o = 0.0005, a = 0.001, c = 0.01, u = 0.002;
  auto run = [&](int workers, const json& engine, double update, double send) {
    json cfg = clock_config("send", workers, c, engine);
    cfg["cluster"]["network"] = {{"latency", a}};
    cfg["cluster"]["server"] = {{"update_seconds", update}, {"send_seconds", send}};
    cfg["stop"] = {{"updates", 20}};
    cfg["eval"] = {{"every", 10}, {"unit", "updates"}};
    return summary_at(run_one(cfg, "send"));
  };
  for (double update : {0.0, u}) {
    json sync = run(4, {{"type", "sync"}}, update, o);
    EXPECT_NEAR(sync["time"].get<double>(), 20 * (4 * o + 2 * a + c + update), 1e-9) << update;
    EXPECT_NEAR(sync["server"]["busy_time"].get<double>(), 20 * (4 * o + update), 1e-9) << update;
    json free_sends = run(4, {{"type", "sync"}}, update, 0.0);
    EXPECT_NEAR(free_sends["time"].get<double>(), 20 * (2 * a + c + update), 1e-9) << update;
    // one worker: pull (o + a), compute, push (a), update
    json one = run(1, {{"type", "async"}}, update, o);
    EXPECT_NEAR(one["time"].get<double>(), 20 * (o + 2 * a + c + update), 1e-9) << update;
  }
  // many workers: the server makes at most one update and one send per u + o
  json cfg = clock_config("send16", 16, 1e-3, {{"type", "async"}});
  cfg["cluster"]["server"] = {{"update_seconds", u}, {"send_seconds", o}};
  json many = summary_at(run_one(cfg, "send16"));
  EXPECT_LE(rate(many, "updates"), 1 / (u + o) + 1e-9);
  EXPECT_GE(rate(many, "updates"), 0.9 / (u + o));
}

// Cancelling a step sends its worker a notice, which takes the server o before the update:
// sync_backup's cancel form with b backups (K = N - b) and constant compute ends an
// iteration after K parameter sends, the K-th gradient, b notices and the update, so
// N o + 2 a + c again (K o + 2 a + c if notices were free).
TEST(TimeModel, ACancelNoticeTakesTheServerOneSend) {
  const double o = 0.0005, a = 0.001, c = 0.01;
  for (int b : {1, 2}) {
    json cfg = clock_config("notice", 4, c, {{"type", "sync_backup"}, {"backups", b}, {"late", "cancel"}});
    cfg["cluster"]["network"] = {{"latency", a}};
    cfg["cluster"]["server"] = {{"send_seconds", o}};
    cfg["stop"] = {{"updates", 20}};
    cfg["eval"] = {{"every", 10}, {"unit", "updates"}};
    json s = summary_at(run_one(cfg, "notice"));
    EXPECT_NEAR(s["time"].get<double>(), 20 * (4 * o + 2 * a + c), 1e-9) << b;
    // every iteration's N pulls and b notices (the last update's pulls come after the end)
    EXPECT_NEAR(s["server"]["busy_time"].get<double>(), 20 * (4 + b) * o, 1e-9) << b;
  }
}

// ------------------------------------------------------------------ counting

// Every engine stops and evaluates at the same epochs, whether its steps update the model
// of record (async, sync) or the workers' own models (EASGD, local SGD). (SSP applies
// gradients in groups of varying size, so its rows fall at the first update past a mark.)
TEST(Counting, EveryEngineStopsAndEvaluatesAtTheSameEpochs) {
  const std::vector<json> engines = {{{"type", "async"}},
                                     {{"type", "sync"}},
                                     {{"type", "local_sgd"}, {"steps", 4}},
                                     {{"type", "easgd"}, {"period", 4}},
                                     {{"type", "easgd"}, {"period", 3}, {"mode", "sync"}}};
  for (const auto& engine : engines) {
    json c = clock_config("epochs", 4, 0.01, engine);
    c["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", 0.001}};
    c["stop"] = {{"epochs", 1}};
    c["eval"] = {{"every", 0.25}, {"unit", "epochs"}};
    std::string dir = run_one(c, "epochs");
    EXPECT_EQ(read_metrics(dir + "/metrics.csv").column("epoch"), (std::vector<double>{0, 0.25, 0.5, 0.75, 1.0}))
        << engine;
    json s = summary_at(dir);
    EXPECT_EQ(s["epochs"], 1.0) << engine;
    EXPECT_EQ(s["samples"], 512) << engine;
  }
}

// What an epoch counts: the samples of applied gradients. sync_backup's dropped gradients
// are computed (samples_computed) but advance neither the epoch nor the rate, which stays
// the schedule's value at the epoch reached, as for any worker count.
TEST(Counting, DroppedGradientsAdvanceNeitherTheEpochNorTheRate) {
  json c = clock_config("drop", 8, 0.0, {{"type", "sync_backup"}, {"backups", 2}});
  c["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", 0.01}};
  c["train"]["lr_schedule"] = {{"type", "step"}, {"milestones", {0.5, 1.0}}, {"gamma", 0.5}};
  c["stop"] = {{"epochs", 1.5}};
  c["eval"] = {{"every", 0.1}, {"unit", "epochs"}};
  std::string dir = run_one(c, "drop");
  json s = summary_at(dir);
  Metrics workers = read_metrics(dir + "/workers.csv");
  double applied = 0, gradients = 0;
  for (double a : workers.column("applied")) applied += a;
  for (double g : workers.column("gradients")) gradients += g;
  EXPECT_GT(s["dropped_gradients"].get<int>(), 10);
  EXPECT_EQ(s["samples"].get<double>(), 8 * applied);
  EXPECT_EQ(s["samples_computed"].get<double>(), 8 * gradients);
  EXPECT_EQ(s["samples"].get<double>(), 8 * 6 * s["updates"].get<double>());  // N - b gradients an update
  EXPECT_NEAR(s["epochs"].get<double>(), s["samples"].get<double>() / 512, 1e-12);
  LrScheduleSpec spec;
  spec.type = "step";
  spec.lr = 0.01;
  spec.milestones = {0.5, 1.0};
  spec.gamma = 0.5;
  LrSchedule schedule(spec);
  Metrics m = read_metrics(dir + "/metrics.csv");
  auto epoch = m.column("epoch"), lr = m.column("lr"), samples = m.column("samples");
  ASSERT_GT(epoch.size(), 10u);
  for (size_t i = 0; i < epoch.size(); ++i) {
    EXPECT_DOUBLE_EQ(lr[i], schedule.at(epoch[i])) << "row " << i;
    EXPECT_DOUBLE_EQ(epoch[i], samples[i] / 512) << "row " << i;
  }
}

// The warm-up has no forced staleness: with staleness.mode fixed, its rows are still the
// rows of one worker training alone on fresh parameters.
TEST(Counting, TheWarmUpHasNoForcedStaleness) {
  json warm = clock_config("warmst", 4, 0.01, {{"type", "async"}});
  warm["train"]["single_replica_epochs"] = 0.5;
  warm["staleness"] = {{"mode", "fixed"}, {"tau", 4}};
  warm["stop"] = {{"epochs", 1}};
  warm["eval"] = {{"every", 1}, {"unit", "updates"}};
  json alone = warm;
  alone["name"] = "alone";
  alone["train"]["single_replica_epochs"] = 0;
  alone["staleness"] = {{"mode", "emergent"}};
  alone["cluster"]["workers"] = 1;
  alone["stop"] = {{"epochs", 0.5}};
  Metrics w = read_metrics(run_one(warm, "warmst") + "/metrics.csv");
  Metrics a = read_metrics(run_one(alone, "alone") + "/metrics.csv");
  ASSERT_EQ(a.rows.size(), 33u);  // 32 updates of 8 samples, and the start
  ASSERT_GT(w.rows.size(), a.rows.size());
  for (size_t i = 1; i < a.rows.size(); ++i) {
    EXPECT_EQ(w.column("train_loss")[i], a.column("train_loss")[i]) << "update " << i;
    EXPECT_EQ(w.column("mean_staleness")[i], 0.0) << "update " << i;
  }
  EXPECT_GT(w.column("mean_staleness").back(), 3.0);  // the engine afterwards: forced staleness
}

// workers.csv splits each worker's time into compute + comm + wait + down = the run's time.
// async, 2 equal workers, 10 ms steps, 1 ms latency: each gradient is 10 ms of compute and
// 2 ms of messages, nobody waits. sync with one worker twice as slow: per iteration the
// fast one computes 10 ms, communicates 2 ms and waits 10 ms.
TEST(Counting, WorkersCsvSplitsComputeCommunicationAndWaiting) {
  json a = clock_config("split", 2, 0.01, {{"type", "async"}});
  a["cluster"]["network"] = {{"latency", 0.001}};
  a["stop"] = {{"updates", 20}};
  a["eval"] = {{"every", 10}, {"unit", "updates"}};
  std::string dir = run_one(a, "split");
  Metrics w = read_metrics(dir + "/workers.csv");
  EXPECT_EQ(w.header, (std::vector<std::string>{"worker", "gradients", "applied", "dropped", "lost", "compute_time",
                                                "comm_time", "wait_time", "down_time", "cancelled", "wasted_time"}));
  EXPECT_NEAR(summary_at(dir)["time"].get<double>(), 0.12, 1e-12);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(w.column("gradients")[k], 10);
    EXPECT_NEAR(w.column("compute_time")[k], 0.1, 1e-12);
    EXPECT_NEAR(w.column("comm_time")[k], 0.02, 1e-12);
    EXPECT_NEAR(w.column("wait_time")[k], 0.0, 1e-12);
  }

  json s = clock_config("split2", 2, 0.01, {{"type", "sync"}});
  s["cluster"]["network"] = {{"latency", 0.001}};
  s["cluster"]["speeds"] = {1.0, 2.0};
  s["stop"] = {{"updates", 10}};
  s["eval"] = {{"every", 10}, {"unit", "updates"}};
  dir = run_one(s, "split2");
  w = read_metrics(dir + "/workers.csv");
  EXPECT_NEAR(summary_at(dir)["time"].get<double>(), 10 * 0.022, 1e-12);
  EXPECT_NEAR(w.column("compute_time")[0], 0.1, 1e-12);
  EXPECT_NEAR(w.column("comm_time")[0], 0.02, 1e-12);
  EXPECT_NEAR(w.column("wait_time")[0], 0.1, 1e-12);
  EXPECT_NEAR(w.column("compute_time")[1], 0.2, 1e-12);
  EXPECT_NEAR(w.column("wait_time")[1], 0.0, 1e-12);
}

// summary.json's staleness says what it counts; config.json shows the per-worker batch
// that global_batch resolved to.
TEST(Counting, StalenessSaysItsUnitAndConfigShowsTheResolvedBatch) {
  const std::vector<std::pair<json, std::string>> engines = {{{{"type", "async"}}, "updates"},
                                                             {{{"type", "ssp"}, {"bound", 1}}, "updates"},
                                                             {{{"type", "sync_backup"}, {"backups", 1}}, "updates"},
                                                             {{{"type", "local_sgd"}, {"steps", 2}}, "updates"},
                                                             {{{"type", "easgd"}, {"period", 2}}, "exchanges"}};
  for (const auto& [engine, unit] : engines) {
    json c = clock_config("unit", 4, 0.01, engine);
    c["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", 0.001}};
    c["train"].erase("batch_size");  // (its default, 32, is not what global_batch resolves to)
    c["train"]["global_batch"] = 32;
    c["stop"] = {{"epochs", 1}};
    std::string dir = run_one(c, "unit");
    json s = summary_at(dir);
    EXPECT_EQ(s["staleness"]["unit"], unit) << engine;
    EXPECT_EQ(json::parse(read_file(dir + "/config.json"))["train"]["batch_size"], 8) << engine;
    if (unit == "exchanges") {
      EXPECT_GT(s["staleness"]["mean"].get<double>(), 0.5) << "other workers' exchanges";
    }
  }
}

// ------------------------------------------------------------------ equivalences

// The engines' equivalences hold with links, NICs, latency and the server's time on, since
// equal algorithms send equal messages: local SGD with H = 1 and SSP with bound 0 are sync
// (with aggregate sum: SSP applies gradients in full), an unreachable SSP bound is async.
TEST(TimeModel, EquivalencesHoldWithTheNetworkAndTheServerOn) {
  auto with_costs = [](json c) {
    c["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", 0.001}};
    c["cluster"]["network"] = {
        {"bandwidth", 2e7}, {"worker_bandwidth", 1.5e7}, {"shards", 2}, {"latency", 0.0005}, {"message_bytes", 1e5}};
    c["cluster"]["server"] = {{"update_seconds", 0.002}};
    c["train"]["aggregate"] = "sum";
    c["stop"] = {{"updates", 40}};
    c["eval"] = {{"every", 5}, {"unit", "updates"}};
    return c;
  };
  // (iteration_time too for the sync family: async has none, SSP counts its slowest clock)
  auto files_of = [](const std::string& dir, bool iterations = true) {
    std::string all;
    for (const char* f : {"metrics.csv", "staleness.csv", "workers.csv"}) all += read_file(dir + "/" + f);
    json s = summary_at(dir);
    return all + (iterations ? s["iteration_time"].dump() : "") + s["server"].dump() + s["messages"].dump();
  };
  const std::string sync = files_of(run_one(with_costs(clock_config("eq_sync", 4, 0, {{"type", "sync"}})), "eq"));
  EXPECT_EQ(sync,
            files_of(run_one(with_costs(clock_config("eq_l1", 4, 0, {{"type", "local_sgd"}, {"steps", 1}})), "eq")));
  EXPECT_EQ(sync, files_of(run_one(with_costs(clock_config("eq_s0", 4, 0, {{"type", "ssp"}, {"bound", 0}})), "eq")));
  const std::string async = files_of(run_one(with_costs(clock_config("eq_a", 4, 0, {{"type", "async"}})), "eq"), false);
  EXPECT_EQ(
      async,
      files_of(run_one(with_costs(clock_config("eq_si", 4, 0, {{"type", "ssp"}, {"bound", 1000000}})), "eq"), false));
  EXPECT_NE(async, sync);
}

// ------------------------------------------------------------------ determinism

// Every new piece of the time model on at once: the same bytes for 1, 2 and 3 threads.
TEST(Determinism, TheWholeTimeModelIsByteIdenticalAcrossThreadCounts) {
  json c = {
      {"name", "clock"},
      {"seed", 2},
      {"model", {{"type", "mlp"}, {"hidden", {12}}}},
      {"data", {{"type", "synthetic"}, {"classes", 3}, {"features", 8}, {"train_samples", 400}, {"test_samples", 100}}},
      {"train", {{"batch_size", 8}, {"lr", 0.1}, {"single_replica_epochs", 0.25}}},
      {"stop", {{"epochs", 2}}},
      {"eval", {{"every", 0.25}}},
      {"trace", true},
      {"cluster",
       {{"workers", 5},
        {"compute", {{"dist", "lognormal"}, {"mean", 0.001}, {"sigma", 0.8}, {"per", "sample"}, {"overhead", 0.002}}},
        {"speeds", {{"dist", "uniform"}, {"low", 0.5}, {"high", 2.0}}},
        {"network",
         {{"bandwidth", 2e6},
          {"latency", 0.001},
          {"shards", 2},
          {"worker_bandwidth", 3e6},
          {"message_bytes", 20000},
          {"precision", "bf16"}}},
        {"server", {{"update_seconds", 0.003}}},
        {"stragglers", {{"probability", 0.1}, {"factor", 4.0}}},
        {"failures", {{"rate", 0.5}, {"down_time", 0.05}}}}},
      {"staleness", {{"mode", "uniform"}, {"tau", 2}}},
      {"engines", json::array({json{{"type", "async"}, {"delay_compensation", 0.04}},
                               json{{"type", "sync_backup"}, {"backups", 1}}, json{{"type", "ssp"}, {"bound", 1}},
                               json{{"type", "local_sgd"}, {"steps", 3}}, json{{"type", "easgd"}, {"period", 3}},
                               json{{"type", "easgd"}, {"name", "easgd_sync"}, {"mode", "sync"}, {"period", 2}}})}};
  std::string d1 = run_config(c, temp_dir("clock1"), 1), d2 = run_config(c, temp_dir("clock2"), 2),
              d3 = run_config(c, temp_dir("clock3"), 3);
  for (const char* run :
       {"async-seed2", "sync_backup-seed2", "ssp-seed2", "local_sgd-seed2", "easgd-seed2", "easgd_sync-seed2"}) {
    for (const char* file : {"metrics.csv", "staleness.csv", "workers.csv", "trace.json"}) {
      std::string a = read_file(d1 + "/" + run + "/" + file);
      EXPECT_FALSE(a.empty()) << run << "/" << file;
      EXPECT_EQ(a, read_file(d2 + "/" + run + "/" + file)) << run << "/" << file;
      EXPECT_EQ(a, read_file(d3 + "/" + run + "/" + file)) << run << "/" << file;
    }
    json s1 = json::parse(read_file(d1 + "/" + run + "/summary.json"));
    for (const std::string& d : {d2, d3}) {
      json s = json::parse(read_file(d + "/" + run + "/summary.json"));
      s1["wall_seconds"] = s["wall_seconds"] = 0;
      EXPECT_EQ(s1, s) << run;
    }
    EXPECT_GT(s1["server"]["utilisation"].get<double>(), 0.0) << run;
    EXPECT_GT(s1["messages"]["to_server"].get<double>(), 0.0) << run;
  }
}

// The shipped study experiments/configs/sync_equivalence.json at a reduced size (#21): its
// headline is a theorem, so CI checks it. Sync over 8 workers of 32 and over 1 worker of
// 256 log the same rate at the same epochs, reach each evaluation 8 times sooner in
// virtual time (constant compute per sample, free network: exactly), and train the same
// model up to float summation order.
TEST(Studies, SyncEquivalenceHoldsAtReducedSize) {
  const std::string config = std::string(asgd::testing::source_dir()) + "/experiments/configs/sync_equivalence.json";
  const std::string out = temp_dir("synceq");
  CommandResult r = run_cli("run " + config + " --out " + out + " --quiet --set data.train_limit=4096 " +
                            "--set data.test_limit=1000 --set repeats=1 --set stop.epochs=1 " +
                            "--set train.lr_schedule.total_epochs=1 --set eval.train_samples=1000");
  if (r.exit_code == 2 && r.output.find("fashion") != std::string::npos) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Metrics one = read_metrics(out + "/sync_equivalence/sync-workers=1-seed1/metrics.csv");
  Metrics eight = read_metrics(out + "/sync_equivalence/sync-workers=8-seed1/metrics.csv");
  ASSERT_EQ(one.column("epoch"), eight.column("epoch"));
  ASSERT_GE(one.column("epoch").size(), 3u);
  EXPECT_EQ(one.column("lr"), eight.column("lr"));
  EXPECT_EQ(one.column("updates"), eight.column("updates"));
  for (size_t i = 1; i < one.column("time").size(); ++i) {
    EXPECT_NEAR(one.column("time")[i], 8 * eight.column("time")[i], 1e-9 * one.column("time")[i]) << "row " << i;
    EXPECT_NEAR(one.column("train_loss")[i], eight.column("train_loss")[i], 1e-3 * one.column("train_loss")[i])
        << "row " << i;
  }
}

// experiments/configs/lr_scaling_sum.json against lr_scaling.json at a reduced size (#21):
// summing k gradients at rate eta is the linear scaling rule (the mean at k eta) by another
// name, a theorem, so CI checks it. Same updates at the same virtual times, the logged rate
// k times smaller for the sum, and the same model up to float rounding (1/k times a sum
// against the sum, then times k eta against eta).
TEST(Studies, LrScalingSumIsTheLinearRule) {
  const std::string dir = std::string(asgd::testing::source_dir()) + "/experiments/configs/";
  const std::string out = temp_dir("lrsum");
  const std::string reduced = " --out " + out + " --quiet --set data.train_limit=4096 --set data.test_limit=1000 " +
                              "--set repeats=1 --set stop.epochs=1 --set eval.train_samples=1000 " +
                              "--set eval.every=0.25 --set 'sweep.cluster.workers=[4]'";
  CommandResult sum = run_cli("run " + dir + "lr_scaling_sum.json" + reduced);
  if (sum.exit_code == 2 && sum.output.find("fashion") != std::string::npos) GTEST_SKIP() << sum.output;
  ASSERT_EQ(sum.exit_code, 0) << sum.output;
  CommandResult mean =
      run_cli("run " + dir + "lr_scaling.json" + reduced + " --set 'sweep.train.lr_schedule.scale=[\"workers\"]'" +
              " --set 'sweep.train.lr_schedule.warmup_epochs=[0]' --set 'sweep.train.lr=[0.05]'");
  ASSERT_EQ(mean.exit_code, 0) << mean.output;
  std::vector<std::string> runs;  // the one run the reduced sweep leaves
  for (const auto& e : std::filesystem::directory_iterator(out + "/lr_scaling"))
    if (e.is_directory()) runs.push_back(e.path().string());
  ASSERT_EQ(runs.size(), 1u);
  Metrics s = read_metrics(out + "/lr_scaling_sum/sync-workers=4-seed1/metrics.csv");
  Metrics m = read_metrics(runs[0] + "/metrics.csv");
  ASSERT_GE(s.rows.size(), 4u);
  ASSERT_EQ(s.column("updates"), m.column("updates"));
  EXPECT_EQ(s.column("time"), m.column("time"));
  for (size_t i = 0; i < s.rows.size(); ++i) {
    EXPECT_DOUBLE_EQ(4 * s.column("lr")[i], m.column("lr")[i]) << "row " << i;
    EXPECT_NEAR(s.column("train_loss")[i], m.column("train_loss")[i], 1e-4 * m.column("train_loss")[i]) << "row " << i;
  }
}

// experiments/configs/bandwidth.json at a reduced size (#21): where the knee sits is a
// closed form, so CI checks it. With constant compute c per step, latency L, shard links of
// W bytes/s and a message of B bytes split over s shards, one async worker completes a
// step every T1 = c + 2 (L + B / (s W)); below the knee N workers make N / T1 updates per
// virtual second, above it the links cap them at s W / B. Measured between the 500th and
// the 1500th update (steady state), for fp32 and fp16 (half the bytes) on 1 and 4 shards.
TEST(Studies, BandwidthKneeIsTheClosedForm) {
  const std::string config = std::string(asgd::testing::source_dir()) + "/experiments/configs/bandwidth.json";
  const std::string out = temp_dir("knee");
  // Under the sanitizers: 1 and 64 workers (below every knee and above every one), 900
  // updates with rows every 300; in Release 1, 4 and 128 workers, 1500 updates.
  const bool reduced = reduced_size();
  const std::vector<int> workers = reduced ? std::vector<int>{1, 64} : std::vector<int>{1, 4, 128};
  const int every = reduced ? 300 : 500, updates = 3 * every;
  std::string sweep;
  for (int n : workers) sweep += (sweep.empty() ? "" : ",") + std::to_string(n);
  CommandResult r = run_cli(
      "run " + config + " --out " + out + " --quiet --set data.train_limit=4096 --set data.test_limit=500 " +
      "--set repeats=1 --set stop.epochs=0 --set stop.updates=" + std::to_string(updates) +
      " --set eval.unit=updates --set eval.every=" + std::to_string(every) +
      " --set eval.train_samples=500 --set 'cluster.compute={\"dist\":\"constant\",\"value\":0.0003125}' " +
      "--set 'sweep.cluster.workers=[" + sweep + "]' --set 'sweep.cluster.network.precision=[\"fp32\",\"fp16\"]'");
  if (r.exit_code == 2 && r.output.find("fashion") != std::string::npos) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double params = 784.0 * 128 + 128 + 128 * 10 + 10, c = 32 * 0.0003125, L = 0.0005, W = 2.5e8;
  for (int shards : {1, 4})
    for (const char* precision : {"fp32", "fp16"}) {
      const double B = params * (std::string(precision) == "fp32" ? 4 : 2);
      const double T1 = c + 2 * (L + B / (shards * W)), cap = shards * W / B;
      for (int n : workers) {
        // (--set moves the overridden sweep key to the end of the run id)
        const std::string run = std::string("async-precision=") + precision + "-shards=" + std::to_string(shards) +
                                "-workers=" + std::to_string(n) + "-seed1";
        Metrics m = read_metrics(out + "/bandwidth/" + run + "/metrics.csv");
        std::vector<double> u = m.column("updates"), t = m.column("time");
        ASSERT_GE(u.size(), 3u) << run;
        ASSERT_EQ(u[u.size() - 2], 2 * every) << run;
        const double rate = (u.back() - u[u.size() - 3]) / (t.back() - t[t.size() - 3]);
        const double expected = std::min(n / T1, cap);
        EXPECT_NEAR(rate, expected, 0.01 * expected) << run << " (knee " << 2 + cap * (c + 2 * L) << ")";
      }
    }
}

// experiments/configs/sparse_scaling.json and sparse_scaling_dense.json at a reduced size
// (#21): why sparse models scale further is arithmetic on message sizes, so CI checks it.
// With constant compute c per step, latency L and a link of W bytes/s each way, an async
// worker completes a step every T1 = c + 2 L + (pull + push bytes) / W. The dense MLP's
// messages are its B = 103002 x 4 bytes both ways, so the link caps it at W / B (about 607
// updates a second) from about 8 workers on; the sparse model's carry only the rows a
// minibatch touches (their mean measured from summary.json), so 64 workers still make
// 64 / T1 a second, well below that link's cap. Rates between the 1000th and the 3000th update.
TEST(Studies, SparseScalesPastTheDenseKnee) {
  const std::string dir = std::string(asgd::testing::source_dir()) + "/experiments/configs/";
  const std::string out = temp_dir("sparseknee");
  const double c = 32 * 0.0003125, L = 0.0005, W = 2.5e8;
  const std::string reduced = " --out " + out + " --quiet --set repeats=1 --set stop.time=0 --set stop.updates=3000 " +
                              "--set eval.unit=updates --set eval.every=1000 --set eval.train_samples=500 " +
                              "--set data.test_samples=500 --set 'sweep.cluster.workers=[64]' " +
                              "--set 'cluster.compute={\"dist\":\"constant\",\"value\":0.0003125}'";
  CommandResult sparse = run_cli("run " + dir + "sparse_scaling.json" + reduced);
  ASSERT_EQ(sparse.exit_code, 0) << sparse.output;
  CommandResult dense = run_cli("run " + dir + "sparse_scaling_dense.json" + reduced +
                                " --set 'sweep.cluster.network.compression.type=[\"none\"]'");
  ASSERT_EQ(dense.exit_code, 0) << dense.output;
  auto steady_rate = [](const std::string& run_dir) {
    Metrics m = read_metrics(run_dir + "/metrics.csv");
    std::vector<double> u = m.column("updates"), t = m.column("time");
    EXPECT_GE(u.size(), 4u) << run_dir;
    if (u.size() < 4) return 0.0;
    EXPECT_EQ(u[u.size() - 3], 1000) << run_dir;
    return (u.back() - u[u.size() - 3]) / (t.back() - t[t.size() - 3]);
  };
  const std::string sparse_run = out + "/sparse_scaling/async-workers=64-seed1";
  const nlohmann::json messages = summary_at(sparse_run)["messages"];
  const double pull = messages["bytes_to_workers"].get<double>() / messages["to_workers"].get<double>();
  const double push = messages["bytes_to_server"].get<double>() / messages["to_server"].get<double>();
  ASSERT_LT(pull + push, 20000) << "the sparse messages should be a few kB";
  const double sparse_expected = 64 / (c + 2 * L + (pull + push) / W);
  const double sparse_rate = steady_rate(sparse_run);
  EXPECT_NEAR(sparse_rate, sparse_expected, 0.02 * sparse_expected);
  const double B = 103002.0 * 4, cap = W / B;
  const double dense_rate = steady_rate(out + "/sparse_scaling_dense/async-type=none-workers=64-seed1");
  EXPECT_NEAR(dense_rate, cap, 0.01 * cap);
  EXPECT_GT(sparse_rate, 8 * dense_rate);
}

// experiments/configs/topology.json at a reduced size (#21): with constant compute every
// iteration time is a closed form (docs/architecture.md, "Boxes" and "Collectives"; the
// formulas are tested in test_topology.cpp). What the study reads off them, CI checks:
// one box of 8 GPUs makes 8 times one GPU's samples a second (each GPU has its own PCIe
// link; the host's work is not charged); over boxes of one GPU, all-reduce crosses that box
// between 8 and 16 GPUs; with the 4 parameter servers even 16 do not.
TEST(Studies, TopologyEightInABoxAgainstSixteenOverBoxes) {
  const std::string config = std::string(asgd::testing::source_dir()) + "/experiments/configs/topology.json";
  const std::string out = temp_dir("topostudy");
  CommandResult r =
      run_cli("run " + config + " --out " + out + " --quiet --set repeats=1 --set stop.updates=4 " +
              "--set 'sweep.cluster.topology.boxes=[1,8,16]' " + "--set 'sweep.cluster.topology.per_box=[1,8]'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rate = [&](const std::string& engine, int boxes, int per_box) {
    const nlohmann::json s = summary_at(out + "/topology/" + engine + "-boxes=" + std::to_string(boxes) +
                                        "-per_box=" + std::to_string(per_box) + "-seed1");
    return s["samples"].get<double>() / s["time"].get<double>();
  };
  const double one = rate("ps", 1, 1), box = rate("ps", 1, 8);
  EXPECT_NEAR(box, 8 * one, 1e-9 * box);
  EXPECT_LT(rate("allreduce", 8, 1), box);
  EXPECT_GT(rate("allreduce", 16, 1), box);
  EXPECT_LT(rate("hierarchical", 8, 1), box);
  EXPECT_GT(rate("hierarchical", 16, 1), box);
  EXPECT_LT(rate("ps", 16, 1), box);
}

// cluster.compute.dist "flops" (issue 35): a step on m samples takes
// overhead + m x flops_per_sample / (device FLOP/s x efficiency), exactly (to the
// clock's nanosecond), for the MLP and the CNN; the FLOPs are the model's own count.
TEST(ComputeFromFlops, StepTimeIsTheModelsFlopsOverThePeakTimesEfficiency) {
  struct Case {
    json model, data;
    double flops_per_sample;  // by hand: 2 x multiply-adds of the forward GEMMs, the weights' gradients, and
                              // the activations' gradients below the first layer
  };
  // MLP 784-128-10: forward 784x128 + 128x10, weights' gradients the same, activations' 128x10
  const double mlp = 2.0 * (2 * (784.0 * 128 + 128 * 10) + 128 * 10);
  std::vector<Case> cases = {
      {{{"type", "mlp"}, {"hidden", {128}}},
       {{"type", "synthetic"}, {"features", 784}, {"classes", 10}, {"train_samples", 256}, {"test_samples", 64}},
       mlp},
      {{{"type", "cnn"}, {"arch", "lenet5"}},
       {{"type", "synthetic"}, {"image", {1, 28, 28}}, {"train_samples", 256}, {"test_samples", 64}},
       0.0}};  // the CNN's count is the model's (checked against make_cnn below)
  for (const auto& c : cases) {
    for (const auto& [device, rate] :
         std::vector<std::pair<json, double>>{{json("a100-fp32"), 19.5e12}, {json(2e12), 2e12}}) {
      const double efficiency = 0.4, overhead = 0.002;
      const int batch = 64;
      json cfg = {
          {"name", "flops"},
          {"model", c.model},
          {"data", c.data},
          {"train", {{"batch_size", batch}}},
          {"cluster",
           {{"workers", 1},
            {"compute", {{"dist", "flops"}, {"flops", device}, {"efficiency", efficiency}, {"overhead", overhead}}}}},
          {"stop", {{"updates", 3}}},
          {"eval", {{"every", 1}, {"unit", "updates"}, {"train_samples", 64}, {"test_samples", 64}}},
          {"engines", json::array({{{"type", "async"}}})}};
      const Experiment e = resolve_experiment(cfg, "t", ".");
      const json& model = e.runs[0].settings.compute_model;
      double fps = c.flops_per_sample;
      if (fps == 0) fps = make_cnn(Shape{28, 28, 1}, lenet5(), 10)->flops_per_sample();
      ASSERT_EQ(model["dist"], "flops");
      EXPECT_DOUBLE_EQ(model["flops_per_sample"].get<double>(), fps) << c.model;
      EXPECT_DOUBLE_EQ(model["device_flops"].get<double>(), rate);
      const double step = overhead + batch * fps / (rate * efficiency);
      // three steps of one worker, no network: the run ends at 3 x the step, to the nanosecond
      const std::string dir = temp_dir("flops");
      write_text(dir + "/c.json", cfg.dump());
      CommandResult r = run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out");
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const json summary = json::parse(read_file(dir + "/out/flops/async-seed1/summary.json"));
      EXPECT_NEAR(summary["time"].get<double>(), 3 * std::round(step * 1e9) * 1e-9, 1.5e-9) << c.model << device;
      EXPECT_EQ(summary["compute_model"], model);
    }
  }
  // a model without a FLOP count, and an unknown device, are refused naming the key
  json bad = {{"model", {{"type", "quadratic"}}},
              {"cluster", {{"compute", {{"dist", "flops"}, {"flops", 1e12}}}}},
              {"engines", json::array({{{"type", "async"}}})}};
  auto refusal = [](const json& config) {
    try {
      resolve_experiment(config, "t", ".");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refusal(bad).find("cluster.compute.dist"), std::string::npos) << refusal(bad);
  bad["model"] = {{"type", "mlp"}};
  bad["cluster"]["compute"]["flops"] = "b200-fp4";
  EXPECT_NE(refusal(bad).find("cluster.compute.flops"), std::string::npos) << refusal(bad);
}

// A push is a message sent once its step's compute is done: steps cut off by the end of
// the run (or cancelled) before that send nothing. Async, 4 workers, 1 ms a step, stop at
// 10.5 ms: each worker has finished 10 steps and is 0.5 ms into its 11th, so 40 pushes,
// not 44. With 2 ms messages, a push under way at the end was sent and is counted.
TEST(MessageCounts, StepsCutOffByTheEndSendNothing) {
  json c = clock_config("cutoff", 4, kMs, {{"type", "async"}});
  c["stop"] = {{"time", 10.5 * kMs}};
  c["eval"] = {{"every", 1.0}, {"unit", "time"}};
  json s = summary_at(run_one(c, "cutoff"));
  EXPECT_EQ(s["gradients"], 40);
  EXPECT_EQ(s["messages"]["to_server"], 40);
  // a network: pull 2 ms, compute 1 ms, push 2 ms (latency-bound messages of 8 bytes)
  c["name"] = "cutoff_net";
  c["cluster"]["network"] = {{"bandwidth", 1e12}, {"latency", 2 * kMs}};
  c["stop"] = {{"time", 13.5 * kMs}};
  s = summary_at(run_one(c, "cutoff_net"));
  // per worker: pull [0,2] compute [2,3] push [3,5]; pull [5,7] compute [7,8] push [8,10];
  // pull [10,12] compute [12,13] push [13,15): sent, not arrived by 13.5 ms
  EXPECT_EQ(s["messages"]["to_server"], 12);
  EXPECT_EQ(s["messages"]["to_workers"], 12);
}

// ------------------------------------------------------------ timing models through whole runs

// Past some number of workers the shared link, not the compute, sets the pace.
TEST(Network, SharedLinkSaturatesAsyncThroughput) {
  const double bw = 4e7;  // 400 kB / 4e7 B/s = 10 ms a message, each direction
  double u1 = updates(link_config(1, bw)), u2 = updates(link_config(2, bw));
  double u8 = updates(link_config(8, bw)), u32 = updates(link_config(32, bw));
  // one worker: pull 11 ms + compute 10 ms + push 11 ms per update
  EXPECT_NEAR(u1, 2.0 / 0.032, 2);
  EXPECT_GT(u2 / u1, 1.8);           // still compute-bound: nearly linear
  EXPECT_LT(u32 / u8, 1.05);         // saturated: more workers add nothing
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
  json c = {
      {"name", "deep16"},
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
  window["cluster"]["stragglers"] = {
      {"slow", json::array({json{{"worker", 0}, {"factor", 4.0}, {"from", 0.0}, {"to", 0.2}}})}};
  std::string dir = run_config(window, temp_dir("win"));
  Metrics wk = read_metrics(dir + "/async-seed1/workers.csv");
  auto grads = wk.column("gradients");
  EXPECT_LT(grads[0], grads[1]);  // worker 0 was slow for the first 0.2 s
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
      {[](json& c) {
         c["cluster"]["failures"] = {{"events", json::array({json{{"worker", 9}, {"at", 1.0}}})}};
       },
       {"cluster.failures.events[0].worker", "does not exist"}},
      {[](json& c) {
         c["cluster"]["stragglers"] = {{"slow", json::array({json{{"worker", 4}, {"factor", 2.0}}})}};
       },
       {"cluster.stragglers.slow[0].worker"}},
      {[](json& c) {
         c["cluster"]["compute"] = {{"dist", "trace"}, {"file", "/nonexistent/trace.csv"}};
       },
       {"cluster.compute.file", "/nonexistent/trace.csv"}},
      {[&](json& c) {
         c["cluster"]["compute"] = {{"dist", "trace"}, {"file", dir + "/bad_trace.csv"}};
       },
       {"line 3", "fast"}},
      {[](json& c) {
         c["cluster"]["compute"] = {{"dist", "lognormal"}, {"mean", 0.01}, {"sigma", -1}};
       },
       {"cluster.compute.sigma"}},
      {[](json& c) {
         c["cluster"]["network"] = {{"precision", "fp8"}};
       },
       {"cluster.network.precision", "bf16"}},
      {[](json& c) {
         c["cluster"]["network"] = {{"bandwidth", -5}};
       },
       {"cluster.network.bandwidth"}},
      {[](json& c) {
         c["cluster"]["speeds"] = {{"dist", "pareto"}, {"scale", 1.0}};
       },
       {"cluster.speeds.alpha", "missing"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    json c = base;
    cases[i].edit(c);
    std::string path = dir + "/c" + std::to_string(i) + ".json";
    write_text(path, c.dump());
    CommandResult r = run_cli("run " + path + " --quiet --out " + dir + "/out");
    EXPECT_EQ(r.exit_code, 2) << "case " << i << ":\n" << r.output;
    for (const auto& m : cases[i].mention)
      EXPECT_NE(r.output.find(m), std::string::npos) << "case " << i << " lacks " << m << ":\n" << r.output;
  }
}

// DESIGN.md determinism with every timing model switched on at once.
TEST(Determinism, EveryTimingModelOnStillByteIdenticalAcrossThreads) {
  json c = {
      {"name", "all"},
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
        {"stragglers",
         {{"probability", 0.2},
          {"factor", 5.0},
          {"slow", json::array({json{{"worker", 2}, {"factor", 3.0}, {"from", 0.1}, {"to", 0.5}}})}}},
        {"failures",
         {{"rate", 1.0}, {"down_time", 0.05}, {"events", json::array({json{{"worker", 5}, {"at", 0.2}}})}}}}},
      {"staleness", {{"mode", "geometric"}, {"mean", 1.5}}},
      {"engines",
       json::array({json{{"type", "async"}}, json{{"type", "sync_backup"}, {"backups", 1}}, json{{"type", "easgd"}}})}};
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
