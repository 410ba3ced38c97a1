// tests/test_bench.cpp — `asgdsim bench`: its options, that its workloads measure what
// they say, and the CI regression check on workload (a): the simulator's throughput as a
// fraction of the bare limit (same kernels, same threads, no scheduler) must stay above
// a floor. The floor is a ratio measured in one process, never an absolute time, so a
// slower or busier machine does not trip it; it is set far enough below what we measure
// that the noise of a shared 2-core machine cannot cross it by accident.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "experiments/bench/bench.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd;

namespace {

char* arg(const char* s) { return const_cast<char*>(s); }

const std::string kFashionMnist = "/usr/share/datasets/fashion-mnist";

bool have_fashion_mnist() {
  return std::filesystem::exists(kFashionMnist + "/train-images-idx3-ubyte.gz") ||
         std::filesystem::exists(kFashionMnist + "/train-images-idx3-ubyte");
}

}  // namespace

TEST(BenchOptions, ParsesTheDocumentedFlags) {
  char* argv[] = {arg("bench"), arg("--threads"), arg("3"),         arg("--quick"),   arg("--only"),
                  arg("a,c"),   arg("--json"),    arg("out.jsonl"), arg("--repeats"), arg("2")};
  BenchOptions o = parse_bench_options(10, argv);
  EXPECT_EQ(o.threads, 3);
  EXPECT_TRUE(o.quick);
  EXPECT_EQ(o.only, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(o.json_path, "out.jsonl");
  EXPECT_EQ(o.repeats, 2);

  char* cnn[] = {arg("bench"), arg("--only"), arg("f")};
  EXPECT_EQ(parse_bench_options(3, cnn).only, (std::vector<std::string>{"f"}));
  char* sparse[] = {arg("bench"), arg("--only"), arg("g")};
  EXPECT_EQ(parse_bench_options(3, sparse).only, (std::vector<std::string>{"g"}));

  char* batched[] = {arg("bench"), arg("--batched-gradients"), arg("8")};
  EXPECT_EQ(parse_bench_options(3, batched).batched_gradients, 8);

  char* none[] = {arg("bench")};
  BenchOptions d = parse_bench_options(1, none);
  EXPECT_EQ(d.threads, 0);
  EXPECT_FALSE(d.quick);
  EXPECT_TRUE(d.only.empty());
  EXPECT_EQ(d.batched_gradients, 1);
}

TEST(BenchOptions, RejectsBadUsage) {
  char* bad_letter[] = {arg("bench"), arg("--only"), arg("a,x")};
  EXPECT_THROW(parse_bench_options(3, bad_letter), std::invalid_argument);
  char* bad_threads[] = {arg("bench"), arg("--threads"), arg("two")};
  EXPECT_THROW(parse_bench_options(3, bad_threads), std::invalid_argument);
  char* missing[] = {arg("bench"), arg("--json")};
  EXPECT_THROW(parse_bench_options(2, missing), std::invalid_argument);
  for (const char* k : {"0", "1025", "x"}) {
    char* bad_batch[] = {arg("bench"), arg("--batched-gradients"), arg(k)};
    EXPECT_THROW(parse_bench_options(3, bad_batch), std::invalid_argument) << k;
  }
  char* unknown[] = {arg("bench"), arg("--fast")};
  EXPECT_THROW(parse_bench_options(2, unknown), std::invalid_argument);
  // The CLI turns these into usage errors: exit code 2.
  auto r = asgd::testing::run_cli("bench --only z");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--only"), std::string::npos) << r.output;
}

// Workload e measures the eval schedule of the shipped default experiment: keep them equal.
TEST(BenchWorkloads, EvalWorkloadUsesTheDefaultConfigsSchedule) {
  std::ifstream in(std::string(asgd::testing::source_dir()) + "/experiments/configs/default.json");
  ASSERT_TRUE(in) << "experiments/configs/default.json not found";
  json def = json::parse(in);
  json ours = bench_default_eval_schedule();
  for (const auto& [key, value] : def.at("eval").items())
    EXPECT_EQ(ours.at(key), value) << "eval." << key << " differs from default.json";
  EXPECT_EQ(def.at("cluster").at("workers"), 8);
  EXPECT_EQ(def.at("train").at("batch_size"), 32);
}

// The event core (c) at a small size: counts are consistent and both sides ran.
TEST(BenchWorkloads, EventCoreCountsUpdatesAndTimesBothSides) {
  BenchResult r = bench_event_core(/*workers=*/500, /*updates=*/20000, /*threads=*/2, /*repeats=*/1);
  EXPECT_EQ(r.workload, "c");
  EXPECT_EQ(r.updates, 20000u);
  EXPECT_GE(r.gradients, r.updates);  // async: one update per gradient (in-flight ones too)
  EXPECT_GT(r.sim_seconds, 0.0);
  EXPECT_GT(r.bare_seconds, 0.0);
  EXPECT_GT(r.sim_rate, 0.0);
  EXPECT_EQ(r.rate_unit, "updates/s");
  EXPECT_EQ(r.ratios.size(), 1u);
  json j = r.to_json();
  for (const char* k : {"workload", "sim_rate", "bare_rate", "ratio", "threads", "workers", "backend"})
    EXPECT_TRUE(j.contains(k)) << k;
}

// The sparse workload (g) at a small size: a simulated run of sparse messages and a bare
// loop of the same sparse gradients both ran, with the same counts.
TEST(BenchWorkloads, SparseWorkloadTimesSparseMessagesAgainstABareLoop) {
  BenchResult r = bench_sparse(/*workers=*/4, /*gradients=*/300, /*threads=*/2, /*repeats=*/1);
  EXPECT_EQ(r.workload, "g");
  EXPECT_EQ(r.gradients, 300u);
  EXPECT_EQ(r.updates, 300u);
  EXPECT_GT(r.sim_seconds, 0.0);
  EXPECT_GT(r.bare_seconds, 0.0);
  EXPECT_EQ(r.rate_unit, "updates/s");
  // a push of the touched rows: far below the 400004-byte dense vector
  EXPECT_NE(r.note.find("bytes per push"), std::string::npos) << r.note;
  const double push = std::stod(r.note.substr(r.note.find("sim: ") + 5));
  EXPECT_GT(push, 20 * 8.0);
  EXPECT_LT(push, 32 * 20 * 8.0 + 4);
}

// The population workload (h) at a small size: FedBuff's client jobs on a population ran,
// the bare loop took a local SGD step per gradient, and the note says the jobs.
TEST(BenchWorkloads, PopulationWorkloadTimesClientJobsAgainstABareLoop) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST not installed at " << kFashionMnist;
  BenchResult r = bench_population(/*clients=*/1000, /*slots=*/8, /*gradients=*/400, /*threads=*/2, /*repeats=*/1,
                                   kFashionMnist, 2000);
  EXPECT_EQ(r.workload, "h");
  EXPECT_EQ(r.updates, r.gradients) << "a local SGD step per gradient";
  EXPECT_GE(r.gradients, 400u);
  EXPECT_GT(r.sim_seconds, 0.0);
  EXPECT_GT(r.bare_seconds, 0.0);
  EXPECT_NE(r.note.find("client jobs of 1000 clients"), std::string::npos) << r.note;
}

// The CI floor. Workload (a), shortened: MLP 784-128-10, batch 32, Fashion-MNIST (10,000
// training images), async with 16 workers, 3,000 gradients per timed run, 5 interleaved
// (sim, bare) pairs on 2 threads; the ratio is the median of the pairs' bare/sim wall
// times. Measured on the 2-core AMD EPYC that three other engineers' builds and tests
// share (2026-11-22), 30 runs at 1,500 to 6,000 gradients: the median ratio moved with
// the machine's load between 0.62 (machine otherwise idle: the bare side gets both cores)
// and 0.86 (busy), lowest single run 0.61; the CPU-time ratio stayed in 0.70-0.92.
// Floors: half the lower median, rounded down, for the wall ratio (0.3), and half the
// lowest CPU ratio for the CPU ratio (0.35). They catch gross regressions (workers
// serialised, a futex or an allocation storm per job, a parameter copy per job); the full
// `asgdsim bench` is for the finer ones.
TEST(BenchRegression, AsyncMlpStaysNearTheBareLimit) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST not installed at " << kFashionMnist;
  BenchResult r = bench_mlp("a", "async", 16, 3000, /*threads=*/2, /*repeats=*/5, kFashionMnist, 10000);
  std::cout << r.to_json().dump() << "\n";
  EXPECT_EQ(r.gradients, r.updates);
  EXPECT_GE(r.gradients, 3000u);
  EXPECT_GT(r.ratio, 0.3) << "simulated " << r.sim_rate << " updates/s vs bare " << r.bare_rate;
  EXPECT_GT(r.cpu_ratio, 0.35) << "CPU seconds: simulated " << r.sim_cpu_seconds << ", bare " << r.bare_cpu_seconds;
}

// Workload f at a small size: the LeNet-5 CNN's counts, its FLOPs per gradient (LeNet-5
// on 28x28x1: 2,263,920 per sample, batch 32), and both sides timed. The ratio floor is
// the MLP's (a CNN gradient is ~20 times the work, so the simulator's share is smaller).
TEST(BenchWorkloads, CnnWorkloadCountsFlopsAndStaysNearTheBareLimit) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST not installed at " << kFashionMnist;
  BenchResult r = bench_cnn("async", 16, 96, /*threads=*/2, /*repeats=*/1, kFashionMnist, 2000);
  EXPECT_EQ(r.workload, "f");
  EXPECT_EQ(r.name, "cnn_async");
  EXPECT_EQ(r.gradients, r.updates);
  EXPECT_GE(r.gradients, 96u);
  EXPECT_EQ(r.flops_per_gradient, 2263920.0 * 32);
  json j = r.to_json();
  for (const char* k : {"flops_per_gradient", "sim_gflops", "bare_gflops"}) EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_NEAR(j["sim_gflops"].get<double>(), r.flops_per_gradient * r.sim_rate / 1e9,
              1e-6 * j["sim_gflops"].get<double>());
  EXPECT_GT(r.ratio, 0.3) << "simulated " << r.sim_rate << " gradients/s vs bare " << r.bare_rate;
}
