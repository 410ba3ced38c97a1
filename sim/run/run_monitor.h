// sim/run/run_monitor.h — the bookkeeping of one run that both runtimes share: the simulator
// (sim/core/simulation.h, virtual time) and the real MPI mode (experiments/cluster/cluster.cpp, wall
// time). It counts gradients and samples, keeps the staleness histogram and the window of
// minibatch losses and staleness behind each metrics row, owns the learning rate schedule
// (by epochs of applied samples), and applies the evaluation schedule (in updates or
// epochs) and the stop rules (limits, divergence). It is not a clock: the runtime gives it
// "now", evaluates the model of record when asked, and runs time-based schedules itself.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>
#include "kernels/model.h"
#include "sim/timing/lr_schedule.h"
#include "sim/run/recorder.h"
#include "sim/run/run_outcome.h"
#include "sim/run/settings.h"
#include "sim/base/time.h"

namespace asgd {

// A run that ended "completed" but did not train is "stalled": its last train_loss is at
// least (1 - kStallMargin) times its first (the row before any update), which must be > 0
// (a model that starts at its optimum cannot stall). The one rule, for both runtimes;
// docs/outputs.md states it.
constexpr double kStallMargin = 0.01;
// The rule of failures without updates (RunMonitor::check_progress): so many failures per
// worker with no update of the model of record end the run "stalled".
constexpr uint64_t kFailuresWithoutUpdate = 100;
bool stalled(double first_train_loss, double last_train_loss);

class RunMonitor {
 public:
  // The runtime's clock (a row's time) and its evaluation of the model of record now
  // (train and test sums as evaluate_params gives them).
  using Clock = std::function<SimTime()>;
  using Evaluate = std::function<std::pair<EvalSums, EvalSums>()>;

  // `out` receives every counter (its workers sized by the caller); train_size is the
  // samples per epoch.
  RunMonitor(const RunSettings& s, size_t train_size, bool classifier, RunOutcome& out, Recorder& recorder);
  void bind(Clock now, Evaluate evaluate) {
    now_ = std::move(now);
    evaluate_ = std::move(evaluate);
  }

  double epoch() const;
  double lr() const { return schedule_.at(epoch()); }  // the rate in force now

  // `count` gradients of `worker` arrived (an EASGD exchange brings `period`), computed on
  // `samples` samples with minibatch losses summing to loss_sum. False (and the run stops
  // as diverged) when the loss is not finite: the gradients are then not to be applied.
  bool arrived(int worker, uint64_t samples, double loss_sum, uint64_t count = 1);
  // `count` gradients of `worker` on `samples` samples were applied `staleness` updates
  // late: their samples count toward the epoch, so call it before reading lr() for them.
  void applied(int worker, uint64_t samples, uint64_t staleness, uint64_t count = 1);
  void dropped(int worker);
  void iteration_done(double seconds);
  // One update of the model of record is done: an instant on the server's trace track,
  // then a row if the schedule in updates or epochs asks for one, then the stop limits.
  void updated();
  // After steps that may not update the model of record (local steps): rows due in
  // epochs and the stop limits; only when gradients arrived or were applied since. Also
  // the rule of failures without updates: a run whose workers failed
  // kFailuresWithoutUpdate times each (times the worker count) since the last update of
  // the model of record ends "stalled", naming it: its failures end every round before the
  // round finishes (DiLoCo's 500 inner steps against a failure every 20 ms), and it would
  // compute forever under a limit in updates.
  void check_progress();
  // A metrics row now (evaluating the model of record); stops the run if it diverged.
  void evaluate_row();
  bool evaluated_now() const { return evaluated_now_; }  // no update since the last row
  void request_stop(const std::string& status, const std::string& note);
  bool stopping() const { return stop_; }
  // At the end: the staleness histogram and means into the outcome, the failures note, and
  // a completed run that did not train marked "stalled".
  void finish();
  // Why `row` shows the run diverged ("" if it does not): train_loss not finite or above
  // eval.divergence_bound, or the workers' own minibatch loss (worker_loss) above it
  // (EASGD's or local SGD's workers can diverge while the model of record stays put).
  std::string divergence(const MetricsRow& row) const;
  // The note of a stop target `row` reaches (stop.target_accuracy, stop.target_loss), or "".
  std::string target_reached(const MetricsRow& row) const;

  std::function<void(const MetricsRow&)> on_row;

  // A checkpoint of the counts, the row window and the schedule's place (the outcome's
  // counters included; between events, with no stop requested).
  void checkpoint(StateArchive& a);

 private:
  const RunSettings& s_;
  const size_t train_size_;
  const bool classifier_;
  RunOutcome& out_;
  Recorder& recorder_;
  LrSchedule schedule_;
  AfterUpdate after_update_;
  RowWindow window_;
  Clock now_;
  Evaluate evaluate_;
  bool stop_ = false, evaluated_now_ = false, progressed_ = false;
  bool reached_target_ = false;      // a stop target ended the run (it is then not "stalled")
  uint64_t failures_at_update_ = 0;  // out_.failures at the last update
  double first_train_loss_ = std::numeric_limits<double>::quiet_NaN();  // of the first row
  double last_train_loss_ = std::numeric_limits<double>::quiet_NaN();   // of the last row
  std::vector<uint64_t> stale_counts_;  // applied gradients by staleness (dense: a map was slow)
  double stale_total_ = 0;
  uint64_t stale_total_count_ = 0;
  double iter_sum_ = 0;
};

}  // namespace asgd
