// tests/test_population.cpp — a population of clients apart from the worker slots (section
// clients; sim/core/population.h) and the federated server rules on it (engines/federated.cpp):
// the sampler against its laws, the arrival process against its closed form, FedAsync and
// FedBuff against hand recursions, FedAvg's rounds, determinism, and the config's refusals.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/core/population.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;

namespace {

std::map<uint64_t, uint64_t> staleness_of(const std::string& run_dir) {
  std::map<uint64_t, uint64_t> hist;
  Metrics m = read_metrics(run_dir + "/staleness.csv");  // staleness,count
  for (const auto& row : m.rows) hist[uint64_t(row[0])] = uint64_t(row[1]);
  return hist;
}

// A federated engine on the quadratic (no data: each client an equal share of the stream),
// every local step exactly 10 ms, a row per update.
json federated_quadratic(const std::string& name, const json& engine, int slots, int clients) {
  json cfg = quadratic_config(name, {1.0, 0.5}, slots, 0.1);
  cfg["clients"] = {{"count", clients}};
  cfg["engines"] = json::array({engine});
  cfg["stop"] = {{"updates", 12}};
  return cfg;
}

}  // namespace

// Uniform sampling: every idle client equally likely; a training client is never drawn.
TEST(Population, UniformDrawsAreUniformOverTheIdleClients) {
  Population p(11, std::vector<uint32_t>(10, 5), false);
  const int64_t held = p.draw();  // one client stays in training throughout
  std::vector<int> counts(10, 0);
  const int draws = 90000;
  for (int i = 0; i < draws; ++i) {
    const int64_t c = p.draw();
    ASSERT_NE(c, held);
    counts[size_t(c)]++;
    p.release(c);
  }
  for (int c = 0; c < 10; ++c) {
    if (c == held) continue;
    EXPECT_NEAR(counts[size_t(c)], draws / 9.0, 0.05 * draws / 9.0) << "client " << c;
  }
  EXPECT_EQ(p.distinct(), 10u);
  EXPECT_EQ(p.draws(), uint64_t(draws) + 1);
}

// "size": chance proportional to the client's samples.
TEST(Population, SizeSamplingFollowsTheShares) {
  std::vector<uint32_t> sizes = {1, 2, 3, 4, 10};
  Population p(5, sizes, true);
  std::vector<int> counts(sizes.size(), 0);
  const int draws = 100000;
  for (int i = 0; i < draws; ++i) {
    const int64_t c = p.draw();
    counts[size_t(c)]++;
    p.release(c);
  }
  for (size_t c = 0; c < sizes.size(); ++c)
    EXPECT_NEAR(counts[c], draws * sizes[c] / 20.0, 0.05 * draws * sizes[c] / 20.0) << "client " << c;
}

// Every client can train at once, no more: then the draw refuses; a client released is
// drawn again.
TEST(Population, DrawsOnlyClientsNotTraining) {
  Population p(3, std::vector<uint32_t>(200, 1), false);
  std::vector<int> seen(200, 0);
  for (int i = 0; i < 200; ++i) seen[size_t(p.draw())]++;
  for (int c = 0; c < 200; ++c) EXPECT_EQ(seen[size_t(c)], 1) << c;  // the cyclic fallback included
  EXPECT_THROW(p.draw(), std::logic_error);
  p.release(17);
  EXPECT_EQ(p.draw(), 17);
  EXPECT_THROW(Population(1, {3, 0}, false), std::invalid_argument);
}

// The closed form of the sampler's arrival process: async SGD, 8 slots, each step 10 ms
// times its client's factor, the factors Exp(1) over 100,000 clients drawn uniformly. Each
// client job then lasts an exponential time of mean 10 ms, independent of the others (a
// client recurs in under 1 % of draws), so the arrivals are those of 8 independent Poisson
// processes: 8 / 10 ms = 800 updates per virtual second, and the staleness of an update is
// geometric, P(tau = k) = (1/8)(7/8)^k, mean 7 (Mitliagkas et al. 2016; ALGORITHMS.md).
// Without the population every step lasts 10 ms and tau is 7 always.
TEST(Population, ArrivalsOfExponentialClientsFollowTheRenewalLaw) {
  json cfg = quadratic_config("arrivals", {1.0}, 8, 0.001);
  cfg["clients"] = {{"count", 100000}, {"speeds", {{"dist", "exponential"}, {"mean", 1.0}}}};
  cfg["stop"] = {{"time", 10.0}};
  cfg["eval"] = {{"every", 1.0}, {"unit", "time"}};
  const std::string dir = run_one(cfg, "pop");
  const json s = summary_at(dir);
  const double updates = s["updates"].get<double>();
  EXPECT_NEAR(updates, 8000.0, 0.04 * 8000.0);  // a Poisson count of 8000 has sd 89
  const auto hist = staleness_of(dir);
  double total = 0, mean = 0;
  for (const auto& [k, c] : hist) total += double(c), mean += double(k) * double(c);
  mean /= total;
  EXPECT_NEAR(mean, 7.0, 0.05 * 7.0);
  double tv = 0;  // total variation distance to the geometric law
  double covered = 0;
  for (uint64_t k = 0; k < 200; ++k) {
    const double law = (1.0 / 8.0) * std::pow(7.0 / 8.0, double(k));
    const double seen = hist.count(k) ? double(hist.at(k)) / total : 0.0;
    tv += std::fabs(law - seen);
    covered += seen;
  }
  tv = 0.5 * (tv + (1.0 - covered));
  EXPECT_LT(tv, 0.04) << "staleness histogram far from geometric(1/8)";
  EXPECT_EQ(s["clients"]["count"], 100000);
  EXPECT_NEAR(s["clients"]["draws"].get<double>(), updates + 8, 8)
      << "a draw per step launched: the updates plus the steps under way at the end";
}

// FedAsync (Xie et al. 2019): w <- (1 - a_t) w + a_t x, a_t = alpha (tau + 1)^-0.5. Two slots
// in lockstep (every step 10 ms), H = 3 local SGD steps from w: x = r w, r = (1 - lr h)^3 per
// coordinate. Slot 0's delta arrives first (tau 0), slot 1's next (tau 1, from the same w),
// then each read the w of two updates before: w_1 = w_0 + a_0 (r w_0 - w_0),
// w_t = w_{t-1} + a_1 (r w_{t-2} - w_{t-1}).
TEST(Federated, FedAsyncMixesEachClientModelAsXieEtAl) {
  const std::vector<double> h = {1.0, 0.5};
  json cfg = federated_quadratic("fedasync", {{"type", "fedasync"}, {"local_steps", 3}, {"alpha", 0.6}}, 2, 10);
  Metrics m = read_metrics(run_one(cfg, "fed") + "/metrics.csv");
  auto loss = m.column("train_loss");
  ASSERT_EQ(loss.size(), 13u);
  const double a0 = 0.6, a1 = 0.6 / std::sqrt(2.0);
  std::vector<std::vector<double>> w = {{1.0, 1.0}};
  for (int t = 1; t <= 12; ++t) {
    const auto& prev = w[size_t(t - 1)];
    const auto& read = t == 1 ? w[0] : w[size_t(t - 2)];
    const double a = t == 1 ? a0 : a1;
    std::vector<double> next(2);
    for (size_t i = 0; i < 2; ++i) next[i] = prev[i] + a * (std::pow(1 - 0.1 * h[i], 3) * read[i] - prev[i]);
    w.push_back(next);
  }
  for (int t = 0; t <= 12; ++t)
    EXPECT_NEAR(loss[size_t(t)], quadratic_loss(h, w[size_t(t)]), 1e-5 * quadratic_loss(h, w[size_t(t)])) << t;
  EXPECT_LT(loss.back(), 0.5 * loss.front());
}

// FedBuff (Nguyen et al. 2022, Algorithm 1): K = 2 deltas, each weighted 1/sqrt(1 + tau), their
// mean applied with server_lr 0.8. Two slots, H = 2: Delta = (1 - r) w_base, r = (1 - lr h)^2.
// Slot 0 pushes first and at once draws its next client, which reads the w before the update
// slot 1's push then completes: from the second update on slot 0's delta has tau = 1, slot 1's
// tau = 0: w_1 = w_0 - 0.8 (1 - r) w_0, w_{t+1} = w_t - 0.4 (1 - r)(w_{t-1}/sqrt 2 + w_t).
TEST(Federated, FedBuffBuffersKDeltasWeightedByStaleness) {
  const std::vector<double> h = {1.0, 0.5};
  json cfg =
      federated_quadratic("fedbuff", {{"type", "fedbuff"}, {"local_steps", 2}, {"k", 2}, {"server_lr", 0.8}}, 2, 10);
  Metrics m = read_metrics(run_one(cfg, "fed") + "/metrics.csv");
  auto loss = m.column("train_loss");
  ASSERT_EQ(loss.size(), 13u);
  std::vector<std::vector<double>> w = {{1.0, 1.0}};
  for (int t = 1; t <= 12; ++t) {
    std::vector<double> next(2);
    for (size_t i = 0; i < 2; ++i) {
      const double q = 1 - std::pow(1 - 0.1 * h[i], 2);
      const auto& prev = w[size_t(t - 1)];
      next[i] =
          t == 1 ? prev[i] - 0.8 * q * prev[i] : prev[i] - 0.4 * q * (w[size_t(t - 2)][i] / std::sqrt(2.0) + prev[i]);
    }
    w.push_back(next);
  }
  for (int t = 0; t <= 12; ++t)
    EXPECT_NEAR(loss[size_t(t)], quadratic_loss(h, w[size_t(t)]), 1e-5 * quadratic_loss(h, w[size_t(t)])) << t;
}

// FedAvg's rounds: every slot trains a client H steps from w, so w <- w - server_lr (1 - r) w
// per round; with report 2 of 3 slots (over-selection) the third client is cancelled each
// round. A round lasts H steps: 4 x 10 ms, at least (cancelled steps end with it).
TEST(Federated, FedAvgRoundsAverageTheDeltasAndCancelTheLate) {
  const std::vector<double> h = {1.0, 0.5};
  for (int report : {0, 2}) {
    json cfg =
        federated_quadratic("fedavg" + std::to_string(report),
                            {{"type", "fedavg"}, {"local_steps", 4}, {"server_lr", 0.9}, {"report", report}}, 3, 12);
    cfg["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", 0.01}, {"per", "step"}};
    const std::string dir = run_one(cfg, "fed");
    auto loss = read_metrics(dir + "/metrics.csv").column("train_loss");
    ASSERT_EQ(loss.size(), 13u) << report;
    std::vector<double> w = {1.0, 1.0};
    for (int t = 0; t <= 12; ++t) {
      EXPECT_NEAR(loss[size_t(t)], quadratic_loss(h, w), 1e-5 * quadratic_loss(h, w)) << report << " " << t;
      for (size_t i = 0; i < 2; ++i) w[i] -= 0.9 * (1 - std::pow(1 - 0.1 * h[i], 4)) * w[i];
    }
    const json s = summary_at(dir);
    EXPECT_EQ(s["iteration_time"]["count"], 12);
    Metrics workers = read_metrics(dir + "/workers.csv");
    double cancelled = 0;
    for (double c : workers.column("cancelled")) cancelled += c;
    EXPECT_EQ(cancelled, report == 2 ? 12.0 : 0.0) << "one late client cancelled per round";
  }
}

// The same config and seed give the same files for any thread count, with a non-IID split
// over the clients and heterogeneous client speeds, for each rule.
TEST(Federated, ByteIdenticalAcrossThreads) {
  for (const char* type : {"fedavg", "fedbuff", "fedasync"}) {
    json cfg = {
        {"name", std::string("det_") + type},
        {"seed", 5},
        {"model", {{"type", "softmax"}}},
        {"data",
         {{"type", "synthetic"},
          {"classes", 4},
          {"features", 8},
          {"train_samples", 600},
          {"test_samples", 100},
          {"partition", "dirichlet_mix"},
          {"partition_alpha", 0.3}}},
        {"train", {{"batch_size", 4}, {"lr", 0.1}}},
        {"stop", {{"updates", 20}}},
        {"eval", {{"every", 5}, {"unit", "updates"}}},
        {"clients",
         {{"count", 30}, {"sampling", "size"}, {"speeds", {{"dist", "lognormal"}, {"mean", 1.0}, {"sigma", 0.5}}}}},
        {"cluster", {{"workers", 4}, {"compute", {{"dist", "exponential"}, {"mean", 0.001}}}}},
        {"engines", json::array({json{{"type", type}, {"local_steps", 3}, {"k", 2}}})}};
    if (std::string(type) != "fedbuff") cfg["engines"][0].erase("k");
    const std::string a = run_one(cfg, std::string("det1") + type, 1), b = run_one(cfg, std::string("det3") + type, 3);
    for (const char* f : {"metrics.csv", "summary.json", "staleness.csv", "partition.csv"}) {
      std::string fa = read_file(a + "/" + f), fb = read_file(b + "/" + f);
      if (std::string(f) == "summary.json") {  // wall_seconds differs
        json ja = json::parse(fa), jb = json::parse(fb);
        ja.erase("wall_seconds"), jb.erase("wall_seconds");
        EXPECT_EQ(ja, jb) << type;
        EXPECT_EQ(ja["clients"]["partition"]["samples"]["min"], 20) << "600 samples over 30 clients, equal parts";
        EXPECT_EQ(ja["status"], "completed") << type << ": " << ja["note"];
      } else {
        EXPECT_FALSE(fa.empty()) << f;
        EXPECT_EQ(fa, fb) << type << " " << f;
      }
    }
    EXPECT_NE(read_file(a + "/partition.csv").find("client,samples"), std::string::npos);
  }
}

// The config's refusals, each naming its key.
TEST(Population, ConfigRefusals) {
  auto issues = [](const json& cfg) { return config_issues(cfg); };
  json fewer = quadratic_config("x", {1.0}, 4, 0.1);
  fewer["clients"] = {{"count", 3}};
  EXPECT_NE(issues(fewer).find("clients.count"), std::string::npos);
  json stateful = quadratic_config("x", {1.0}, 4, 0.1);
  stateful["clients"] = {{"count", 10}};
  stateful["engines"] = json::array({json{{"type", "local_sgd"}}});
  const std::string why = issues(stateful);
  EXPECT_NE(why.find("does not run on a population"), std::string::npos) << why;
  EXPECT_NE(why.find("fedbuff"), std::string::npos) << why;
  json speeds = quadratic_config("x", {1.0}, 4, 0.1);
  speeds["clients"] = {{"count", 10}, {"speeds", 2}};
  EXPECT_NE(issues(speeds).find("clients.speeds"), std::string::npos);
  json report = quadratic_config("x", {1.0}, 4, 0.1);
  report["clients"] = {{"count", 10}};
  report["engines"] = json::array({json{{"type", "fedavg"}, {"report", 5}}});
  EXPECT_NE(issues(report).find("engines[0].report"), std::string::npos) << issues(report);
  // the federated engines train clients: no population (clients.count 0) is refused (fedavg
  // went round at t = 0 looking for a client until memory ran out)
  for (const char* type : {"fedavg", "fedbuff", "fedasync"}) {
    json none = quadratic_config("x", {1.0}, 4, 0.1);
    none["engines"] = json::array({json{{"type", type}}});
    const std::string no_clients = issues(none);
    EXPECT_NE(no_clients.find("clients.count: engine " + std::string(type) + " trains the clients of a population"),
              std::string::npos)
        << no_clients;
  }
}

// clients.devices: a client's messages cross its own link (bytes x 8 / 1000 / kbit/s seconds
// each way), its factor is its ms per sample over the median device's, and a client that
// leaves before its job is done drops it (counted). One slot, FedBuff with K = 1.
TEST(Population, DevicesChargeTheClientLinkAndDropJobsTheirClientsLeave) {
  const std::string dir = temp_dir("devices");
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir + "/" + name) << text; };
  // Bandwidth: one client of 1 kbit/s; the quadratic's 2 parameters are 8 bytes: 64 ms a message.
  write("devices.csv", "client,compute_ms_per_sample,bandwidth_kbps\n0,5,1\n");
  json cfg = federated_quadratic("link", {{"type", "fedbuff"}, {"k", 1}, {"staleness_weight", "none"}}, 1, 1);
  cfg["clients"]["devices"] = dir;
  cfg["stop"] = {{"updates", 10}};
  json s = summary_at(run_one(cfg, "dev"));
  EXPECT_NEAR(s["time"].get<double>(), 10 * (0.010 + 2 * 0.064), 1e-6) << s.dump();
  EXPECT_EQ(s["clients"]["departed"], 0);

  // Availability: client 0 is there for [0, 25 ms], client 1 from 100 ms on; a job is 3 steps
  // of 10 ms x its factor (client 1: 20 ms per sample over the median 20: 1). Client 0's first
  // job is cut at 25 ms; the slot then waits for client 1, whose jobs all finish.
  write("devices.csv", "client,compute_ms_per_sample,bandwidth_kbps\n0,20,1e9\n1,20,1e9\n");
  write("availability.csv", "client,active_from,active_to,period\n0,0,0.025,1000\n1,0.1,1000,1000\n");
  json avail = federated_quadratic("avail", {{"type", "fedbuff"}, {"k", 1}, {"local_steps", 3}}, 1, 2);
  avail["clients"]["devices"] = dir;
  avail["stop"] = {{"updates", 5}};
  s = summary_at(run_one(avail, "dev"));
  EXPECT_EQ(s["clients"]["departed"], 1) << s.dump();
  EXPECT_NEAR(s["time"].get<double>(), 0.1 + 5 * 0.030, 1e-6) << s.dump();
  EXPECT_EQ(s["status"], "completed") << s["note"];

  // An engine that cannot take back a job its client left is refused at validation, naming
  // the key; so is a devices folder that is not there.
  avail["engines"] = json::array({json{{"type", "async"}}});
  std::string why = config_issues(avail);
  EXPECT_NE(why.find("clients.devices: its clients come and go"), std::string::npos) << why;
  avail["engines"] = json::array({json{{"type", "fedasync"}}});
  avail["clients"]["devices"] = dir + "/nowhere";
  why = config_issues(avail);
  EXPECT_NE(why.find("clients.devices: " + dir + "/nowhere/devices.csv: cannot read"), std::string::npos) << why;
}

// Memory follows the slots, not the population: the same run with 1,000 and with 1,000,000
// clients (100,000 in a sanitizer build) differs in peak resident memory by what a few
// bytes per client make (the population's arrays: about 14 B a client), far below a model
// copy per client (4 KB each here: 4 GB). Measured in child processes by /usr/bin/time.
TEST(Population, PeakMemoryDoesNotGrowWithTheClients) {
  if (!std::filesystem::exists("/usr/bin/time")) GTEST_SKIP() << "/usr/bin/time is not installed";
  const int big = reduced_size() ? 100000 : 1000000;
  auto peak_kb = [&](int clients) {
    json cfg = quadratic_config("mem" + std::to_string(clients), std::vector<double>(1000, 1.0), 100, 0.01);
    cfg["clients"] = {{"count", clients}};
    cfg["engines"] = json::array({json{{"type", "fedbuff"}, {"k", 10}, {"local_steps", 2}}});
    cfg["stop"] = {{"updates", 20}};
    cfg["eval"] = {{"every", 10}, {"unit", "updates"}};
    const std::string dir = temp_dir("mem" + std::to_string(clients));
    std::ofstream(dir + "/c.json") << cfg.dump();
    CommandResult r = run_shell("/usr/bin/time -f 'peak_kb=%M' " + std::string(binary()) + " run " + dir +
                                "/c.json --out " + dir + "/out --quiet 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.find("peak_kb=");
    return at == std::string::npos ? -1.0 : std::stod(r.output.substr(at + 8));
  };
  const double small = peak_kb(1000), large = peak_kb(big);
  ASSERT_GT(small, 0);
  ASSERT_GT(large, 0);
  EXPECT_LT(large - small, 64.0 * 1024) << "peak " << small << " kB with 1,000 clients, " << large << " kB with "
                                        << big;
}

// A slot that fails mid-job loses its client's job (counted lost) and frees the client; the
// rule goes on with the other slots and takes the slot back when it returns; FedAvg's round
// ends with the slots left. Each rule completes its updates, and a failure never frees a
// client twice (Population::release throws then).
TEST(Federated, ASlotFailureLosesItsClientsJob) {
  for (const char* type : {"fedavg", "fedbuff", "fedasync"}) {
    json engine = {{"type", type}, {"local_steps", 3}};
    if (std::string(type) == "fedbuff") engine["k"] = 2;
    json cfg = federated_quadratic(std::string("fail_") + type, engine, 3, 6);
    cfg["cluster"]["failures"] = {{"events", {{{"worker", 1}, {"at", 0.015}, {"down_for", 0.05}}}}};  // mid-step 2
    const json s = summary_at(run_one(cfg, "fail"));
    EXPECT_EQ(s["status"], "completed") << type << ": " << s["note"];
    EXPECT_EQ(s["updates"], 12) << type;
    EXPECT_GE(s["lost_gradients"].get<int>(), 1) << type;
    EXPECT_EQ(s["worker_failures"], 1) << type;
  }
}
