// experiments/run_parts.cpp — what `asgdsim run` and `asgdsim cluster` both build from a
// run's resolved config (data, model, compute-time model) and write around it.
#include "experiments/run_parts.h"
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include "asgd/build_info.h"
#include "sim/atomic_file.h"
#include "sim/idx_reader.h"
#include "sim/recorder.h"
#include "kernels/rng.h"

namespace asgd {

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


// Runs with equal keys share one loaded data set (synthetic data depends on the seed).
json data_key(const json& cfg) {
  json key = cfg["data"];
  if (key["type"] == "synthetic") key["seed"] = cfg["seed"];
  return key;
}

std::shared_ptr<LoadedData> load_data(const json& cfg, const std::string& base_dir) {
  const json& d = cfg["data"];
  std::string type = d["type"];
  auto out = std::make_shared<LoadedData>();
  out->key = data_key(cfg);
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

std::string index_csv(const Experiment& exp, const std::string& exp_dir) {
  std::string out = "run_id,engine";
  for (const auto& k : exp.sweep_keys) out += "," + k;
  out += ",seed,status,final_train_loss,final_test_loss,final_test_accuracy,time,updates\n";
  auto cell = [](const json& v) -> std::string {
    if (v.is_null()) return "nan";
    if (v.is_number_float()) return format_number(v.get<double>());
    std::string text = v.is_string() ? v.get<std::string>() : v.dump();
    if (text.find_first_of(",\"\n") == std::string::npos) return text;
    std::string quoted = "\"";  // RFC 4180: a list or object swept, or a string with a comma
    for (char ch : text) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return quoted + "\"";
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

ComputeTimeModel build_compute_model(const json& c, const RunSettings& s, const std::string& base_dir) {
  const json& cluster = c["cluster"];
  std::vector<double> slowdown;
  if (cluster["speeds"].is_object()) {  // drawn once per worker from (seed, Speed, w, 0)
    auto dist = make_distribution(cluster["speeds"], base_dir);
    for (int w = 0; w < s.workers; ++w) {
      Rng rng(s.seed, RngPurpose::Speed, uint32_t(w), 0);
      slowdown.push_back(std::max(1e-9, dist->sample(rng, uint32_t(w), 0)));
    }
  } else {
    slowdown = cluster["speeds"].get<std::vector<double>>();
  }
  StragglerSpec st;
  st.probability = cluster["stragglers"]["probability"];
  st.factor = cluster["stragglers"]["factor"];
  for (const auto& w : cluster["stragglers"]["slow"]) {
    double to = w["to"];
    st.windows.push_back(SlowWindow{w["worker"].get<int>(), w["factor"].get<double>(),
                                    seconds_to_sim(w["from"].get<double>()), to > 0 ? seconds_to_sim(to) : kNever});
  }
  StepCost cost;
  cost.per_sample = cluster["compute"]["per"] == "sample";
  cost.overhead = cluster["compute"]["overhead"];
  return ComputeTimeModel(s.seed, make_distribution(cluster["compute"], base_dir), slowdown, st, cost);
}


}  // namespace asgd

namespace asgd {

std::string host_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

json run_meta(const std::string& command_line) {
  return {{"asgdsim_version", build::version}, {"git_commit", build::git_commit}, {"git_dirty", build::git_dirty},
          {"backend", build::backend},         {"build_type", build::build_type}, {"command_line", command_line},
          {"host", host_name()},               {"start", iso_now()}};
}

void write_run_results(const std::string& dir, const Recorder& recorder, const RunOutcome& outcome, int workers,
                       json& meta, const json& summary) {
  recorder.write_metrics(dir + "/metrics.csv");
  Recorder::write_staleness(dir + "/staleness.csv", outcome.staleness_hist);
  Recorder::write_workers(dir + "/workers.csv", outcome.workers, outcome.time);
  if (recorder.tracing()) recorder.write_trace(dir + "/trace.json", workers);
  meta["end"] = iso_now();
  write_file_atomic(dir + "/meta.json", meta.dump(2) + "\n");
  write_file_atomic(dir + "/summary.json", summary.dump(2) + "\n");
}

json summary_json(const RunSpec& run, const RunOutcome& outcome, const MetricsRow& last, const json& engine_config,
                  const std::string& note, double wall_seconds) {
  return {
      {"status", outcome.status},
      {"note", note},
      {"run_id", run.run_id},
      {"engine", run.engine},
      {"engine_config", engine_config},
      {"seed", run.seed},
      {"sweep", run.sweep_values},
      {"final", {{"train_loss", finite_or_null(last.train_loss)}, {"test_loss", finite_or_null(last.test_loss)},
                 {"test_accuracy", finite_or_null(last.test_accuracy)}}},
      {"time", sim_to_seconds(outcome.time)},
      {"updates", outcome.updates},
      {"gradients", outcome.gradients},
      {"samples", outcome.samples},
      {"samples_computed", outcome.samples_computed},
      {"epochs", last.epoch},
      {"dropped_gradients", outcome.dropped},
      {"lost_gradients", outcome.lost},
      {"worker_failures", outcome.failures},
      {"staleness",
       {{"mean", outcome.staleness_mean}, {"max", outcome.staleness_max}, {"unit", outcome.staleness_unit}}},
      {"iteration_time", outcome.iterations ? json{{"mean", outcome.iteration_time_mean}, {"count", outcome.iterations}}
                                            : json(nullptr)},
      {"server",
       {{"updates", outcome.server_updates},
        {"busy_time", sim_to_seconds(outcome.server_busy)},
        {"utilisation", outcome.time > 0 ? double(outcome.server_busy) / double(outcome.time) : 0.0}}},
      {"messages",
       {{"to_server", outcome.messages_to_server},
        {"to_workers", outcome.messages_to_workers},
        {"bytes_to_server", outcome.bytes_to_server},
        {"bytes_to_workers", outcome.bytes_to_workers}}},
      {"wall_seconds", wall_seconds},
  };
}

void write_index(const Experiment& exp, const std::string& exp_dir) {
  const std::string lock_path = exp_dir + "/.index.lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot open " + lock_path + ": " + std::strerror(errno));
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    int err = errno;
    ::close(fd);
    throw IoError("cannot lock " + lock_path + ": " + std::strerror(err));
  }
  try {
    write_file_atomic(exp_dir + "/index.csv", index_csv(exp, exp_dir));
  } catch (...) {
    ::close(fd);  // releases the lock
    throw;
  }
  ::close(fd);
}

}  // namespace asgd
