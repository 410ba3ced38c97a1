// tests/test_sim.cpp — the sim/ layer's building blocks: event ordering, timing
// distributions (sample moments against their closed forms), compute-time model, the
// sample stream, the IDX reader and Fashion-MNIST loader, parameter versions, the worker
// pool, learning-rate schedules and atomic files. Not here: whole simulated runs and the
// engines (tests/test_engines.cpp).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/exec.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "sim/run/atomic_file.h"
#include "sim/timing/compute_time.h"
#include "sim/data/dataset.h"
#include "sim/timing/distribution.h"
#include "sim/core/event_queue.h"
#include "sim/data/idx_reader.h"
#include "sim/timing/lr_schedule.h"
#include "sim/core/parameter_store.h"
#include "sim/data/sample_stream.h"
#include "sim/core/simulation.h"
#include "sim/base/time.h"
#include "sim/core/worker_pool.h"

namespace asgd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------------------
// helpers

// A fresh folder under the system temp dir, removed (with everything in it) at the end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "asgd_test_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    // give back write permission a test may have taken away, so everything can go
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    for (fs::recursive_directory_iterator it(path_, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}
void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}
std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs fn on its own thread; a deadlock is reported and ends the test binary rather than
// hanging it (the stuck thread cannot be reclaimed).
template <class F>
void within_seconds(double seconds, const char* what, F fn) {
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  std::thread t([fn, done]() mutable {
    fn();
    done->set_value();
  });
  if (fut.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: %s did not finish within %.0f s (deadlock?)\n", what, seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  t.join();
}

#define EXPECT_THROW_WITH(stmt, type, ...)                                                                           \
  do {                                                                                                               \
    try {                                                                                                            \
      stmt;                                                                                                          \
      ADD_FAILURE() << "no exception from: " #stmt;                                                                  \
    } catch (const type& e) {                                                                                        \
      std::string msg = e.what();                                                                                    \
      for (const std::string& part : std::vector<std::string>{__VA_ARGS__})                                          \
        EXPECT_NE(msg.find(part), std::string::npos) << "message '" << msg << "' does not mention '" << part << "'"; \
    }                                                                                                                \
  } while (0)

// ---------------------------------------------------------------------------------------
// EventQueue

TEST(EventQueueTest, OrdersByTimeThenSchedulingOrder) {
  EventQueue q;
  EXPECT_TRUE(q.empty());
  const SimTime times[] = {50, 30, 50, 10, 30, 50, 10, 0};
  for (size_t i = 0; i < std::size(times); ++i) q.push(times[i], EventKind::EngineTimer, int32_t(i), i);
  EXPECT_EQ(q.size(), std::size(times));
  EXPECT_EQ(q.top().time, 0);
  // expected: by time, ties in push order
  const uint64_t want[] = {7, 3, 6, 1, 4, 0, 2, 5};
  for (uint64_t w : want) {
    Event e = q.pop();
    EXPECT_EQ(e.payload, w);
    EXPECT_EQ(e.worker, int32_t(w));
    EXPECT_EQ(e.time, times[w]);
    EXPECT_EQ(e.kind, EventKind::EngineTimer);
    EXPECT_EQ(q.now(), e.time);
  }
  EXPECT_TRUE(q.empty());
}

TEST(EventQueueTest, RandomScheduleComesOutSortedAndStable) {
  EventQueue q;
  Rng rng(1, RngPurpose::Data, 0, 0);
  std::vector<std::pair<SimTime, uint64_t>> pushed;
  for (uint64_t i = 0; i < 5000; ++i) {
    SimTime t = SimTime(rng.below(100));
    q.push(t, EventKind::GradientArrival, 0, i);
    pushed.push_back({t, i});
  }
  std::stable_sort(pushed.begin(), pushed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& p : pushed) {
    Event e = q.pop();
    ASSERT_EQ(e.time, p.first);
    ASSERT_EQ(e.payload, p.second);
  }
}

TEST(EventQueueTest, TimeNeverRunsBackwards) {
  EventQueue q;
  q.push(100, EventKind::Evaluate);
  q.pop();
  EXPECT_EQ(q.now(), 100);
  EXPECT_THROW(q.push(99, EventKind::Evaluate), std::logic_error);
  EXPECT_NO_THROW(q.push(100, EventKind::Evaluate));  // "now" is allowed
  EXPECT_NO_THROW(q.push(kNever, EventKind::StopTime));
  EXPECT_EQ(q.pop().time, 100);
  EXPECT_THROW(q.push(50, EventKind::Evaluate), std::logic_error);
  EXPECT_EQ(q.size(), 1u);
}

TEST(SimTimeTest, SecondsRoundTrip) {
  EXPECT_EQ(seconds_to_sim(1.5), 1500000000);
  EXPECT_EQ(seconds_to_sim(1e-9), 1);
  EXPECT_EQ(seconds_to_sim(0.4e-9), 0);
  EXPECT_DOUBLE_EQ(sim_to_seconds(2500000000), 2.5);
}

// ---------------------------------------------------------------------------------------
// Distributions

struct SampleStats {
  double mean = 0, var = 0, min = INFINITY, max = -INFINITY;
};

// N draws from Rng(seed, ComputeTime, worker 3, step i), i = 0..N-1.
SampleStats sample_stats(const Distribution& d, int N, uint64_t seed = 2024) {
  std::vector<double> x(N);
  for (int i = 0; i < N; ++i) {
    Rng rng(seed, RngPurpose::ComputeTime, 3, uint32_t(i));
    x[i] = d.sample(rng, 3, uint32_t(i));
  }
  SampleStats s;
  for (double v : x) {
    s.mean += v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  s.mean /= N;
  for (double v : x) s.var += (v - s.mean) * (v - s.mean);
  s.var /= (N - 1);
  return s;
}

// Fourth central moment from raw moments E[X^k], k = 1..4.
double central4(double m1, double m2, double m3, double m4) {
  return m4 - 4 * m1 * m3 + 6 * m1 * m1 * m2 - 3 * m1 * m1 * m1 * m1;
}

// The sample mean within 5 standard errors sqrt(var/N) of mean(); the sample variance
// within 5 standard errors sqrt((mu4 - var^2)/N) of variance().
void expect_moments(const Distribution& d, double mu4, int N) {
  SampleStats s = sample_stats(d, N);
  double var = d.variance();
  EXPECT_NEAR(s.mean, d.mean(), 5 * std::sqrt(var / N)) << "sample mean";
  EXPECT_NEAR(s.var, var, 5 * std::sqrt((mu4 - var * var) / N)) << "sample variance";
}

const int kDraws = 200000;

TEST(DistributionTest, ConstantIsConstant) {
  auto d = make_distribution({{"dist", "constant"}, {"value", 0.25}});
  EXPECT_EQ(d->mean(), 0.25);
  EXPECT_EQ(d->variance(), 0.0);
  SampleStats s = sample_stats(*d, 1000);
  EXPECT_EQ(s.min, 0.25);
  EXPECT_EQ(s.max, 0.25);
}

TEST(DistributionTest, UniformMoments) {
  auto d = make_distribution({{"dist", "uniform"}, {"low", 2.0}, {"high", 5.0}});
  EXPECT_DOUBLE_EQ(d->mean(), 3.5);
  EXPECT_DOUBLE_EQ(d->variance(), 9.0 / 12);
  expect_moments(*d, 81.0 / 80, kDraws);  // mu4 = (b - a)^4 / 80
  SampleStats s = sample_stats(*d, 10000);
  EXPECT_GE(s.min, 2.0);
  EXPECT_LE(s.max, 5.0);
  EXPECT_THROW(make_distribution({{"dist", "uniform"}, {"low", 5.0}, {"high", 2.0}}), std::invalid_argument);
  auto point = make_distribution({{"dist", "uniform"}, {"low", 1.0}, {"high", 1.0}});
  EXPECT_EQ(sample_stats(*point, 100).max, 1.0);
}

TEST(DistributionTest, ExponentialMoments) {
  auto d = make_distribution({{"dist", "exponential"}, {"mean", 1.5}});
  EXPECT_DOUBLE_EQ(d->mean(), 1.5);
  EXPECT_DOUBLE_EQ(d->variance(), 2.25);
  expect_moments(*d, 9 * std::pow(1.5, 4), kDraws);  // mu4 = 9 theta^4
  EXPECT_GE(sample_stats(*d, 10000).min, 0.0);
}

TEST(DistributionTest, ShiftedExponentialMoments) {
  auto d = make_distribution({{"dist", "shifted_exponential"}, {"shift", 0.2}, {"mean", 0.5}});
  EXPECT_DOUBLE_EQ(d->mean(), 0.7);
  EXPECT_DOUBLE_EQ(d->variance(), 0.25);
  expect_moments(*d, 9 * std::pow(0.5, 4), kDraws);
  EXPECT_GE(sample_stats(*d, 10000).min, 0.2);
}

TEST(DistributionTest, LogNormalMoments) {
  const double mean = 2.0, sigma = 0.5;
  auto d = make_distribution({{"dist", "lognormal"}, {"mean", mean}, {"sigma", sigma}});
  const double mu = std::log(mean) - sigma * sigma / 2;
  auto raw = [&](int k) { return std::exp(k * mu + k * k * sigma * sigma / 2); };
  EXPECT_NEAR(d->mean(), raw(1), 1e-12);
  EXPECT_NEAR(d->variance(), raw(2) - raw(1) * raw(1), 1e-12);
  expect_moments(*d, central4(raw(1), raw(2), raw(3), raw(4)), kDraws);
  EXPECT_GT(sample_stats(*d, 10000).min, 0.0);
}

TEST(DistributionTest, ParetoMoments) {
  // alpha = 6: mean, variance and the fourth moment exist, so both checks are principled.
  const double xm = 1.5, alpha = 6;
  auto d = make_distribution({{"dist", "pareto"}, {"scale", xm}, {"alpha", alpha}});
  auto raw = [&](int k) { return alpha * std::pow(xm, k) / (alpha - k); };
  EXPECT_NEAR(d->mean(), raw(1), 1e-12);
  EXPECT_NEAR(d->variance(), raw(2) - raw(1) * raw(1), 1e-12);
  expect_moments(*d, central4(raw(1), raw(2), raw(3), raw(4)), kDraws);
  EXPECT_GE(sample_stats(*d, 10000).min, xm);

  // alpha = 3: variance finite (mean check only: the fourth moment does not exist).
  auto heavy = make_distribution({{"dist", "pareto"}, {"scale", 2.0}, {"alpha", 3.0}});
  EXPECT_DOUBLE_EQ(heavy->mean(), 3.0);
  EXPECT_DOUBLE_EQ(heavy->variance(), 3.0);  // alpha xm^2 / ((alpha-1)^2 (alpha-2))
  EXPECT_NEAR(sample_stats(*heavy, kDraws).mean, 3.0, 5 * std::sqrt(3.0 / kDraws));

  auto no_var = make_distribution({{"dist", "pareto"}, {"scale", 1.0}, {"alpha", 2.0}});
  EXPECT_TRUE(std::isinf(no_var->variance()));
  EXPECT_DOUBLE_EQ(no_var->mean(), 2.0);
  auto no_mean = make_distribution({{"dist", "pareto"}, {"scale", 1.0}, {"alpha", 1.0}});
  EXPECT_TRUE(std::isinf(no_mean->mean()));
}

// Weibull (added as the recipe's example of a new distribution: one entry in
// sim/timing/distribution.cpp): raw moments scale^k Gamma(1 + k/shape).
TEST(DistributionTest, WeibullMoments) {
  for (double shape : {0.7, 1.0, 2.5}) {
    const double scale = 0.3;
    auto d = make_distribution({{"dist", "weibull"}, {"scale", scale}, {"shape", shape}});
    auto raw = [&](int k) { return std::pow(scale, k) * std::tgamma(1 + k / shape); };
    EXPECT_NEAR(d->mean(), raw(1), 1e-12) << shape;
    EXPECT_NEAR(d->variance(), raw(2) - raw(1) * raw(1), 1e-12) << shape;
    expect_moments(*d, central4(raw(1), raw(2), raw(3), raw(4)), kDraws);
    EXPECT_GT(sample_stats(*d, 10000).min, 0.0);
  }
  // shape 1 is the exponential of mean `scale`
  auto w = make_distribution({{"dist", "weibull"}, {"scale", 1.5}, {"shape", 1.0}});
  EXPECT_NEAR(w->mean(), 1.5, 1e-12);
  EXPECT_NEAR(w->variance(), 2.25, 1e-12);
}

TEST(DistributionTest, DrawsAreReproduciblePerKey) {
  for (const char* spec : {R"({"dist":"exponential","mean":1})", R"({"dist":"lognormal","mean":1,"sigma":1})",
                           R"({"dist":"pareto","scale":1,"alpha":3})", R"({"dist":"uniform","low":0,"high":1})"}) {
    auto d = make_distribution(json::parse(spec));
    Rng a(7, RngPurpose::ComputeTime, 1, 9), b(7, RngPurpose::ComputeTime, 1, 9), c(7, RngPurpose::ComputeTime, 1, 10);
    double x = d->sample(a, 1, 9);
    EXPECT_EQ(x, d->sample(b, 1, 9)) << spec;
    EXPECT_NE(x, d->sample(c, 1, 10)) << spec;
  }
}

// A single sequence is drawn from, not replayed in order: each (worker, step) takes a value
// chosen uniformly by its own stream, so every value comes up about n/4 times in n draws,
// two workers' steps differ (no lockstep: in order, every worker's step k took values[k]),
// and the same (seed, worker, step) draws the same value.
TEST(DistributionTest, TraceFromValuesDrawsEachStepIndependently) {
  auto d = make_distribution({{"dist", "trace"}, {"values", {0.5, 1.0, 1.5, 4.0}}});
  EXPECT_DOUBLE_EQ(d->mean(), 1.75);
  EXPECT_DOUBLE_EQ(d->variance(), 7.25 / 4);  // population variance of the trace
  EXPECT_EQ(d->worker_sequences(), 0u);
  const int n = 40000;
  std::map<double, int> counts;
  int same = 0;
  for (int k = 0; k < n; ++k) {
    Rng a(9, RngPurpose::ComputeTime, 0, uint32_t(k)), b(9, RngPurpose::ComputeTime, 1, uint32_t(k));
    const double x = d->sample(a, 0, uint32_t(k)), y = d->sample(b, 1, uint32_t(k));
    ++counts[x];
    same += x == y;
    Rng again(9, RngPurpose::ComputeTime, 0, uint32_t(k));
    ASSERT_EQ(d->sample(again, 0, uint32_t(k)), x);
  }
  ASSERT_EQ(counts.size(), 4u);
  for (const auto& [value, c] : counts) EXPECT_NEAR(c, n / 4, 4 * std::sqrt(n * 0.25 * 0.75)) << value;
  // two independent workers agree with probability 1/4 (lockstep: always)
  EXPECT_NEAR(same, n / 4, 4 * std::sqrt(n * 0.25 * 0.75));
  SampleStats s = sample_stats(*d, n);
  EXPECT_NEAR(s.mean, d->mean(), 4 * std::sqrt(d->variance() / n));
}

TEST(DistributionTest, TraceFromFile) {
  TempDir dir;
  write_text(dir.file("t.csv"), "# durations, seconds\n0.5,\n\n1.0\r\n  1.5  \n4\n");
  auto d = make_distribution({{"dist", "trace"}, {"file", dir.file("t.csv")}});
  EXPECT_DOUBLE_EQ(d->mean(), 1.75);
  EXPECT_EQ(d->worker_sequences(), 0u);
  std::set<double> seen;
  for (uint32_t k = 0; k < 200; ++k) {
    Rng rng(1, RngPurpose::ComputeTime, 2, k);
    seen.insert(d->sample(rng, 2, k));
  }
  EXPECT_EQ(seen, (std::set<double>{0.5, 1.0, 1.5, 4.0}));
  // relative to base_dir
  auto rel = make_distribution({{"dist", "trace"}, {"file", "t.csv"}}, dir.path());
  EXPECT_DOUBLE_EQ(rel->variance(), 7.25 / 4);
}

// A per-worker trace (a real job's step log) replays each worker's own sequence in order,
// cyclically, in both forms: rows of worker,step,seconds (in any interleaving, from any
// first step) and a column per worker (columns of different lengths).
TEST(DistributionTest, PerWorkerTraceReplaysEachWorkersOwnSequence) {
  TempDir dir;
  write_text(dir.file("rows.csv"),
             "# a PyTorch loop's log\nworker,step,seconds\n1,7,0.2\n0,0,0.1\n0,1,0.3\n1,8,0.4\n1,9,0.6\n");
  write_text(dir.file("cols.csv"), "Rank 0, rank 1\n0.1,0.2\n0.3,0.4\n,0.6\n");
  for (const char* file : {"rows.csv", "cols.csv"}) {
    auto d = make_distribution({{"dist", "trace"}, {"file", dir.file(file)}});
    EXPECT_EQ(d->worker_sequences(), 2u) << file;
    const std::vector<std::vector<double>> want = {{0.1, 0.3}, {0.2, 0.4, 0.6}};
    for (uint32_t w = 0; w < 2; ++w)
      for (uint32_t k = 0; k < 7; ++k) {
        Rng rng(5, RngPurpose::ComputeTime, w, k);
        EXPECT_EQ(d->sample(rng, w, k), want[w][k % want[w].size()]) << file << " worker " << w << " step " << k;
      }
    EXPECT_DOUBLE_EQ(d->mean(), (0.1 + 0.3 + 0.2 + 0.4 + 0.6) / 5) << file;
    Rng rng(5, RngPurpose::ComputeTime, 2, 0);
    EXPECT_THROW_WITH(d->sample(rng, 2, 0), std::invalid_argument, "worker 2");
  }
}

// What a per-worker trace refuses, each naming the file and, where there is one, the line.
TEST(DistributionTest, PerWorkerTraceErrorsNameTheFileAndLine) {
  TempDir dir;
  const std::string bad = dir.file("bad.csv");
  struct Case {
    std::string text;
    std::vector<std::string> said;
  };
  const std::vector<Case> cases = {
      {"worker,step,seconds\n0,0,0.1\n2,0,0.2\n", {"worker 1 has no durations"}},
      {"worker,step,seconds\n0,0,0.1\n0,2,0.2\n", {"line 3", "step 2 follows its step 0"}},
      {"worker,step,seconds\n0,0,-0.1\n", {"line 2", "negative"}},
      {"worker,step,seconds\n0,0,fast\n", {"line 2", "'fast' is not a number"}},
      {"worker,step,seconds\n0,1.5,0.1\n", {"line 2", "step '1.5' is not an integer"}},
      {"worker,step,seconds\n-1,0,0.1\n", {"line 2", "worker '-1'"}},
      {"worker,step,seconds\n0,0\n", {"line 2", "expected worker,step,seconds"}},
      {"a,b\n0.1,0.2,0.3\n", {"line 2", "3 fields", "2 workers"}},
      {"a,b\n0.1,\n0.2,0.3\n", {"line 3", "worker 1", "after an empty cell"}},
      {"a,b\n,0.1\n", {"worker 0 has no durations"}},
      {"a,,c\n0.1,0.2,0.3\n", {"line 1", "empty name"}},
      {"0.1,0.2\n", {"line 1", "2 values in a line"}},
      {"worker,step,seconds\n", {"holds no durations"}},
      {std::string("0.1\n0.2\0x\n", 9), {"line 2", "is not a number"}},
  };
  for (const auto& c : cases) {
    write_text(bad, c.text);
    try {
      make_distribution({{"dist", "trace"}, {"file", bad}});
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(bad), std::string::npos) << what;
      for (const auto& s : c.said) EXPECT_NE(what.find(s), std::string::npos) << "'" << s << "' not in: " << what;
    }
  }
}

TEST(DistributionTest, TraceErrorsNameTheFileAndLine) {
  TempDir dir;
  const std::string missing = dir.file("missing.csv");
  EXPECT_THROW_WITH(make_distribution({{"dist", "trace"}, {"file", missing}}), std::invalid_argument, missing);
  const std::string bad = dir.file("bad.csv");
  write_text(bad, "1.0\n2.0\nabc\n3.0\n");
  EXPECT_THROW_WITH(make_distribution({{"dist", "trace"}, {"file", bad}}), std::invalid_argument, bad, "line 3", "abc");
  write_text(bad, "1.0\n2.0x\n");
  EXPECT_THROW_WITH(make_distribution({{"dist", "trace"}, {"file", bad}}), std::invalid_argument, bad, "line 2");
  write_text(bad, "1.0\nnan\n");
  EXPECT_THROW_WITH(make_distribution({{"dist", "trace"}, {"file", bad}}), std::invalid_argument, bad, "line 2");
  write_text(bad, "# a comment\n1\n-2\n");
  EXPECT_THROW_WITH(make_distribution({{"dist", "trace"}, {"file", bad}}), std::invalid_argument, bad, "line 3",
                    "negative");
  write_text(bad, "# only a comment\n\n");
  EXPECT_THROW_WITH(make_distribution({{"dist", "trace"}, {"file", bad}}), std::invalid_argument, bad);
  EXPECT_THROW_WITH(make_distribution({{"dist", "trace"}, {"values", {1.0, -1.0}}}), std::invalid_argument, "trace",
                    ">= 0");
  EXPECT_THROW(make_distribution({{"dist", "trace"}, {"values", json::array()}}), std::invalid_argument);
  EXPECT_THROW(make_distribution({{"dist", "trace"}, {"values", json::array({1.0})}, {"file", bad}}),
               std::invalid_argument);
}

TEST(DistributionTest, CatalogAndUnknownNames) {
  std::set<std::string> names;
  for (const auto& c : distribution_catalog()) names.insert(c.name);
  for (const char* n :
       {"constant", "uniform", "exponential", "shifted_exponential", "lognormal", "pareto", "weibull", "trace"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_THROW_WITH(make_distribution({{"dist", "gamma"}, {"mean", 1.0}}), std::invalid_argument, "gamma");
}

// ---------------------------------------------------------------------------------------
// ComputeTimeModel

TEST(ComputeTimeModelTest, DeterministicPerWorkerAndStep) {
  auto spec = json{{"dist", "exponential"}, {"mean", 0.1}};
  ComputeTimeModel a(5, make_distribution(spec), {});
  ComputeTimeModel b(5, make_distribution(spec), {});
  ComputeTimeModel other_seed(6, make_distribution(spec), {});
  std::vector<SimTime> forward;
  for (uint32_t w = 0; w < 4; ++w)
    for (uint32_t s = 0; s < 50; ++s) forward.push_back(a.duration(w, s, 1));
  // same (worker, step) in reverse call order on another instance: same values
  size_t k = forward.size();
  for (int w = 3; w >= 0; --w)
    for (int s = 49; s >= 0; --s) ASSERT_EQ(b.duration(uint32_t(w), uint32_t(s), 1), forward[--k]);
  std::set<SimTime> distinct(forward.begin(), forward.end());
  EXPECT_GT(distinct.size(), forward.size() - 2) << "different (worker, step) should differ";
  EXPECT_NE(other_seed.duration(0, 0, 1), a.duration(0, 0, 1));
  // the draw is the distribution's, from the (seed, ComputeTime, worker, step) stream
  Rng rng(5, RngPurpose::ComputeTime, 2, 17);
  EXPECT_EQ(a.duration(2, 17, 1), seconds_to_sim(a.distribution().sample(rng, 2, 17)));
  EXPECT_DOUBLE_EQ(a.distribution().mean(), 0.1);
}

TEST(ComputeTimeModelTest, SlowdownFactorsMultiply) {
  ComputeTimeModel c(1, make_distribution({{"dist", "constant"}, {"value", 0.5}}), {1.0, 2.0, 0.5});
  EXPECT_EQ(c.duration(0, 0, 1), 500000000);
  EXPECT_EQ(c.duration(1, 7, 1), 1000000000);
  EXPECT_EQ(c.duration(2, 3, 1), 250000000);
  EXPECT_EQ(c.duration(3, 3, 1), 500000000) << "workers past the list run at nominal speed";

  auto spec = json{{"dist", "lognormal"}, {"mean", 0.2}, {"sigma", 0.7}};
  ComputeTimeModel nominal(9, make_distribution(spec), {});
  ComputeTimeModel slow(9, make_distribution(spec), {1.0, 3.0});
  for (uint32_t s = 0; s < 100; ++s) {
    EXPECT_EQ(slow.duration(0, s, 1), nominal.duration(0, s, 1));
    Rng rng(9, RngPurpose::ComputeTime, 1, s);
    EXPECT_EQ(slow.duration(1, s, 1), seconds_to_sim(3.0 * nominal.distribution().sample(rng, 1, s)));
    EXPECT_NEAR(double(slow.duration(1, s, 1)), 3.0 * double(nominal.duration(1, s, 1)), 2.0);
  }
  EXPECT_THROW(ComputeTimeModel(1, make_distribution(spec), {1.0, 0.0}), std::invalid_argument);
  EXPECT_THROW(ComputeTimeModel(1, make_distribution(spec), {-1.0}), std::invalid_argument);
}

// A step costs overhead + m x draw per sample, overhead + draw per step; the worker's
// speed and straggler factors multiply the whole step, overhead included.
TEST(ComputeTimeModelTest, StepsScaleWithTheBatchAndFactorsMultiplyTheWholeStep) {
  auto spec = json{{"dist", "exponential"}, {"mean", 0.001}};
  ComputeTimeModel per_sample(4, make_distribution(spec), {1.0, 2.0}, {}, StepCost{true, 0.002});
  ComputeTimeModel per_step(4, make_distribution(spec), {1.0, 2.0}, {}, StepCost{false, 0.002});
  StragglerSpec windows;
  windows.windows.push_back(SlowWindow{0, 3.0, 0, seconds_to_sim(1.0)});
  ComputeTimeModel slow_window(4, make_distribution(spec), {}, windows, StepCost{true, 0.002});
  for (uint32_t s = 0; s < 20; ++s) {
    Rng rng(4, RngPurpose::ComputeTime, 1, s);
    const double draw = per_sample.distribution().sample(rng, 1, s);
    EXPECT_EQ(per_sample.duration(1, s, 32), seconds_to_sim(2.0 * (0.002 + 32 * draw))) << s;
    EXPECT_EQ(per_step.duration(1, s, 32), seconds_to_sim(2.0 * (0.002 + draw))) << s;
    Rng rng0(4, RngPurpose::ComputeTime, 0, s);
    const double draw0 = per_sample.distribution().sample(rng0, 0, s);
    EXPECT_EQ(slow_window.duration(0, s, 8, seconds_to_sim(0.5)), seconds_to_sim(3.0 * (0.002 + 8 * draw0))) << s;
    EXPECT_EQ(slow_window.duration(0, s, 8, seconds_to_sim(1.5)), seconds_to_sim(0.002 + 8 * draw0)) << s;
  }
  // no overhead, per sample: twice the batch, twice the time (up to the nanosecond)
  ComputeTimeModel plain(4, make_distribution(spec), {});
  for (uint32_t s = 0; s < 20; ++s)
    EXPECT_NEAR(double(plain.duration(3, s, 64)), 2.0 * double(plain.duration(3, s, 32)), 1.0);
  EXPECT_THROW(ComputeTimeModel(1, make_distribution(spec), {}, {}, StepCost{true, -1.0}), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------
// SampleStream

bool is_permutation_of_range(std::vector<int32_t> v, size_t n) {
  if (v.size() != n) return false;
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < n; ++i)
    if (v[i] != int32_t(i)) return false;
  return true;
}

TEST(SampleStreamTest, EachEpochIsAPermutation) {
  const size_t n = 1000;
  SampleStream s(n, 42);
  std::vector<int32_t> e0, e1, e2;
  s.next(n, e0);
  s.next(n, e1);
  s.next(n, e2);
  EXPECT_TRUE(is_permutation_of_range(e0, n));
  EXPECT_TRUE(is_permutation_of_range(e1, n));
  EXPECT_TRUE(is_permutation_of_range(e2, n));
  EXPECT_NE(e0, e1);
  EXPECT_NE(e1, e2);
  std::vector<int32_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(e0, identity) << "not shuffled";
  EXPECT_EQ(s.taken(), 3 * n);
}

// For models that read no data (shuffle = false) the ids only count samples: every epoch
// is 0..n-1 in order, across batch boundaries, with the same counts.
TEST(SampleStreamTest, WithoutShufflingEveryEpochIsInOrder) {
  const size_t n = 7;
  SampleStream s(n, 42, /*shuffle=*/false);
  std::vector<int32_t> got;
  for (size_t m : {3, 5, 6, 7})  // 21 = three epochs, the batches crossing their ends
    s.next(m, got);
  ASSERT_EQ(got.size(), 3 * n);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], int32_t(i % n)) << "id " << i;
  EXPECT_EQ(s.taken(), 3 * n);
}

TEST(SampleStreamTest, SeededAndReproducible) {
  SampleStream a(500, 7), b(500, 7), c(500, 8);
  std::vector<int32_t> va, vb, vc;
  a.next(1234, va);
  b.next(1234, vb);
  c.next(1234, vc);
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
  EXPECT_EQ(va.size(), 1234u);
}

TEST(SampleStreamTest, BatchesSpanEpochBoundaries) {
  const size_t n = 10;
  SampleStream whole(n, 3), pieces(n, 3);
  std::vector<int32_t> all, parts;
  whole.next(3 * n, all);
  for (size_t m : {7, 7, 6, 1, 9}) pieces.next(m, parts);  // 7 | 7 crosses 10, ...
  EXPECT_EQ(parts, all);
  for (size_t e = 0; e < 3; ++e)
    EXPECT_TRUE(is_permutation_of_range(std::vector<int32_t>(all.begin() + e * n, all.begin() + (e + 1) * n), n))
        << "epoch " << e;
  // appends, never overwrites
  std::vector<int32_t> out = {-5};
  SampleStream s(n, 3);
  s.next(4, out);
  EXPECT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0], -5);
  s.next(0, out);
  EXPECT_EQ(out.size(), 5u);
  EXPECT_EQ(s.taken(), 4u);
}

TEST(SampleStreamTest, SlicesOfNTimesMEqualNPiecesOfM) {
  // the sync-equivalence premise: one draw of N*M ids sliced in N equals N draws of M
  const size_t n = 777, N = 4, M = 50;
  SampleStream one(n, 11), many(n, 11);
  for (int iter = 0; iter < 10; ++iter) {
    std::vector<int32_t> big;
    one.next(N * M, big);
    for (size_t i = 0; i < N; ++i) {
      std::vector<int32_t> slice;
      many.next(M, slice);
      ASSERT_EQ(slice, std::vector<int32_t>(big.begin() + i * M, big.begin() + (i + 1) * M))
          << "iteration " << iter << " worker " << i;
    }
  }
}

TEST(SampleStreamTest, ShuffleIsUniform) {
  // Where id 0 lands, over many seeds: every position equally likely (a biased shuffle,
  // e.g. Sattolo's, never leaves an element in place).
  const size_t n = 5;
  const int seeds = 5000;
  std::vector<int> where(n, 0);
  for (int seed = 0; seed < seeds; ++seed) {
    SampleStream s(n, uint64_t(seed));
    std::vector<int32_t> v;
    s.next(n, v);
    where[std::find(v.begin(), v.end(), 0) - v.begin()]++;
  }
  double chi2 = 0, e = double(seeds) / n;
  for (int c : where) chi2 += (c - e) * (c - e) / e;
  EXPECT_LT(chi2, 30.0) << "chi-square, 4 degrees of freedom (P(>30) ~ 5e-6)";
}

TEST(SampleStreamTest, RejectsAnEmptySet) {
  EXPECT_THROW(SampleStream(0, 1), std::invalid_argument);
  SampleStream one(1, 1);
  std::vector<int32_t> v;
  one.next(5, v);
  EXPECT_EQ(v, std::vector<int32_t>(5, 0));
}

// ---------------------------------------------------------------------------------------
// IDX reader and Fashion-MNIST

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}
std::vector<uint8_t> idx_images(uint32_t count, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t i = 0; i < count * rows * cols; ++i) b.push_back(uint8_t((i * 37 + 11) % 256));
  return b;
}
std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = 0x801) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, uint32_t(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

TEST(IdxReaderTest, ParsesValidImagesAndLabels) {
  auto bytes = idx_images(3, 2, 4);
  IdxImages img = parse_idx_images(bytes, "mem");
  EXPECT_EQ(img.count, 3u);
  EXPECT_EQ(img.rows, 2u);
  EXPECT_EQ(img.cols, 4u);
  EXPECT_EQ(img.pixels, std::vector<uint8_t>(bytes.begin() + 16, bytes.end()));
  EXPECT_EQ(parse_idx_labels(idx_labels({3, 0, 9}), "mem"), (std::vector<uint8_t>{3, 0, 9}));
  EXPECT_TRUE(parse_idx_labels(idx_labels({}), "mem").empty());
  EXPECT_EQ(parse_idx_images(idx_images(0, 28, 28), "mem").count, 0u);
}

TEST(IdxReaderTest, RejectsMalformedImages) {
  EXPECT_THROW_WITH(parse_idx_images(idx_images(2, 3, 3, 0x801), "imgs.idx"), DataError, "imgs.idx", "magic",
                    "0x00000801");
  auto truncated = idx_images(2, 3, 3);
  truncated.pop_back();
  EXPECT_THROW_WITH(parse_idx_images(truncated, "imgs.idx"), DataError, "imgs.idx", "truncated");
  auto trailing = idx_images(2, 3, 3);
  trailing.push_back(0);
  trailing.push_back(0);
  EXPECT_THROW_WITH(parse_idx_images(trailing, "imgs.idx"), DataError, "imgs.idx", "2 unexpected bytes");
  EXPECT_THROW_WITH(parse_idx_images(std::vector<uint8_t>(15, 0), "imgs.idx"), DataError, "imgs.idx", "too short");
  EXPECT_THROW_WITH(parse_idx_images({}, "imgs.idx"), DataError, "imgs.idx", "too short");
  EXPECT_THROW_WITH(parse_idx_images(idx_images(1, 0, 5), "imgs.idx"), DataError, "imgs.idx", "image size");
  // a huge count in the header must not be trusted (no overflow, no giant allocation)
  auto lying = idx_images(1, 28, 28);
  lying[4] = lying[5] = lying[6] = lying[7] = 0xFF;
  EXPECT_THROW_WITH(parse_idx_images(lying, "imgs.idx"), DataError, "imgs.idx", "truncated");
}

TEST(IdxReaderTest, RejectsMalformedLabels) {
  EXPECT_THROW_WITH(parse_idx_labels(idx_labels({1, 2}, 0x803), "labels.idx"), DataError, "labels.idx", "magic");
  auto truncated = idx_labels({1, 2, 3});
  truncated.pop_back();
  EXPECT_THROW_WITH(parse_idx_labels(truncated, "labels.idx"), DataError, "labels.idx", "3 labels");
  auto trailing = idx_labels({1, 2, 3});
  trailing.push_back(4);
  EXPECT_THROW_WITH(parse_idx_labels(trailing, "labels.idx"), DataError, "labels.idx", "3 labels");
  EXPECT_THROW_WITH(parse_idx_labels(std::vector<uint8_t>(7, 0), "labels.idx"), DataError, "labels.idx", "too short");
}

TEST(IdxReaderTest, ReadsPlainAndGzipFiles) {
  TempDir dir;
  auto img = idx_images(4, 3, 2);
  auto lab = idx_labels({1, 2, 3, 4});
  write_bytes(dir.file("img"), img);
  write_gzip(dir.file("img.gz"), img);
  write_gzip(dir.file("lab.gz"), lab);
  EXPECT_EQ(read_idx_images(dir.file("img")).pixels, read_idx_images(dir.file("img.gz")).pixels);
  EXPECT_EQ(read_idx_images(dir.file("img.gz")).count, 4u);
  EXPECT_EQ(read_idx_labels(dir.file("lab.gz")), (std::vector<uint8_t>{1, 2, 3, 4}));

  const std::string missing = dir.file("nope.gz");
  EXPECT_THROW_WITH(read_idx_images(missing), DataError, missing);
  const std::string bad = dir.file("bad");
  auto wrong = img;
  wrong[3] = 0x01;
  write_bytes(bad, wrong);
  EXPECT_THROW_WITH(read_idx_images(bad), DataError, bad, "magic");
  // a cut-off gzip stream: either zlib or the size check must notice
  std::vector<uint8_t> gz;
  {
    std::ifstream in(dir.file("img.gz"), std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  gz.resize(gz.size() / 2);
  const std::string cut = dir.file("cut.gz");
  write_bytes(cut, gz);
  EXPECT_THROW_WITH(read_idx_images(cut), DataError, cut);
}

// Writes a small Fashion-MNIST-shaped folder (gzip, as Debian installs it).
void write_fake_mnist(const TempDir& dir, uint32_t train, uint32_t train_labels, uint32_t test) {
  auto labels = [](uint32_t n) {
    std::vector<uint8_t> l(n);
    for (uint32_t i = 0; i < n; ++i) l[i] = uint8_t(i % 10);
    return l;
  };
  write_gzip(dir.file("train-images-idx3-ubyte.gz"), idx_images(train, 2, 3));
  write_gzip(dir.file("train-labels-idx1-ubyte.gz"), idx_labels(labels(train_labels)));
  write_gzip(dir.file("t10k-images-idx3-ubyte.gz"), idx_images(test, 2, 3));
  write_gzip(dir.file("t10k-labels-idx1-ubyte.gz"), idx_labels(labels(test)));
}

TEST(FashionMnistTest, LoadsAFolderAndScalesPixels) {
  TempDir dir;
  write_fake_mnist(dir, 12, 12, 5);
  DataSplit d = load_fashion_mnist(dir.path());
  EXPECT_EQ(d.train.n, 12u);
  EXPECT_EQ(d.test.n, 5u);
  EXPECT_EQ(d.train.dim, 6u);
  EXPECT_EQ(d.train.classes, 10);
  auto raw = idx_images(12, 2, 3);
  for (size_t i = 0; i < d.train.x.size(); ++i) ASSERT_FLOAT_EQ(d.train.x[i], raw[16 + i] / 255.0f);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(d.train.y[i], float(i % 10));
  DataSplit limited = load_fashion_mnist(dir.path(), 4, 2);
  EXPECT_EQ(limited.train.n, 4u);
  EXPECT_EQ(limited.train.x.size(), 4u * 6);
  EXPECT_EQ(limited.test.n, 2u);
  EXPECT_EQ(limited.train.x, std::vector<float>(d.train.x.begin(), d.train.x.begin() + 24));
}

TEST(FashionMnistTest, MismatchedCountsNameBothFiles) {
  TempDir dir;
  write_fake_mnist(dir, 12, 11, 5);
  EXPECT_THROW_WITH(load_fashion_mnist(dir.path()), DataError, dir.file("train-images-idx3-ubyte.gz"),
                    dir.file("train-labels-idx1-ubyte.gz"), "12", "11");
}

TEST(FashionMnistTest, MissingFolderAndBadLabels) {
  TempDir dir;
  EXPECT_THROW_WITH(load_fashion_mnist(dir.file("absent")), DataError, dir.file("absent"), "not found");
  write_fake_mnist(dir, 3, 3, 2);
  write_gzip(dir.file("t10k-labels-idx1-ubyte.gz"), idx_labels({1, 10}));
  EXPECT_THROW_WITH(load_fashion_mnist(dir.path()), DataError, "t10k-labels-idx1-ubyte.gz", "label 10");
}

TEST(FashionMnistTest, RealDataset) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz") && !fs::exists(dir + "/train-images-idx3-ubyte"))
    GTEST_SKIP() << "Fashion-MNIST not installed at " << dir;
  DataSplit d = load_fashion_mnist(dir);
  EXPECT_EQ(d.train.n, 60000u);
  EXPECT_EQ(d.test.n, 10000u);
  EXPECT_EQ(d.train.dim, 784u);
  EXPECT_EQ(d.test.dim, 784u);
  EXPECT_EQ(d.train.x.size(), 60000u * 784);
  EXPECT_EQ(d.test.y.size(), 10000u);
  for (const HostDataset* h : {&d.train, &d.test}) {
    auto [lo, hi] = std::minmax_element(h->x.begin(), h->x.end());
    EXPECT_EQ(*lo, 0.0f);
    EXPECT_EQ(*hi, 1.0f);
    std::vector<size_t> per_class(10, 0);
    for (float y : h->y) {
      ASSERT_EQ(y, std::floor(y));
      ASSERT_GE(y, 0.0f);
      ASSERT_LE(y, 9.0f);
      per_class[size_t(y)]++;
    }
    for (size_t c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], h->n / 10) << "class " << c;  // balanced
  }
  // the well-known training-set pixel mean of Fashion-MNIST (0.2860) pins the /255 scaling
  double s = 0;
  for (float v : d.train.x) s += v;
  EXPECT_NEAR(s / double(d.train.x.size()), 0.2860, 5e-4);
}

TEST(DatasetTest, SyntheticIsSeededAndUploadRoundTrips) {
  SyntheticSpec spec;
  spec.features = 5;
  spec.classes = 3;
  spec.train_samples = 200;
  spec.test_samples = 50;
  DataSplit a = make_synthetic(spec, 1), b = make_synthetic(spec, 1), c = make_synthetic(spec, 2);
  EXPECT_EQ(a.train.x, b.train.x);
  EXPECT_EQ(a.train.y, b.train.y);
  EXPECT_NE(a.train.x, c.train.x);
  EXPECT_EQ(a.train.x.size(), 200u * 5);
  EXPECT_EQ(a.test.n, 50u);
  EXPECT_NE(std::vector<float>(a.train.x.begin(), a.train.x.begin() + 250), a.test.x)
      << "train and test sets must be different draws";
  std::set<float> labels(a.train.y.begin(), a.train.y.end());
  EXPECT_EQ(labels, (std::set<float>{0, 1, 2}));
  if (!kernels_device_available()) return;
  DeviceDataset d = upload(a.train);
  EXPECT_EQ(d.n, 200u);
  EXPECT_EQ(d.dim, 5u);
  EXPECT_EQ(d.classes, 3);
  EXPECT_EQ(d.x.to_host(), a.train.x);
  EXPECT_EQ(d.y.to_host(), a.train.y);
}

// evaluate_params: both sets' chunks side by side on the pool. The limits pick the first
// rows; the sums agree with one evaluate() call over the same rows (up to the order of
// the double additions) and, bit for bit, across pools of 1, 2 and 3 threads, where the
// chunks finish in different orders.
TEST(EvaluateParams, SumsTheFirstRowsOfEachSetIndependentlyOfTheThreadCount) {
  SyntheticSpec spec;
  spec.features = 12;
  spec.classes = 5;
  spec.train_samples = 5000;  // 3 chunks, the last short
  spec.test_samples = 2100;   // 2 chunks
  DataSplit host = make_synthetic(spec, 4);
  DeviceDataset train = upload(host.train), test = upload(host.test);
  auto model = make_dense({12, 16, 5}, DenseLoss::SoftmaxCrossEntropy);
  std::vector<float> w0;
  model->init_params(3, w0);
  DeviceArray<float> w;
  w.upload(w0);
  ExecContext ctx;
  for (size_t train_limit : {size_t(0), size_t(4100), size_t(100)}) {
    std::vector<EvalPair> got;
    for (int threads : {1, 2, 3}) {
      WorkerPool pool(threads, /*caller_computes=*/true);
      got.push_back(evaluate_params(*model, pool, ctx, w.data(), &train, train_limit, &test, 0));
    }
    const size_t n = train_limit ? train_limit : 5000;
    EXPECT_EQ(got[0].train.count, n);
    EXPECT_EQ(got[0].test.count, 2100u);
    EvalSums whole = model->evaluate(ctx, w.data(), &train, 0, n);
    EXPECT_NEAR(got[0].train.loss_sum, whole.loss_sum, 1e-9 * std::fabs(whole.loss_sum));
    EXPECT_EQ(got[0].train.correct, whole.correct);
    EvalSums whole_test = model->evaluate(ctx, w.data(), &test, 0, 2100);
    EXPECT_NEAR(got[0].test.loss_sum, whole_test.loss_sum, 1e-9 * std::fabs(whole_test.loss_sum));
    for (size_t t = 1; t < got.size(); ++t) {
      EXPECT_EQ(got[t].train.loss_sum, got[0].train.loss_sum) << "limit " << train_limit;
      EXPECT_EQ(got[t].test.loss_sum, got[0].test.loss_sum) << "limit " << train_limit;
      EXPECT_EQ(got[t].train.correct, got[0].train.correct);
      EXPECT_EQ(got[t].test.correct, got[0].test.correct);
    }
  }
}

// ---------------------------------------------------------------------------------------
// ParameterStore

class ParameterStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels_device_available()) GTEST_SKIP() << "no device";
    ones_.upload(std::vector<float>(kN, 1.0f));
  }
  // version v+1 = version v + 1 (elementwise); records whether it ran in place
  bool add_one(ParameterStore& store) {
    bool in_place = false;
    store.update([&](float* out, const float* in) {
      in_place = out == in;
      ops::sgd_step(ctx_, out, in, ones_.data(), -1.0f, kN);
      ctx_.synchronize();
    });
    return in_place;
  }
  static std::vector<float> init() {
    std::vector<float> v(kN);
    std::iota(v.begin(), v.end(), 0.0f);
    return v;
  }
  static std::vector<float> plus(float k) {
    auto v = init();
    for (auto& x : v) x += k;
    return v;
  }
  static std::vector<float> contents(const Snapshot& s) { return s.params->to_host(); }

  static constexpr size_t kN = 1000;
  ExecContext ctx_;
  DeviceArray<float> ones_;
};

TEST_F(ParameterStoreTest, UpdatesInPlaceWhenNobodyHoldsTheSnapshot) {
  ParameterStore store(init(), 0);
  EXPECT_EQ(store.size(), kN);
  EXPECT_EQ(store.version(), 0u);
  const float* p = store.current().data();
  for (int i = 1; i <= 5; ++i) {
    EXPECT_TRUE(add_one(store)) << "update " << i;
    EXPECT_EQ(store.version(), uint64_t(i));
  }
  EXPECT_EQ(store.buffers_allocated(), 1u);
  EXPECT_EQ(store.current().data(), p);
  EXPECT_EQ(contents(store.current()), plus(5));
  EXPECT_EQ(store.current().version, 5u);
}

TEST_F(ParameterStoreTest, HeldSnapshotIsNeverOverwritten) {
  ParameterStore store(init(), 0);
  Snapshot held = store.current();
  EXPECT_FALSE(add_one(store));
  EXPECT_EQ(store.buffers_allocated(), 2u);
  EXPECT_EQ(held.version, 0u);
  EXPECT_EQ(contents(held), init()) << "a reader's snapshot changed under it";
  EXPECT_EQ(contents(store.current()), plus(1));
  EXPECT_EQ(store.version(), 1u);

  held = Snapshot{};            // old version released: its buffer goes back to the pool
  EXPECT_TRUE(add_one(store));  // nobody holds version 1 -> in place
  EXPECT_EQ(store.buffers_allocated(), 2u);
  Snapshot a = store.current();  // version 2
  EXPECT_FALSE(add_one(store));  // reuses the pooled buffer
  EXPECT_EQ(store.buffers_allocated(), 2u);
  Snapshot b = store.current();  // version 3
  EXPECT_FALSE(add_one(store));  // a and b held: a third buffer
  EXPECT_EQ(store.buffers_allocated(), 3u);
  EXPECT_EQ(contents(a), plus(2));
  EXPECT_EQ(contents(b), plus(3));
  EXPECT_EQ(contents(store.current()), plus(4));
  EXPECT_EQ(a.version, 2u);
  EXPECT_EQ(b.version, 3u);
  EXPECT_EQ(store.version(), 4u);
}

TEST_F(ParameterStoreTest, SnapshotOutlivesTheStore) {
  Snapshot s;
  {
    ParameterStore store(init(), 1);
    add_one(store);
    s = store.current();
    add_one(store);
  }
  EXPECT_EQ(contents(s), plus(1));
}

TEST_F(ParameterStoreTest, LaggedReturnsOlderVersionsFromHistory) {
  const size_t keep = 3;
  ParameterStore store(init(), keep);
  for (uint64_t v = 0; v <= 8; ++v) {
    ASSERT_EQ(store.version(), v);
    for (uint64_t T = 0; T <= keep; ++T) {
      Snapshot s = store.lagged(T);
      uint64_t want = v >= T ? v - T : 0;
      EXPECT_EQ(s.version, want) << "v " << v << " T " << T;
      EXPECT_EQ(contents(s), plus(float(want))) << "v " << v << " T " << T;
    }
    // asking for more lag than the store keeps is a logic error (at version 0 the answer,
    // version 0, is still right)
    if (v > 0) {
      EXPECT_THROW(store.lagged(keep + 1), std::logic_error);
    }
    EXPECT_FALSE(add_one(store)) << "with history kept, an update never overwrites";
  }
  // memory is bounded by the history, not by the number of updates
  EXPECT_LE(store.buffers_allocated(), keep + 2);
}

// ---------------------------------------------------------------------------------------
// WorkerPool

TEST(WorkerPoolTest, RunsTasksInParallelOnSeparateContexts) {
  within_seconds(30, "parallel tasks", [] {
    WorkerPool pool(2);
    EXPECT_EQ(pool.threads(), 2);
    // Each task waits until both have started: only possible if they run concurrently.
    std::atomic<int> started{0};
    std::atomic<bool> met[2] = {false, false};
    ExecContext* ctx[2] = {nullptr, nullptr};
    std::vector<WorkerPool::Task> tasks;
    for (int i = 0; i < 2; ++i)
      tasks.push_back([&, i](ExecContext& c) {
        ctx[i] = &c;
        started++;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        met[i] = started.load() == 2;
      });
    pool.run_all(std::move(tasks));
    EXPECT_TRUE(met[0] && met[1]) << "the two tasks never ran at the same time";
    EXPECT_NE(ctx[0], ctx[1]) << "concurrent tasks must not share an ExecContext";
  });
}

TEST(WorkerPoolTest, WaitRethrowsAndThePoolKeepsWorking) {
  within_seconds(30, "exception handling", [] {
    WorkerPool pool(2);
    auto bad = pool.submit([](ExecContext&) { throw std::runtime_error("boom"); });
    EXPECT_THROW_WITH(pool.wait(bad), std::runtime_error, "boom");
    EXPECT_THROW(pool.wait(bad), std::runtime_error) << "the error stays with the ticket";
    std::atomic<int> ran{0};
    auto good = pool.submit([&](ExecContext&) { ran++; });
    pool.wait(good);
    EXPECT_EQ(ran.load(), 1);

    // run_all: every task runs; the first error by index is rethrown
    std::vector<WorkerPool::Task> tasks;
    for (int i = 0; i < 20; ++i)
      tasks.push_back([&, i](ExecContext&) {
        if (i == 7 || i == 3) throw std::runtime_error("task " + std::to_string(i));
        if (i == 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // finishes late
        ran++;
      });
    EXPECT_THROW_WITH(pool.run_all(std::move(tasks)), std::runtime_error, "task 3");
    EXPECT_EQ(ran.load(), 1 + 18);
    pool.run_all({[&](ExecContext&) { ran++; }});
    EXPECT_EQ(ran.load(), 20);
  });
}

TEST(WorkerPoolTest, RunAllReturnsAfterAllTasks) {
  within_seconds(30, "run_all", [] {
    WorkerPool pool(2);
    const int n = 200;
    std::vector<int> done(n, 0);
    std::vector<WorkerPool::Task> tasks;
    for (int i = 0; i < n; ++i)
      tasks.push_back([&done, i](ExecContext&) {
        if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        done[i] = 1;
      });
    pool.run_all(std::move(tasks));
    EXPECT_EQ(std::accumulate(done.begin(), done.end(), 0), n);
    pool.run_all({});  // nothing to do
  });
}

TEST(WorkerPoolTest, OneThreadManyTasksNoDeadlock) {
  within_seconds(30, "one-thread pool", [] {
    WorkerPool pool(1);
    std::vector<WorkerPool::Ticket> tickets;
    std::atomic<long> sum{0};
    for (int i = 0; i < 2000; ++i) tickets.push_back(pool.submit([&, i](ExecContext&) { sum += i; }));
    for (auto it = tickets.rbegin(); it != tickets.rend(); ++it) pool.wait(*it);  // out of order
    EXPECT_EQ(sum.load(), 1999L * 2000 / 2);
    std::vector<WorkerPool::Task> tasks(500, [&](ExecContext&) { sum += 1; });
    pool.run_all(std::move(tasks));
    EXPECT_EQ(sum.load(), 1999L * 2000 / 2 + 500);
  });
  // Destroying a pool with queued work drains it without hanging.
  within_seconds(30, "pool shutdown", [] {
    std::atomic<int> ran{0};
    {
      WorkerPool pool(1);
      for (int i = 0; i < 100; ++i) pool.submit([&](ExecContext&) { ran++; });
    }
    EXPECT_EQ(ran.load(), 100);
  });
  EXPECT_THROW(WorkerPool(0), std::invalid_argument);
}

// A waiter does not sleep while its job sits in the queue: with the only pool thread
// stuck on another job, wait() runs the job on the calling thread.
TEST(WorkerPoolTest, WaiterRunsAQueuedJobItself) {
  within_seconds(30, "waiter helps", [] {
    WorkerPool pool(1);
    std::atomic<bool> release{false}, blocker_started{false};
    auto blocker = pool.submit([&](ExecContext&) {
      blocker_started = true;
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    while (!blocker_started.load()) std::this_thread::yield();
    std::thread::id ran_on;
    auto job = pool.submit([&](ExecContext&) { ran_on = std::this_thread::get_id(); });
    pool.wait(job);  // would deadlock if it only slept: the pool thread is busy until release
    EXPECT_EQ(ran_on, std::this_thread::get_id());
    release = true;
    pool.wait(blocker);
  });
}

// Jobs measured far below a microsecond run inside submit() on the calling thread (a
// hand-off would cost more); results and errors are the same as from a pool thread.
TEST(WorkerPoolTest, TinyJobsRunInlineWithTheSameResultsAndErrors) {
  within_seconds(30, "tiny jobs", [] {
    WorkerPool pool(2);
    std::vector<int> out(4000, 0);
    std::vector<WorkerPool::Ticket> tickets;
    std::atomic<int> on_caller{0};
    const auto caller = std::this_thread::get_id();
    for (int i = 0; i < 4000; ++i) {
      tickets.push_back(pool.submit([&, i](ExecContext&) {
        out[i] = i * 3;
        if (std::this_thread::get_id() == caller) on_caller++;
      }));
      if (i % 8 == 7) pool.wait(tickets.back());
    }
    for (auto& t : tickets) pool.wait(t);
    for (int i = 0; i < 4000; ++i) ASSERT_EQ(out[i], i * 3);
    EXPECT_GE(pool.recent_job_ns(), 0);
    EXPECT_GT(on_caller.load(), 0) << "no tiny job ran inline (mean job " << pool.recent_job_ns() << " ns)";
    // An error of a job run inline stays with its ticket, like any other.
    auto bad = pool.submit([](ExecContext&) { throw std::runtime_error("tiny boom"); });
    EXPECT_THROW_WITH(pool.wait(bad), std::runtime_error, "tiny boom");
    EXPECT_THROW(pool.wait(bad), std::runtime_error);
  });
}

// Callables too big for a job's inline storage are boxed; tickets may outlive the pool.
TEST(WorkerPoolTest, BigCallablesAndTicketsThatOutliveThePool) {
  within_seconds(30, "big callables", [] {
    WorkerPool::Ticket survivor;
    std::array<double, 64> big{};  // 512 bytes captured by value
    for (size_t i = 0; i < big.size(); ++i) big[i] = double(i);
    double sum = 0;
    {
      WorkerPool pool(2);
      auto t = pool.submit([big, &sum](ExecContext&) {
        for (double v : big) sum += v;
      });
      pool.wait(t);
      survivor = t;
      WorkerPool::Ticket copy = survivor;  // copies share the job
      EXPECT_TRUE(bool(copy));
    }
    EXPECT_EQ(sum, 63.0 * 64 / 2);
    survivor.reset();  // after the pool is gone: must not touch freed memory
    EXPECT_FALSE(bool(survivor));
  });
}

// caller_computes: the thread that waits is one of the pool's threads. With one thread
// the pool starts none, and every job runs on the caller, in wait(), in run_all() or
// when the pool is destroyed; nothing is lost and nothing hangs.
TEST(WorkerPoolTest, CallerComputesWithOneThreadRunsEverythingOnTheCaller) {
  within_seconds(30, "caller-computes pool", [] {
    const auto caller = std::this_thread::get_id();
    std::atomic<int> elsewhere{0};
    std::atomic<long> sum{0};
    {
      WorkerPool pool(1, /*caller_computes=*/true);
      EXPECT_EQ(pool.threads(), 1);
      EXPECT_EQ(pool.parallelism(), 1);
      EXPECT_TRUE(pool.callers_help());
      std::vector<WorkerPool::Ticket> tickets;
      for (int i = 0; i < 300; ++i)
        tickets.push_back(pool.submit([&, i](ExecContext&) {
          if (std::this_thread::get_id() != caller) elsewhere++;
          std::this_thread::sleep_for(std::chrono::microseconds(i % 10 == 0 ? 50 : 0));
          sum += i;
        }));
      for (auto it = tickets.rbegin(); it != tickets.rend(); ++it) pool.wait(*it);  // out of order
      EXPECT_EQ(sum.load(), 299L * 300 / 2);
      auto bad = pool.submit([](ExecContext&) { throw std::runtime_error("caller boom"); });
      EXPECT_THROW_WITH(pool.wait(bad), std::runtime_error, "caller boom");
      std::vector<WorkerPool::Task> tasks(50, [&](ExecContext&) { sum += 1; });
      pool.run_all(std::move(tasks));
      EXPECT_EQ(sum.load(), 299L * 300 / 2 + 50);
      for (int i = 0; i < 20; ++i) pool.submit([&](ExecContext&) { sum += 1000; });  // never waited for
    }
    EXPECT_EQ(sum.load(), 299L * 300 / 2 + 50 + 20000) << "the destructor must run what is still queued";
    EXPECT_EQ(elsewhere.load(), 0) << "a one-thread caller_computes pool must not start a thread";
  });
}

// While the job it waits for runs on a pool thread, the caller runs queued jobs from the
// head instead of sleeping. The blocker below finishes only once the two jobs queued
// behind it have run, which only the caller can do (the pool's one thread is the
// blocker's).
TEST(WorkerPoolTest, CallerComputesRunsQueuedJobsWhileItsJobRunsElsewhere) {
  within_seconds(30, "caller helps from the head", [] {
    WorkerPool pool(2, /*caller_computes=*/true);
    EXPECT_EQ(pool.threads(), 2);
    const auto caller = std::this_thread::get_id();
    std::atomic<bool> blocker_started{false};
    std::atomic<int> done{0}, on_caller{0};
    bool met = false;
    auto blocker = pool.submit([&](ExecContext&) {
      blocker_started = true;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (done.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      met = done.load() == 2;
    });
    while (!blocker_started.load()) std::this_thread::yield();
    for (int i = 0; i < 2; ++i)
      pool.submit([&](ExecContext&) {
        if (std::this_thread::get_id() == caller) on_caller++;
        done++;
      });
    pool.wait(blocker);
    EXPECT_TRUE(met) << "the caller slept instead of running the queued jobs";
    EXPECT_EQ(on_caller.load(), 2);
  });
}

// ---------------------------------------------------------------------------------------
// LrSchedule

TEST(LrScheduleTest, Constant) {
  LrScheduleSpec s;
  s.lr = 0.2;
  s.scale = 3;
  LrSchedule lr(s);
  EXPECT_DOUBLE_EQ(lr.at(0), 0.6);
  EXPECT_DOUBLE_EQ(lr.at(123.4), 0.6);
  s.type = "linear";
  EXPECT_THROW_WITH(LrSchedule{s}, std::invalid_argument, "linear");
}

TEST(LrScheduleTest, StepMultipliesByGammaAtEachMilestone) {
  LrScheduleSpec s;
  s.type = "step";
  s.lr = 0.2;
  s.milestones = {3, 1};  // given unsorted
  s.gamma = 0.5;
  LrSchedule lr(s);
  EXPECT_DOUBLE_EQ(lr.at(0), 0.2);
  EXPECT_DOUBLE_EQ(lr.at(0.999), 0.2);
  EXPECT_DOUBLE_EQ(lr.at(1), 0.1);
  EXPECT_DOUBLE_EQ(lr.at(2.9), 0.1);
  EXPECT_DOUBLE_EQ(lr.at(3), 0.05);
  EXPECT_DOUBLE_EQ(lr.at(1000), 0.05);
}

TEST(LrScheduleTest, CosineEndpointsAndMidpoint) {
  LrScheduleSpec s;
  s.type = "cosine";
  s.lr = 0.1;
  s.min_lr = 0.001;
  s.total_epochs = 10;
  LrSchedule lr(s);
  EXPECT_DOUBLE_EQ(lr.at(0), 0.1);
  EXPECT_NEAR(lr.at(5), (0.1 + 0.001) / 2, 1e-15);
  EXPECT_NEAR(lr.at(10), 0.001, 1e-15);
  EXPECT_NEAR(lr.at(25), 0.001, 1e-15) << "stays at min_lr after the end";
  EXPECT_NEAR(lr.at(2.5), 0.001 + 0.5 * 0.099 * (1 + std::cos(M_PI / 4)), 1e-15);
  for (double e = 0; e < 10; e += 0.5) EXPECT_GE(lr.at(e), lr.at(e + 0.5)) << "decreasing";
  // with warm-up the decay spans [warmup_epochs, total_epochs]
  s.warmup_epochs = 2;
  LrSchedule w(s);
  EXPECT_NEAR(w.at(2), 0.1, 1e-15);
  EXPECT_NEAR(w.at(6), (0.1 + 0.001) / 2, 1e-15);
  EXPECT_NEAR(w.at(10), 0.001, 1e-15);
}

TEST(LrScheduleTest, WarmupRampsLinearlyToTheScaledRate) {
  LrScheduleSpec s;
  s.lr = 0.1;
  s.scale = 4;
  s.warmup_epochs = 5;
  LrSchedule lr(s);
  EXPECT_DOUBLE_EQ(lr.at(0), 0.1) << "warmup_from defaults to the unscaled lr";
  EXPECT_NEAR(lr.at(2.5), 0.25, 1e-15);
  EXPECT_NEAR(lr.at(4.999), 0.4 - 0.3 * 0.001 / 5, 1e-12);
  EXPECT_DOUBLE_EQ(lr.at(5), 0.4);
  EXPECT_DOUBLE_EQ(lr.at(50), 0.4);
  s.warmup_from = 0;
  LrSchedule from_zero(s);
  EXPECT_DOUBLE_EQ(from_zero.at(0), 0.0);
  EXPECT_NEAR(from_zero.at(2.5), 0.2, 1e-15);
  // step milestones apply to the peak after warm-up
  s.type = "step";
  s.milestones = {10};
  s.gamma = 0.1;
  LrSchedule step(s);
  EXPECT_NEAR(step.at(2.5), 0.2, 1e-15);
  EXPECT_DOUBLE_EQ(step.at(9), 0.4);
  EXPECT_NEAR(step.at(10), 0.04, 1e-15);
}

// ---------------------------------------------------------------------------------------
// write_file_atomic / make_directories

TEST(AtomicFileTest, WritesAndReplacesWholeFiles) {
  TempDir dir;
  const std::string p = dir.file("out.json");
  write_file_atomic(p, "first");
  EXPECT_EQ(read_text(p), "first");
  std::string big(1 << 20, 'x');
  big[12345] = '\0';  // binary-safe
  write_file_atomic(p, big);
  EXPECT_EQ(read_text(p), big);
  write_file_atomic(p, "");
  EXPECT_EQ(read_text(p), "");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}), 1)
      << "temporary files left behind";
}

TEST(AtomicFileTest, FailuresThrowIoErrorNamingThePath) {
  TempDir dir;
  const std::string nowhere = dir.file("no/such/folder/metrics.csv");
  EXPECT_THROW_WITH(write_file_atomic(nowhere, "x"), IoError, nowhere);
  // the target is a folder: rename fails; nothing is left behind
  fs::create_directory(dir.file("taken"));
  EXPECT_THROW_WITH(write_file_atomic(dir.file("taken"), "x"), IoError, dir.file("taken"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}), 1)
      << "temporary file left behind after a failed rename";
}

TEST(AtomicFileTest, ReadOnlyFolder) {
  TempDir dir;
  const std::string ro = dir.file("ro");
  fs::create_directory(ro);
  write_file_atomic(ro + "/keep.txt", "old");
  ASSERT_EQ(::chmod(ro.c_str(), 0555), 0);
  if (::access(ro.c_str(), W_OK) == 0) GTEST_SKIP() << "running as root: a read-only folder is writable";
  EXPECT_THROW_WITH(write_file_atomic(ro + "/keep.txt", "new"), IoError, ro + "/keep.txt");
  EXPECT_EQ(read_text(ro + "/keep.txt"), "old") << "the previous file must survive a failed write";
  EXPECT_THROW_WITH(make_directories(ro + "/sub"), IoError, ro + "/sub");
}

TEST(AtomicFileTest, MakeDirectories) {
  TempDir dir;
  const std::string deep = dir.file("a/b/c");
  make_directories(deep);
  EXPECT_TRUE(fs::is_directory(deep));
  make_directories(deep);  // exists already: fine
  write_text(dir.file("file"), "x");
  EXPECT_THROW_WITH(make_directories(dir.file("file/sub")), IoError, dir.file("file/sub"));
}

}  // namespace
}  // namespace asgd
