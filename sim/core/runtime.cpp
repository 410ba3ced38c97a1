// sim/core/runtime.cpp — the run core both runtimes share (sim/core/runtime.h).
#include "sim/core/runtime.h"
#include <algorithm>
#include <stdexcept>
#include <string>

namespace asgd {

int64_t Runtime::live_workers() const { return std::count(alive_.begin(), alive_.end(), true); }

void Runtime::end_with_no_work_left() {
  if (live_workers() == 0)
    monitor_.request_stop("completed", "no work left (every worker was lost)");
  else
    monitor_.request_stop("stalled", "the engine gave none of its " + std::to_string(live_workers()) +
                                         " live workers a step, with nothing under way, after " +
                                         std::to_string(out_.updates) +
                                         " updates and before any stop limit: the engine is stuck");
}

std::vector<float> Runtime::initial_params() const {
  if (!initial_override_.empty()) return initial_override_;
  std::vector<float> w;
  model_.init_params(settings_.seed, w);
  return w;
}

size_t Runtime::history_needed() const {
  switch (settings_.staleness) {
    case StalenessMode::Emergent:
      return 0;
    case StalenessMode::Fixed:
    case StalenessMode::Uniform:
    case StalenessMode::Geometric:
    case StalenessMode::PerLayer:
      return settings_.staleness_tau;
  }
  return 0;
}

void Runtime::applied(const GradientJob& job, uint64_t staleness) {
  recorder_.note_staleness(job.worker + 1, job.step, int64_t(staleness));
  monitor_.applied(job.worker, job.ids.size(), staleness);
}

void Runtime::dropped(const GradientJob& job) {
  monitor_.dropped(job.worker);
  out_.workers[size_t(job.worker)].wasted += job.arrival - job.start;  // the whole step, for nothing
}

void Runtime::make_sample_streams(const DeviceDataset* train, const RunTasks& run) {
  if (train_size_ == 0) throw std::invalid_argument("training set size (samples per epoch) is 0");
  // a model that reads no data ignores the ids: they only count samples
  stream_ = std::make_unique<SampleStream>(train_size_, settings_.seed, /*shuffle=*/model_.uses_data());
  parts_ = make_partitioned_samples(settings_.partition, settings_.data_owners(), settings_.seed,
                                    model_.uses_data() ? train : nullptr, model_.uses_data(), run);
  if (parts_) out_.partition_labels = parts_->histogram();
}

}  // namespace asgd
