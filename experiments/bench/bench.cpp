// experiments/bench/bench.cpp — `asgdsim bench` (see bench.h). Each workload is a config
// validated by resolve_experiment and bound into RunSettings while validating,
// exactly as `asgdsim run` does; the simulated side then runs Simulation + engine on a
// WorkerPool without writing run folders (files are not what is measured), and the
// bare side calls the same kernels directly on as many threads. Data loading, model
// construction and thread start-up are outside both timings.
#include "experiments/bench/bench.h"
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include "engines/engine_registry.h"
#include "experiments/run/calibration.h"
#include "experiments/config/config.h"
#include "experiments/run/run_parts.h"
#include "experiments/run/runner.h"
#include "kernels/ops.h"
#include "sim/data/dataset.h"
#include "sim/timing/distribution.h"
#include "sim/core/parameter_store.h"
#include "sim/data/sample_stream.h"
#include "sim/core/simulation.h"

namespace asgd {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU seconds (user + system) of every thread of the process so far.
double process_cpu_seconds() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int default_threads(int threads) {
  return threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
}

// Evaluation only at the start and the end of a run, on few rows: the workloads measure
// the training loop; workload e measures evaluation on its own.
json minimal_eval() { return json{{"every", 1e9}, {"unit", "epochs"}, {"train_samples", 256}, {"test_samples", 256}}; }

// ---- the two sides ----

struct Problem {
  const Model* model = nullptr;
  const DeviceDataset* train = nullptr;  // null: the model reads no data
  const DeviceDataset* test = nullptr;
};

struct SimRun {
  double seconds = 0;
  RunOutcome outcome;
  size_t evaluations = 0;  // metrics rows: evaluations of the model of record
};

// One simulated run of the (single-engine) experiment `user`, as `asgdsim run` would run
// it, minus the run folder.
SimRun time_simulation(const json& user, const Problem& p, WorkerPool& pool) {
  Experiment exp = resolve_experiment(user, "bench", ".");
  if (exp.runs.size() != 1) throw std::logic_error("bench: a workload must expand to one run");
  const json& c = exp.runs[0].config;
  RunSettings settings = exp.runs[0].settings;
  ComputeTimeModel compute = build_compute_model(settings, ".");
  Recorder recorder(false);
  std::unique_ptr<Engine> engine = make_engine(c["engine"]);
  SimRun r;
  auto t0 = Clock::now();
  {
    Simulation sim(settings, *p.model, p.train, p.test, pool, compute, recorder);
    r.outcome = sim.run(*engine);
  }
  r.seconds = seconds_since(t0);
  r.evaluations = recorder.rows().size();
  // (a bench times the run: a workload made to exercise the event core need not train, so
  // "stalled" is fine; "diverged" or "interrupted" are not)
  if (r.outcome.status != "completed" && r.outcome.status != "stalled")
    throw std::runtime_error("bench: simulated run ended " + r.outcome.status + " (" + r.outcome.note + ")");
  return r;
}

// The bare loop's SGD step of w by g (model.num_params()): over the whole vector, or for a
// model with a row table (Model::row_layout) over `rows` (g's touched rows) and the dense
// part, as the server steps (ServerUpdate).
void bare_sgd_step(ExecContext& ctx, const Model& model, const std::vector<int32_t>& rows, float* w, const float* g,
                   float lr) {
  const size_t n = model.num_params();
  const RowLayout layout = model.row_layout();
  if (layout.rows == 0) {
    ops::sgd_step(ctx, w, w, g, lr, n);
    return;
  }
  const size_t table = layout.rows * layout.width;
  ops::sgd_step(ctx, ops::Rows{rows.data(), rows.size(), layout.width}, w, w, g, lr);
  ops::sgd_step(ctx, w + table, w + table, g + table, lr, n - table);
}

// The bare limit: `gradients` loss+gradient evaluations and `updates` SGD steps split over
// `threads` threads; each thread owns an ExecContext, its parameters and gradient, and
// calls Model::loss_grad and ops::sgd_step in a loop (updates spread evenly among the
// gradients). Minibatches are slices of a SampleStream, as in a run. With jobs > 1 a
// thread computes `jobs` gradients (on its parameters, into as many buffers) per
// Model::loss_grad_batch call, as a run with batched_gradients = jobs does. A sparse
// model's steps (Model::row_layout) touch only the rows of the gradient's minibatch
// (Model::touched_rows, computed for each gradient, as a run does) and the dense part, as
// the server's do (ServerUpdate). Returns the wall seconds from the moment every thread
// is ready until the last one is done.
double time_bare(const Problem& p, size_t train_size, size_t batch, uint64_t gradients, uint64_t updates, int threads,
                 uint64_t seed, int jobs = 1) {
  const size_t n = p.model->num_params();
  std::vector<float> init;
  p.model->init_params(seed, init);
  std::mutex m;
  std::condition_variable cv;
  int ready = 0;
  bool go = false;
  std::atomic<double> sink{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      kernels_use_one_thread_here();
      uint64_t my_grads = gradients / threads + (uint64_t(t) < gradients % threads ? 1 : 0);
      uint64_t my_updates = updates / threads + (uint64_t(t) < updates % threads ? 1 : 0);
      // Minibatch ids: up to 1024 batches of the thread's own stream, cycled.
      size_t batches = size_t(std::min<uint64_t>(std::max<uint64_t>(my_grads, 1), 1024));
      GradientLoop loop(*p.model, p.train, init, train_size, batch, seed + 1000 + t, batches);
      ExecContext& ctx = loop.ctx;
      DeviceArray<float>&w = loop.w, &g = loop.g;
      const std::vector<int32_t>& ids = loop.ids;
      const float lr = 1e-4f;  // small: the parameters stay finite whatever the model
      double loss = loop.gradient(0, {seed, uint32_t(t), 0});
      {
        std::unique_lock<std::mutex> lock(m);
        ++ready;
        cv.notify_all();
        cv.wait(lock, [&] { return go; });
      }
      uint64_t done_updates = 0;
      const RowLayout layout = p.model->row_layout();
      std::vector<int32_t> rows;  // a sparse model's: those of g's minibatch
      auto step = [&] { bare_sgd_step(ctx, *p.model, rows, w.data(), g.data(), lr); };
      if (layout.rows > 0) p.model->touched_rows(p.train, ids.data(), batch, rows);
      // jobs gradients per step of the loop (one loss_grad call when jobs is 1), into g and
      // jobs - 1 more buffers; the updates step with g, the group's first gradient
      const uint64_t group = uint64_t(std::max(jobs, 1));
      std::vector<DeviceArray<float>> more(size_t(group - 1));
      for (auto& buf : more) buf.resize_discard(n);
      std::vector<GradRequest> reqs(static_cast<size_t>(group));
      for (uint64_t k = 0; k < my_grads; k += group) {
        const size_t count = size_t(std::min(group, my_grads - k));
        if (group == 1) {
          loss += loop.gradient(k, {seed, uint32_t(t), uint32_t(k)});
        } else {
          for (size_t j = 0; j < count; ++j) {
            reqs[j].w = w.data();
            reqs[j].ids = ids.data() + ((k + j) % batches) * batch;
            reqs[j].m = batch;
            reqs[j].noise = {seed, uint32_t(t), uint32_t(k + j)};
            reqs[j].grad = j == 0 ? g.data() : more[j - 1].data();
          }
          p.model->loss_grad_batch(ctx, p.train, reqs.data(), count);
          for (size_t j = 0; j < count; ++j) loss += reqs[j].loss;
        }
        // updates spread evenly: after gradient i, the total applied is (i+1)*U/G
        if (layout.rows > 0) p.model->touched_rows(p.train, ids.data() + (k % batches) * batch, batch, rows);
        const uint64_t due = (k + count) * my_updates / my_grads;
        for (; done_updates < due; ++done_updates) step();
      }
      for (; done_updates < my_updates; ++done_updates) step();
      ctx.synchronize();
      sink.store(sink.load() + loss);
    });
  }
  Clock::time_point t0;
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return ready == threads; });
    t0 = Clock::now();
    go = true;
  }
  cv.notify_all();
  for (auto& th : pool) th.join();
  double s = seconds_since(t0);
  if (!std::isfinite(sink.load())) throw std::runtime_error("bench: bare loop produced a non-finite loss");
  return s;
}

// Interleaved, repeated (sim, bare) pairs; the order alternates so that a slow phase of a
// shared machine hits both sides alike. The ratio is the median of the pairs' ratios.
template <class SimFn, class BareFn>
void measure_pairs(int repeats, SimFn&& sim, BareFn&& bare, BenchResult& r) {
  std::vector<double> ts, tb, cs, cb;
  auto timed = [](auto&& f, std::vector<double>& wall, std::vector<double>& cpu) {
    double c0 = process_cpu_seconds();
    wall.push_back(f());
    cpu.push_back(process_cpu_seconds() - c0);
  };
  for (int i = 0; i < repeats; ++i) {
    if (i % 2 == 0) {
      timed(sim, ts, cs);
      timed(bare, tb, cb);
    } else {
      timed(bare, tb, cb);
      timed(sim, ts, cs);
    }
    r.ratios.push_back(tb.back() / ts.back());
  }
  r.sim_seconds = median(ts);
  r.bare_seconds = median(tb);
  r.sim_cpu_seconds = median(cs);
  r.bare_cpu_seconds = median(cb);
  r.ratio = median(r.ratios);
  r.cpu_ratio = r.bare_cpu_seconds / r.sim_cpu_seconds;
}

void set_rates(BenchResult& r, bool per_update) {
  double count = double(per_update ? r.updates : r.gradients);
  r.rate_unit = per_update ? "updates/s" : "gradients/s";
  r.sim_rate = count / r.sim_seconds;
  r.bare_rate = count / r.bare_seconds;
}

// ---- workloads ----

// A model on Fashion-MNIST (the first train_limit training images, 5,000 test images),
// built from `model` (a config's "model" section) exactly as `asgdsim run` builds it.
struct MnistFixture {
  LoadedData data;
  json model_config;
  std::string description;  // e.g. "mlp 784-128-10, batch 32, fashion_mnist"
  std::unique_ptr<Model> model;
};

json mnist_config(const json& model, const std::string& engine, int workers, uint64_t gradients, const std::string& dir,
                  size_t train_limit, int batched_gradients) {
  return json{
      {"name", "bench"},
      {"batched_gradients", batched_gradients},
      {"seed", 1},
      {"model", model},
      {"data", {{"type", "fashion_mnist"}, {"path", dir}, {"train_limit", train_limit}, {"test_limit", 5000}}},
      {"train", {{"batch_size", 32}, {"lr", 0.05}}},
      {"stop", {{"gradients", gradients}}},
      {"eval", minimal_eval()},
      {"cluster", {{"workers", workers}, {"compute", {{"dist", "exponential"}, {"mean", 0.01}, {"per", "step"}}}}},
      {"engines", json::array({json{{"type", engine}}})}};
}

const json kMlpModel = {{"type", "mlp"}, {"hidden", {128}}};

// h: a population of `clients` clients (lognormal speeds, sigma 0.7), FedBuff with k 10 and
// 5 local steps a client job: the bare side computes the gradients and a local SGD step each.
json population_patch(int clients) {
  return {{"clients", {{"count", clients}, {"speeds", {{"dist", "lognormal"}, {"mean", 1.0}, {"sigma", 0.7}}}}},
          {"engines", json::array({json{{"type", "fedbuff"}, {"k", 10}, {"local_steps", 5}}})}};
}
const json kCnnModel = {{"type", "cnn"}, {"arch", "lenet5"}};
const char* const kCnnDescription =
    "cnn lenet5 (28x28x1: conv 6 5x5, pool 2, conv 16 5x5, pool 2, 120, 84, 10), batch 32, fashion_mnist";

std::unique_ptr<MnistFixture> load_mnist(const std::string& dir, size_t train_limit, const json& model,
                                         const std::string& description) {
  auto f = std::make_unique<MnistFixture>();
  f->data.host = load_fashion_mnist(dir, train_limit, 5000);
  f->data.train = upload(f->data.host.train);
  f->data.test = upload(f->data.host.test);
  f->model_config = model;
  f->description = description;
  Experiment exp = resolve_experiment(mnist_config(model, "async", 1, 1, dir, train_limit, 1), "bench", ".");
  f->model = build_model(*exp.runs.front().bound_model, f->data);
  return f;
}

std::unique_ptr<MnistFixture> load_mlp(const std::string& dir, size_t train_limit) {
  return load_mnist(dir, train_limit, kMlpModel, "mlp 784-128-10, batch 32, fashion_mnist");
}

// a, b, f: `engine` with `workers` workers training f's model; the bare side computes as
// many gradients and SGD steps with the same kernels.
// `patch` (a JSON merge patch over the config: a population's clients and engine keys) is
// applied to the timed and the warm-up runs alike.
BenchResult model_workload(const MnistFixture& f, const std::string& workload, const std::string& name,
                           const std::string& engine, int workers, uint64_t gradients, int threads, int repeats,
                           const std::string& dir, size_t train_limit, int batched,
                           const json& patch = json::object()) {
  BenchResult r;
  r.workload = workload;
  r.name = name + "_" + engine;
  r.engine = engine;
  r.model = f.description;
  r.workers = workers;
  r.threads = threads;
  r.flops_per_gradient = f.model->flops_per_sample() * 32;
  Problem p{f.model.get(), &f.data.train, &f.data.test};
  WorkerPool pool(threads, /*caller_computes=*/true);  // the simulating thread is one of them
  r.batched_gradients = batched;
  json cfg = mnist_config(f.model_config, engine, workers, gradients, dir, train_limit, batched);
  // Warm-up (workspaces, page faults, caches): a short run of each side.
  json warm = mnist_config(f.model_config, engine, workers, std::max<uint64_t>(gradients / 10, 4 * workers), dir,
                           train_limit, batched);
  cfg.merge_patch(patch);
  warm.merge_patch(patch);
  time_simulation(warm, p, pool);
  SimRun last;
  auto sim = [&] {
    last = time_simulation(cfg, p, pool);
    return last.seconds;
  };
  // The bare side does what the run did: its gradients, and one SGD step per update of
  // a model (async: every gradient; sync: one per iteration; easgd: every local step).
  uint64_t counted_grads = 0, counted_updates = 0;
  const size_t n = f.data.train.n;
  auto bare = [&] { return time_bare(p, n, 32, counted_grads, counted_updates, threads, 1, batched); };
  // One simulated run first fixes the counts.
  sim();
  counted_grads = last.outcome.gradients;
  // easgd and a population's clients take a local SGD step per gradient
  const bool local_steps = engine == "easgd" || last.outcome.clients > 0;
  counted_updates = local_steps ? last.outcome.gradients : last.outcome.updates;
  time_bare(p, n, 32, std::min<uint64_t>(counted_grads, 4 * threads * batched), 0, threads, 1, batched);  // warm-up
  r.launches = count_job_launches(*f.model, &f.data.train, n, 32, size_t(std::max(batched, 1)));
  measure_pairs(repeats, sim, bare, r);
  r.gradients = counted_grads;
  r.updates = counted_updates;
  set_rates(r, engine == "async");
  if (local_steps) r.note = "updates = local SGD steps (one per gradient)";
  if (last.outcome.clients > 0)
    r.note += "; " + std::to_string(last.outcome.client_draws) + " client jobs of " +
              std::to_string(last.outcome.clients) + " clients";
  if (engine == "sync") r.note = "one update per iteration of " + std::to_string(workers) + " gradients";
  if (batched > 1) r.note += std::string(r.note.empty() ? "" : "; ") + "batched_gradients " + std::to_string(batched);
  return r;
}

json quadratic_config(size_t dim, int workers, uint64_t updates, double lr) {
  return json{
      {"name", "bench"},
      {"seed", 1},
      {"model", {{"type", "quadratic"}, {"dim", dim}, {"curvature", 1.0}, {"noise", 0.0}, {"init", 1.0}}},
      {"data", {{"type", "none"}}},
      // The quadratic reads no data: the batch only sets the epoch length, so one
      // id per gradient keeps the sample stream out of the event core's cost.
      {"train", {{"batch_size", 1}, {"lr", lr}}},
      {"stop", {{"updates", updates}}},
      {"eval", minimal_eval()},
      {"cluster", {{"workers", workers}, {"compute", {{"dist", "exponential"}, {"mean", 0.01}, {"per", "step"}}}}},
      {"engines", json::array({json{{"type", "async"}}})}};
}

std::unique_ptr<Model> quadratic_model(size_t dim) { return make_quadratic(std::vector<float>(dim, 1.0f), 0.0f, 1.0f); }

// c: the event core. A 1-dim quadratic's gradient is nearly free, so this is scheduling,
// version handling, bookkeeping and the pool's hand-offs.
BenchResult event_core_workload(int workers, uint64_t updates, int threads, int repeats) {
  BenchResult r;
  r.workload = "c";
  r.name = "event_core";
  r.engine = "async";
  r.model = "quadratic dim 1";
  r.workers = workers;
  r.threads = threads;
  auto model = quadratic_model(1);
  Problem p{model.get(), nullptr, nullptr};
  WorkerPool pool(threads, /*caller_computes=*/true);  // the simulating thread is one of them
  // lr * staleness (~workers) << 1 keeps stale SGD stable
  json cfg = quadratic_config(1, workers, updates, 1e-6);
  time_simulation(quadratic_config(1, workers, std::max<uint64_t>(updates / 10, workers), 1e-6), p, pool);
  SimRun last;
  auto sim = [&] {
    last = time_simulation(cfg, p, pool);
    return last.seconds;
  };
  sim();
  uint64_t g = last.outcome.gradients, u = last.outcome.updates;
  auto bare = [&] { return time_bare(p, 1024, 1, g, u, threads, 1); };
  measure_pairs(repeats, sim, bare, r);
  r.gradients = g;
  r.updates = u;
  set_rates(r, true);
  return r;
}

uint64_t rusage_maxrss_kb(int who) {
  struct rusage ru;
  getrusage(who, &ru);
  return uint64_t(ru.ru_maxrss);
}

double current_rss_mb() {
  std::ifstream in("/proc/self/statm");
  double pages_total = 0, pages_rss = 0;
  if (!(in >> pages_total >> pages_rss)) return -1;
  return pages_rss * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// d: scale. Every in-flight gradient holds the version it read, so memory is bounded by
// the distinct versions in flight (at most workers + 1) plus one gradient per job.
BenchResult scale_workload(int workers, size_t dim, uint64_t updates, int threads) {
  BenchResult r;
  r.workload = "d";
  r.name = "scale";
  r.engine = "async";
  r.model = "quadratic dim " + std::to_string(dim);
  r.workers = workers;
  r.threads = threads;
  auto model = quadratic_model(dim);
  Problem p{model.get(), nullptr, nullptr};
  double start_rss = current_rss_mb();
  uint64_t buffers0 = BufferPool::total_allocated();
  SimRun run;
  double c0 = process_cpu_seconds();
  {
    WorkerPool pool(threads, /*caller_computes=*/true);  // the simulating thread is one of them
    run = time_simulation(quadratic_config(dim, workers, updates, 1e-7), p, pool);
  }
  r.sim_cpu_seconds = process_cpu_seconds() - c0;
  r.param_buffers = BufferPool::total_allocated() - buffers0;
  r.sim_seconds = run.seconds;
  r.gradients = run.outcome.gradients;
  r.updates = run.outcome.updates;
  c0 = process_cpu_seconds();
  r.bare_seconds = time_bare(p, 1024, 1, r.gradients, r.updates, threads, 1);
  r.bare_cpu_seconds = process_cpu_seconds() - c0;
  r.ratio = r.bare_seconds / r.sim_seconds;
  r.cpu_ratio = r.bare_cpu_seconds / r.sim_cpu_seconds;
  r.ratios = {r.ratio};
  set_rates(r, true);
  r.max_versions_in_flight = uint64_t(workers) + 1;
  std::ostringstream note;
  note << "one parameter or gradient vector is " << std::fixed << std::setprecision(1) << double(dim) * 4 / 1024
       << " KiB; RSS at start " << std::setprecision(0) << start_rss << " MiB";
  r.note = note.str();
  return r;
}

// Runs f in a child process so that its peak RSS (ru_maxrss of the child) is its own;
// the result comes back as JSON through a pipe. Falls back to running here.
BenchResult in_child(const std::function<BenchResult()>& f) {
  int fds[2];
  if (::pipe(fds) != 0) {
    BenchResult r = f();
    r.peak_rss_mb = double(rusage_maxrss_kb(RUSAGE_SELF)) / 1024.0;
    return r;
  }
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    json out;
    try {
      out = f().to_json();
    } catch (const std::exception& e) {
      out = json{{"error", e.what()}};
    }
    std::string s = out.dump();
    size_t off = 0;
    while (off < s.size()) {
      ssize_t k = ::write(fds[1], s.data() + off, s.size() - off);
      if (k <= 0) break;
      off += size_t(k);
    }
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    BenchResult r = f();
    r.peak_rss_mb = double(rusage_maxrss_kb(RUSAGE_SELF)) / 1024.0;
    return r;
  }
  std::string s;
  char buf[4096];
  for (ssize_t k; (k = ::read(fds[0], buf, sizeof(buf))) > 0;) s.append(buf, size_t(k));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  json j = s.empty() ? json{{"error", "the child process died"}} : json::parse(s);
  if (j.contains("error")) throw std::runtime_error("bench: " + j["error"].get<std::string>());
  BenchResult r;
  r.workload = j["workload"];
  r.name = j["name"];
  r.engine = j["engine"];
  r.model = j["model"];
  r.workers = j["workers"];
  r.threads = j["threads"];
  r.gradients = j["gradients"];
  r.updates = j["updates"];
  r.sim_seconds = j["sim_seconds"];
  r.bare_seconds = j["bare_seconds"];
  r.ratio = j["ratio"];
  r.ratios = j["ratios"].get<std::vector<double>>();
  r.rate_unit = j["rate_unit"];
  r.sim_rate = j["sim_rate"];
  r.sim_cpu_seconds = j["sim_cpu_seconds"];
  r.bare_cpu_seconds = j["bare_cpu_seconds"];
  r.cpu_ratio = j["cpu_ratio"];
  r.bare_rate = j["bare_rate"];
  r.param_buffers = j["param_buffers"];
  r.max_versions_in_flight = j["max_versions_in_flight"];
  r.note = j["note"];
  r.flops_per_gradient = j["flops_per_gradient"];
  r.peak_rss_mb = double(rusage_maxrss_kb(RUSAGE_CHILDREN)) / 1024.0;
  return r;
}

// e: what the default eval schedule (experiments/configs/default.json: every 0.5 epochs,
// 2000 train and 5000 test samples) costs in a run of the default experiment's async
// engine, as a share of its wall time: (t_default_eval - t_minimal_eval) / t_default_eval.
json default_eval() {
  return json{{"every", 0.5}, {"unit", "epochs"}, {"train_samples", 2000}, {"test_samples", 5000}};
}

BenchResult eval_workload(const MnistFixture& f, double epochs, int threads, int repeats, const std::string& dir) {
  BenchResult r;
  r.workload = "e";
  r.name = "eval_cost";
  r.engine = "async";
  r.model = "default.json: mlp 784-128-10, 8 workers";
  r.workers = 8;
  r.threads = threads;
  Problem p{f.model.get(), &f.data.train, &f.data.test};
  WorkerPool pool(threads, /*caller_computes=*/true);  // the simulating thread is one of them
  auto cfg = [&](const json& eval) {
    return json{
        {"name", "bench"},
        {"seed", 1},
        {"model", kMlpModel},
        {"data", {{"type", "fashion_mnist"}, {"path", dir}, {"test_limit", 5000}}},
        {"train", {{"batch_size", 32}, {"lr", 0.2}, {"lr_schedule", {{"type", "cosine"}, {"total_epochs", 10}}}}},
        {"stop", {{"epochs", epochs}}},
        {"eval", eval},
        {"cluster", {{"workers", 8}, {"compute", {{"dist", "exponential"}, {"mean", 0.01}, {"per", "step"}}}}},
        {"engines", json::array({json{{"type", "async"}}})}};
  };
  json with_eval = cfg(default_eval()), without = cfg(minimal_eval());
  SimRun last;
  json warm = cfg(minimal_eval());
  warm["stop"]["epochs"] = 0.05;
  time_simulation(warm, p, pool);  // warm-up
  // here "sim" is the run with the default schedule and "bare" the same run with minimal eval
  measure_pairs(
      repeats,
      [&] {
        last = time_simulation(with_eval, p, pool);
        return last.seconds;
      },
      [&] { return time_simulation(without, p, pool).seconds; }, r);
  r.gradients = last.outcome.gradients;
  r.updates = last.outcome.updates;
  set_rates(r, true);
  // Directly: one evaluation as Simulation::evaluate_row does it (evaluate_params: the
  // first 2,000 training and 5,000 test rows on the pool), timed on its own, times the
  // evaluations the run made, over the run's median wall time.
  std::vector<float> w0;
  f.model->init_params(1, w0);
  DeviceArray<float> w;
  w.upload(w0);
  ExecContext ctx;
  const json ev = default_eval();
  std::vector<double> one;
  for (int i = 0; i < 7; ++i) {
    auto t0 = Clock::now();
    evaluate_params(*f.model, pool, ctx, w.data(), &f.data.train, ev["train_samples"].get<size_t>(), &f.data.test,
                    ev["test_samples"].get<size_t>());
    one.push_back(seconds_since(t0));
  }
  r.eval_seconds = median(one);
  r.evaluations = last.evaluations;
  r.eval_fraction = double(r.evaluations) * r.eval_seconds / r.sim_seconds;
  std::vector<double> fractions;
  for (double x : r.ratios) fractions.push_back(1.0 - x);
  r.eval_fraction_by_difference = median(fractions);
  r.note =
      "sim = the run with the default eval schedule, bare = the same run evaluated at start and end "
      "only; eval_fraction = evaluations x one evaluation's time / the run's time (the difference "
      "of the two runs, 1 - ratio, is the cross-check)";
  return r;
}

std::string fmt(double v, int prec = 0) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(prec) << v;
  return s.str();
}

std::string target_of(const BenchResult& r) {
  if (r.workload == "a" || r.workload == "b" || r.workload == "f")
    return r.ratio >= 0.8 ? "ratio >= 0.8: met" : "ratio >= 0.8: NOT met";
  if (r.workload == "c") return r.sim_rate >= 2e6 ? ">= 2M updates/s: met" : ">= 2M updates/s: NOT met";
  if (r.workload == "d")
    return "peak " + fmt(r.peak_rss_mb) + " MiB, " + std::to_string(r.param_buffers) + " param buffers";
  if (r.workload == "e")
    return "eval " + fmt(100 * r.eval_fraction, 1) +
           "% of a run (< 10%: " + (r.eval_fraction < 0.1 ? "met)" : "NOT met)");
  return "";
}

void print_table(const std::vector<BenchResult>& results, std::ostream& out) {
  out << "\n"
      << std::left << std::setw(3) << "" << std::setw(13) << "workload" << std::setw(8) << "engine" << std::right
      << std::setw(8) << "workers" << std::setw(8) << "threads" << std::setw(14) << "sim rate" << std::setw(14)
      << "bare rate" << std::setw(13) << "unit" << std::setw(7) << "ratio" << std::setw(6) << "cpu" << std::setw(10)
      << "launch/g"
      << "  target\n";
  for (const auto& r : results) {
    out << std::left << std::setw(3) << r.workload << std::setw(13) << r.name << std::setw(8) << r.engine << std::right
        << std::setw(8) << r.workers << std::setw(8) << r.threads << std::setw(14) << fmt(r.sim_rate) << std::setw(14)
        << fmt(r.bare_rate) << std::setw(13) << r.rate_unit << std::setw(7) << fmt(r.ratio, 2) << std::setw(6)
        << fmt(r.cpu_ratio, 2) << std::setw(10)
        << (r.launches.k > 0 ? fmt(double(r.launches.gradients.launches()) / double(r.launches.k), 1) : "-") << "  "
        << target_of(r) << "\n";
  }
}

bool selected(const BenchOptions& o, const std::string& w) {
  return o.only.empty() || std::find(o.only.begin(), o.only.end(), w) != o.only.end();
}

}  // namespace

json BenchResult::to_json() const {
  json j = {{"workload", workload},
            {"name", name},
            {"engine", engine},
            {"model", model},
            {"workers", workers},
            {"threads", threads},
            {"batched_gradients", batched_gradients},
            {"gradients", gradients},
            {"updates", updates},
            {"sim_seconds", sim_seconds},
            {"bare_seconds", bare_seconds},
            {"rate_unit", rate_unit},
            {"sim_rate", sim_rate},
            {"bare_rate", bare_rate},
            {"ratio", ratio},
            {"ratios", ratios},
            {"param_buffers", param_buffers},
            {"max_versions_in_flight", max_versions_in_flight},
            {"sim_cpu_seconds", sim_cpu_seconds},
            {"bare_cpu_seconds", bare_cpu_seconds},
            {"cpu_ratio", cpu_ratio},
            {"flops_per_gradient", flops_per_gradient},
            {"sim_gflops", flops_per_gradient * double(gradients) / sim_seconds / 1e9},
            {"bare_gflops", flops_per_gradient * double(gradients) / bare_seconds / 1e9},
            {"note", note},
            {"backend", kernels_backend()}};
  if (peak_rss_mb >= 0) j["peak_rss_mb"] = peak_rss_mb;
  if (launches.k > 0) j["launches"] = launches.to_json();
  if (workload == "e") {
    j["eval_fraction"] = eval_fraction;
    j["eval_fraction_by_difference"] = eval_fraction_by_difference;
    j["evaluations"] = evaluations;
    j["eval_seconds"] = eval_seconds;
  }
  return j;
}

BenchOptions parse_bench_options(int argc, char** argv) {
  BenchOptions o;
  auto value = [&](int& i, const std::string& flag) -> std::string {
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    return argv[++i];
  };
  auto integer = [](const std::string& flag, const std::string& v) {
    try {
      size_t pos = 0;
      int x = std::stoi(v, &pos);
      if (pos != v.size()) throw std::invalid_argument("");
      return x;
    } catch (...) {
      throw std::invalid_argument(flag + " expects an integer, got '" + v + "'");
    }
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads") {
      o.threads = integer(a, value(i, a));
      if (o.threads < 0) throw std::invalid_argument("--threads must be >= 0");
    } else if (a == "--repeats") {
      o.repeats = integer(a, value(i, a));
      if (o.repeats < 1) throw std::invalid_argument("--repeats must be >= 1");
    } else if (a == "--batched-gradients") {
      o.batched_gradients = integer(a, value(i, a));
      if (o.batched_gradients < 1 || o.batched_gradients > 1024)
        throw std::invalid_argument("--batched-gradients must be in [1, 1024]");
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--json") {
      o.json_path = value(i, a);
    } else if (a == "--data") {
      o.data_dir = value(i, a);
    } else if (a == "--only") {
      std::stringstream ss(value(i, a));
      for (std::string w; std::getline(ss, w, ',');) {
        if (w.size() != 1 || w[0] < 'a' || w[0] > 'h')
          throw std::invalid_argument("--only takes workload letters a, b, c, d, e, f, g, h; got '" + w + "'");
        o.only.push_back(w);
      }
    } else {
      throw std::invalid_argument("bench: unknown argument '" + a + "'");
    }
  }
  return o;
}

JobLaunches count_job_launches(const Model& model, const DeviceDataset* train, size_t train_size, size_t batch,
                               size_t k) {
  JobLaunches out;
  std::thread([&] {
    kernels_use_one_thread_here();
    std::vector<float> init;
    model.init_params(1, init);
    GradientLoop loop(model, train, init, train_size, batch, 1, k);
    std::vector<DeviceArray<float>> more(k - 1);
    for (auto& buf : more) buf.resize_discard(model.num_params());
    std::vector<GradRequest> reqs(k);
    auto call = [&] {
      if (k == 1) {
        loop.gradient(0, NoiseKey{});
        return;
      }
      for (size_t i = 0; i < k; ++i) {
        reqs[i].w = loop.w.data();
        reqs[i].ids = loop.batch_ids(i);
        reqs[i].m = batch;
        reqs[i].grad = i == 0 ? loop.g.data() : more[i - 1].data();
      }
      model.loss_grad_batch(loop.ctx, train, reqs.data(), k);
    };
    call();  // warm: the workspace sized
    LaunchCounts before = loop.ctx.counts();
    call();
    out.gradients = loop.ctx.counts() - before;
    std::vector<int32_t> rows;
    if (model.row_layout().rows > 0) model.touched_rows(train, loop.batch_ids(0), batch, rows);
    before = loop.ctx.counts();
    bare_sgd_step(loop.ctx, model, rows, loop.w.data(), loop.g.data(), 1e-4f);
    out.update = loop.ctx.counts() - before;
    loop.ctx.synchronize();
  }).join();
  out.k = k;
  return out;
}

json JobLaunches::to_json() const {
  auto counts = [](const LaunchCounts& c, double per) {
    return json{{"launches", double(c.launches()) / per}, {"kernels", double(c.kernels) / per},
                {"gemms", double(c.gemms) / per},         {"copies", double(c.copies) / per},
                {"syncs", double(c.syncs) / per},         {"events", double(c.events) / per},
                {"graphs", double(c.graphs) / per}};
  };
  return json{
      {"gradients_per_call", k}, {"per_gradient", counts(gradients, double(k))}, {"per_update", counts(update, 1.0)}};
}

BenchResult bench_mlp(const std::string& workload, const std::string& engine, int workers, uint64_t gradients,
                      int threads, int repeats, const std::string& data_dir, size_t train_limit,
                      int batched_gradients) {
  auto f = load_mlp(data_dir, train_limit);
  return model_workload(*f, workload, "mlp", engine, workers, gradients, default_threads(threads), repeats, data_dir,
                        train_limit, batched_gradients);
}

BenchResult bench_population(int clients, int slots, uint64_t gradients, int threads, int repeats,
                             const std::string& data_dir, size_t train_limit) {
  auto f = load_mlp(data_dir, train_limit);
  return model_workload(*f, "h", "mlp", "fedbuff", slots, gradients, default_threads(threads), repeats, data_dir,
                        train_limit, 1, population_patch(clients));
}

BenchResult bench_cnn(const std::string& engine, int workers, uint64_t gradients, int threads, int repeats,
                      const std::string& data_dir, size_t train_limit) {
  auto f = load_mnist(data_dir, train_limit, kCnnModel, kCnnDescription);
  return model_workload(*f, "f", "cnn", engine, workers, gradients, default_threads(threads), repeats, data_dir,
                        train_limit, 1);
}

namespace {

// g: sparse_logistic on sparse_synthetic data (100000 features in 20 one-hot fields,
// Zipf 1.1), batch 32, async with `workers` workers behind a 250 MB/s link, so that each
// gradient step sizes its sparse messages (Model::touched_rows) as a run does. The bare
// side computes the same sparse gradients and SGD steps with the same kernels.
json sparse_config(int workers, uint64_t gradients) {
  return json{{"name", "bench"},
              {"seed", 1},
              {"model", {{"type", "sparse_logistic"}}},
              {"data",
               {{"type", "sparse_synthetic"},
                {"features", 100000},
                {"nnz", 20},
                {"zipf", 1.1},
                {"classes", 2},
                {"train_samples", 20000},
                {"test_samples", 2000}}},
              {"train", {{"batch_size", 32}, {"lr", 0.5}}},
              {"stop", {{"gradients", gradients}}},
              {"eval", minimal_eval()},
              {"cluster",
               {{"workers", workers},
                {"compute", {{"dist", "exponential"}, {"mean", 0.01}, {"per", "step"}}},
                {"network", {{"bandwidth", 2.5e8}, {"latency", 0.0005}}}}},
              {"engines", json::array({json{{"type", "async"}}})}};
}

BenchResult sparse_workload(int workers, uint64_t gradients, int threads, int repeats) {
  Experiment exp = resolve_experiment(sparse_config(workers, gradients), "bench", ".");
  std::shared_ptr<LoadedData> data = load_data(exp.runs.front(), ".");
  std::unique_ptr<Model> model = build_model(*exp.runs.front().bound_model, *data);
  BenchResult r;
  r.workload = "g";
  r.name = "sparse_async";
  r.engine = "async";
  r.model =
      "sparse_logistic, 100000 features, 20 one-hot fields (Zipf 1.1), batch 32, sparse messages on a 250 MB/s link";
  r.workers = workers;
  r.threads = threads;
  Problem p{model.get(), &data->train, &data->test};
  WorkerPool pool(threads, /*caller_computes=*/true);
  time_simulation(sparse_config(workers, std::max<uint64_t>(gradients / 10, 4 * uint64_t(workers))), p,
                  pool);  // warm-up
  SimRun last;
  auto sim = [&] {
    last = time_simulation(sparse_config(workers, gradients), p, pool);
    return last.seconds;
  };
  sim();
  const uint64_t g = last.outcome.gradients, u = last.outcome.updates;
  auto bare = [&] { return time_bare(p, data->train.n, 32, g, u, threads, 1); };
  bare();
  r.launches = count_job_launches(*model, &data->train, data->train.n, 32, 1);
  measure_pairs(repeats, sim, bare, r);
  r.gradients = g;
  r.updates = u;
  set_rates(r, true);
  r.note = "sim: " +
           std::to_string(uint64_t(last.outcome.bytes_to_server /
                                   double(std::max<uint64_t>(last.outcome.messages_to_server, 1)))) +
           " bytes per push (the touched rows)";
  return r;
}

}  // namespace

BenchResult bench_sparse(int workers, uint64_t gradients, int threads, int repeats) {
  return sparse_workload(workers, gradients, default_threads(threads), repeats);
}

json bench_default_eval_schedule() { return default_eval(); }

BenchResult bench_event_core(int workers, uint64_t updates, int threads, int repeats) {
  return event_core_workload(workers, updates, default_threads(threads), repeats);
}

int run_bench(const BenchOptions& opts, std::ostream& out) {
  const int threads = default_threads(opts.threads);
  const bool q = opts.quick;
  const int repeats = opts.repeats > 0 ? opts.repeats : (q ? 5 : 7);
  std::vector<BenchResult> results;
  std::ofstream json_file;
  if (!opts.json_path.empty()) {
    json_file.open(opts.json_path);
    if (!json_file) throw std::runtime_error("bench: cannot write " + opts.json_path);
  }
  auto report = [&](const BenchResult& r) {
    std::string line = r.to_json().dump();
    out << line << "\n" << std::flush;
    if (json_file) json_file << line << "\n" << std::flush;
    results.push_back(r);
  };
  out << "asgdsim bench: backend " << kernels_backend() << ", " << threads << " thread(s)" << (q ? ", quick" : "")
      << ", " << repeats << " timed pair(s) per workload"
      << (opts.batched_gradients > 1 ? ", batched_gradients " + std::to_string(opts.batched_gradients) + " (a, b)" : "")
      << "\n";

  // d first, in a child process started before this one loads data or starts threads,
  // so that the child's peak RSS is the workload's own.
  if (selected(opts, "d")) {
    int workers = 100000;
    uint64_t updates = q ? 200000 : 1000000;
    report(in_child([&] { return scale_workload(workers, 1000, updates, threads); }));
  }
  const size_t train_limit = 10000;
  std::unique_ptr<MnistFixture> mnist;
  if (selected(opts, "a") || selected(opts, "b")) mnist = load_mlp(opts.data_dir, train_limit);
  // Short runs, many pairs: on a shared machine a pair's two sides then see the same load.
  const uint64_t mlp_grads = q ? 1500 : 6000;
  if (selected(opts, "a"))
    report(model_workload(*mnist, "a", "mlp", "async", 16, mlp_grads, threads, repeats, opts.data_dir, train_limit,
                          opts.batched_gradients));
  if (selected(opts, "b")) {
    report(model_workload(*mnist, "b", "mlp", "sync", 16, mlp_grads, threads, repeats, opts.data_dir, train_limit,
                          opts.batched_gradients));
    report(model_workload(*mnist, "b", "mlp", "easgd", 16, mlp_grads, threads, repeats, opts.data_dir, train_limit,
                          opts.batched_gradients));
  }
  if (selected(opts, "f")) {
    mnist.reset();
    // A CNN gradient costs about 20 MLP ones here: fewer per timed run.
    auto cnn = load_mnist(opts.data_dir, train_limit, kCnnModel, kCnnDescription);
    report(model_workload(*cnn, "f", "cnn", "async", 16, q ? 240 : 960, threads, repeats, opts.data_dir, train_limit,
                          opts.batched_gradients));
  }
  if (selected(opts, "h")) {  // a population: 100,000 clients on 100 slots
    if (!mnist) mnist = load_mlp(opts.data_dir, train_limit);
    report(model_workload(*mnist, "h", "mlp", "fedbuff", 100, mlp_grads, threads, repeats, opts.data_dir, train_limit,
                          1, population_patch(100000)));
  }
  if (selected(opts, "c")) report(event_core_workload(10000, q ? 300000 : 2000000, threads, repeats));
  if (selected(opts, "g")) report(sparse_workload(16, q ? 3000 : 12000, threads, repeats));
  if (selected(opts, "e")) {
    mnist.reset();
    auto full = load_mlp(opts.data_dir, 0);
    // quick: 3 epochs (7 evaluations, 2.3 per epoch, close to the full run's 21 in 10)
    report(eval_workload(*full, q ? 3.0 : 10.0, threads, std::min(repeats, 3), opts.data_dir));
  }
  std::sort(results.begin(), results.end(),
            [](const BenchResult& a, const BenchResult& b) { return a.workload < b.workload; });
  print_table(results, out);
  return 0;
}

}  // namespace asgd
