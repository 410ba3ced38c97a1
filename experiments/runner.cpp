// experiments/runner.cpp — from RunSpecs to run folders.
#include "experiments/runner.h"
#include <sys/stat.h>
#include <unistd.h>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include "asgd/build_info.h"
#include "engines/engine_registry.h"
#include "sim/atomic_file.h"
#include "sim/dataset.h"
#include "sim/interrupt.h"
#include "sim/simulation.h"

namespace asgd {
namespace fs = std::filesystem;

namespace {

std::string iso_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

bool read_json(const std::string& path, json& out) {
  std::ifstream in(path);
  if (!in) return false;
  try {
    out = json::parse(in);
    return true;
  } catch (...) {
    return false;
  }
}

// ---- data and models from a run config ----

struct LoadedData {
  json key;
  DataSplit host;
  DeviceDataset train, test;
};

std::shared_ptr<LoadedData> load_data(const json& cfg, const std::string& base_dir,
                                      std::shared_ptr<LoadedData> cached) {
  const json& d = cfg["data"];
  json key = d;
  std::string type = d["type"];
  if (type == "synthetic") key["seed"] = cfg["seed"];
  if (cached && cached->key == key) return cached;
  auto out = std::make_shared<LoadedData>();
  out->key = key;
  if (type == "none") return out;
  if (type == "synthetic") {
    SyntheticSpec s;
    s.classification = d["task"] == "classification";
    s.classes = s.classification ? d["classes"].get<int>() : 0;
    s.features = d["features"];
    s.train_samples = d["train_samples"];
    s.test_samples = d["test_samples"];
    s.noise = d["noise"];
    out->host = make_synthetic(s, cfg["seed"].get<uint64_t>());
  } else {
    std::string path = d["path"];
    if (!path.empty() && path[0] != '/' && !base_dir.empty()) path = base_dir + "/" + path;
    out->host = load_fashion_mnist(path, d["train_limit"], d["test_limit"]);
  }
  out->train = upload(out->host.train);
  out->test = upload(out->host.test);
  return out;
}

std::unique_ptr<Model> build_model(const json& m, const LoadedData& data) {
  std::string type = m["type"];
  if (type == "quadratic") {
    size_t dim = m["dim"];
    const json& c = m["curvature"];
    std::vector<float> h(dim);
    if (c.is_number()) std::fill(h.begin(), h.end(), c.get<float>());
    else if (c.is_array()) for (size_t i = 0; i < dim; ++i) h[i] = c[i].get<float>();
    else {
      double lo = c["min"], hi = c["max"];
      for (size_t i = 0; i < dim; ++i)
        h[i] = float(dim == 1 ? lo : lo * std::pow(hi / lo, double(i) / double(dim - 1)));
    }
    return make_quadratic(std::move(h), m["noise"].get<float>(), m["init"].get<float>());
  }
  int in = int(data.host.train.dim);
  int classes = data.host.train.classes;
  if (type == "linear") return make_dense({in, 1}, DenseLoss::Squared);
  if (type == "logistic") return make_dense({in, 1}, DenseLoss::Logistic);
  std::vector<int> layers{in};
  if (type == "mlp")
    for (const auto& h : m["hidden"]) layers.push_back(h.get<int>());
  layers.push_back(classes);
  return make_dense(layers, DenseLoss::SoftmaxCrossEntropy);
}

// ---- progress ----

double progress_fraction(const RunSettings& s, const MetricsRow& r) {
  double f = 0;
  if (s.stop_epochs > 0) f = std::max(f, r.epoch / s.stop_epochs);
  if (s.stop_time != kNever) f = std::max(f, double(r.time) / double(s.stop_time));
  if (s.stop_updates) f = std::max(f, double(r.updates) / double(s.stop_updates));
  if (s.stop_gradients) f = std::max(f, double(r.gradients) / double(s.stop_gradients));
  return std::min(1.0, f);
}

std::string index_csv(const Experiment& exp, const std::string& exp_dir) {
  std::string out = "run_id,engine";
  for (const auto& k : exp.sweep_keys) out += "," + k;
  out += ",seed,status,final_train_loss,final_test_loss,final_test_accuracy,time,updates\n";
  auto cell = [](const json& v) -> std::string {
    if (v.is_null()) return "nan";
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_float()) return format_number(v.get<double>());
    return v.dump();
  };
  for (const auto& run : exp.runs) {
    json s;
    bool have = read_json(exp_dir + "/" + run.run_id + "/summary.json", s);
    out += run.run_id + "," + run.engine;
    for (const auto& k : exp.sweep_keys) out += "," + cell(run.sweep_values[k]);
    out += "," + std::to_string(run.seed);
    if (have) {
      const json& f = s["final"];
      out += "," + s.value("status", std::string("unknown")) + "," + cell(f["train_loss"]) + "," +
             cell(f["test_loss"]) + "," + cell(f["test_accuracy"]) + "," + cell(s["time"]) + "," + cell(s["updates"]) + "\n";
    } else {
      out += ",pending,nan,nan,nan,nan,nan\n";
    }
  }
  return out;
}

}  // namespace

RunSettings settings_from_config(const json& c) {
  RunSettings s;
  s.seed = c["seed"];
  s.workers = c["cluster"]["workers"];
  const json& t = c["train"];
  int64_t global = t["global_batch"];
  s.batch_size = global > 0 ? size_t(global / s.workers) : t["batch_size"].get<size_t>();
  const json& ls = t["lr_schedule"];
  s.lr.type = ls["type"];
  s.lr.lr = t["lr"];
  s.lr.scale = ls["scale"].is_string() ? double(s.workers) : ls["scale"].get<double>();
  s.lr.warmup_epochs = ls["warmup_epochs"];
  s.lr.warmup_from = ls["warmup_from"].is_string() ? -1.0 : ls["warmup_from"].get<double>();
  if (s.lr.type == "step") {
    s.lr.milestones = ls["milestones"].get<std::vector<double>>();
    s.lr.gamma = ls["gamma"];
  } else if (s.lr.type == "cosine") {
    s.lr.total_epochs = ls["total_epochs"];
    s.lr.min_lr = ls["min_lr"];
  }
  s.momentum = t["momentum"];
  s.aggregate_sum = t["aggregate"] == "sum";
  s.single_replica_epochs = t["single_replica_epochs"];

  const json& st = c["stop"];
  if (st["time"].get<double>() > 0) s.stop_time = seconds_to_sim(st["time"].get<double>());
  s.stop_updates = st["updates"];
  s.stop_gradients = st["gradients"];
  s.stop_epochs = st["epochs"];

  const json& e = c["eval"];
  std::string unit = e["unit"];
  s.eval_unit = unit == "time" ? EvalUnit::Time : unit == "updates" ? EvalUnit::Updates : EvalUnit::Epochs;
  s.eval_every = e["every"];
  s.eval_train_samples = e["train_samples"];
  s.eval_test_samples = e["test_samples"];
  s.divergence_bound = e["divergence_bound"];

  const json& sl = c["staleness"];
  std::string mode = sl["mode"];
  if (mode == "fixed") { s.staleness = StalenessMode::Fixed; s.staleness_tau = sl["tau"]; }
  else if (mode == "uniform") { s.staleness = StalenessMode::Uniform; s.staleness_tau = sl["tau"]; }
  else if (mode == "geometric") {
    s.staleness = StalenessMode::Geometric;
    s.staleness_mean = sl["mean"];
    uint32_t cap = sl["max"];
    s.staleness_tau = cap > 0 ? cap : uint32_t(std::ceil(10.0 * s.staleness_mean));
  }
  if (c["data"]["type"] == "none") s.nominal_train_size = c["data"]["samples"];
  s.trace = c.value("trace", false);
  return s;
}

int run_experiment(const Experiment& exp, const RunnerOptions& opts) {
  const std::string name = exp.resolved.value("name", std::string("experiment"));
  const std::string exp_dir = opts.out_dir + "/" + name;
  make_directories(exp_dir);
  write_file_atomic(exp_dir + "/experiment.json", exp.resolved.dump(2) + "\n");

  int threads = opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  WorkerPool pool(threads);
  const bool live = !opts.quiet && ::isatty(STDERR_FILENO);
  std::shared_ptr<LoadedData> data;
  int exit_code = 0;
  const size_t total = exp.runs.size();

  for (size_t k = 0; k < total && exit_code == 0; ++k) {
    const RunSpec& run = exp.runs[k];
    const std::string dir = exp_dir + "/" + run.run_id;
    const std::string tag = "[" + std::to_string(k + 1) + "/" + std::to_string(total) + "] " + run.run_id;

    json old_config, old_summary;
    bool has_config = read_json(dir + "/config.json", old_config);
    bool has_summary = read_json(dir + "/summary.json", old_summary);
    if (has_config && old_config != run.config && !opts.force)
      throw IoError(dir + " holds a run of a different config; pass --force to overwrite it, or choose another --out");
    if (has_config && has_summary && !opts.force) {
      std::string status = old_summary.value("status", "");
      if (status == "completed" || status == "diverged") {
        if (!opts.quiet) std::cout << tag << ": " << status << " earlier, skipped (--force re-runs it)\n";
        continue;
      }
    }
    make_directories(dir);
    std::error_code ec;
    fs::remove(dir + "/summary.json", ec);  // the folder must not look complete while running
    write_file_atomic(dir + "/config.json", run.config.dump(2) + "\n");

    json meta = {{"asgdsim_version", build::version}, {"git_commit", build::git_commit},
                 {"git_dirty", build::git_dirty}, {"backend", build::backend},
                 {"build_type", build::build_type}, {"threads", threads},
                 {"command_line", opts.command_line}, {"start", iso_now()}};
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    meta["host"] = host;
    write_file_atomic(dir + "/meta.json", meta.dump(2) + "\n");

    auto wall_start = std::chrono::steady_clock::now();
    RunSettings settings = settings_from_config(run.config);
    settings.trace = settings.trace || opts.trace;
    data = load_data(run.config, exp.base_dir, data);
    std::unique_ptr<Model> model = build_model(run.config["model"], *data);
    ComputeTimeModel compute(settings.seed, make_distribution(run.config["cluster"]["compute"], exp.base_dir),
                             run.config["cluster"]["speeds"].get<std::vector<double>>());
    Recorder recorder(settings.trace);
    std::unique_ptr<Engine> engine = make_engine(run.config["engine"]);
    RunOutcome outcome;
    {
      bool uses_data = model->uses_data();
      Simulation sim(settings, *model, uses_data ? &data->train : nullptr, uses_data ? &data->test : nullptr,
                     pool, compute, recorder);
      auto last_print = std::chrono::steady_clock::now() - std::chrono::seconds(1);
      if (live)
        sim.on_row = [&](const MetricsRow& r) {
          auto now = std::chrono::steady_clock::now();
          if (now - last_print < std::chrono::milliseconds(100)) return;
          last_print = now;
          double elapsed = std::chrono::duration<double>(now - wall_start).count();
          double f = progress_fraction(settings, r);
          char buf[256];
          std::snprintf(buf, sizeof(buf), "\r\033[K%s  t=%.3gs  epoch %.2f  train_loss %.4g%s  %3.0f%%  ETA %.0fs",
                        tag.c_str(), sim_to_seconds(r.time), r.epoch, r.train_loss,
                        std::isnan(r.test_accuracy) ? "" : ("  acc " + format_number(std::round(r.test_accuracy * 1000) / 1000)).c_str(),
                        100 * f, f > 0.01 ? elapsed * (1 - f) / f : 0.0);
          std::cerr << buf << std::flush;
        };
      outcome = sim.run(*engine);
    }
    if (live) std::cerr << "\r\033[K" << std::flush;
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

    recorder.write_metrics(dir + "/metrics.csv");
    Recorder::write_staleness(dir + "/staleness.csv", outcome.staleness_hist);
    Recorder::write_workers(dir + "/workers.csv", outcome.workers, outcome.time);
    if (settings.trace) recorder.write_trace(dir + "/trace.json", settings.workers);
    meta["end"] = iso_now();
    write_file_atomic(dir + "/meta.json", meta.dump(2) + "\n");

    const MetricsRow& last = recorder.rows().back();
    json summary = {
        {"status", outcome.status},
        {"note", outcome.note},
        {"run_id", run.run_id},
        {"engine", run.engine},
        {"engine_config", engine->describe()},
        {"seed", run.seed},
        {"sweep", run.sweep_values},
        {"final", {{"train_loss", finite_or_null(last.train_loss)}, {"test_loss", finite_or_null(last.test_loss)},
                   {"test_accuracy", finite_or_null(last.test_accuracy)}}},
        {"time", sim_to_seconds(outcome.time)},
        {"updates", outcome.updates},
        {"gradients", outcome.gradients},
        {"samples", outcome.samples},
        {"epochs", last.epoch},
        {"dropped_gradients", outcome.dropped},
        {"lost_gradients", outcome.lost},
        {"staleness", {{"mean", outcome.staleness_mean}, {"max", outcome.staleness_max}}},
        {"iteration_time", outcome.iterations ? json{{"mean", outcome.iteration_time_mean}, {"count", outcome.iterations}} : json(nullptr)},
        {"wall_seconds", wall},
    };
    write_file_atomic(dir + "/summary.json", summary.dump(2) + "\n");

    if (!opts.quiet) {
      std::cout << tag << ": " << outcome.status << " (" << outcome.note << "), train_loss "
                << format_number(last.train_loss);
      if (!std::isnan(last.test_accuracy)) std::cout << ", test_accuracy " << format_number(last.test_accuracy);
      std::cout << ", virtual " << format_number(sim_to_seconds(outcome.time)) << " s, " << outcome.updates
                << " updates, " << format_number(std::round(wall * 100) / 100) << " s wall\n"
                << std::flush;
    }
    if (outcome.status == "interrupted") exit_code = 130;
  }
  write_file_atomic(exp_dir + "/index.csv", index_csv(exp, exp_dir));
  if (!opts.quiet) std::cout << "results: " << exp_dir << "\n";
  return exit_code;
}

}  // namespace asgd
