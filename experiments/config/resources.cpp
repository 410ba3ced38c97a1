// experiments/config/resources.cpp — run scale and memory estimates from a resolved run config
// (see resources.h). The per-item byte counts are the sizes of the structures that hold
// them (sim/, engines/, kernels/), rounded up for allocator and container overhead; the
// per-worker and per-row constants were measured (docs/reliability.md).
#include "experiments/config/resources.h"
#include "experiments/config/config.h"
#include "sim/data/catalog.h"
#include "sim/models/catalog.h"
#include "sim/data/dataset.h"
#include "sim/data/idx_reader.h"  // DataError
#include "sim/run/settings.h"
#include "engines/engine_registry.h"
#include <sys/resource.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>

namespace asgd {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kFloat = 4;  // bytes per parameter, gradient or data value
// Bookkeeping per simulated worker beyond its buffers (job record, stats, engine state,
// per-worker vectors of the scheduler and the engines): measured ~0.6 KB, rounded up.
constexpr double kWorkerBytes = 1024;
// One metrics row: the record (104 bytes), its CSV text when written, vector growth.
constexpr double kRowBytes = 512;
// One trace span: the record (32 bytes), its JSON text when written (~110), growth.
constexpr double kSpanBytes = 256;
constexpr double kSpansPerGradient = 4;  // pull, compute, push, and an update instant

double mean_speed_factor(const RunSettings& rs) {
  if (rs.speeds_dist) {
    try {
      return rs.speeds_dist->make()->mean();
    } catch (const std::exception&) {
    }
    return 1;
  }
  if (rs.speeds.empty()) return 1;
  double sum = 0;
  for (double f : rs.speeds) sum += f;
  return sum / double(rs.speeds.size());
}

}  // namespace

ModelSizes model_sizes(const BoundModel& model, const BoundData& data) {
  ModelSizes z;
  if (const std::optional<double> params =
          model.params_unbuilt()) {  // building it would allocate what is being estimated
    z.params = *params;
    return z;
  }
  if (model.type().reads == ModelType::Reads::External) return z;  // its sizes are the module's: not known here
  const DataShape d = data.shape();
  try {  // the model the run builds (construction allocates nothing but its layer list)
    const auto m = model.build(ModelInput{size_t(d.in), d.classes, d.image, "the data"});
    z.params = double(m->num_params());
    z.train_floats_per_sample = double(m->floats_per_sample(true));
    z.eval_floats_per_sample = double(m->floats_per_sample(false));
    z.flops_per_sample = m->flops_per_sample();
  } catch (const std::exception&) {
    // a model its data cannot feed: reported by the config's own checks
  }
  return z;
}

namespace {

// The estimates over the run's parts: its settings (the caller's: tracing may be on), its
// bound model, data and engine.
struct Sizing {
  const RunSettings& rs;
  const BoundModel& model;
  const BoundData& data;
  const BoundEngine& engine;
};

RunScale run_scale(const Sizing& run, const Distribution& compute, const ModelSizes* known) {
  const RunSettings& rs = run.rs;
  RunScale s;
  const double workers = std::max(1, rs.workers);
  const double batch = std::max<double>(1, double(rs.batch_size));
  const double samples = std::max(1.0, run.data.shape().train);
  const double stop_time = rs.stop_time == kNever ? 0 : sim_to_seconds(rs.stop_time);

  // A step: compute (overhead + the batch's or the step's mean draw, x mean slowdown, x the
  // transient stragglers' mean factor), then the engine's messages per step (a pull and a
  // push for async, ssp and the sync family; one exchange per period or round for easgd
  // and local_sgd) over the slower of the shard links and the worker's NIC.
  double straggle = 1 + rs.stragglers.probability * (rs.stragglers.factor - 1);
  const StepCost& cost = rs.step_cost;
  double step = (cost.overhead + compute.mean() * (cost.per_sample ? batch : 1)) * mean_speed_factor(rs) * straggle;
  const EngineCost engine = run.engine.cost(rs.workers);
  const double messages = engine.messages_per_step;
  double bytes_per_second = kInf;
  if (rs.network.bandwidth > 0) bytes_per_second = rs.network.bandwidth * std::max(1, rs.network.shards);
  if (rs.network.worker_bandwidth > 0) bytes_per_second = std::min(bytes_per_second, rs.network.worker_bandwidth);
  const double bytes =
      message_bytes(rs.network, size_t(known ? known->params : model_sizes(run.model, run.data).params));
  step += messages * (bytes / bytes_per_second + rs.network.latency);
  s.step_seconds = std::isfinite(step) ? step : kInf;

  // Gradients per update, at most: one (async, ssp), a round of every worker (sync
  // family), every worker's local steps (local_sgd, easgd).
  const double per_update = engine.gradients_per_update;

  double g = kInf;
  if (rs.stop_gradients > 0) g = std::min(g, double(rs.stop_gradients));
  if (rs.stop_updates > 0) g = std::min(g, double(rs.stop_updates) * per_update + workers);
  if (rs.stop_epochs > 0) g = std::min(g, std::ceil(rs.stop_epochs * samples / batch) + workers);
  // A step under half a nanosecond rounds to 0 ns: virtual time would not advance.
  if (stop_time > 0 && s.step_seconds >= 0.5e-9) g = std::min(g, stop_time * workers / s.step_seconds + workers);
  s.gradients = g;
  s.updates = rs.stop_updates > 0 ? std::min(double(rs.stop_updates), g) : g;
  s.epochs = g * batch / samples;
  s.seconds = stop_time > 0 ? stop_time : std::isfinite(g) ? g * s.step_seconds / workers : kInf;
  return s;
}

// A part of the estimate: the key that drives it, what it is, its bytes (none: left out).
using AddPart = std::function<void(std::string key, std::string what, double bytes)>;
// A number as the parts say it (4 significant digits).
std::string fmt4(double v) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.4g", v);
  return s;
}

// Data: inputs and labels as floats, on the host and in backend memory (the same RAM on
// CPU backends), the raw file bytes while converting, and the sample order.
void add_data_parts(const AddPart& add, const DataShape& d, const RunSettings& rs, double workers) {
  const auto n = fmt4;
  if (d.sparse)  // both copies while uploading, as stored (CSR)
    add("data.train_samples",
        n(d.train) + " + " + n(d.test) + " sparse samples of " + n(d.features_per_sample) + " features each",
        2 * d.stored_values * kFloat);
  else
    add("data", n(d.train) + " + " + n(d.test) + " samples x " + n(d.in) + " features", 2 * d.stored_values * kFloat);
  add("data", "the raw data files", d.raw_bytes);
  add(d.samples_key, "the sample order of " + n(d.train) + " samples", d.train * 4);
  // A split by label (data.partition): each worker's label counts, and partition.csv's text
  // of them (up to 8 digits and a comma each), beside the parts themselves (the samples' ids).
  if (rs.partition.kind != PartitionSpec::Kind::Iid)
    add("data.partition", n(workers) + " workers x " + n(d.classes) + " classes' label counts (partition.csv)",
        workers * std::max(1, d.classes) * (8 + 9) + d.train * 4);
}

// What the run records: metrics rows (the start, one per eval interval, the end; an
// interval in epochs is checked after each update, so at most one row per update) and
// trace spans.
void add_record_parts(const AddPart& add, const RunSettings& rs, const RunScale& scale) {
  const auto n = fmt4;
  const std::string& unit = word_of(eval_unit_words(), rs.eval_unit);
  const double every = rs.eval_every;
  double span = rs.eval_unit == EvalUnit::Time      ? scale.seconds
                : rs.eval_unit == EvalUnit::Updates ? scale.updates
                                                    : scale.epochs;
  double rows = every > 0 ? span / every + 2 : kInf;
  if (rs.eval_unit == EvalUnit::Epochs) rows = std::min(rows, scale.updates + 2);
  add("eval.every", n(rows) + " metrics rows (eval every " + n(every) + " " + unit + ")", rows * kRowBytes);
  if (rs.trace)
    add("trace", n(scale.gradients) + " gradients' trace spans", scale.gradients * kSpansPerGradient * kSpanBytes);
}

MemoryEstimate run_memory(const Sizing& run, const Distribution& compute, const ModelSizes* known) {
  const RunSettings& rs = run.rs;
  MemoryEstimate m;
  const DataShape d = run.data.shape();
  const double workers = std::max(1, rs.workers);
  const double batch = std::max<double>(1, double(rs.batch_size));
  const ModelSizes sizes = known ? *known : model_sizes(run.model, run.data);
  const double params = sizes.params;
  const double vec = params * kFloat;
  const RunScale scale = run_scale(run, compute, &sizes);
  // The key that sets the model's size: its dim, the data's features (a sparse model has a
  // row per feature), or the model's layers.
  const std::string model_key = run.model.params_unbuilt() ? "model.dim" : d.sparse ? "data.features" : "model";
  const AddPart add = [&m](std::string key, std::string what, double bytes) {
    if (bytes > 0) m.parts.push_back({std::move(key), std::move(what), bytes});
  };
  const auto n = fmt4;

  // Parameter versions: the model of record, its momentum, and the history forced
  // staleness keeps (no more versions than there are updates).
  const double history = std::min(double(rs.staleness_tau), scale.updates);  // 0 unless forced
  // (Adam's state is two vectors: one more.)
  const double state = rs.optimizer.adam() ? 2 : 1;
  add(model_key,
      std::string("the model of record and its ") + (rs.optimizer.adam() ? "Adam moments" : "momentum") + " (" +
          n(params) + " parameters)",
      (1 + state) * vec);
  const std::string history_key = rs.staleness != StalenessMode::Geometric ? "staleness.tau"
                                  : rs.staleness_max > 0                   ? "staleness.max"
                                                                           : "staleness.mean";
  add(history_key, "the " + n(history) + " parameter versions forced staleness keeps", history * vec);

  // Per worker: a gradient in flight and the parameters it was computed on; replicas of
  // their own for local SGD and EASGD (EAMSGD: two more vectors) and local SGD's and
  // DiLoCo's optimizer state; minibatch ids.
  const EngineCost cost = run.engine.cost(rs.workers);
  const double copies = cost.vectors_per_worker + (cost.optimizer_per_worker && rs.optimizer.stateful() ? state : 0);
  // Named after the factor more out of the ordinary: the workers, or the model's size.
  add(vec > workers * kWorkerBytes ? model_key : "cluster.workers",
      n(workers) + " workers x " + n(copies) + " vectors of " + n(params) + " parameters", workers * copies * vec);
  add("cluster.workers", n(workers) + " workers' bookkeeping", workers * kWorkerBytes);
  add("train.batch_size", n(workers) + " workers x minibatches of " + n(batch) + " sample ids",
      workers * batch * 2 * 4);

  // Activations: each thread computing a gradient holds the model's workspace for its
  // minibatch (Model::floats_per_sample: activations, their gradients, the layers' own
  // buffers), or, evaluating, for a chunk of at most 1,024 rows and 16 MiB.
  const double eval_row = sizes.eval_floats_per_sample + 2;  // + the row's loss and correct
  const double eval_rows = std::max(1.0, std::min(1024.0, std::floor(4194304.0 / eval_row)));
  const double per_thread =
      std::max(batch * sizes.train_floats_per_sample, eval_rows * eval_row * (sizes.eval_floats_per_sample > 0));
  const double threads = std::min(workers, double(std::max(1u, std::thread::hardware_concurrency())));
  add("train.batch_size",
      n(threads) + " threads x the model's workspace for " + n(batch) + " samples (" +
          n(sizes.train_floats_per_sample) + " floats each)",
      threads * per_thread * kFloat);

  add_data_parts(add, d, rs, workers);
  add_record_parts(add, rs, scale);

  std::stable_sort(m.parts.begin(), m.parts.end(),
                   [](const MemoryPart& a, const MemoryPart& b) { return a.bytes > b.bytes; });
  for (const auto& p : m.parts) m.total += p.bytes;
  return m;
}

Sizing sizing(const RunSpec& run, const RunSettings& settings) {
  return {settings, *run.bound_model, *run.bound_data, *run.bound_engine};
}

}  // namespace

RunScale estimate_run_scale(const RunSpec& run, const Distribution& compute, const ModelSizes* known) {
  return run_scale(sizing(run, run.settings), compute, known);
}

MemoryEstimate estimate_run_memory(const RunSpec& run, const Distribution& compute, const ModelSizes* known) {
  return run_memory(sizing(run, run.settings), compute, known);
}

void check_run_resources(const RunSpec& run, const Distribution& compute, Validator& v) {
  const RunScale scale = estimate_run_scale(run, compute);
  if (!std::isfinite(scale.gradients)) {  // only stop.time bounds it, and steps take no time
    v.error("stop.time",
            "the run can never reach it: a worker's step takes 0 ns of virtual time (cluster.compute has "
            "mean " +
                brief(json(compute.mean())) +
                " s, rounded to whole nanoseconds, and the "
                "network charges nothing), so "
                "virtual time never advances; give cluster.compute a duration >= 1 ns, or add a limit on "
                "stop.updates, stop.gradients or stop.epochs");
    return;
  }
  const MemoryEstimate m = estimate_run_memory(run, compute);
  const double budget = memory_limit_bytes();
  if (m.total <= budget) return;
  v.error(m.parts.front().key, memory_refusal(m, budget) + ". Lower " + m.parts.front().key);
}

std::string memory_refusal(const MemoryEstimate& m, double budget) {
  // Named after the limit that binds: a ulimit below the machine's memory, else the machine.
  std::string whose = " this machine has";
  const double physical = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  for (int resource : {RLIMIT_DATA, RLIMIT_AS}) {
    rlimit r{};
    if (::getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY && double(r.rlim_cur) < physical)
      whose = std::string(" this process may use under its ") + (resource == RLIMIT_AS ? "address-space" : "data") +
              " limit of " + format_bytes(double(r.rlim_cur)) + " (ulimit " + (resource == RLIMIT_AS ? "-v" : "-d") +
              "; less what it already maps and its threads' stacks" + (resource == RLIMIT_AS ? " and arenas" : "") +
              ")";
  }
  std::string text = "this run would need about " + format_bytes(m.total) + " of memory, more than the " +
                     format_bytes(budget) + whose;
  if (!m.parts.empty())
    text += "; the largest part is " + m.parts.front().what + ": " + format_bytes(m.parts.front().bytes);
  return text;
}

void check_memory_with_data(const RunSpec& run, const std::string& base_dir, size_t features, int classes,
                            const std::string& source) {
  json keys = run.bound_data->keys();  // the data as the file told it: another data config
  keys["type"] = run.bound_data->type().name;
  keys["features"] = features;
  keys["classes"] = classes;
  const std::shared_ptr<const BoundData> told = bind_data(keys);
  const MemoryEstimate m = run_memory({run.settings, *run.bound_model, *told, *run.bound_engine},
                                      *run.settings.compute_dist->make(base_dir), nullptr);
  const double budget = memory_limit_bytes();
  if (m.total <= budget) return;
  throw DataError(source + ": " + std::to_string(features) + " features and " + std::to_string(classes) +
                  " classes: " + memory_refusal(m, budget) +
                  ". The data decides it: check the file's feature indices and labels, or give data.features and "
                  "data.classes so that such lines are refused");
}

void check_memory_with_model(const RunSpec& run, const RunSettings& settings, const std::string& base_dir,
                             size_t params, const std::string& source) {
  ModelSizes sizes;
  sizes.params = double(params);
  const MemoryEstimate m = run_memory(sizing(run, settings), *settings.compute_dist->make(base_dir), &sizes);
  const double budget = memory_limit_bytes();
  if (m.total <= budget) return;
  throw DataError(source + " has " + std::to_string(params) + " parameters: " + memory_refusal(m, budget) + ". Lower " +
                  m.parts.front().key + ", or make the module smaller");
}

std::string out_of_memory_text(const std::string& during) {
  return "out of memory (std::bad_alloc)" + (during.empty() ? std::string() : " " + during) +
         ": an allocation failed; this process may use about " + format_bytes(memory_limit_bytes()) +
         " (physical memory, lowered by ulimit -v / -d and a cgroup memory.max): make the run smaller (model size, "
         "cluster.workers, data) or raise the limit";
}

}  // namespace asgd
