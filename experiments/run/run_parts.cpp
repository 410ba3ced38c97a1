// experiments/run/run_parts.cpp — what `asgdsim run` and `asgdsim cluster` both build from a
// run's resolved config (data, model, compute-time model) and write around it.
#include "experiments/run/run_parts.h"
#include "experiments/config/config.h"
#include "experiments/config/records.h"
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include "engines/engine_registry.h"
#include "experiments/run/build_info.h"
#include "sim/data/catalog.h"
#include "sim/run/atomic_file.h"
#include "sim/run/file_lock.h"
#include "sim/base/hash.h"
#include "sim/base/interrupt.h"
#include "sim/run/recorder.h"
#include "experiments/config/resources.h"
#include "kernels/rng.h"

namespace asgd {
namespace fs = std::filesystem;

std::string iso_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

bool read_json(const std::string& path, json& out) {
  // Run files are a few KB; anything past 64 MiB (or nested past kMaxJsonDepth, or with
  // a key twice) is not one of ours.
  constexpr size_t kMaxBytes = size_t(64) << 20;
  std::string text;
  if (!read_output_file_limited(path, kMaxBytes, text) || text.size() > kMaxBytes) return false;
  try {
    out = parse_json_strict(text, /*allow_comments=*/false);
    return true;
  } catch (...) {
    return false;
  }
}

// ---- data and models from a run config ----

json data_key(const RunSpec& run) { return run.bound_data->share_key(run.settings.seed); }

std::shared_ptr<LoadedData> load_data(const RunSpec& run, const std::string& base_dir) {
  const BoundData& data = *run.bound_data;
  auto out = std::make_shared<LoadedData>();
  out->key = data_key(run);
  if (data.type().layout == DataType::Layout::None) return out;  // no samples: nothing to load
  DataLoadContext ctx;
  ctx.seed = run.settings.seed;
  ctx.base_dir = base_dir;
  ctx.check_sizes = [&](size_t features, int classes, const std::string& source) {
    check_memory_with_data(run, base_dir, features, classes, source);
  };
  out->host = data.load(ctx);
  out->train = upload(out->host.train);
  out->test = upload(out->host.test);
  for (HostDataset* h : {&out->host.train, &out->host.test})
    if (h->sparse()) {  // uploaded: the backend's copy (and its host index) is what runs read
      *h = HostDataset{{}, {}, h->n, h->dim, h->classes};
    }
  return out;
}

std::unique_ptr<Model> build_model(const BoundModel& m, const LoadedData& data, const std::string& base_dir) {
  return m.build(ModelInput{data.host.train.dim, data.host.train.classes, data.host.train.shape, data.host.description,
                            base_dir, &data.train});
}

std::string config_differences(const json& there, const json& now, size_t limit) {
  auto brief_value = [](const json& root, const json::json_pointer& at) -> std::string {
    if (!root.contains(at)) return "(absent)";
    std::string text = root.at(at).dump();
    return text.size() > 40 ? text.substr(0, 37) + "..." : text;
  };
  std::vector<std::string> keys;
  for (const auto& op : json::diff(there, now)) {
    std::string pointer = op.value("path", ""), dotted;
    json::json_pointer at(pointer);
    // "/model/hidden/0" -> "model.hidden[0]" (~1 and ~0 stand for / and ~ in a pointer)
    for (size_t i = 1, next; i <= pointer.size(); i = next + 1) {
      next = pointer.find('/', i);
      if (next == std::string::npos) next = pointer.size();
      std::string token = pointer.substr(i, next - i);
      for (size_t t; (t = token.find("~1")) != std::string::npos;) token.replace(t, 2, "/");
      for (size_t t; (t = token.find("~0")) != std::string::npos;) token.replace(t, 2, "~");
      bool index = !token.empty() && std::all_of(token.begin(), token.end(), ::isdigit);
      dotted += index ? "[" + token + "]" : (dotted.empty() ? "" : ".") + token;
    }
    keys.push_back((dotted.empty() ? std::string("(the whole file)") : dotted) + ": " + brief_value(there, at) +
                   " there, " + brief_value(now, at) + " now");
  }
  std::string out;
  for (size_t i = 0; i < keys.size() && i < limit; ++i) out += (i ? "; " : "") + keys[i];
  if (keys.size() > limit) out += " (and " + std::to_string(keys.size() - limit) + " more)";
  return out;
}

namespace {
// summary.json as the runner and the index read it back (summary_json and
// ended_summary_json write it, with more keys): how the run ended, ...
struct SummaryStatus {
  std::string status;
};
const Section<SummaryStatus>& summary_status() {
  static const Section<SummaryStatus> s = record<SummaryStatus>(
      "", "summary.json's status",
      {field(&SummaryStatus::status, keys::str("status", nullptr, "how the run ended: completed, failed, ..."))});
  return s;
}
// ... and, of a run that ended with results, which run it is and where it ended.
struct SummaryResults {
  std::string run_id;
  uint64_t updates = 0;  // metrics.csv's last row's
};
const Section<SummaryResults>& summary_results() {
  static const Section<SummaryResults> s = record<SummaryResults>(
      "", "what summary.json says of a run that ended with results",
      {field(&SummaryResults::run_id, keys::str("run_id", nullptr, "the run's id")),
       field(&SummaryResults::updates, keys::integer("updates", nullptr, "updates applied in the run", 0, kMaxCount))});
  return s;
}
// What a run's config.json says of its result files: workers.csv has a row per worker;
// trace.json is written when it traces. Its keys are the config's own.
struct ClusterWorkers {
  int workers = 0;
};
struct ResultFiles {
  ClusterWorkers cluster;
  bool trace = false;
};
const Section<ResultFiles>& result_files() {
  static const Section<ResultFiles> s = record<ResultFiles>(
      "", "what a run's config.json says of its result files",
      {field(&ResultFiles::trace, declared_key(settings_section("top"), "trace"))},
      {record_key(
          &ResultFiles::cluster, keys::any("cluster", nullptr, "the cluster"),
          record<ClusterWorkers>(
              "cluster", "its workers",
              {field(&ClusterWorkers::workers, required_key(declared_key(settings_section("cluster"), "workers")))}))});
  return s;
}
}  // namespace

std::string index_csv(const Experiment& exp, const std::string& exp_dir, const std::set<std::string>& pending) {
  std::string out = "run_id,engine";
  for (const auto& k : exp.sweep_keys) out += "," + k;
  out += ",seed,status,final_train_loss,final_test_loss,final_test_accuracy,time,updates\n";
  auto cell = [](const json& v) -> std::string {
    if (v.is_null()) return "nan";
    if (v.is_number_float()) return format_number(v.get<double>());
    const std::string text = value_text(v);
    if (text.find_first_of(",\"\n") == std::string::npos) return text;
    std::string quoted = "\"";  // RFC 4180: a list or object swept, or a string with a comma
    for (char ch : text) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return quoted + "\"";
  };
  auto member = [](const json& o, const char* key) { return o.is_object() && o.contains(key) ? o.at(key) : json(); };
  for (const auto& run : exp.runs) {
    json s;
    const std::string status = pending.count(run.run_id) ? "pending" : listed_status(exp_dir, run, s);
    out += run.run_id + "," + run.engine;
    for (const auto& k : exp.sweep_keys)  // empty: an engine.* key this run's engine does not have
      out += "," + (run.sweep_values.contains(k) ? cell(run.sweep_values[k]) : std::string());
    out += "," + std::to_string(run.seed) + "," + cell(status);
    const json f = member(s, "final");
    for (const json& v : {member(f, "train_loss"), member(f, "test_loss"), member(f, "test_accuracy"),
                          member(s, "time"), member(s, "updates")})
      out += "," + cell(v);
    out += "\n";
  }
  return out;
}

std::string listed_status(const std::string& exp_dir, const RunSpec& run, json& summary) {
  summary = json();
  const std::string dir = exp_dir + "/" + run.run_id;
  if (!read_json(dir + "/summary.json", summary)) {
    summary = json();
    return "pending";
  }
  // A summary.json is read as it is: whatever it holds (a hand edit, another program's
  // file) gives a row, its missing or odd members "nan" or "unknown".
  const auto ended = read_record(summary_status(), summary);
  const std::string status = ended ? ended->status : "unknown";
  // a folder `asgdsim run` would not skip as done is not listed as done (a result file
  // deleted or cut): the check is the runner's own
  if (ended_with_results(status) && !incomplete_results(dir, run.config, summary).empty()) return "incomplete";
  return status;
}

ComputeTimeModel build_compute_model(const RunSettings& s, const std::string& base_dir) {
  std::vector<double> slowdown = s.speeds;
  if (s.speeds_dist) {  // drawn once per worker from (seed, Speed, w, 0)
    slowdown.clear();
    auto dist = s.speeds_dist->make(base_dir);
    for (int w = 0; w < s.workers; ++w) {
      Rng rng(s.seed, RngPurpose::Speed, uint32_t(w), 0);
      slowdown.push_back(std::max(1e-9, dist->sample(rng, uint32_t(w), 0)));
    }
  }
  ComputeTimeModel model(s.seed, s.compute_dist->make(base_dir), slowdown, s.stragglers, s.step_cost);
  if (s.clients.count > 0) {  // drawn once per client from (seed, ClientSpeed, c, 0)
    auto dist = s.clients.speeds->make(base_dir);
    std::vector<float> factors(size_t(s.clients.count));
    for (size_t c = 0; c < factors.size(); ++c) {
      Rng rng(s.seed, RngPurpose::ClientSpeed, uint32_t(c), 0);
      factors[c] = float(std::max(1e-9, dist->sample(rng, uint32_t(c), 0)));
    }
    if (!s.clients.devices.empty()) {  // times each device's ms per sample over the median device's
      auto devices = std::make_shared<const ClientDevices>(
          read_client_devices(data_path(s.clients.devices, base_dir), size_t(s.clients.count)));
      std::vector<float> ms = devices->compute_ms;
      std::nth_element(ms.begin(), ms.begin() + ptrdiff_t(ms.size() / 2), ms.end());
      const double median = ms[ms.size() / 2];
      for (size_t c = 0; c < factors.size(); ++c)
        factors[c] = float(double(factors[c]) * devices->compute_ms[c] / median);
      model.set_client_devices(std::move(devices));
    }
    model.set_client_slowdown(std::move(factors));
  }
  return model;
}

RunParts make_run_parts(const RunSpec& run, RunSettings settings, std::shared_ptr<LoadedData> data,
                        const std::string& base_dir) {
  RunParts p;
  p.data = data ? std::move(data) : load_data(run, base_dir);
  p.model = build_model(*run.bound_model, *p.data, base_dir);
  if (run.bound_model->type().reads == ModelType::Reads::External)  // its size is known only now
    check_memory_with_model(run, settings, base_dir, p.model->num_params(), "the PyTorch module");
  p.compute = std::make_unique<ComputeTimeModel>(build_compute_model(settings, base_dir));
  p.engine = make_engine(*run.bound_engine);
  p.settings = std::move(settings);
  return p;
}

std::unique_ptr<Simulation> RunParts::simulation(WorkerPool& pool, Recorder& recorder) const {
  const bool uses_data = model->uses_data();
  return std::make_unique<Simulation>(settings, *model, uses_data ? &data->train : nullptr,
                                      uses_data ? &data->test : nullptr, pool, *compute, recorder);
}

}  // namespace asgd

namespace asgd {

std::string host_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

json run_meta(const std::string& command_line) {
  return {{"asgdsim_version", build::version},
          {"git_commit", build::git_commit},
          {"git_dirty", build::git_dirty},
          {"backend", build::backend},
          {"build_type", build::build_type},
          {"command_line", command_line},
          {"host", host_name()},
          {"start", iso_now()}};
}

void write_run_results(const std::string& dir, const Recorder& recorder, const RunOutcome& outcome, int workers,
                       json& meta, const json& summary) {
  recorder.write_metrics(dir + "/metrics.csv");
  Recorder::write_staleness(dir + "/staleness.csv", outcome.staleness_hist);
  Recorder::write_workers(dir + "/workers.csv", outcome.workers, outcome.time);
  // data.partition: each data owner's label counts (a population's clients: up to
  // kPartitionRows of them; summary.json's clients.partition summarises every population)
  if (!outcome.partition_labels.empty() && outcome.partition_labels.size() <= kPartitionRows) {
    std::string csv = outcome.clients > 0 ? "client,samples" : "worker,samples";
    for (size_t c = 0; c < outcome.partition_labels[0].size(); ++c) csv += ",label_" + std::to_string(c);
    csv += "\n";
    for (size_t w = 0; w < outcome.partition_labels.size(); ++w) {
      uint64_t total = 0;
      for (uint64_t k : outcome.partition_labels[w]) total += k;
      csv += std::to_string(w) + "," + std::to_string(total);
      for (uint64_t k : outcome.partition_labels[w]) csv += "," + std::to_string(k);
      csv += "\n";
    }
    write_file_atomic(dir + "/partition.csv", csv);
  }
  if (recorder.tracing()) recorder.write_trace(dir + "/trace.json", workers);
  meta["end"] = iso_now();
  write_file_atomic(dir + "/meta.json", meta.dump(2) + "\n");
  write_file_atomic(dir + "/summary.json", summary.dump(2) + "\n");
}

json summary_json(const RunSpec& run, const RunOutcome& outcome, const MetricsRow& last, const json& engine_config,
                  const std::string& note, double wall_seconds) {
  json summary = {
      {"status", outcome.status},
      {"note", note},
      {"run_id", run.run_id},
      {"engine", run.engine},
      {"engine_config", engine_config},
      {"compute_model", run.settings.compute_model},
      {"seed", run.seed},
      {"sweep", run.sweep_values},
      {"final",
       {{"train_loss", finite_or_null(last.train_loss)},
        {"test_loss", finite_or_null(last.test_loss)},
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
      {"iteration_time",
       outcome.iterations ? json{{"mean", outcome.iteration_time_mean}, {"count", outcome.iterations}} : json(nullptr)},
      {"server",
       {{"updates", outcome.server_updates},
        {"busy_time", sim_to_seconds(outcome.server_busy)},
        {"utilisation", outcome.time > 0 ? double(outcome.server_busy) / double(outcome.time) : 0.0}}},
      {"messages",
       {{"to_server", outcome.messages_to_server},
        {"to_workers", outcome.messages_to_workers},
        {"bytes_to_server", outcome.bytes_to_server},
        {"bytes_to_workers", outcome.bytes_to_workers},
        {"peak_sync_bytes", outcome.peak_sync_bytes},
        {"mean_bandwidth", mean_bandwidth(outcome)}}},
      {"compute_utilisation", compute_utilisation(outcome)},
      {"wall_seconds", wall_seconds},
  };
  if (outcome.clients > 0) summary["clients"] = clients_json(outcome);
  return summary;
}

// The quantiles a population's summary gives of a per-client count: min, median, max.
static json spread(std::vector<uint64_t> v) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  return {{"min", v.front()}, {"median", v[v.size() / 2]}, {"max", v.back()}};
}

json clients_json(const RunOutcome& outcome) {
  json c = {{"count", outcome.clients},
            {"draws", outcome.client_draws},
            {"distinct", outcome.clients_distinct},
            {"departed", outcome.clients_departed}};
  if (outcome.partition_labels.empty()) return c;
  std::vector<uint64_t> samples, labels;  // per client: its samples, the classes it has
  for (const auto& row : outcome.partition_labels) {
    uint64_t total = 0, present = 0;
    for (uint64_t k : row) {
      total += k;
      present += k > 0;
    }
    samples.push_back(total);
    labels.push_back(present);
  }
  c["partition"] = {{"samples", spread(samples)},
                    {"classes", spread(labels)},
                    {"csv", outcome.partition_labels.size() <= kPartitionRows}};
  return c;
}

double compute_utilisation(const RunOutcome& outcome) {
  if (outcome.time <= 0 || outcome.workers.empty()) return 0.0;
  double compute = 0;
  for (const WorkerStats& w : outcome.workers) compute += sim_to_seconds(w.compute);
  return compute / (double(outcome.workers.size()) * sim_to_seconds(outcome.time));
}

double mean_bandwidth(const RunOutcome& outcome) {
  if (outcome.time <= 0 || outcome.workers.empty()) return 0.0;
  return (outcome.bytes_to_server + outcome.bytes_to_workers) /
         (double(outcome.workers.size()) * sim_to_seconds(outcome.time));
}

json ended_summary_json(const RunSpec& run, const std::string& status, const std::string& why) {
  json s = {{"status", status},
            {"note", status == "failed" ? "the run failed: " + why : why},
            {"run_id", run.run_id},
            {"engine", run.engine},
            {"seed", run.seed},
            {"sweep", run.sweep_values},
            {"final", {{"train_loss", nullptr}, {"test_loss", nullptr}, {"test_accuracy", nullptr}}},
            {"time", nullptr},
            {"updates", nullptr}};
  if (status == "failed") s["error"] = why;
  return s;
}

const std::vector<std::string>& run_result_files() {
  static const std::vector<std::string> files = {"summary.json", "metrics.csv", "staleness.csv", "workers.csv",
                                                 "trace.json",   "meta.json",   "config.json"};
  return files;
}

void refuse_link(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    throw IoError(path +
                  " is a symbolic link: asgdsim never writes or deletes through a link inside the output "
                  "folder (only --out itself may be one); remove the link, or choose another --out");
}

void make_experiment_folder(const std::string& exp_dir) {
  refuse_link(exp_dir);
  make_directories(exp_dir);
  refuse_link(exp_dir);                                                             // planted while it was made
  for (const char* lock : {"/.lock", "/.index.lock"}) refuse_link(exp_dir + lock);  // opened with O_NOFOLLOW too
}

void clear_run_folder(const std::string& dir) {
  refuse_link(dir);  // make_directories(dir) went through it: nothing is removed or written there
  for (const auto& f : run_result_files()) {
    const std::string path = dir + "/" + f;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      throw IoError("cannot remove " + path + " before re-running the run: " + std::strerror(errno));
  }
  remove_stale_temp_files(dir, run_result_files());
}

namespace {
// The last line of a text file (without its newline), "" if none; reads only the head
// (its first line into *first) and the tail. An output-tree file: a FIFO is refused.
std::string last_line(const std::string& path, std::string* first = nullptr) {
  const int fd = open_output_file(path);
  if (fd < 0) return "";
  struct stat st;
  const off_t size = ::fstat(fd, &st) == 0 ? st.st_size : 0;
  auto read_at = [&](off_t from, size_t n) {
    std::string s(n, '\0');
    const ssize_t got = ::pread(fd, &s[0], n, from);
    s.resize(got > 0 ? size_t(got) : 0);
    return s;
  };
  if (first) {
    const std::string head = read_at(0, 4096);
    *first = head.substr(0, head.find('\n'));
  }
  const off_t from = std::max<off_t>(0, size - 4096);
  std::string tail = read_at(from, size_t(size - from));
  ::close(fd);
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  size_t nl = tail.rfind('\n');
  return nl == std::string::npos ? (from == 0 ? tail : "") : tail.substr(nl + 1);
}
}  // namespace

bool ended_with_results(const std::string& status) {
  return status == "completed" || status == "diverged" || status == "stalled";
}

std::string incomplete_results(const std::string& dir, const json& config, const json& summary) {
  const auto record = read_record(run_config_record(), config);
  if (!record) return "config.json has no run record (" + record.why + ")";
  const auto files = read_record(result_files(), config);
  if (!files) return "config.json is not readable (" + files.why + ")";
  const auto results = read_record(summary_results(), summary);
  if (!results) return "summary.json is not readable (" + results.why + ")";
  if (results->run_id != record->run.run_id) return "summary.json is another run's";
  for (const char* f : {"metrics.csv", "staleness.csv", "workers.csv", "meta.json"})
    if (::access((dir + "/" + f).c_str(), R_OK) != 0) return std::string(f) + " is missing";
  std::string header;
  const std::string last = last_line(dir + "/metrics.csv", &header);
  if (header.rfind("time,updates,", 0) != 0) return "metrics.csv has no header";
  // The last row is taken at the end of the run: its updates are the summary's.
  size_t a = last.find(','), b = a == std::string::npos ? a : last.find(',', a + 1);
  const std::string updates = std::to_string(results->updates);
  if (b == std::string::npos || last.substr(a + 1, b - a - 1) != updates)
    return "metrics.csv does not end at the summary's " + updates + " updates";
  std::string workers_header;
  const std::string last_worker = last_line(dir + "/workers.csv", &workers_header);
  if (workers_header.rfind("worker,", 0) != 0) return "workers.csv has no header";
  // a row per worker, the last one worker N - 1's, written whole
  const std::string last_worker_id = std::to_string(files->cluster.workers - 1);
  if (last_worker.rfind(last_worker_id + ",", 0) != 0 ||
      std::count(last_worker.begin(), last_worker.end(), ',') !=
          std::count(workers_header.begin(), workers_header.end(), ','))
    return "workers.csv does not end with worker " + last_worker_id + "'s whole row";
  std::string staleness_header;
  last_line(dir + "/staleness.csv", &staleness_header);
  if (staleness_header.rfind("staleness,", 0) != 0) return "staleness.csv has no header";
  if (files->trace && ::access((dir + "/trace.json").c_str(), R_OK) != 0) return "trace.json is missing";
  return "";
}

std::string lock_holder_line(const std::string& what) {
  return "pid " + std::to_string(::getpid()) + " on " + host_name() + " since " + iso_now() + " (" + what + ")";
}

std::string experiment_identity(const json& resolved, int shards) {
  return fnv1a64_hex(resolved.dump()) + " in " + std::to_string(std::max(1, shards)) + " shard" +
         (shards > 1 ? "s" : "");
}

std::string lock_holder(const std::string& text) {
  std::string holder = text.substr(0, text.find('\n'));
  while (!holder.empty() && holder.back() == '\0') holder.pop_back();
  return holder.empty() ? "another process" : printable(holder);
}

namespace {
constexpr const char* kIdentityTag = "config ";  // the lock file's line that says which config holds it

// The lock file's text: the holder's line, then "config IDENTITY" when it has one.
std::string identity_in(const std::string& text) {
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    if (text.compare(at, std::strlen(kIdentityTag), kIdentityTag) == 0)
      return text.substr(at + std::strlen(kIdentityTag), nl - at - std::strlen(kIdentityTag));
    at = nl + 1;
  }
  return "";
}

// An flock on the experiment folder itself, held while a process decides whether it may
// share .lock: the first sharer writes its config's identity there before the next one
// reads it. Best effort: a file system without flock on folders gets no gate.
class FolderGate {
 public:
  explicit FolderGate(const std::string& dir)
      : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) {
    if (fd_ < 0) return;
    for (int i = 0; i < 3000; ++i) {  // held for microseconds by others; polled, so no signal waits on it
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
      if (errno != EWOULDBLOCK && errno != EINTR) break;
      ::usleep(1000);
    }
    ::close(fd_);
    fd_ = -1;
  }
  ~FolderGate() {
    if (fd_ >= 0) ::close(fd_);
  }
  FolderGate(const FolderGate&) = delete;
  FolderGate& operator=(const FolderGate&) = delete;

 private:
  int fd_;
};
}  // namespace

ExperimentLock::ExperimentLock(const std::string& exp_dir, Mode mode, bool wait, const std::string& command_line,
                               bool quiet, const std::string& identity)
    : file_(std::make_unique<FileLock>(exp_dir + "/.lock")) {
  FileLock& f = *file_;
  const std::string me =
      lock_holder_line(command_line) + "\n" + (identity.empty() ? std::string() : kIdentityTag + identity + "\n");
  bool said = false;
  for (;;) {
    std::string busy;  // why the lock cannot be had now ("" once it is held)
    if (mode == Mode::Exclusive) {
      if (f.try_lock(FileLock::Mode::Exclusive))
        f.set_text(me);
      else
        busy = "in use by " + lock_holder(f.text());
    } else {
      FolderGate gate(exp_dir);
      if (f.try_lock(FileLock::Mode::Exclusive)) {  // no one holds it: this process says whose it is
        f.set_text(me);
        if (!f.try_lock(FileLock::Mode::Shared)) busy = "in use by " + lock_holder(f.text());  // taken in between
      } else if (f.try_lock(FileLock::Mode::Shared)) {  // shared by others: of this config only
        const std::string text = f.text(), theirs = identity_in(text);
        if (theirs.empty() || identity.empty() || theirs == identity) {
          if (theirs.empty() && !identity.empty()) f.set_text(me);  // held by `asgdsim index` alone
        } else {
          f.unlock();
          busy = "in use by processes of another config (" + lock_holder(text) + ", config " + theirs +
                 "; this one is " + identity + "), which share it among themselves";
        }
      } else {
        busy = "in use by " + lock_holder(f.text());
      }
    }
    if (busy.empty()) break;
    if (!wait)
      throw IoError("experiment folder " + exp_dir + " is " + busy +
                    ": wait for it to end (or pass --wait to wait for it), or choose another --out or name");
    if (!said && !quiet) std::cerr << "asgdsim: waiting for " << exp_dir << ", " << busy << "\n";
    said = true;
    if (interrupt_requested()) return;  // held_ stays false
    ::usleep(100 * 1000);
  }
  held_ = true;
}

ExperimentLock::~ExperimentLock() = default;  // closing the file releases the lock

RunPlan plan_runs(const Experiment& exp, const std::string& exp_dir, const std::vector<json>& configs,
                  const ReplacePolicy& replace, int shard, int shards, const std::set<size_t>& remeasured) {
  RunPlan plan;
  plan.lines.resize(exp.runs.size());
  for (size_t k = 0; k < exp.runs.size(); ++k) {
    if (int(k % size_t(std::max(1, shards))) != shard) continue;  // another shard's
    const RunSpec& run = exp.runs[k];
    ReplacePolicy policy = replace;  // a run whose trace is measured anew is made again
    policy.rerun = policy.rerun || remeasured.count(k) > 0;
    const EarlierRun earlier =
        earlier_run(exp_dir + "/" + run.run_id, configs.empty() ? run.config : configs.at(k), policy, run_tag(exp, k));
    plan.lines[k] = earlier.line;
    if (earlier.superseded) plan.aside.push_back(run.run_id);  // this shard's run: no other shard touches it
    if (!earlier.done) plan.todo.push_back(k);
  }
  return plan;
}

void prepare_experiment_folder(const Experiment& exp, const std::string& exp_dir, RunPlan& plan,
                               const std::vector<std::string>& others, int shard, int shards, bool supersede,
                               bool write_index_now) {
  const bool sharded = shards > 1;
  json old_experiment;  // the config that made what is here, as this process found it
  if (!read_json(exp_dir + "/experiment.json", old_experiment) || (sharded && old_experiment == exp.resolved))
    old_experiment = nullptr;  // another shard may have replaced it already: then it is not written aside
  // Shard 0 alone moves the others (the folders are no shard's runs, so no other shard writes them).
  if (shard == 0) plan.aside.insert(plan.aside.end(), others.begin(), others.end());
  if (sharded && !old_experiment.is_null() && old_experiment != exp.resolved && !supersede)
    // shards of one experiment share experiment.json; one of another config must not replace it
    throw IoError(exp_dir + "/experiment.json is another config's (" +
                  config_differences(old_experiment, exp.resolved) +
                  "): a sharded run (--shard, mpirun) never replaces it; pass --supersede to replace it (and move "
                  "the runs of that config aside), or choose another --out");
  move_runs_aside(exp_dir, plan.aside, old_experiment);
  if (!sharded) remove_stale_temp_files(exp_dir, {"experiment.json", "index.csv"});  // no other process writes here now
  write_file_atomic(exp_dir + "/experiment.json", exp.resolved.dump(2) + "\n");
  if (write_index_now && !plan.todo.empty()) {
    std::set<std::string> pending;
    for (size_t k : plan.todo) pending.insert(exp.runs[k].run_id);
    write_index(exp, exp_dir, pending);
  }
}

void write_index(const Experiment& exp, const std::string& exp_dir, const std::set<std::string>& pending) {
  FileLock lock(exp_dir + "/.index.lock");  // a planted link or FIFO: refused
  // Polled rather than waited for in flock: another shard holds it only while it writes
  // index.csv, and a thread asleep in usleep takes signals where one blocked in flock may
  // not (TSan defers handlers to its intercepted calls), so a second Ctrl-C still ends
  // the process at once.
  while (!lock.try_lock(FileLock::Mode::Exclusive)) ::usleep(10 * 1000);
  write_file_atomic(exp_dir + "/index.csv", index_csv(exp, exp_dir, pending));
}

std::string run_tag(const Experiment& exp, size_t k) {
  return "[" + std::to_string(k + 1) + "/" + std::to_string(exp.runs.size()) + "] " + exp.runs[k].run_id;
}

EarlierRun earlier_run(const std::string& dir, const json& config, const ReplacePolicy& policy,
                       const std::string& tag) {
  refuse_link(dir);  // checked before anything is written
  EarlierRun earlier;
  json old_config, old_summary;
  if (!read_json(dir + "/config.json", old_config)) return earlier;
  if (old_config != config) {
    const std::string differences = config_differences(old_config, config);
    if (!policy.supersede)
      throw IoError(dir + " holds a run of a different config (" + differences +
                    "); pass --supersede to move it aside (nothing is deleted), or choose another --out");
    earlier.superseded = true;
    earlier.line = tag + ": its folder holds a run of a different config (" + differences + "): moved aside";
    return earlier;
  }
  if (!read_json(dir + "/summary.json", old_summary)) return earlier;
  const auto ended = read_record(summary_status(), old_summary);
  if (!ended || !ended_with_results(ended->status)) return earlier;  // results, kept
  const std::string& status = ended->status;
  const std::string missing = incomplete_results(dir, config, old_summary);
  earlier.done = missing.empty() && !policy.rerun;
  earlier.line = tag + ": " + status + " earlier" +
                 (!missing.empty() ? ", but " + missing + ": re-running it"
                  : earlier.done   ? ", skipped (--rerun re-runs it)"
                                   : ", re-running it (--rerun)");
  return earlier;
}

std::vector<std::string> runs_of_other_configs(const std::string& exp_dir, const Experiment& exp) {
  std::set<std::string> ours;
  for (const RunSpec& run : exp.runs) ours.insert(run.run_id);
  std::vector<std::string> others;
  std::error_code ec;
  for (fs::directory_iterator it(exp_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->symlink_status().type() == fs::file_type::directory && !ours.count(name) &&
        fs::is_regular_file(it->path() / "config.json"))
      others.push_back(name);
  }
  std::sort(others.begin(), others.end());
  return others;
}

void refuse_runs_of_other_configs(const std::string& exp_dir, const std::vector<std::string>& others, bool supersede) {
  if (others.empty() || supersede) return;
  std::string named;
  for (size_t i = 0; i < others.size() && i < 3; ++i) named += (i ? ", " : "") + others[i];
  if (others.size() > 3) named += ", ... (" + std::to_string(others.size() - 3) + " more)";
  throw IoError(exp_dir + " holds " + std::to_string(others.size()) + " run folder" + (others.size() == 1 ? "" : "s") +
                " that this config does not make (" + named +
                "): their results would be read with this experiment's; pass --supersede to move them into " + exp_dir +
                "/superseded-<UTC time>/ (no run is re-run), or choose another --out or name");
}

void move_runs_aside(const std::string& exp_dir, const std::vector<std::string>& names, const json& made_them) {
  if (names.empty()) return;
  std::string stamp = iso_now();
  stamp.erase(std::remove_if(stamp.begin(), stamp.end(), [](char c) { return c == '-' || c == ':'; }), stamp.end());
  // create_directory is false for a folder that exists: another shard's, made the same second
  std::string aside;
  std::error_code ec;
  for (int k = 1;; ++k) {
    aside = exp_dir + "/superseded-" + stamp + (k == 1 ? "" : "-" + std::to_string(k));
    if (fs::create_directory(aside, ec)) break;
    if (ec) throw IoError("cannot create " + aside + ": " + ec.message());
  }
  for (const std::string& name : names) {
    fs::rename(exp_dir + "/" + name, aside + "/" + name, ec);
    if (ec) throw IoError("cannot move " + exp_dir + "/" + name + " into " + aside + ": " + ec.message());
  }
  if (!made_them.is_null())  // index.csv stays: it also lists runs that stay
    write_file_atomic(aside + "/experiment.json", made_them.dump(2) + "\n");
  std::cerr << "moved " << names.size() << " run folder" << (names.size() == 1 ? "" : "s") << " of another config into "
            << aside << "\n";
}

}  // namespace asgd
