// sim/simulation.h — one simulated run: the virtual clock and event queue, the gradient
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
#include "sim/compute_time.h"
#include "sim/engine.h"
#include "sim/event_queue.h"
#include "sim/topology.h"
#include "sim/parameter_store.h"
#include "sim/recorder.h"
#include "sim/run_monitor.h"
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

// Tests only: a sparse model's steps read whole versions and the server applies every
// gradient to every row, as before row reads and sparse updates (the equivalence tests
// compare the two bit for bit).
inline bool g_force_dense_updates = false;

// One step of worker `worker` and the messages around it, as the engine declares them
// (Simulation::launch). Each message is parameter-sized (cluster.network.message_bytes),
// except a gradient step's (Step::gradient) of a sparse model or under compression
// (sim/message_size.h), and crosses the topology; nothing else is charged. What the engines send:
//   async, SSP            pull from the server's store, compute, push the gradient
//   sync, sync_backup     the same (the pull at the iteration's start or on joining it)
//   local SGD             the round's first step pulls w, the H-th pushes the worker's model
//   EASGD                 local steps send nothing; the step that ends a period pushes the
//                         worker's parameters (the exchange), the next one first receives
//                         the server's reply (and a worker's very first step the center)
//   single-replica warm-up  nothing: one replica trains alone
struct Step {
  int worker = 0;
  const int32_t* ids = nullptr;  // the minibatch's m sample ids (copied)
  size_t m = 0;
  uint64_t tag = 0;              // the engine's own (e.g. the sync iteration)
  // The parameters the step computes on, one of:
  //  - pull: the server's store. The pull reads it when the server serves the pull (the
  //    transfer starts), not when it is requested; forced staleness (staleness.mode) picks
  //    the version there.
  //  - own: the worker's own parameters (pull == null); with `reply`, the server's answer
  //    to the worker's last push reaches the worker first (one message), else no message.
  const ParameterStore* pull = nullptr;
  Snapshot own;
  bool reply = false;
  int reply_from = kServer;      // the reply's sender: the server, a box's host or a peer worker
  bool push = true;              // the result travels to the server (one message)
  // The push carries this step's gradient on the pulled parameters (async, SSP, sync), not
  // parameters: a sparse model's pull and push then hold only the rows the minibatch
  // reads and its gradient touches (Model::touched_rows), and a dense model's gradient is
  // compressed as cluster.network.compression says. False: full-size messages.
  bool gradient = false;
  DeferredStep before;           // own only: applied to own.data() first (see DeferredStep)
};

// The synchronous family's collectives (Simulation::collective), over the topology, in the
// alpha-beta model: docs/architecture.md, "Collectives". Every transfer of a step of a
// collective is requested when the step before has ended everywhere.
enum class Collective {
  RingAllReduce,     // a ring of the members in worker order: 2(n-1) steps of bytes/n each
  Hierarchical,      // members -> their box's host, a ring of those hosts, hosts -> members
  HostReduceToServers,   // members -> their box's host, each such host -> the servers
  ServersToHostsToMembers,  // the servers -> each members' box's host -> the members
};

// One gradient computation: worker `worker`'s step `step`, on parameters `read`.
struct GradientJob {
  int worker = 0;
  uint32_t step = 0;
  Snapshot read;                // released once computed unless the engine keeps it
  uint64_t read_version = 0;
  std::vector<int32_t> ids;     // minibatch sample ids
  DeviceArray<float> grad;      // (num_params) mean gradient over the minibatch
  std::vector<int32_t> rows;    // a sparse model's gradient: the table rows it touches (exactly +0 elsewhere)
  bool sparse = false;          // rows is set (the model has a row table)
  // A sparse model's gradient step pulled from a store: `read` is then this job's own
  // copy of only the rows it reads (= rows) and the dense part, taken from the version
  // read; the rest of `pulled` is stale. So no reader holds the store's versions, and the
  // server updates them in place. ServerUpdate reads a DC backup on those rows only.
  bool read_rows = false;
  DeviceArray<float> pulled;    // (num_params) read_rows only
  // The rows for ServerUpdate: null for a dense gradient.
  const std::vector<int32_t>* touched() const { return sparse ? &rows : nullptr; }
  double push_bytes = 0;        // of its push message
  bool compress = false;        // its pushed gradient is compressed when it arrives
  double loss = 0;              // mean minibatch loss at `read`
  SimTime start = 0;            // launched (a pull or reply is requested now)
  SimTime compute_start = 0;    // parameters at the worker
  SimTime compute_done = 0;     // gradient ready (push starts)
  SimTime arrival = 0;          // at the server (pushed), or compute_done (kept on the worker); kNever: not known yet
  uint64_t incarnation = 0;     // the worker's life it belongs to (a failure ends a life)
  uint64_t tag = 0;             // engine's own (e.g. the sync iteration)
  const ParameterStore* source = nullptr;  // pulled from this store, read when served
  bool received = false;        // a message brought the parameters (a pull or a reply)
  bool pushed = false;          // the result travels to the server
  bool submitted = false;       // handed to the pool (a pull is handed over once served)
  bool read_at_arrival = false; // staleness.at = apply: read (and computed) when it arrives
  bool accounted = false;       // its time is in the worker's compute/comm counters
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
  uint64_t updates = 0, gradients = 0, dropped = 0, lost = 0, failures = 0;
  uint64_t samples = 0;              // of applied gradients: what epochs count
  uint64_t samples_computed = 0;     // of every gradient that arrived (applied, dropped or held)
  std::map<uint64_t, uint64_t> staleness_hist;
  double staleness_mean = 0;
  uint64_t staleness_max = 0;
  std::string staleness_unit = "updates";  // what staleness counts (Engine::staleness_unit)
  double iteration_time_mean = 0;    // sync family; 0 if none
  uint64_t iterations = 0;
  uint64_t server_updates = 0;       // updates the server finished (Simulation::server_update)
  SimTime server_busy = 0;           // virtual time it spent on updates, up to the run's end
  uint64_t messages_to_server = 0, messages_to_workers = 0;
  double bytes_to_server = 0, bytes_to_workers = 0;
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

  // Worker w's next step on the next minibatch (the per-worker batch of the stream, into
  // `ids`, which must outlive the launch): the engine then says where the parameters come
  // from and what travels, and launches it.
  Step next_step(int worker, std::vector<int32_t>& ids) {
    ids.clear();
    stream_->next(settings_.batch_size, ids);
    Step step;
    step.worker = worker;
    step.ids = ids.data();
    step.m = ids.size();
    return step;
  }
  // Starts worker step.worker's next step: the messages it declares and its compute take
  // virtual time; then engine.on_gradient gets the job, at the server when pushed, else on
  // the worker when computed (unless the worker failed meanwhile: then it is lost and
  // counted). The engine launches a worker's next step only once its last one is back.
  void launch(const Step& step);
  // The server applies one update (an async gradient, a sync aggregate, an EASGD exchange,
  // a local-SGD averaging): it is busy cluster.server.update_seconds per update, one at a
  // time in the order asked, and `apply` (which makes the update and goes on) runs when the
  // update is done: at once when the server is free and updates take no time. `apply` is
  // called once; it may own what it needs (a move-only capture, such as the job).
  template <class F>
  void server_update(F&& apply);
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
  // The job's gradient is applied (to the model of record, or to the worker's own model):
  // its samples count toward the epoch, so call it before reading lr() for its step.
  void applied(const GradientJob& job, uint64_t staleness);
  void dropped(const GradientJob& job);
  void iteration_done(SimTime duration);
  // One update of the model of record is done: runs evaluation/stop checks. (Rows due in
  // epochs and the stop limits on gradients and epochs are also checked after every event,
  // so engines whose steps do not update the model of record stop and evaluate there too.)
  void updated();
  void schedule_timer(SimTime at, int worker, uint64_t payload);
  // Starts collective `kind` among `members` (worker indices, ascending) now, each moving
  // one parameter-sized message's bytes: reserves the links and returns when it ends
  // (now if there is nothing to move). The members' time until then is communication.
  SimTime collective(Collective kind, const std::vector<int>& members);
  const Topology& topology() const { return *topology_; }
  bool stopping() const { return monitor_.stopping(); }
  bool worker_alive(int w) const { return alive_[w]; }

 private:
  void handle_arrival(const Event& e);
  void handle_compute_done(const Event& e);
  void handle_pull_served(const Event& e);
  void handle_server_done();
  // The parameters worker w's step `step` reads from `store` now: the current version, or
  // an older one under forced staleness.
  Snapshot read_for(int worker, uint32_t step, const ParameterStore& store);
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

  const RunSettings& settings_;
  const Model& model_;
  const DeviceDataset* train_;
  const DeviceDataset* test_;
  WorkerPool& pool_;
  const ComputeTimeModel& compute_;
  Recorder& recorder_;
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
  std::unique_ptr<Topology> topology_;
  double message_bytes_ = 0;          // one parameter-sized message
  RowLayout layout_;                  // model_.row_layout(): rows > 0 for a sparse model
  double compressed_bytes_ = 0;       // one compressed gradient push (settings_.compression)
  std::vector<DeviceArray<float>> residual_;  // per worker: error feedback of compression
  void compress(GradientJob& job);
  bool contended_ = false;            // topology_->contended()
  bool free_network_ = true;          // topology_->free()
  SimTime server_seconds_ = 0;        // cluster.server.update_seconds
  SimTime server_free_ = 0;           // when the server finishes the updates asked so far
  std::vector<int> last_collective_;  // members of the last collective (for the run's end)
  SimTime last_collective_end_ = 0;
  // An update waiting for its ServerDone event (a move-only callable, type-erased).
  struct ServerTask {
    virtual ~ServerTask() = default;
    virtual void run() = 0;
  };
  template <class F>
  struct ServerTaskOf final : ServerTask {
    explicit ServerTaskOf(F&& f) : f_(std::move(f)) {}
    void run() override { f_(); }
    F f_;
  };
  std::deque<std::unique_ptr<ServerTask>> server_tasks_;  // in the order asked

  RunOutcome out_;
  RunMonitor monitor_;  // counters, rows, the eval schedule and stop rules (shared with asgdsim cluster)
};

template <class F>
void Simulation::server_update(F&& apply) {
  if (server_seconds_ == 0) {
    out_.server_updates++;
    apply();
    return;
  }
  const SimTime start = std::max(now(), server_free_);
  server_free_ = add_time(start, server_seconds_);
  out_.server_busy += server_seconds_;
  recorder_.add_span(0, "apply", start, server_free_);
  using Task = std::decay_t<F>;
  server_tasks_.push_back(std::make_unique<ServerTaskOf<Task>>(Task(std::forward<F>(apply))));
  queue_.push(server_free_, EventKind::ServerDone);
}

}  // namespace asgd
