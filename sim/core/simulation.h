// sim/core/simulation.h — one simulated run: the virtual clock and event queue, the gradient
// jobs in flight on the worker pool, the messages they send over the topology, the server
// as a resource, the sample stream, counters, evaluation of the model of record, and the
// stop rules. Engines drive it through the small API below, in the terms the algorithm
// uses (pull the parameters, compute, push the result; the server applies an update), and
// never compute a cost themselves. Results are committed in virtual-time order, so output
// does not depend on the thread count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>
#include "kernels/model.h"
#include "sim/timing/compute_time.h"
#include "sim/core/engine.h"
#include "sim/core/runtime.h"
#include "sim/core/event_queue.h"
#include "sim/net/topology.h"
#include "sim/core/parameter_store.h"
#include "sim/core/population.h"
#include "sim/run/recorder.h"
#include "sim/run/run_monitor.h"
#include "sim/data/sample_stream.h"
#include "sim/run/settings.h"
#include "sim/core/worker_pool.h"

namespace asgd {

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
                         const DeviceDataset* train, size_t train_limit, const DeviceDataset* test, size_t test_limit);

// The no-progress rule (Simulation::run): more than kStuckEventsBase +
// kStuckEventsPerWorker x workers events in a row at one virtual instant, with stop.time
// the only limit or with no gradient arriving and no update applied among them, end the
// run with NoProgress.
inline constexpr uint64_t kStuckEventsBase = 100000;
inline constexpr uint64_t kStuckEventsPerWorker = 1000;
// An interrupted run's checkpoint waits at most this many events for a point with no
// server update under way.
inline constexpr uint64_t kCheckpointDeferEvents = 100000;

class Simulation final : public Runtime {
 public:
  Simulation(const RunSettings& settings, const Model& model, const DeviceDataset* train, const DeviceDataset* test,
             WorkerPool& pool, const ComputeTimeModel& compute, Recorder& recorder);
  ~Simulation();

  // The run from its start, or, with `from`, from the checkpoint it reads (written by
  // the same build for the same config: the runner checks its header).
  RunOutcome run(Engine& engine, StateArchive* from = nullptr);
  std::function<void(const MetricsRow&)> on_row;  // progress callback

  // Checkpoints (docs/reliability.md, "Checkpoints"): `due` is asked after every event
  // whether one is wanted; when it is and checkpoint_point() holds, the run's
  // whole state goes to `write` (the engine's, then the simulator's); on an interruption
  // too, at the first such point (within kCheckpointDeferEvents events, else none).
  // Writing one charges no virtual time and changes no result. Unset: none. Both get
  // the updates applied so far (write also the virtual time).
  struct CheckpointHooks {
    std::function<bool(uint64_t updates)> due;
    std::function<void(std::string&& state, uint64_t updates, SimTime time)> write;
  };
  void set_checkpoints(CheckpointHooks hooks) { checkpoints_ = std::move(hooks); }
  // Why this run, with `engine`, cannot be checkpointed ("" when it can); once run()
  // has started, checkpoint_refused() says it for the run's engine.
  std::string checkpoint_refusal(const Engine& engine) const;
  const std::string& checkpoint_refused() const { return checkpoint_refused_; }

  // ---- the engine's API (Runtime; sim/core/runtime.h says what each does) ----
  SimTime now() const override { return queue_.now(); }
  // With a population, from the client the worker's slot trains (drawn now if it has none).
  Step next_step(int worker, std::vector<int32_t>& ids) override;
  // The messages the step declares and its compute take virtual time over the topology.
  void launch(const Step& step) override;
  // (server_update: the server is busy cluster.server.update_seconds per update.)
  // settle scans the jobs in flight; a settled job's errors are left for its arrival.
  void settle(int worker) override;
  void cancel(int worker) override;
  void recycle(std::unique_ptr<GradientJob> job) override;
  // The blocks are a few thousand elements (what several arrays' slices keep in the
  // core's cache between passes), split into ranges run side by side by the pool threads
  // and the caller. On CUDA, or for small n, one call f(exec(), 0, n) here.
  void for_each_block(size_t n, const BlockFn& f) override;
  void schedule_timer(SimTime at, int worker, uint64_t payload) override;
  // In the alpha-beta model over the topology: reserves the links.
  using Runtime::collective;
  SimTime collective(Collective kind, const std::vector<int>& members, double bytes, SimTime at,
                     bool overlapped) override;
  uint32_t client_samples(int64_t client) const override { return population_->samples(client); }

 private:
  bool update_now() override;
  void defer_update(std::unique_ptr<ServerTask> task) override;
  void handle_arrival(const Event& e);
  void handle_compute_done(const Event& e);
  void handle_pull_served(const Event& e);
  void handle_server_done();
  // launch(): a job for the step (its fields and message sizes), then its times (the pull
  // message, the compute and the cuts of a time budget or a departing client); returns
  // when the parameters are read.
  std::unique_ptr<GradientJob> new_job(const Step& st);
  SimTime time_step(GradientJob& job, const Step& st);
  // run(): the start (the engine's first steps, the first row), one event, the end (the
  // steps cut off, the last row, the outcome's counters).
  void start_run(Engine& engine);
  void handle(const Event& e);
  void finish_run();
  // The checkpoint: the state written (every gradient in flight computed first), or read
  // back in place of start_run. False (nothing written) when a gradient failed: its error
  // is for its arrival to report.
  bool save_checkpoint();
  // Where one can be taken: no server update queued (a closure, not state), and no batch
  // of gradients being gathered (flushing one early would change how jobs are batched,
  // and so, on CUDA, the bits).
  bool checkpoint_point() const { return server_tasks_.empty() && pending_.empty(); }
  void restore(Engine& engine, StateArchive& a);
  void checkpoint_state(StateArchive& a);
  // The parameters worker w's step `step` reads from `store` now: the current version, or
  // an older one under forced staleness.
  Snapshot read_for(int worker, uint32_t step, const ParameterStore& store);
  // Whether forced staleness applies now (staleness.from_epoch, until_epoch).
  bool staleness_window_open() const;
  // staleness.mode per_layer: each layer from its own version, into job.pulled.
  void read_layers(GradientJob& job, const ParameterStore& store);
  // Reads the job's parameters from `store` (read_for), into job.read: the version itself,
  // or, for read_rows, the job's copy of its rows of it.
  void read_params(GradientJob& job, const ParameterStore& store);
  // Hands the job to the pool (or the batch being gathered).
  void submit(GradientJob* job);
  // Schedules the job's next event once its parameters are at the worker: the push when it
  // is computed (ComputeDone, contended links), else its arrival.
  void schedule_after_read(GradientJob& job, size_t slot);
  // Adds the job's pull, compute and push time up to `until` to its worker's counters (and
  // the trace); once per job.
  void account(GradientJob& job, SimTime until);
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
  void uncount_unsent_push(GradientJob& job);
  // The job will not come back to the engine (cancelled, lost): its client is free, and the
  // slot draws another for its next step (a client's job is not carried over).
  void end_client_job(GradientJob& job);
  // The time `bytes` take over the client's own link (clients.devices' bandwidth; 0 without).
  SimTime client_link(int64_t client, double bytes) const;

  const DeviceDataset* train_;
  const DeviceDataset* test_;
  WorkerPool& pool_;
  const ComputeTimeModel& compute_;
  bool host_kernels_;  // kernels run on the CPU (OMP, CPP): for_each_block splits over the pool
  Engine* engine_ = nullptr;

  EventQueue queue_;
  std::unique_ptr<Population> population_;               // section clients (null: none)
  std::vector<int64_t> slot_client_;                     // the client each worker's slot trains now (-1: none)
  const ClientDevices* devices_ = nullptr;               // clients.devices (null: none)
  std::vector<std::unique_ptr<GradientJob>> in_flight_;  // by slot
  std::vector<size_t> free_slots_;
  std::vector<std::unique_ptr<GradientJob>> spare_jobs_;
  JobSetup setup_;                     // set by run()
  std::vector<GradientJob*> pending_;  // launched, not yet submitted (batched_gradients > 1)
  std::vector<uint32_t> steps_;
  std::vector<uint64_t> incarnation_;
  std::vector<uint32_t> failure_draws_;
  std::vector<SimTime> down_since_;
  std::vector<SimTime> idle_since_;           // for trace "wait" spans: when the worker last went idle (-1: busy)
  double message_bytes_ = 0;                  // one parameter-sized message
  RowLayout layout_;                          // model_.row_layout(): rows > 0 for a sparse model
  std::vector<ParamRange> layers_;            // staleness per_layer: the model's layers
  std::vector<DeviceArray<float>> residual_;  // per worker: error feedback of compression
  void compress(GradientJob& job);
  bool contended_ = false;      // topology_->contended()
  bool free_network_ = true;    // topology_->free()
  SimTime server_seconds_ = 0;  // cluster.server.update_seconds
  SimTime send_seconds_ = 0;    // cluster.server.send_seconds
  SimTime server_free_ = 0;     // when the server finishes the updates (and sends) asked so far
  // The server sends one message (send_seconds_ > 0): it starts when the server
  // is free (the time returned: a pull's parameters are read then) and keeps it busy
  // send_seconds_; the message leaves when that is over.
  SimTime server_send();
  std::vector<int> last_collective_;  // members of the last collective (for the run's end)
  SimTime last_collective_end_ = 0;
  // Updates waiting for their ServerDone events, in the order asked.
  std::deque<std::unique_ptr<ServerTask>> server_tasks_;

  // The no-progress rule (run): the instant of the last event, and how many ran at it.
  SimTime instant_ = 0;
  uint64_t same_instant_ = 0;
  uint64_t work_seen_ = 0;  // gradients + updates when the no-progress rule last looked
  CheckpointHooks checkpoints_;
  std::string checkpoint_refused_;
  // Interrupted, the run goes on to the first point a checkpoint can be taken: the loops
  // that poll for interruption (a collective's steps) run on as they would have meanwhile.
  bool awaiting_checkpoint_ = false;
};

}  // namespace asgd
