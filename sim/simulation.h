// sim/simulation.h — one simulated run: the virtual clock and event queue, the gradient
// jobs in flight on the worker pool, the sample stream, counters, evaluation of the model
// of record, and the stop rules. Engines drive it through the small API below; results
// are committed in virtual-time order, so output does not depend on the thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "kernels/model.h"
#include "sim/compute_time.h"
#include "sim/engine.h"
#include "sim/event_queue.h"
#include "sim/network.h"
#include "sim/parameter_store.h"
#include "sim/recorder.h"
#include "sim/sample_stream.h"
#include "sim/settings.h"
#include "sim/worker_pool.h"

namespace asgd {

// An SGD step that a gradient job applies, on its pool thread, to parameters its worker
// owns before computing: params <- params - lr * grad, in place, (n) floats each. An
// engine whose workers keep their own parameters (EASGD) defers a local step so: it then
// runs beside the other gradients instead of on the scheduler thread, and the gradient
// reads the parameters while they are still in that core's cache. The engine keeps grad
// alive and leaves params alone until the job has computed (its arrival, or settle()).
// With grad_buffer (the array grad points into), the job also computes its own gradient
// into that buffer, after the step has read it: the engine gets the job's former buffer
// in exchange. The gradient's writes then go to lines the step just brought into the
// core's cache, instead of to a buffer untouched since the job before.
struct DeferredStep {
  float* params = nullptr;  // null: nothing deferred
  const float* grad = nullptr;
  float lr = 0;
  DeviceArray<float>* grad_buffer = nullptr;
};

// One gradient computation: worker `worker`'s step `step`, on parameters `read`.
struct GradientJob {
  int worker = 0;
  uint32_t step = 0;
  Snapshot read;                // released once computed unless the engine keeps it
  uint64_t read_version = 0;
  std::vector<int32_t> ids;     // minibatch sample ids
  DeviceArray<float> grad;      // (num_params) mean gradient over the minibatch
  double loss = 0;              // mean minibatch loss at `read`
  SimTime start = 0;            // read requested (pull starts)
  SimTime compute_start = 0;    // parameters arrived
  SimTime compute_done = 0;     // gradient ready (push starts)
  SimTime arrival = 0;          // gradient at the server
  uint64_t incarnation = 0;     // the worker's life it belongs to (a failure ends a life)
  uint64_t tag = 0;             // engine's own (e.g. the sync iteration)
  DeferredStep before;          // applied to `read` before computing (see DeferredStep)
  WorkerPool::Ticket ticket;
};

// What every gradient job of a run shares, besides its GradientJob.
struct JobSetup {
  const Model* model = nullptr;
  const DeviceDataset* data = nullptr;
  uint64_t seed = 0;
  Precision precision = Precision::Fp32;
  bool release_read = true;  // let go of the snapshot once computed
};

// The train and test sums of parameters w as a run's metrics rows take them: the first
// train_limit / test_limit rows of each set (0: all), in fixed 2,048-row chunks computed
// side by side on the pool, each set's chunks added in chunk order (so the result does
// not depend on the thread count). A model that reads no data is evaluated once per set,
// on exec.
struct EvalPair {
  EvalSums train, test;
};
EvalPair evaluate_params(const Model& model, WorkerPool& pool, ExecContext& exec, const float* w,
                         const DeviceDataset* train, size_t train_limit, const DeviceDataset* test,
                         size_t test_limit);

struct RunOutcome {
  std::string status = "completed";  // completed | diverged | interrupted
  std::string note;                  // why it ended, in words
  SimTime time = 0;
  uint64_t updates = 0, gradients = 0, samples = 0, dropped = 0, lost = 0, failures = 0;
  std::map<uint64_t, uint64_t> staleness_hist;
  double staleness_mean = 0;
  uint64_t staleness_max = 0;
  double iteration_time_mean = 0;    // sync family; 0 if none
  uint64_t iterations = 0;
  std::vector<WorkerStats> workers;
};

class Simulation {
 public:
  Simulation(const RunSettings& settings, const Model& model, const DeviceDataset* train,
             const DeviceDataset* test, WorkerPool& pool, const ComputeTimeModel& compute,
             Recorder& recorder);
  ~Simulation();

  RunOutcome run(Engine& engine);
  std::function<void(const MetricsRow&)> on_row;  // progress callback

  // ---- the engine's API ----
  SimTime now() const { return queue_.now(); }
  int workers() const { return settings_.workers; }
  const RunSettings& settings() const { return settings_; }
  const Model& model() const { return model_; }
  size_t num_params() const { return model_.num_params(); }
  ExecContext& exec() { return exec_; }
  // The parameters engines start from: the model's seeded initialisation, unless
  // set_initial_params gave others (the single-replica warm-up hands on its result so).
  std::vector<float> initial_params() const;
  void set_initial_params(std::vector<float> w) { initial_override_ = std::move(w); }
  // History depth a parameter store needs for the configured forced staleness.
  size_t history_needed() const;

  // The parameters worker w reads now from `store`: the current version, or an older
  // one under forced staleness.
  Snapshot read_for(int worker, const ParameterStore& store);
  // Appends the next m ids of the run's sample stream.
  void take_samples(size_t m, std::vector<int32_t>& out) { stream_->next(m, out); }
  // Starts worker w's next gradient on `params` with minibatch `ids`: the pull, the
  // compute and the push take virtual time; then engine.on_gradient gets it (unless the
  // worker failed meanwhile: then the gradient is lost and counted). `before`, if set,
  // is applied to params.data() (== before.params) first, on the pool thread.
  void launch(int worker, Snapshot params, const int32_t* ids, size_t m, uint64_t tag = 0,
              const DeferredStep& before = {});
  // Waits until every gradient job of `worker` still in flight has computed (a lost one
  // too: its deferred step is then applied and it reads its parameters no more). Its
  // errors are left for its arrival to report. Scans the jobs in flight: for failures.
  void settle(int worker);
  void recycle(std::unique_ptr<GradientJob> job);
  // Elementwise work over [0, n) on the worker pool: f(ctx, begin, end) is called for
  // consecutive blocks (a few thousand elements: what several arrays' slices keep in the
  // core's cache between passes), the blocks split into ranges run side by side by the
  // pool threads and the caller. On CUDA, or for small n, one call f(exec(), 0, n) here.
  // f must give the same result however [0, n) is split: elementwise kernels only.
  using BlockFn = std::function<void(ExecContext& ctx, size_t begin, size_t end)>;
  void for_each_block(size_t n, const BlockFn& f);
  // Learning rate in force now (from the epoch reached).
  double lr() const;
  double epoch() const;

  // Bookkeeping the engine reports.
  void applied(const GradientJob& job, uint64_t staleness);
  void dropped(const GradientJob& job);
  void iteration_done(SimTime duration);
  // One update of the model of record is done: runs evaluation/stop checks.
  void updated();
  void schedule_timer(SimTime at, int worker, uint64_t payload);
  bool stopping() const { return stop_; }
  bool worker_alive(int w) const { return alive_[w]; }

 private:
  void handle_arrival(const Event& e);
  void handle_compute_done(const Event& e);
  // The job's worker failed after it started: the gradient is lost.
  bool lose_if_stale(std::unique_ptr<GradientJob>& job);
  void worker_down(int worker, SimTime down_for);
  void worker_up(int worker);
  void schedule_rate_failure(int worker);
  size_t take_slot(std::unique_ptr<GradientJob> job);
  // Submits the jobs gathered for a batch (settings.batched_gradients > 1) as one pool
  // job; they are gathered in launch order and flushed when the batch is full or one of
  // them is awaited: both follow virtual time, so the batches are the same every run.
  void flush_pending();
  // Waits for a job's gradient (flushing its batch first if it is still gathering).
  void await(GradientJob& job);
  void evaluate_row();
  void request_stop(const std::string& status, const std::string& note);
  void drain();

  const RunSettings& settings_;
  const Model& model_;
  const DeviceDataset* train_;
  const DeviceDataset* test_;
  WorkerPool& pool_;
  const ComputeTimeModel& compute_;
  Recorder& recorder_;
  LrSchedule schedule_;
  ExecContext exec_;
  bool host_kernels_;  // kernels run on the CPU (OMP, CPP): for_each_block splits over the pool
  Engine* engine_ = nullptr;

  EventQueue queue_;
  std::unique_ptr<SampleStream> stream_;
  size_t train_size_;
  std::vector<std::unique_ptr<GradientJob>> in_flight_;  // by slot
  std::vector<size_t> free_slots_;
  std::vector<std::unique_ptr<GradientJob>> spare_jobs_;
  JobSetup setup_;                     // set by run()
  std::vector<GradientJob*> pending_;  // launched, not yet submitted (batched_gradients > 1)
  std::vector<uint32_t> steps_;
  std::vector<bool> alive_;
  std::vector<float> initial_override_;  // set_initial_params (empty: the model's init)
  std::vector<uint64_t> incarnation_;
  std::vector<uint32_t> failure_draws_;
  std::vector<SimTime> down_since_;
  std::vector<SimTime> idle_since_;  // for trace "wait" spans: when the worker last went idle (-1: busy)
  NetworkModel network_;

  RunOutcome out_;
  bool stop_ = false;
  bool evaluated_at_current_state_ = false;
  AfterUpdate after_update_;  // the eval schedule in updates/epochs and the stop limits
  // windows since the last row
  RowWindow window_;
  std::vector<uint64_t> stale_counts_;  // applied gradients by staleness
  double stale_total_ = 0; uint64_t stale_total_count_ = 0;
  double iter_sum_ = 0;
};

}  // namespace asgd
