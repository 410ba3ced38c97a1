// experiments/run/calibration.cpp — timing the real gradient (see calibration.h).
#include "experiments/run/calibration.h"
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>
#include "experiments/run/build_info.h"
#include "experiments/config/resources.h"
#include "experiments/run/run_parts.h"
#include "sim/base/errors.h"
#include "sim/base/hash.h"
#include "sim/data/sample_stream.h"
#include "sim/base/interrupt.h"
#include "sim/run/atomic_file.h"
#include "sim/run/file_lock.h"
#include "sim/timing/distribution.h"
#include "sim/timing/measured_trace.h"

namespace asgd {

GradientLoop::GradientLoop(const Model& m, const DeviceDataset* data, const std::vector<float>& init, size_t train_size,
                           size_t b, uint64_t stream_seed, size_t n_batches)
    : model(m), train(data), batch(b), batches(std::max<size_t>(n_batches, 1)), g(m.num_params()) {
  w.upload(init);
  SampleStream stream(train_size, stream_seed);
  stream.next(batches * batch, ids);
}

double GradientLoop::gradient(uint64_t k, const NoiseKey& noise) {
  return model.loss_grad(ctx, w.data(), train, batch_ids(k), batch, noise, g.data());
}

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "Intel(R) Xeon(R) ... @ 2.20GHz" from /proc/cpuinfo ("" where there is none)
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      std::string v = line.substr(line.find(':') + 1);
      return v.substr(std::min(v.size(), v.find_first_not_of(' ')));
    }
  return "";
}

// calibration/.lock, taken exclusively (polled, so Ctrl-C is heard: Interrupted): one
// process calibrates at a time, so shards that share the folder measure a trace once and
// read it after. A process that waits says for whom.
void take_calibration_lock(FileLock& lock, const CalibrationOptions& opts) {
  bool said = false;
  while (!lock.try_lock(FileLock::Mode::Exclusive)) {
    if (!said && !opts.quiet)
      std::cerr << "asgdsim: waiting for " << lock.path() << ", in use by " << lock_holder(lock.text())
                << " (one process measures a trace at a time)\n";
    said = true;
    throw_if_interrupted("waiting for " + lock.path());
    ::usleep(100 * 1000);
  }
  lock.set_text(lock_holder_line("calibrating cluster.compute \"measured\"") + "\n");
}

// What a trace in the calibration cache was measured for: a trace of the same key times
// the same gradient, on the same machine and build, with the same budget and clock.
json cache_key(const RunSpec& run, const Model& model, const CalibrationBudget& budget, const std::string& clock) {
  std::string commit = build::git_commit;
  if (build::git_dirty) commit += " (dirty)";
  return {{"model", run.config["model"]},
          {"data", run.config["data"]},
          {"sources", sources_of(run)},
          {"code", model.code_identity()},
          {"batch", run.settings.batch_size},
          {"threads", model.job_threads()},
          {"clock", clock},
          {"budget",
           {{"warmup", budget.warmup},
            {"steps", budget.steps},
            {"seconds", budget.seconds},
            {"min_steps", budget.min_steps}}},
          {"machine", host_name() + (cpu_model().empty() ? "" : ", " + cpu_model())},
          {"backend", std::string(build::backend) + ", " + build::build_type + ", GEMM " + kernels_gemm_core()},
          {"commit", commit},
          {"asgdsim_version", build::version}};
}

// The cache's file for `key` (beside the experiment folder's name of the same trace).
std::string cache_path(const std::string& dir, const std::string& trace_name, const json& key) {
  const std::string stem = trace_name.substr(0, trace_name.size() - std::string(".trace").size());
  return dir + "/" + stem + "-" + fnv1a64_hex(key.dump()) + ".trace";
}

// The cached trace of `key` at `path`, or none (missing, unreadable, another key's).
bool read_cached(const std::string& path, const json& key, MeasuredTrace& out, const CalibrationOptions& opts) {
  if (::access(path.c_str(), F_OK) != 0) return false;
  try {
    MeasuredTrace t = read_measured_trace(path);
    if (t.header.value("cache_key", json()) != key) return false;
    out = std::move(t);
    return true;
  } catch (const DataError& e) {
    if (!opts.quiet) std::cerr << "asgdsim: warning: the calibration cache's " << e.what() << ": measuring again\n";
    return false;
  }
}

// Makes `path`, the trace of `run`'s model at its per-worker batch: copied from the
// calibration cache where it holds one of the same key, else measured (and then stored
// in the cache; a cache that cannot be written is a warning).
void calibrate(const RunSpec& run, const std::string& base_dir, const std::string& path,
               const CalibrationBudget& budget, const CalibrationOptions& opts) {
  const size_t batch = run.settings.batch_size;
  const double t0 = steady_seconds();
  std::shared_ptr<LoadedData> data = load_data(run, base_dir);
  std::unique_ptr<Model> model = build_model(*run.bound_model, *data);
  const std::string clock = opts.now ? "injected" : calibration_clock_name(model->job_threads());
  const std::string cache_dir = calibration_cache_dir();
  const json key = cache_key(run, *model, budget, clock);
  const std::string cached = cache_dir.empty() ? "" : cache_path(cache_dir, trace_name_of(run), key);
  MeasuredTrace trace;
  if (!opts.recalibrate && !cached.empty() && read_cached(cached, key, trace, opts)) {
    trace.header.erase("cache_key");
    trace.header["from_cache"] = cached;
    write_file_atomic(path, format_measured_trace(trace));
    if (!opts.quiet)
      std::cerr << "asgdsim: cluster.compute \"measured\": " << run.bound_model->type().name << " at batch " << batch
                << ": the trace measured " << trace.header.value("date", std::string("?"))
                << " on this machine and build, from the calibration cache " << cached
                << " (--recalibrate measures again)\n";
    return;
  }
  if (!opts.quiet)
    std::cerr << "asgdsim: calibrating cluster.compute \"measured\": " << run.bound_model->type().name << " at batch "
              << batch << " (" << budget.warmup << " warm-up steps, then up to " << budget.steps << " steps or "
              << budget.seconds << " s, at least " << std::min(budget.min_steps, budget.steps) << ") ..." << std::flush;
  const bool uses_data = model->uses_data();
  const size_t train_size = uses_data && data->train.n > 0 ? data->train.n : 1024;
  trace.step_seconds =
      time_gradient_steps(*model, uses_data ? &data->train : nullptr, train_size, batch, budget, opts.now);
  trace.header = {{"model", run.config["model"]},  // the resolved object, as replays compare it
                  {"data", run.config["data"]},
                  {"batch", batch},
                  {"threads", model->job_threads()},
                  {"clock", clock},
                  {"warmup_steps", budget.warmup},
                  {"timed_steps", trace.step_seconds.size()},
                  {"machine", key["machine"]},
                  {"backend", key["backend"]},
                  {"commit", key["commit"]},
                  {"asgdsim_version", build::version},
                  {"date", iso_now()}};
  write_file_atomic(path, format_measured_trace(trace));
  if (!opts.quiet) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), " %zu steps, median %.4g ms (%.2f s in all)\n", trace.step_seconds.size(),
                  1e3 * median_of(trace.step_seconds), steady_seconds() - t0);
    std::cerr << buf << std::flush;
  }
  if (cached.empty()) return;
  trace.header["cache_key"] = key;
  try {
    make_directories(std::filesystem::path(cached).parent_path().string());
    write_file_atomic(cached, format_measured_trace(trace));
  } catch (const std::exception& e) {
    if (!opts.quiet)
      std::cerr << "asgdsim: warning: the calibration cache " << cache_dir << " cannot be written (" << e.what()
                << "): other experiments will measure again (ASGDSIM_CACHE_DIR=off turns it off)\n";
  }
}

}  // namespace

namespace {
bool wall_clock(int job_threads) { return std::string(kernels_backend()) == "CUDA" || job_threads > 1; }
}  // namespace

std::string calibration_cache_dir() {
  if (const char* dir = std::getenv("ASGDSIM_CACHE_DIR")) return std::string(dir) == "off" ? "" : dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/asgdsim";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/asgdsim";
  return "";
}

double calibration_clock_seconds(int job_threads) {
  if (wall_clock(job_threads)) return steady_seconds();
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

const char* calibration_clock_name(int job_threads) {
  return wall_clock(job_threads) ? "wall time" : "the timing thread's CPU time";
}

std::vector<double> time_gradient_steps(const Model& model, const DeviceDataset* train, size_t train_size, size_t batch,
                                        const CalibrationBudget& budget, const std::function<double()>& now_fn) {
  const int threads = model.job_threads();
  const std::function<double()> now =
      now_fn ? now_fn : std::function<double()>([threads] { return calibration_clock_seconds(threads); });
  std::vector<double> times;
  std::exception_ptr error;
  // A thread of its own, set up as the worker pool's threads are (one kernel thread).
  std::thread timer([&] {
    try {
      kernels_use_one_thread_here();
      std::vector<float> init;
      model.init_params(1, init);
      const size_t steps = size_t(std::max(budget.steps, 1)), warmup = size_t(std::max(budget.warmup, 0));
      GradientLoop loop(model, train, init, train_size, batch, /*stream_seed=*/1, std::min<size_t>(steps + warmup, 64));
      uint64_t k = 0;
      for (; k < warmup; ++k) {
        throw_if_interrupted("calibrating cluster.compute \"measured\"");
        loop.gradient(k, {1, 0, uint32_t(k)});
      }
      loop.ctx.synchronize();
      double total = 0;
      const size_t min_steps = std::min(steps, size_t(std::max(budget.min_steps, 1)));
      while (times.size() < steps && (times.size() < min_steps || total < budget.seconds)) {
        throw_if_interrupted("calibrating cluster.compute \"measured\"");
        const double t0 = now();
        loop.gradient(k, {1, 0, uint32_t(k)});
        loop.ctx.synchronize();
        const double t = std::max(0.0, now() - t0);
        times.push_back(t);
        total += t;
        ++k;
      }
    } catch (...) {
      error = std::current_exception();
    }
  });
  timer.join();
  if (error) std::rethrow_exception(error);
  return times;
}

namespace {
// dist "measured" (resolved here: its trace is made or found)
bool measured(const RunSpec& run) { return run.settings.compute_dist->type() == "measured"; }
// dist "flops" of a model counted when it is built (a PyTorch module): not resolved yet
bool flops_counted_at_run(const RunSpec& run) { return run.settings.compute_dist->type() == "flops"; }
}  // namespace

std::set<size_t> runs_measured_anew(const Experiment& exp, const std::string& exp_dir, bool recalibrate) {
  std::set<size_t> out;
  for (size_t k = 0; k < exp.runs.size(); ++k)
    if (measured(exp.runs[k]) &&
        (recalibrate || ::access((exp_dir + "/" + trace_name_of(exp.runs[k])).c_str(), F_OK) != 0))
      out.insert(k);
  return out;
}

Experiment with_measured_compute(const Experiment& exp, const std::string& exp_dir, const CalibrationOptions& opts) {
  Experiment out = exp;
  std::map<std::string, MeasuredTrace> traces;  // by name
  std::vector<std::pair<std::string, std::shared_ptr<Distribution>>> dists;
  Validator v;
  std::vector<std::pair<json, std::pair<double, std::string>>> counted;  // {model, data}: FLOPs per sample, counter
  for (RunSpec& run : out.runs) {
    if (!flops_counted_at_run(run)) continue;
    const json which = {run.config["model"], run.config["data"]};
    auto it = std::find_if(counted.begin(), counted.end(), [&](const auto& c) { return c.first == which; });
    if (it == counted.end()) {
      std::shared_ptr<LoadedData> data = load_data(run, exp.base_dir);
      std::unique_ptr<Model> model = build_model(*run.bound_model, *data);
      it = counted.insert(counted.end(), {which, {model->flops_per_sample(), model->flops_counter()}});
    }
    ComputeRunView view = compute_run_view(run);
    view.flops_per_sample = [fps = it->second.first] { return std::optional<double>(fps); };
    view.flops_counter = it->second.second;
    apply_compute(run, run.settings.compute_dist->resolve(view), out.notes);
    check_run_resources(run, *run.settings.compute_dist->make(), v);
  }
  for (RunSpec& run : out.runs) {
    if (!measured(run)) continue;
    const std::string name = trace_name_of(run);
    // absolute: compute_dist's file must not resolve against the config's folder
    const std::string path = std::filesystem::absolute(exp_dir + "/" + name).lexically_normal().string();
    auto it = traces.find(name);
    if (it == traces.end()) {
      {
        // never through a link: the trace and its lock stay inside the output folder
        const std::string folder = exp_dir + "/calibration";
        refuse_link(folder);
        make_directories(folder);
        refuse_link(folder);  // planted while it was made
        FileLock lock(folder + "/.lock");
        take_calibration_lock(lock, opts);
        if (opts.recalibrate || ::access(path.c_str(), F_OK) != 0) {
          calibrate(run, exp.base_dir, path, calibration_budget(*run.settings.compute_dist), opts);
        }
      }
      MeasuredTrace trace;
      refuse_link(path);
      try {
        trace = read_measured_trace(path);
      } catch (const DataError& e) {
        throw DataError(std::string(e.what()) +
                        " (cluster.compute \"measured\" replays it: fix or delete it, or run "
                        "with --recalibrate to measure it again)");
      }
      // the name's hash keys model, data and batch: a header that disagrees was copied in
      const std::vector<std::pair<std::string, json>> expected = {{"batch", run.settings.batch_size},
                                                                  {"model", run.config["model"]}};
      for (const auto& [key, want] : expected)
        if (trace.header.contains(key) && trace.header[key] != want)
          throw DataError("trace file " + path + ": measured for " + key + " " + trace.header[key].dump() +
                          ", but the runs that replay it use " + want.dump() +
                          " (run with --recalibrate to measure it again)");
      it = traces.emplace(name, std::move(trace)).first;
    }
    ComputeRunView view = compute_run_view(run);
    view.trace_path = path;
    view.trace = &it->second;
    apply_compute(run, run.settings.compute_dist->resolve(view), out.notes);
    auto made = std::find_if(dists.begin(), dists.end(), [&](const auto& d) { return d.first == name; });
    if (made == dists.end()) made = dists.insert(dists.end(), {name, run.settings.compute_dist->make()});
    check_run_resources(run, *made->second, v);
  }
  v.throw_if_failed(exp.source.empty() ? "config" : exp.source);
  return out;
}

}  // namespace asgd
