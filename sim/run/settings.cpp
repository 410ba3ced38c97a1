// sim/run/settings.cpp — the config keys that fill RunSettings, each declared once: its key,
// type, default, range or choices, doc (what `asgdsim list` and docs/config.md show) and
// the member it fills. experiments/config/ binds them while validating a run's config.
#include "sim/run/settings.h"
#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace asgd {
namespace {

using keys::any;
using keys::boolean;
using keys::integer;
using keys::list;
using keys::num;
using keys::seconds;
using keys::str;
using S = RunSettings;

template <class E>
std::vector<std::string> words_of(const std::vector<std::pair<std::string, E>>& words) {
  std::vector<std::string> out;
  for (const auto& w : words) out.push_back(w.first);
  return out;
}

// A distribution object's check (bind_distribution's: its keys at their own paths), with
// its defaults filled.
ShapeCheck distribution_check() {
  return [](json& value, const std::string& path, Validator& v) {
    std::shared_ptr<const BoundDistribution> unused;  // bound by the shape's setter, once the section is valid
    value = bind_distribution(value, path, v, unused);
  };
}

std::vector<Section<S>> make_sections() {
  return {
      // The top level: RunSettings' seed, trace and batched_gradients, and the
      // experiment's own name, description and repeats (experiments/ reads those).
      {"top",
       "top-level keys",
       {unbound<S>(str("name", "",
                       "experiment name: the folder under --out, of letters, digits and . - _ = "
                       "(default: the config file's name, other characters as _)")),
        unbound<S>(str("description", "", "free text, kept with the results")),
        field(&S::seed, integer("seed", 1, "base seed; repeat r uses seed + r", 0, kMaxCount)),
        unbound<S>(integer("repeats", 1, "runs per (engine, sweep point), seeds seed, seed+1, ...", 1, kMaxRuns)),
        field(&S::trace, boolean("trace", false, "write trace.json (Chrome trace events) for every run")),
        field(&S::batched_gradients,
              integer("batched_gradients", 1,
                      "gradient jobs computed together as one batched call (GEMMs of all of them in one cuBLAS "
                      "batched call: for many workers per GPU); 1 = each alone. CPU backends: the same files for "
                      "every value, but slower (a batch runs on one core)",
                      1, 1024))}},
      {"train",
       "optimisation",
       {field(&S::batch_size, integer("batch_size", 32, "minibatch size per worker", 1, 16777216)),
        field(&S::global_batch,
              integer("global_batch", 0,
                      "if > 0: the batch summed over workers; per-worker batch = global_batch / workers")),
        nested(&S::lr, field(&LrScheduleSpec::lr, num("lr", 0.1, "base learning rate", 0, true))),
        field<S>(
            str("optimizer", "sgd",
                "the update rule wherever parameters are updated (the server; local_sgd's and diloco's "
                "workers): sgd (with momentum, nesterov), adam (Kingma & Ba 2015; weight_decay is L2 added to "
                "the gradient), adamw (Loshchilov & Hutter 2019; weight_decay decoupled)",
                words_of(optimizer_words())),
            [](S& s, const json& v) {
              for (const auto& w : optimizer_words())
                if (w.first == v.get<std::string>()) s.optimizer.kind = w.second;
            },
            [](const S& s) { return json(word_of(optimizer_words(), s.optimizer.kind)); }),
        nested(&S::optimizer,
               field(&OptimizerSpec::momentum,
                     num("momentum", 0.0, "sgd: heavy-ball momentum (0 = plain SGD): v = mu v + g; w -= lr v", 0, false,
                         0.999999))),
        nested(&S::optimizer,
               field(&OptimizerSpec::nesterov,
                     boolean("nesterov", false,
                             "sgd: Nesterov momentum in PyTorch's form: v = mu v + g; w -= lr (g + mu v) (needs "
                             "momentum > 0)"))),
        nested(&S::optimizer,
               field(&OptimizerSpec::beta1,
                     num("beta1", 0.9, "adam, adamw: decay of the first-moment average", 0, false, 0.999999))),
        nested(&S::optimizer,
               field(&OptimizerSpec::beta2,
                     num("beta2", 0.999, "adam, adamw: decay of the second-moment average", 0, false, 0.999999))),
        nested(&S::optimizer,
               field(&OptimizerSpec::eps, num("eps", 1e-8, "adam, adamw: added to sqrt(v_hat)", 0, true, 1))),
        nested(&S::optimizer,
               field(&OptimizerSpec::weight_decay,
                     num("weight_decay", 0.0, "adam: L2, g += wd w; adamw: decoupled, w -= lr wd w (sgd: must be 0)", 0,
                         false, 1e6))),
        choice_field(&S::aggregate_sum, str("aggregate", "mean", "how synchronous engines combine worker gradients"),
                     {{"mean", false}, {"sum", true}}),
        field(&S::single_replica_epochs,
              num("single_replica_epochs", 0.0,
                  "warm-up: a single replica (worker 0) trains alone for these epochs, then the engine starts from its "
                  "parameters (the lr schedule and stop limits count the whole run)",
                  0))}},
      {"stop",
       "when a run ends: the first limit reached (0 = no limit)",
       {seconds_field(&S::stop_time, seconds("time", 0, "virtual seconds"), /*zero_is_never=*/true),
        field(&S::stop_updates, integer("updates", 0, "updates of the model of record", 0, kMaxCount)),
        field(&S::stop_gradients, integer("gradients", 0, "gradients computed", 0, kMaxCount)),
        field(&S::stop_epochs, num("epochs", 0, "passes over the training set", 0, false, 1e9)),
        field(&S::stop_target_accuracy,
              num("target_accuracy", 0,
                  "the first evaluation with test_accuracy >= this ends the run (completed; a classifier's); the "
                  "limits above still bound a run that never reaches it",
                  0, false, 1)),
        field(&S::stop_target_loss,
              num("target_loss", 0,
                  "the first evaluation with train_loss <= this ends the run (completed); the limits above still "
                  "bound a run that never reaches it",
                  0))},
       /*left_out=*/{{"epochs", 1}}},
      {"eval",
       "when the model of record is evaluated",
       {field(&S::eval_every,
              num("every", 0.25,
                  "interval between evaluations, in `unit` (time: >= 1e-9, a nanosecond; updates: a whole number)", 0,
                  true, kMaxCount)),
        choice_field(&S::eval_unit, str("unit", "epochs", "what `every` counts"), eval_unit_words()),
        field(
            &S::eval_train_samples,
            integer("train_samples", 10000, "train_loss is measured on the first so many training samples (0 = all)")),
        field(&S::eval_test_samples,
              integer("test_samples", 0, "test metrics on the first so many test samples (0 = all)")),
        field(&S::divergence_bound,
              num("divergence_bound", 1e6, "a train_loss above this (or NaN/Inf) ends the run as diverged", 0, true))},
       nullptr,
       // every's range depends on its unit: a time interval must be a whole nanosecond or
       // more (else the next evaluation is due at the same instant, forever) and fit the
       // clock; an interval in updates is a whole number (it is stored as one).
       [](const json& e, const std::string& path, Validator& v) {
         const double every = e["every"].get<double>();
         const std::string unit = e["unit"].get<std::string>();
         const std::string at = join_path(path, "every");
         if (unit == "time" && every < 1e-9)
           v.error(at, brief(e["every"]) +
                           " s is under the virtual clock's resolution (1 ns): the next evaluation "
                           "would be due at the same instant forever; use eval.every >= 1e-9");
         if (unit == "time" && every > kMaxConfigSeconds)
           v.error(at, brief(e["every"]) + " s is more than the " + brief(kMaxConfigSeconds) +
                           " s a time key may be (the virtual clock holds ~9.2e9 s)");
         if (unit == "updates" && (every < 1 || std::floor(every) != every))
           v.error(at, "in updates it must be a whole number >= 1, got " + brief(e["every"]));
       }},
      {"cluster",
       "the simulated workers (also: compute, network, server, stragglers, failures, topology)",
       {field(&S::workers, integer("workers", 4, "number of workers", 1, kMaxWorkers)),
        field<S>(
            str("placement", "servers",
                "where the parameters live: \"servers\" dedicated server machines (network.shards shards, reached "
                "over the topology's inter links); \"host\" each box's host memory (GPUs reach it over intra; "
                "several boxes: sync exchanges each box's sum with the servers). \"host\" needs a topology with boxes "
                "(cluster.topology.type \"boxes\")",
                {"servers", "host"}),
            [](S& s, const json& v) { s.topology.host_placement = v == "host"; },
            [](const S& s) { return json(s.topology.host_placement ? "host" : "servers"); }),
        shaped<S>(
            any("speeds", json::array(),
                "per-worker slowdown factors (2 = twice as slow): a list of one factor per worker (empty = all "
                "1), or a distribution {\"dist\": ...} drawn once per worker"),
            {{list_shape<S>(number_check(num("", nullptr, "", 0, true)), 0,
                            [](S& s, const json& v) { s.speeds = v.get<std::vector<double>>(); }),
              object_shape<S>(distribution_check(), [](S& s, const json& v) { s.speeds_dist = bind_distribution(v); })},
             "a list of factors > 0 or a distribution {\"dist\": ...}",
             [](const S& s) { return s.speeds_dist ? s.speeds_dist->spec() : json(s.speeds); }})}},
      {"cluster.compute",
       "a step's compute time: `dist` and its keys (see distributions below) give one draw per step; a step on m "
       "samples lasts overhead + m x draw (per sample) or overhead + draw (per step), times the worker's speed and "
       "straggler factors",
       {field<S>(
            str("per", "sample",
                "what one draw is the time of: one sample (a step scales with its batch) or one whole step",
                {"sample", "step"}),
            [](S& s, const json& v) { s.step_cost.per_sample = v == "sample"; },
            [](const S& s) { return json(s.step_cost.per_sample ? "sample" : "step"); }),
        nested(&S::step_cost, field(&StepCost::overhead,
                                    seconds("overhead", 0.0,
                                            "fixed virtual seconds added to every step (before the speed and straggler "
                                            "factors)")))},
       // left out: 10 ms per step at the default batch of 32, exponentially distributed
       /*left_out=*/{{"dist", "exponential"}, {"mean", 0.01 / 32}}},
      {"cluster.network",
       "the messages engines send (docs/architecture.md, Time model): each crosses the worker's NIC and the "
       "parameter-server shard links, FIFO per link",
       {nested(&S::network, field(&NetworkSpec::latency, seconds("latency", 0.0, "virtual seconds per message"))),
        nested(&S::network,
               field(&NetworkSpec::bandwidth,
                     num("bandwidth", 0.0,
                         "bytes per virtual second of each shard's link, each direction (0 = unlimited)", 0))),
        nested(&S::network,
               field(&NetworkSpec::shards,
                     integer("shards", 1, "parameter-server shards, each with its own link; a message is split evenly",
                             1, 4096))),
        nested(&S::network,
               field(&NetworkSpec::worker_bandwidth,
                     num("worker_bandwidth", 0.0,
                         "bytes per virtual second of each worker's NIC, each direction (0 = unlimited)", 0))),
        nested(
            &S::network,
            field(
                &NetworkSpec::message_bytes,
                num("message_bytes", 0.0,
                    "bytes of every parameter or gradient message (0 = parameters x bytes per value of `precision`): a "
                    "proxy size, to time a large model's traffic while computing a small model's learning",
                    0, false, kMaxCount))),
        choice_field(&S::precision,
                     str("precision", "fp32",
                         "format of pulled parameters and pushed gradients (16-bit: half the bytes, values rounded)"),
                     precision_words()),
        field(&S::sparse_pull,
              boolean("sparse_pull", true,
                      "sparse models: a gradient step pulls only the table rows its minibatch reads (and the dense "
                      "part); false: the whole vector. Pushes always carry only the touched rows"))}},
      {"cluster.network.compression",
       "compression of pushed gradients (dense models; async, SSP, sync engines), applied for real: the server "
       "applies the compressed values",
       {field<S>(
            str("type", "none",
                "topk: keep the ratio x parameters values of largest magnitude, k x (4 + value bytes) bytes; "
                "int8: value / (max|value| / 127) rounded, parameters + 4 bytes; powersgd: rank-r PowerSGD "
                "(Vogels et al. 2019) of an all-reduce (sync, sync_backup with comm allreduce or hierarchical): "
                "P and Q all-reduced, r (rows + cols) values per matrix",
                {"none", "topk", "int8", "powersgd"}),
            [](S& s, const json& v) { s.compression.type = compression_type(v.get<std::string>()); },
            [](const S& s) { return json(compression_type_name(s.compression.type)); }),
        nested(
            &S::compression,
            field(&CompressionSpec::ratio,
                  num("ratio", 0.01, "topk: fraction of the values sent (k = ceil(ratio x parameters))", 0, true, 1))),
        nested(
            &S::compression,
            field(&CompressionSpec::error_feedback,
                  boolean("error_feedback", false,
                          "keep what a push (or PowerSGD's all-reduce) did not deliver in a per-worker residual, added "
                          "to the worker's next gradient (PowerSGD's paper and hook use it)"))),
        nested(&S::compression,
               field(&CompressionSpec::rank,
                     integer("rank", 1, "powersgd: the rank r of each matrix's approximation P Q^T", 1, 1 << 20))),
        nested(&S::compression,
               field(&CompressionSpec::min_compression_rate,
                     num("min_compression_rate", 2.0,
                         "powersgd: a matrix rows x cols is compressed only if r (rows + cols) x this < rows x cols "
                         "(torch's powerSGD_hook default 2); the others are all-reduced whole",
                         1.0))),
        nested(&S::compression, field(&CompressionSpec::orthogonalization_epsilon,
                                      num("orthogonalization_epsilon", 0.0,
                                          "powersgd: added to each column's norm in Gram-Schmidt", 0.0))),
        nested(&S::compression, field(&CompressionSpec::warm_start,
                                      boolean("warm_start", true,
                                              "powersgd: each iteration's power step starts from the last Q (else a "
                                              "fresh random Q every iteration)")))}},
      {"cluster.server",
       "the parameter server (or EASGD center) as a resource: one update at a time, FIFO",
       {field(&S::server_update_seconds,
              seconds("update_seconds", 0.0,
                      "virtual seconds the server is busy per update it applies (an async gradient, a sync aggregate, "
                      "an EASGD exchange, a local-SGD averaging)")),
        field(&S::server_send_seconds,
              seconds("send_seconds", 0.0,
                      "virtual seconds the server spends on each message it sends (LogP's o: a pull's parameters, "
                      "a reply, a cancel notice), one at a time on the server: a send waits for the update or send "
                      "in progress, an update for the sends asked before it, and the message leaves when its send "
                      "is done. 0: sends are free and do not wait for the server"))}},
      {"cluster.stragglers",
       "slow steps on top of the compute-time distribution (also: slow, a list of windows)",
       {nested(&S::stragglers,
               field(&StragglerSpec::probability,
                     num("probability", 0.0, "chance that a step is a transient straggler", 0, false, 1))),
        nested(&S::stragglers,
               field(&StragglerSpec::factor,
                     num("factor", 1.0, "how many times slower a transient straggler step is", 0, true)))}},
      {"cluster.failures",
       "workers that fail: at given times (events) and/or at a rate; a failed worker's gradient in flight is lost",
       {field(&S::failure_rate, num("rate", 0.0, "failures per worker per virtual second (exponential gaps)", 0)),
        seconds_field(&S::failure_down_time,
                      seconds("down_time", 0.0, "how long a rate failure lasts (0 = the worker never comes back)"),
                      /*zero_is_never=*/true)}},
      {"clients",
       "a population of clients apart from the worker slots (cluster.workers trainers at once): each client owns "
       "a part of the data (data.partition over the clients), a speed and a sample stream; each client job takes "
       "a free slot, drawn by `sampling` among the clients not training (docs/population.md)",
       {nested(&S::clients,
               field(&ClientsSpec::count,
                     integer("count", 0,
                             "clients in the population (0: none, each worker is its own client); >= cluster.workers",
                             0, 16000000))),
        field<S>(
            str("sampling", "uniform",
                "how a free slot draws its next client among those not training: uniform, or size (with "
                "probability its share of the training data)",
                {"uniform", "size"}),
            [](S& s, const json& v) { s.clients.by_size = v == "size"; },
            [](const S& s) { return json(s.clients.by_size ? "size" : "uniform"); }),
        shaped<S>(any("speeds", json{{"dist", "constant"}, {"value", 1.0}},
                      "the clients' slowdown factors (2 = twice as slow), a distribution {\"dist\": ...} drawn once "
                      "per client: a client's step lasts its slot's compute time times its factor"),
                  {{object_shape<S>(distribution_check(),
                                    [](S& s, const json& v) { s.clients.speeds = bind_distribution(v); })},
                   "a distribution {\"dist\": ...} drawn once per client",
                   [](const S& s) { return s.clients.speeds ? s.clients.speeds->spec() : json(); }}),
        nested(
            &S::clients,
            field(&ClientsSpec::devices,
                  str("devices", "",
                      "a population folder (devices.csv, optional availability.csv; docs/population-devices.md; "
                      "relative to the config's folder): each client's compute (its factor is its ms per sample over "
                      "the median client's, times `speeds`), its bandwidth (its own link, crossed by each of its "
                      "messages) and its availability (drawn only while available; a job it leaves unfinished is "
                      "dropped). \"\": none")))}},
      {"real",
       "`asgdsim cluster` only (real MPI processes; `asgdsim run` ignores it)",
       {field(&S::real_delay_scale,
              num("delay_scale", 0.0,
                  "0: workers compute flat out; s > 0: a worker's step lasts at least s x the compute time drawn from "
                  "cluster.compute, speeds and stragglers (it sleeps for the rest), replaying the simulated timing",
                  0, false, 1e6)),
        field(&S::real_worker_timeout,
              seconds("worker_timeout", 60.0,
                      "wall seconds of silence before a rank is declared dead, both ways: a worker with work in hand "
                      "(one step; EASGD: `period` steps) for the server, the server's heartbeat for a worker, any "
                      "rank's heartbeat while `mpirun asgdsim run` waits for it: it must exceed the slowest step",
                      0, true))}},
  };
}

}  // namespace

const Section<RunSettings>& settings_section(const std::string& name) {
  static const std::vector<Section<S>> sections = make_sections();
  for (const auto& s : sections)
    if (s.name == name) return s;
  throw std::logic_error("no settings section " + name);
}

const Section<SlowWindow>& slow_window_section() {
  using W = SlowWindow;
  static const Section<W> s{
      "cluster.stragglers.slow[]",
      "a named slow worker over a time window",
      {field(&W::worker, integer("worker", nullptr, "worker index")),
       field(&W::factor, num("factor", nullptr, "how many times slower", 0, true)),
       seconds_field(&W::from, seconds("from", 0.0, "start (virtual seconds)"), /*zero_is_never=*/false),
       seconds_field(&W::to, seconds("to", 0.0, "end (virtual seconds; 0 = the end of the run)"),
                     /*zero_is_never=*/true)},
      nullptr,
      // a window that ends before it starts slows nothing (issue 31)
      [](const json& w, const std::string& path, Validator& v) {
        if (w["to"].get<double>() > 0 && w["to"].get<double>() <= w["from"].get<double>())
          v.error(join_path(path, "to"), brief(w["to"]) + " is not after `from` (" + brief(w["from"]) +
                                             "): the window would be empty; use 0 for the end of the run");
      }};
  return s;
}

const Section<FailureEvent>& failure_event_section() {
  using F = FailureEvent;
  static const Section<F> s{
      "cluster.failures.events[]",
      "one scheduled failure",
      {field(&F::worker, integer("worker", nullptr, "worker index")),
       seconds_field(&F::at, seconds("at", nullptr, "when (virtual seconds)"), /*zero_is_never=*/false),
       seconds_field(&F::down_for, seconds("down_for", 0.0, "how long it stays down (0 = it never comes back)"),
                     /*zero_is_never=*/true)}};
  return s;
}

void check_optimizer(const OptimizerSpec& o, Validator& v) {
  const std::string& type = word_of(optimizer_words(), o.kind);
  if (o.kind == OptimizerKind::Sgd) {
    if (o.nesterov && o.momentum <= 0)
      v.error("train.nesterov", "Nesterov momentum needs train.momentum > 0 (train.momentum is 0)");
    if (o.weight_decay > 0)
      v.error("train.weight_decay",
              "weight decay is implemented for train.optimizer adam and adamw, not sgd: set it "
              "to 0 or choose adam/adamw");
  } else {
    if (o.momentum > 0)
      v.error("train.momentum",
              "train.momentum is sgd's; " + type + "'s momentum is train.beta1: set train.momentum to 0");
    if (o.nesterov) v.error("train.nesterov", "Nesterov momentum is sgd's: set it to false with " + json(type).dump());
    if (o.eps > 0 && !float_positive_finite(o.eps))  // the update divides by sqrt(v_hat) + eps
      v.error("train.eps",
              brief(json(o.eps)) + " is 0 in float, so it would not keep " + type + "'s update finite" + kFloatRange);
  }
}

const Family<RunSettings>& lr_schedule_family() {
  static const Family<S> f = [] {
    Family<S> f;
    f.type_key = "type";
    f.default_type = "constant";
    f.common_first = true;
    f.set_type = [](S& s, const std::string& t) { s.lr.type = t; };
    f.common = {
        number_or_word<S>(any("scale", 1.0, "multiplier k of the linear scaling rule: a number > 0, or \"workers\""),
                          {num("", nullptr, "", 0, true),
                           {"workers"},
                           [](S& s, double k) {
                             s.lr_scale_by_workers = false;
                             s.lr.scale = k;
                           },
                           [](S& s, const std::string&) { s.lr_scale_by_workers = true; }}),
        field<S>(num("warmup_epochs", 0.0, "linear warm-up from warmup_from to lr * scale over these epochs", 0),
                 [](S& s, const json& v) { s.lr.warmup_epochs = v.get<double>(); }),
        number_or_word<S>(
            any("warmup_from", "lr", "rate at epoch 0 of the warm-up: a number, or \"lr\" (Goyal et al.)"),
            {num("", nullptr, "", 0),
             {"lr"},
             [](S& s, double rate) { s.lr.warmup_from = rate; },
             [](S& s, const std::string&) { s.lr.warmup_from = -1.0; }})};
    f.members = {
        {"constant", "lr * scale after the warm-up", {}},
        {"step",
         "multiply by gamma at each milestone epoch",
         {field<S>(list("milestones", ParamType::NumberList, json::array(), "epochs", 0),
                   [](S& s, const json& v) { s.lr.milestones = v.get<std::vector<double>>(); }),
          field<S>(num("gamma", 0.1, "factor at each milestone", 0, true),
                   [](S& s, const json& v) { s.lr.gamma = v.get<double>(); })}},
        {"cosine",
         "cosine decay from lr * scale to min_lr at total_epochs",
         {field<S>(num("total_epochs", nullptr, "end of the decay", 0, true),
                   [](S& s, const json& v) { s.lr.total_epochs = v.get<double>(); }),
          field<S>(num("min_lr", 0.0, "final rate", 0), [](S& s, const json& v) { s.lr.min_lr = v.get<double>(); })}},
    };
    return f;
  }();
  return f;
}

const std::vector<std::pair<std::string, StalenessMode>>& staleness_mode_words() {
  static const std::vector<std::pair<std::string, StalenessMode>> w = {{"emergent", StalenessMode::Emergent},
                                                                       {"fixed", StalenessMode::Fixed},
                                                                       {"uniform", StalenessMode::Uniform},
                                                                       {"geometric", StalenessMode::Geometric},
                                                                       {"per_layer", StalenessMode::PerLayer}};
  return w;
}

const std::vector<std::pair<std::string, Precision>>& precision_words() {
  static const std::vector<std::pair<std::string, Precision>> w = {
      {"fp32", Precision::Fp32}, {"fp16", Precision::Fp16}, {"bf16", Precision::Bf16}};
  return w;
}

const std::vector<std::pair<std::string, OptimizerKind>>& optimizer_words() {
  static const std::vector<std::pair<std::string, OptimizerKind>> w = {
      {"sgd", OptimizerKind::Sgd}, {"adam", OptimizerKind::Adam}, {"adamw", OptimizerKind::AdamW}};
  return w;
}

const std::vector<std::pair<std::string, EvalUnit>>& eval_unit_words() {
  static const std::vector<std::pair<std::string, EvalUnit>> w = {
      {"time", EvalUnit::Time}, {"updates", EvalUnit::Updates}, {"epochs", EvalUnit::Epochs}};
  return w;
}

const Family<RunSettings>& staleness_family() {
  static const Family<S> f = [] {
    Family<S> f;
    f.type_key = "mode";
    f.default_type = "emergent";
    f.set_type = [](S& s, const std::string& mode) {
      for (const auto& w : staleness_mode_words())
        if (w.first == mode) s.staleness = w.second;
    };
    // The forced modes' window (emergent has none).
    std::vector<Field<S>> window = {
        field(&S::staleness_from_epoch,
              num("from_epoch", 0.0, "forced staleness applies from this epoch on (before it: emergent only)", 0)),
        field(&S::staleness_until_epoch,
              num("until_epoch", 0.0, "... and until this epoch (0 = to the end; else > from_epoch)", 0)),
        field<S>(str("at", "read",
                     "what the lag counts back from: the version current when the gradient is read (emergent "
                     "staleness adds to it), or the one current when it arrives at the server (applied exactly the "
                     "lag late, at any worker count)",
                     {"read", "apply"}),
                 [](S& s, const json& v) { s.staleness_at_apply = v == "apply"; })};
    auto with = [&](std::vector<Field<S>> own) {
      own.insert(own.end(), window.begin(), window.end());
      return own;
    };
    f.members = {
        {"emergent", "staleness arises from timing alone", {}},
        {"fixed", "each gradient is computed on the version tau updates older than the current one",
         with({field(&S::staleness_tau, integer("tau", nullptr, "the lag T"))})},
        {"uniform", "lag drawn uniformly from 0..tau per gradient",
         with({field(&S::staleness_tau, integer("tau", nullptr, "largest lag"))})},
        {"geometric", "lag drawn from a geometric distribution with the given mean, capped at max",
         with({field(&S::staleness_mean,
                     num("mean", nullptr, "mean lag (at most 1e8: the cap ceil(10 * mean) is stored in 32 bits)", 0,
                         true, 1e8)),
               field(&S::staleness_max, integer("max", 0, "cap on the lag (0 = ceil(10 * mean))"))})},
        {"per_layer",
         "pipeline-style staleness (PipeDream): the model's layer l is read from the version tau[l] updates older "
         "than the current one (the last lag for deeper layers)",
         with({field<S>(list("tau", ParamType::IntegerList, nullptr,
                             "the lag of each layer by depth (Model::param_blocks: a weight and its bias), e.g. "
                             "[3, 2, 1, 0] for 4 pipeline stages",
                             0),
                        [](S& s, const json& v) {
                          s.staleness_layers.clear();
                          for (const auto& x : v) s.staleness_layers.push_back(x.get<uint32_t>());
                        })})},
    };
    return f;
  }();
  return f;
}

void check_staleness(const RunSettings& s, const json& resolved, Validator& v) {
  if (s.staleness_until_epoch > 0 && s.staleness_until_epoch <= s.staleness_from_epoch)
    v.error("staleness.until_epoch", resolved["until_epoch"].dump() + " is not after staleness.from_epoch (" +
                                         resolved["from_epoch"].dump() +
                                         "): the window would be empty; use 0 for no end");
  if (s.staleness == StalenessMode::PerLayer && s.staleness_layers.empty())
    v.error("staleness.tau", "per_layer needs the lag of at least one layer (the last one holds for deeper layers)");
}

RunSettings default_settings() {
  RunSettings s;
  Validator v;
  for (const char* name : {"top", "train", "stop", "eval", "cluster", "cluster.network", "cluster.network.compression",
                           "cluster.server", "cluster.stragglers", "cluster.failures", "real", "clients"})
    settings_section(name).bind(json::object(), name, v, s,
                                {"lr_schedule", "compute", "network", "server", "stragglers", "failures", "topology",
                                 "compression", "slow", "events"});
  lr_schedule_family().bind(json::object(), "train.lr_schedule", v, s);
  staleness_family().bind(json::object(), "staleness", v, s);
  const Section<S>& compute = settings_section("cluster.compute");
  json dist = compute.when_left_out();
  for (const auto& f : compute.fields) dist[f.info.name] = f.info.default_value;
  set_fields(compute.fields, dist, s);
  s.compute_dist = bind_distribution(dist);
  finish_settings(s);
  if (!v.ok()) throw std::logic_error("default_settings: the declarations' own defaults do not validate");
  return s;
}

void finish_settings(RunSettings& s) {
  if (s.global_batch > 0 && s.workers > 0) s.batch_size = s.global_batch / size_t(s.workers);
  if (s.lr_scale_by_workers) s.lr.scale = double(s.workers);
  if (s.staleness == StalenessMode::Geometric)
    s.staleness_tau = s.staleness_max > 0 ? s.staleness_max : uint32_t(std::ceil(10.0 * s.staleness_mean));
  if (s.staleness == StalenessMode::PerLayer)  // the history kept: the largest lag
    s.staleness_tau =
        s.staleness_layers.empty() ? 0 : *std::max_element(s.staleness_layers.begin(), s.staleness_layers.end());
  s.network.bytes_per_value = s.precision == Precision::Fp32 ? 4 : 2;
}

}  // namespace asgd
