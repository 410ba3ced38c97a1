// sim/run/run_monitor.cpp — the counting, rows and stop rules shared by both runtimes.
#include "sim/run/run_monitor.h"
#include <algorithm>
#include <cmath>

namespace asgd {

RunMonitor::RunMonitor(const RunSettings& s, size_t train_size, bool classifier, RunOutcome& out, Recorder& recorder)
    : s_(s),
      train_size_(train_size),
      classifier_(classifier),
      out_(out),
      recorder_(recorder),
      schedule_(s.lr),
      after_update_(s) {}

double RunMonitor::epoch() const { return double(out_.samples) / double(train_size_); }

bool RunMonitor::arrived(int worker, uint64_t samples, double loss_sum, uint64_t count) {
  out_.workers[size_t(worker)].gradients += count;
  out_.gradients += count;
  out_.samples_computed += samples;
  progressed_ = true;
  window_.loss_sum += loss_sum;
  window_.loss_count += count;
  if (std::isfinite(loss_sum)) return true;
  request_stop("diverged", "a worker's minibatch loss became " + format_number(loss_sum));
  return false;
}

void RunMonitor::applied(int worker, uint64_t samples, uint64_t staleness, uint64_t count) {
  out_.workers[size_t(worker)].applied += count;
  out_.samples += samples;
  progressed_ = true;
  if (staleness >= stale_counts_.size()) stale_counts_.resize(staleness + 1, 0);
  stale_counts_[staleness] += count;
  out_.staleness_max = std::max(out_.staleness_max, staleness);
  window_.stale_sum += double(staleness) * double(count);
  window_.stale_count += count;
  stale_total_ += double(staleness) * double(count);
  stale_total_count_ += count;
}

void RunMonitor::dropped(int worker) {
  out_.workers[size_t(worker)].dropped++;
  out_.dropped++;
}

void RunMonitor::iteration_done(double seconds) {
  iter_sum_ += seconds;
  out_.iterations++;
}

void RunMonitor::updated() {
  out_.updates++;
  failures_at_update_ = out_.failures;
  const SimTime t = now_();
  recorder_.add_span(0, "update", t, t);  // an instant on the server's track
  evaluated_now_ = false;
  if (after_update_.evaluate(out_.updates, epoch())) evaluate_row();
  if (const char* limit = after_update_.limit_reached(out_.updates, out_.gradients, epoch()))
    request_stop("completed", limit);
}

void RunMonitor::check_progress() {
  if (!stop_ && out_.failures - failures_at_update_ > kFailuresWithoutUpdate * uint64_t(s_.workers))
    request_stop("stalled", "no update of the model of record in the last " +
                                std::to_string(out_.failures - failures_at_update_) + " worker failures (" +
                                std::to_string(kFailuresWithoutUpdate) + " per worker), after " +
                                std::to_string(out_.updates) +
                                " updates: the failures end every round of the engine before it finishes, so no "
                                "limit in updates would be reached");
  if (!progressed_) return;
  progressed_ = false;
  if (stop_) return;
  if (after_update_.epoch_due(epoch())) evaluate_row();
  if (const char* limit = after_update_.limit_reached(out_.updates, out_.gradients, epoch()))
    request_stop("completed", limit);
}

void RunMonitor::evaluate_row() {
  const auto [tr, te] = evaluate_();
  MetricsRow row;
  row.time = now_();
  row.updates = out_.updates;
  row.gradients = out_.gradients;
  row.samples = out_.samples;
  row.epoch = epoch();
  row.lr = lr();
  row.dropped = out_.dropped;
  window_.fill(row, tr, te, classifier_);
  recorder_.add_row(row);
  evaluated_now_ = true;
  if (std::isnan(first_train_loss_)) first_train_loss_ = row.train_loss;
  last_train_loss_ = row.train_loss;
  if (on_row) on_row(row);
  const std::string why = divergence(row);
  if (why.empty()) {
    if (const std::string reached = target_reached(row); !reached.empty()) {
      reached_target_ = true;
      request_stop("completed", reached);
    }
    return;
  }
  // The row taken after a limit ended the run counts too: a run whose last row diverged
  // did not complete.
  if (stop_ && (out_.status == "completed" || out_.status == "stalled")) stop_ = false;
  request_stop("diverged", why);
}

std::string RunMonitor::divergence(const MetricsRow& row) const {
  if (!std::isfinite(row.train_loss) || row.train_loss > s_.divergence_bound)
    return "train_loss " + format_number(row.train_loss) +
           (std::isfinite(row.train_loss) ? " exceeded the divergence bound" : " is not finite");
  // NaN: no gradient arrived since the last row
  if (!std::isnan(row.worker_loss) && row.worker_loss > s_.divergence_bound)
    return "worker_loss " + format_number(row.worker_loss) +
           " (the workers' minibatch loss) exceeded the divergence bound while train_loss is " +
           format_number(row.train_loss);
  return "";
}

std::string RunMonitor::target_reached(const MetricsRow& row) const {
  if (s_.stop_target_accuracy > 0 && row.test_accuracy >= s_.stop_target_accuracy)  // NaN: never
    return "reached stop.target_accuracy (test_accuracy " + format_number(row.test_accuracy) +
           " >= " + format_number(s_.stop_target_accuracy) + ")";
  if (s_.stop_target_loss > 0 && row.train_loss <= s_.stop_target_loss)
    return "reached stop.target_loss (train_loss " + format_number(row.train_loss) +
           " <= " + format_number(s_.stop_target_loss) + ")";
  return "";
}

bool stalled(double first_train_loss, double last_train_loss) {
  return std::isfinite(first_train_loss) && first_train_loss > 0 && std::isfinite(last_train_loss) &&
         last_train_loss >= (1 - kStallMargin) * first_train_loss;
}

void RunMonitor::request_stop(const std::string& status, const std::string& note) {
  if (stop_) return;
  stop_ = true;
  out_.status = status;
  out_.note = note;
}

void RunMonitor::finish() {
  if (out_.status == "completed" && !reached_target_ && out_.updates == 0) {
    // the engine's first round (a sync iteration, a period of local steps) never ended
    out_.status = "stalled";
    out_.note +=
        "; no round of the engine finished within the stop budget (0 updates of the model of record): a "
        "round is longer than the run, which says nothing of how the engine learns; raise the stop limits "
        "or shorten the round";
  } else if (out_.status == "completed" && !reached_target_ && stalled(first_train_loss_, last_train_loss_)) {
    out_.status = "stalled";
    out_.note += "; train_loss " + format_number(last_train_loss_) + " did not fall below " +
                 format_number(100 * (1 - kStallMargin)) + "% of its first value " + format_number(first_train_loss_) +
                 ": the run did not train";
  }
  if (out_.failures > 0 && out_.status != "failed")
    out_.note += "; " + std::to_string(out_.failures) + " worker failure(s), " + std::to_string(out_.lost) +
                 " gradient(s) lost; the engine went on with the live workers";
  for (size_t k = 0; k < stale_counts_.size(); ++k)
    if (stale_counts_[k]) out_.staleness_hist[k] = stale_counts_[k];
  out_.staleness_mean = stale_total_count_ ? stale_total_ / double(stale_total_count_) : 0.0;
  out_.iteration_time_mean = out_.iterations ? iter_sum_ / double(out_.iterations) : 0.0;
}

void RunMonitor::checkpoint(StateArchive& a) {
  a.tag("monitor");
  asgd::checkpoint(a, out_);
  double next_eval = after_update_.next_eval_epoch();
  a.io(next_eval);
  after_update_.set_next_eval_epoch(next_eval);
  a.io(window_);
  a.io(evaluated_now_);
  a.io(progressed_);
  a.io(reached_target_);
  a.io(failures_at_update_);
  a.io(first_train_loss_);
  a.io(last_train_loss_);
  a.io(stale_counts_);
  a.io(stale_total_);
  a.io(stale_total_count_);
  a.io(iter_sum_);
}

// ---- checkpoints ----

void checkpoint(StateArchive& a, RunOutcome& o) {
  a.tag("outcome");
  a.io(o.status);
  a.io(o.note);
  a.io(o.time);
  for (uint64_t* c : {&o.updates, &o.gradients, &o.dropped, &o.lost, &o.failures, &o.samples, &o.samples_computed,
                      &o.staleness_max, &o.iterations, &o.server_updates, &o.messages_to_server, &o.messages_to_workers,
                      &o.client_draws, &o.clients_distinct, &o.clients_departed})
    a.io(*c);
  a.io(o.staleness_hist);
  a.io(o.staleness_mean);
  a.io(o.staleness_unit);
  a.io(o.iteration_time_mean);
  a.io(o.server_busy);
  a.io(o.bytes_to_server);
  a.io(o.bytes_to_workers);
  a.io(o.peak_sync_bytes);
  a.io(o.workers);
  a.io(o.partition_labels);
  a.io(o.clients);
}

}  // namespace asgd
