// sim/run/settings.h — everything a simulated run needs to know, as plain values, and the
// config keys that fill it (sim/run/settings.cpp: each key declared once with its default,
// range, doc and the member it fills). The experiments layer binds a config's sections
// with these declarations while it validates them; nothing reads these keys elsewhere.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/timing/compute_time.h"
#include "sim/timing/distribution.h"
#include "sim/config/field.h"
#include "sim/timing/lr_schedule.h"
#include "sim/net/message_size.h"
#include "sim/base/limits.h"
#include "sim/base/time.h"
#include "sim/net/topology.h"
#include "sim/data/partition.h"  // PartitionSpec

namespace asgd {

enum class EvalUnit { Time, Updates, Epochs };
enum class StalenessMode { Emergent, Fixed, Uniform, Geometric, PerLayer };
enum class Precision { Fp32, Fp16, Bf16 };  // of parameters pulled and gradients pushed

// The update rule wherever parameters are updated (train.optimizer and its keys): on the
// server of async, sync, sync_backup and SSP, and on each worker's own copy in local SGD
// and DiLoCo (engines/optimizer.h applies it; docs/algorithms.md gives the rules).
enum class OptimizerKind { Sgd, Adam, AdamW };
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::Sgd;
  double momentum = 0.0;      // sgd: heavy-ball momentum (0: plain SGD)
  bool nesterov = false;      // sgd: Nesterov momentum (PyTorch's form), needs momentum > 0
  double beta1 = 0.0;         // adam, adamw: decay of the first moment
  double beta2 = 0.0;         // adam, adamw: decay of the second moment
  double eps = 0.0;           // adam, adamw: added to sqrt(v_hat), > 0
  double weight_decay = 0.0;  // adam: L2 added to the gradient; adamw: decoupled

  bool adam() const { return kind != OptimizerKind::Sgd; }
  // Whether a step keeps state between calls (a velocity, or Adam's moments).
  bool stateful() const { return adam() || momentum > 0.0; }
};

// Worker `worker` fails at `at` and comes back after down_for (kNever: never).
struct FailureEvent {
  int worker = 0;
  SimTime at = 0;
  SimTime down_for = kNever;
};

// A run's settings. The config's defaults are written once, in the keys' declarations
// (sim/run/settings.cpp): the members start at neutral values (zero, off, no limit), and
// default_settings() is what a config that gives none of these keys binds.
// A population of clients apart from the worker slots (section clients; sim/core/population.h):
// count 0 is no population, each worker its own client (and its own part of the data).
struct ClientsSpec {
  int64_t count = 0;
  bool by_size = false;  // sampling "size": a client is drawn with probability its share of the data
  std::shared_ptr<const BoundDistribution> speeds;  // a distribution drawn once per client
  std::string devices;                              // a population folder (sim/data/client_devices.h), "": none
};

struct RunSettings {
  uint64_t seed = 0;
  int workers = 1;
  size_t batch_size = 0;    // per worker
  size_t global_batch = 0;  // train.global_batch; > 0: batch_size = global_batch / workers
  LrScheduleSpec lr;
  bool lr_scale_by_workers = false;    // lr_schedule.scale "workers": lr.scale = workers
  OptimizerSpec optimizer;             // train.optimizer, momentum, nesterov, beta1, ...
  bool aggregate_sum = false;          // sum instead of mean across workers
  double single_replica_epochs = 0.0;  // warm-up: one replica trains this long before the engine

  // stop: the first limit reached ends the run (0 / kNever: no limit)
  SimTime stop_time = kNever;
  uint64_t stop_updates = 0;
  uint64_t stop_gradients = 0;
  double stop_epochs = 0.0;
  // ... or an evaluation that reaches a target (0: none): test_accuracy >= it, train_loss <= it
  double stop_target_accuracy = 0.0;
  double stop_target_loss = 0.0;

  EvalUnit eval_unit = EvalUnit::Epochs;
  double eval_every = 0;          // seconds, updates or epochs
  size_t eval_train_samples = 0;  // first rows of the training set (0 = all)
  size_t eval_test_samples = 0;   // first rows of the test set (0 = all)
  double divergence_bound = 0;    // train_loss above this (or NaN/Inf): diverged

  StalenessMode staleness = StalenessMode::Emergent;
  uint32_t staleness_tau = 0;              // fixed: T; uniform: upper bound; geometric: cap; per_layer: the largest
  std::vector<uint32_t> staleness_layers;  // per_layer: the lag of layer l (the last for deeper layers)
  double staleness_mean = 0.0;             // geometric mean
  uint32_t staleness_max = 0;              // geometric: the cap as given (0: ceil(10 * mean))
  // Forced staleness applies to gradients read (or, at apply, arriving) while the epoch is
  // in [from, until); until 0 = to the end.
  double staleness_from_epoch = 0.0;
  double staleness_until_epoch = 0.0;
  // false ("read"): a gradient is computed on the version lag updates older than the one
  // current when it is read, and emergent staleness adds to the lag. true ("apply"): it is
  // computed on the version lag updates older than the one current when it arrives at the
  // server, so it is applied exactly lag updates late, whatever the worker count.
  bool staleness_at_apply = false;

  NetworkSpec network;
  ClusterSpec topology;  // cluster.topology (sim/net/catalog.h) and cluster.placement
  Precision precision = Precision::Fp32;
  // A sparse model's gradient step pulls only the rows its minibatch reads (and the dense
  // part); false: the whole vector (cluster.network.sparse_pull).
  bool sparse_pull = false;
  CompressionSpec compression;       // of pushed gradients, dense models only
  double server_update_seconds = 0;  // the server is busy this long per update it applies
  // the server is busy this long per message it sends (0: sends are free and wait for nothing)
  double server_send_seconds = 0;
  std::vector<FailureEvent> failures;  // scheduled failures
  double failure_rate = 0;             // per worker per virtual second (exponential gaps)
  SimTime failure_down_time = kNever;  // for rate failures: time down (kNever: never back)

  // compute time (sim/timing/compute_time.h): the distribution, bound once (cluster.compute;
  // "flops" and "measured" are replaced by what they resolve to: BoundDistribution::resolve),
  // what a draw stands for, the workers' slowdown factors (a list, empty = all 1, or a
  // distribution drawn once per worker) and the stragglers
  std::shared_ptr<const BoundDistribution> compute_dist;
  // What the clock charges for compute, as summary.json reports it (ComputeResolution::model).
  nlohmann::json compute_model;
  StepCost step_cost;
  std::vector<double> speeds;
  std::shared_ptr<const BoundDistribution> speeds_dist;  // null: `speeds` holds the factors
  StragglerSpec stragglers;

  // `asgdsim cluster` only (section real)
  double real_delay_scale = 0;     // s > 0: a step lasts at least s x its simulated time
  double real_worker_timeout = 0;  // wall seconds of silence before a rank is declared dead

  size_t nominal_train_size = 0;  // samples per epoch when the model reads no data
  PartitionSpec partition;        // data.partition
  ClientsSpec clients;            // section clients
  // Who owns the parts of the data: the clients of a population, else the workers.
  int data_owners() const { return clients.count > 0 ? int(clients.count) : workers; }
  // Gradient jobs computed together by one Model::loss_grad_batch call (1: each alone).
  // Which jobs go together follows from the virtual-time order of launches and waits
  // alone, so a batched run is as deterministic as any; on CPU backends its files are
  // byte-identical to the unbatched run's.
  size_t batched_gradients = 1;
  bool trace = false;
};

// The settings of a config that gives none of RunSettings' keys: every section bound from
// {} (stop, too, though a run needs a limit; compute as cluster.compute left out).
RunSettings default_settings();

// ---- the keys that fill RunSettings (sim/run/settings.cpp) ----

// The section of that name: "top", "train", "stop", "eval", "cluster", "cluster.compute", "cluster.network",
// "cluster.network.compression", "cluster.server", "cluster.stragglers",
// "cluster.failures", "real", "clients". Throws std::logic_error for another name.
const Section<RunSettings>& settings_section(const std::string& name);
// List items: a slow window (cluster.stragglers.slow[]), a scheduled failure
// (cluster.failures.events[]).
const Section<SlowWindow>& slow_window_section();
const Section<FailureEvent>& failure_event_section();
// The checks across train's optimizer keys (as bound from a valid train): nesterov needs
// momentum > 0 and sgd; momentum and nesterov are sgd's (Adam's momentum is beta1);
// weight_decay is adam's and adamw's.
void check_optimizer(const OptimizerSpec& optimizer, Validator& v);
// The words the config writes for staleness.mode, cluster.network.precision and eval.unit: the keys
// bind with them, and messages name a bound value with them (word_of, sim/config/field.h).
const std::vector<std::pair<std::string, StalenessMode>>& staleness_mode_words();
const std::vector<std::pair<std::string, Precision>>& precision_words();
const std::vector<std::pair<std::string, EvalUnit>>& eval_unit_words();
// ... and for train.optimizer.
const std::vector<std::pair<std::string, OptimizerKind>>& optimizer_words();
// train.lr_schedule (by "type") and staleness (by "mode").
const Family<RunSettings>& lr_schedule_family();
const Family<RunSettings>& staleness_family();
// The checks across staleness's keys, on its bound settings (`resolved`: the section as
// validated, for the values as the config writes them): a window that ends before it
// starts, per_layer with no lag.
void check_staleness(const RunSettings& s, const nlohmann::json& resolved, Validator& v);
// The values derived from several keys, once every section is bound: the per-worker batch
// from global_batch, the lr scale "workers", the geometric cap, bytes per value.
void finish_settings(RunSettings& s);

// What follows each update of the model of record, the same in the simulator and in the
// real mode (asgdsim cluster): whether the eval schedule in updates or epochs asks for a
// row now, and which stop limit on updates, gradients or epochs is reached. (Schedules in
// time are events or clocks of their own.)
class AfterUpdate {
 public:
  explicit AfterUpdate(const RunSettings& s) : s_(s), next_eval_epoch_(s.eval_every) {}
  // True when a row is due after update number `updates`, at `epoch`; moves the next
  // epoch mark past `epoch`.
  bool evaluate(uint64_t updates, double epoch) {
    if (s_.eval_unit == EvalUnit::Updates) {
      uint64_t every = uint64_t(s_.eval_every) > 0 ? uint64_t(s_.eval_every) : 1;
      return updates % every == 0;
    }
    return epoch_due(epoch);
  }
  // With eval.unit = epochs: true when `epoch` has reached the next mark (and moves it past
  // `epoch`); checked after any step, not only after updates of the model of record.
  bool epoch_due(double epoch) {
    if (s_.eval_unit != EvalUnit::Epochs || epoch < next_eval_epoch_) return false;
    // The marks are sums of eval_every. An interval far below one update's progress would
    // take ~(progress / every) additions, and one below the mark's rounding step would
    // never move it (a hang): past kMaxSteps additions, or at the first that changes
    // nothing, the mark moves straight past `epoch`. Either way that is a row per update,
    // which is what such an interval asks for.
    constexpr int kMaxSteps = 1 << 16;
    for (int steps = 0; next_eval_epoch_ <= epoch; ++steps) {
      if (steps == kMaxSteps || next_eval_epoch_ + s_.eval_every == next_eval_epoch_) {
        next_eval_epoch_ = std::nextafter(epoch, epoch + 1.0);
        break;
      }
      next_eval_epoch_ += s_.eval_every;
    }
    return true;
  }
  // The note of the first limit reached ("reached stop.updates", ...), or null.
  const char* limit_reached(uint64_t updates, uint64_t gradients, double epoch) const {
    if (s_.stop_updates && updates >= s_.stop_updates) return "reached stop.updates";
    if (s_.stop_gradients && gradients >= s_.stop_gradients) return "reached stop.gradients";
    if (s_.stop_epochs > 0 && epoch >= s_.stop_epochs - 1e-12) return "reached stop.epochs";
    return nullptr;
  }
  double next_eval_epoch() const { return next_eval_epoch_; }
  void set_next_eval_epoch(double e) { next_eval_epoch_ = e; }

 private:
  const RunSettings& s_;
  double next_eval_epoch_;
};

}  // namespace asgd
