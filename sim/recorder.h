// sim/recorder.h — what a run measured: one metrics row per evaluation point, the
// staleness histogram, per-worker counters and (optionally) a timeline of spans; and
// the writers for metrics.csv, staleness.csv, workers.csv and trace.json. Every file is
// written atomically. Number formatting is fixed, so equal runs give equal bytes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>
#include "kernels/model.h"  // EvalSums
#include "sim/time.h"

namespace asgd {

struct MetricsRow {
  SimTime time = 0;
  uint64_t updates = 0, gradients = 0, samples = 0;
  double epoch = 0, lr = 0;
  double train_loss = 0, test_loss = 0, test_accuracy = 0;  // accuracy NaN: not a classifier
  double worker_loss = 0;      // mean minibatch loss of gradients arrived since the last row
  double mean_staleness = 0;   // mean staleness of gradients applied since the last row
  uint64_t dropped = 0;        // gradients dropped so far
};

// What a metrics row measures besides the model: the minibatch losses and the staleness
// of the gradients since the previous row. fill() writes a row's losses, accuracy
// (NaN unless a classifier), worker_loss and mean_staleness (NaN when the window is
// empty), then starts the next window. Shared by the simulator and asgdsim cluster.
struct RowWindow {
  double loss_sum = 0;
  uint64_t loss_count = 0;
  double stale_sum = 0;
  uint64_t stale_count = 0;

  void fill(MetricsRow& row, const EvalSums& train, const EvalSums& test, bool classifier) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    row.train_loss = train.loss_sum / double(std::max<size_t>(1, train.count));
    row.test_loss = test.loss_sum / double(std::max<size_t>(1, test.count));
    row.test_accuracy = classifier ? test.correct / double(std::max<size_t>(1, test.count)) : nan;
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
  SimTime compute = 0;    // computing gradients (the part of a step cut off by a failure or the end too)
  SimTime comm = 0;       // its messages in transit
  SimTime down = 0;       // failed
};

struct Span {
  int track;              // 0 = server, w + 1 = worker w
  const char* name;       // compute | pull | push | wait | down; server: update (an instant), apply (its busy time)
  SimTime start, end;
};

class Recorder {
 public:
  explicit Recorder(bool trace) : trace_(trace) {}
  bool tracing() const { return trace_; }
  void add_row(const MetricsRow& row) { rows_.push_back(row); }
  void add_span(int track, const char* name, SimTime start, SimTime end) {
    if (trace_ && end >= start) spans_.push_back(Span{track, name, start, end});
  }
  const std::vector<MetricsRow>& rows() const { return rows_; }

  void write_metrics(const std::string& path) const;
  static void write_staleness(const std::string& path, const std::map<uint64_t, uint64_t>& hist);
  static void write_workers(const std::string& path, const std::vector<WorkerStats>& workers,
                            SimTime end_time);
  void write_trace(const std::string& path, int workers) const;

 private:
  bool trace_;
  std::vector<MetricsRow> rows_;
  std::vector<Span> spans_;
};

// "%.10g", with nan/inf spelled so pandas reads them.
std::string format_number(double v);

}  // namespace asgd
