// sim/run/recorder.h — what a run measured: one metrics row per evaluation point, the
// staleness histogram, per-worker counters and (optionally) a timeline of spans; and
// the writers for metrics.csv, staleness.csv, workers.csv and trace.json. Every file is
// written atomically. Number formatting is fixed, so equal runs give equal bytes.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>
#include "kernels/model.h"  // EvalSums
#include "sim/base/state_archive.h"
#include "sim/base/time.h"

namespace asgd {

struct MetricsRow {
  SimTime time = 0;
  uint64_t updates = 0, gradients = 0, samples = 0;
  double epoch = 0, lr = 0;
  double train_loss = 0, test_loss = 0, test_accuracy = 0;  // accuracy NaN: not a classifier
  double worker_loss = 0;     // mean minibatch loss of gradients arrived since the last row
  double mean_staleness = 0;  // mean staleness of gradients applied since the last row
  uint64_t dropped = 0;       // gradients dropped so far
};

// What a metrics row measures besides the model: the minibatch losses and the staleness
// of the gradients since the previous row. fill() writes a row's losses (NaN over no
// rows), accuracy (NaN unless a classifier, or when the model gives no count of right
// answers), worker_loss and mean_staleness (NaN when the window is
// empty), then starts the next window. Shared by the simulator and asgdsim cluster.
struct RowWindow {
  double loss_sum = 0;
  uint64_t loss_count = 0;
  double stale_sum = 0;
  uint64_t stale_count = 0;

  void fill(MetricsRow& row, const EvalSums& train, const EvalSums& test, bool classifier) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    // No rows evaluated (an empty PyTorch test set): nothing was measured, so NaN, not 0.
    row.train_loss = train.count ? train.loss_sum / double(train.count) : nan;
    row.test_loss = test.count ? test.loss_sum / double(test.count) : nan;
    // A test loss that is not finite: the parameters are not numbers, and the count of
    // right answers (whatever argmax makes of NaN) means nothing. A model that cannot tell
    // right answers (a PyTorch module whose outputs are not one score per class) gives
    // `correct` NaN: no accuracy either.
    row.test_accuracy = classifier && std::isfinite(row.test_loss) ? test.correct / double(test.count) : nan;
    row.worker_loss = loss_count ? loss_sum / double(loss_count) : nan;
    row.mean_staleness = stale_count ? stale_sum / double(stale_count) : nan;
    *this = RowWindow{};
  }
};

// A worker's counters. Its virtual time splits into compute + comm + wait + down = the
// run's time: comm is pulls, replies and pushes from request to arrival (queueing behind
// other transfers included); wait is the rest (at a barrier, behind a staleness bound, for
// the server to apply its update and answer).
struct WorkerStats {
  uint64_t gradients = 0, applied = 0, dropped = 0, lost = 0;
  uint64_t cancelled = 0;  // steps abandoned by Runtime::cancel or at their time budget (no gradient)
  SimTime wasted = 0;      // time of steps whose gradient was never applied: dropped, cancelled, timed out
                           // up to the cancel (a part of compute + comm, not beside it)
  SimTime compute = 0;     // computing gradients (the part of a step cut off by a failure or the end too)
  SimTime comm = 0;        // its messages in transit
  SimTime down = 0;        // failed
};

// What a span carries besides its time, written as the trace event's args (Perfetto shows
// them); -1: not known or not applicable, left out.
struct SpanArgs {
  int64_t step = -1;       // the worker's step the span belongs to (pull, compute, push)
  double bytes = -1;       // the message's size (pull, push)
  int64_t staleness = -1;  // the gradient's staleness when applied (set by note_staleness)
};

struct Span {
  int track;         // 0 = server, w + 1 = worker w
  const char* name;  // compute | pull | push | wait | down; server: update (an instant), apply (its busy time), send
                     // (one message, cluster.server.send_seconds)
  SimTime start, end;
  SpanArgs args;
};

class Recorder {
 public:
  explicit Recorder(bool trace) : trace_(trace) {}
  bool tracing() const { return trace_; }
  void add_row(const MetricsRow& row) { rows_.push_back(row); }
  void add_span(int track, const char* name, SimTime start, SimTime end, SpanArgs args = {}) {
    if (!trace_ || end < start) return;
    if (args.step >= 0 && (spans_.empty() || spans_.back().track != track || spans_.back().args.step != args.step))
      first_span_of_step_[step_key(track, args.step)] = spans_.size();
    spans_.push_back(Span{track, name, start, end, args});
  }
  // The gradient of worker track - 1's step `step` was applied with this staleness: its
  // spans (recorded together, in a row, when it arrived) carry it.
  void note_staleness(int track, int64_t step, int64_t staleness) {
    if (!trace_) return;
    auto it = first_span_of_step_.find(step_key(track, step));
    if (it == first_span_of_step_.end()) return;
    for (size_t i = it->second; i < spans_.size() && spans_[i].track == track && spans_[i].args.step == step; ++i)
      spans_[i].args.staleness = staleness;
  }
  // trace.json's process: one id per run, named, so that several runs' traces opened
  // together in Perfetto stay apart (default 0, unnamed).
  void set_process(int pid, std::string name) {
    pid_ = pid;
    process_name_ = std::move(name);
  }
  const std::vector<MetricsRow>& rows() const { return rows_; }
  // A checkpoint of the rows and spans so far (the process name is the runner's).
  void checkpoint(StateArchive& a);

  void write_metrics(const std::string& path) const;
  static void write_staleness(const std::string& path, const std::map<uint64_t, uint64_t>& hist);
  static void write_workers(const std::string& path, const std::vector<WorkerStats>& workers, SimTime end_time);
  void write_trace(const std::string& path, int workers) const;

 private:
  static uint64_t step_key(int track, int64_t step) { return (uint64_t(uint32_t(track)) << 32) | uint32_t(step); }

  bool trace_;
  std::vector<MetricsRow> rows_;
  std::vector<Span> spans_;
  std::unordered_map<uint64_t, size_t> first_span_of_step_;  // (track, step) -> its first span
  int pid_ = 0;
  std::string process_name_;
};

// "%.10g", with nan/inf spelled so pandas reads them.
std::string format_number(double v);

}  // namespace asgd
