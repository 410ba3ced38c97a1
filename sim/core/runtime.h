// sim/core/runtime.h — the narrow interface engines (engines/) drive, and the types they drive it
// with: a Step (what a worker's next step computes on and which messages it sends) and the
// GradientJob that comes back. Two runtimes implement it: Simulation (sim/core/simulation.h:
// virtual time, the event queue, the worker pool) and the MPI server
// (experiments/cluster/mpi_runtime.h: real processes, wall time). An engine written against
// Runtime runs in both; it never computes a cost, reads a clock other than now(), or
// knows which runtime it is in.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>
#include "kernels/model.h"
#include "kernels/exec.h"
#include "sim/core/parameter_store.h"
#include "sim/data/partition.h"
#include "sim/data/sample_stream.h"
#include "sim/run/run_monitor.h"
#include "sim/run/settings.h"
#include "sim/base/time.h"
#include "sim/net/collective.h"
#include "sim/net/topology.h"
#include "sim/core/worker_pool.h"

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
// (Runtime::launch). Each message is parameter-sized (cluster.network.message_bytes),
// except a gradient step's (Step::gradient) of a sparse model or under compression
// (sim/net/message_size.h), and crosses the topology; nothing else is charged. What the engines send:
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
  uint64_t tag = 0;  // the engine's own (e.g. the sync iteration)
  // The parameters the step computes on, one of:
  //  - pull: the server's store. The pull reads it when the server serves the pull (the
  //    transfer starts), not when it is requested; forced staleness (staleness.mode) picks
  //    the version there.
  //  - own: the worker's own parameters (pull == null); with `reply`, the server's answer
  //    to the worker's last push reaches the worker first (one message), else no message.
  const ParameterStore* pull = nullptr;
  Snapshot own;
  bool reply = false;
  int reply_from = kServer;  // the reply's sender: the server, a box's host or a peer worker
  bool push = true;          // the result travels to the server (one message)
  // The push carries this step's gradient on the pulled parameters (async, SSP, sync), not
  // parameters: a sparse model's pull and push then hold only the rows the minibatch
  // reads and its gradient touches (Model::touched_rows), and a dense model's gradient is
  // compressed as cluster.network.compression says. False: full-size messages.
  bool gradient = false;
  DeferredStep before;  // own only: applied to own.data() first (see DeferredStep)
  // A time allowance for the compute (MindFlayer SGD's t_i): a step whose drawn compute
  // time exceeds it is abandoned when the allowance runs out. It then computes nothing and
  // pushes nothing, its time (pull and allowance) counts as the worker's wasted_time and
  // `cancelled`, and the engine gets it back (GradientJob::timed_out) at that moment, on
  // the worker. kNever: no allowance. Simulated only (the MPI runtime refuses it).
  SimTime time_budget = kNever;
  // A population (section clients): the client this step trains (next_step draws one when
  // the worker's slot has none), and whether the client's job goes on after this step
  // (its next local step: the slot keeps the client) or ends with it (the client is free
  // again once the step is back, and the slot's next step draws another). -1: no population.
  int64_t client = -1;
  bool keep_client = false;
  // No client of the population is available now (clients.devices' traces): next_step gave
  // no step (m = 0, client -1), and one may be from this time on (kNever: never again).
  SimTime no_client_until = 0;
};

// One gradient computation: worker `worker`'s step `step`, on parameters `read`.
struct GradientJob {
  int worker = 0;
  uint32_t step = 0;
  Snapshot read;  // released once computed unless the engine keeps it
  uint64_t read_version = 0;
  std::vector<int32_t> ids;   // minibatch sample ids
  DeviceArray<float> grad;    // (num_params) mean gradient over the minibatch
  std::vector<int32_t> rows;  // a sparse model's gradient: the table rows it touches (exactly +0 elsewhere)
  bool sparse = false;        // rows is set (the model has a row table)
  // A sparse model's gradient step pulled from a store: `read` is then this job's own
  // copy of only the rows it reads (= rows) and the dense part, taken from the version
  // read; the rest of `pulled` is stale. So no reader holds the store's versions, and the
  // server updates them in place. ServerUpdate reads a DC backup on those rows only.
  bool read_rows = false;
  DeviceArray<float> pulled;  // (num_params) read_rows only
  // The rows for ServerUpdate: null for a dense gradient.
  const std::vector<int32_t>* touched() const { return sparse ? &rows : nullptr; }
  double push_bytes = 0;      // of its push message
  double pull_bytes = 0;      // of its pull or reply message (when received)
  bool compress = false;      // its pushed gradient is compressed when it arrives
  double loss = 0;            // mean minibatch loss at `read`
  SimTime start = 0;          // launched (a pull or reply is requested now)
  SimTime compute_start = 0;  // parameters at the worker
  SimTime compute_done = 0;   // gradient ready (push starts)
  SimTime arrival = 0;        // at the server (pushed), or compute_done (kept on the worker); kNever: not known yet
  uint64_t incarnation = 0;   // the worker's life it belongs to (a failure ends a life)
  uint64_t tag = 0;           // engine's own (e.g. the sync iteration)
  const ParameterStore* source = nullptr;  // pulled from this store, read when served
  bool received = false;                   // a message brought the parameters (a pull or a reply)
  bool pushed = false;                     // the result travels to the server
  bool submitted = false;                  // handed to the pool (a pull is handed over once served)
  bool read_at_arrival = false;            // staleness.at = apply: read (and computed) when it arrives
  bool accounted = false;                  // its time is in the worker's compute/comm counters
  bool push_counted = false;               // its push is in the run's message counters
  bool cancelled = false;                  // abandoned by Runtime::cancel: never delivered, not lost
  bool timed_out = false;                  // ran out of its Step::time_budget: no gradient, delivered at the cut
  DeferredStep before;                     // applied to `read` before computing (see DeferredStep)
  int64_t client = -1;                     // the population's client it trains (Step::client), -1: none
  bool ends_client_job = false;            // its client's job ends with it (not Step::keep_client)
  WorkerPool::Ticket ticket;
};

// A checkpoint of a job that has computed, or waits for its pull or its arrival to read
// (never one being computed): every field but its ticket. Its source is named by its index
// in `stores` (the engine's pull_stores()). Read back, it has nothing left to wait for.
void checkpoint(StateArchive& a, GradientJob& job, const std::vector<const ParameterStore*>& stores);
// Jobs held by index (an empty place stays empty), each as above; read back, the vector
// has the length written.
void checkpoint(StateArchive& a, std::vector<std::unique_ptr<GradientJob>>& jobs,
                const std::vector<const ParameterStore*>& stores);

// Worker w's next step on the next `batch` ids of the run's one sample stream, or of its
// own part's stream under a non-IID partition (`parts` set), into `ids`: what both
// runtimes' next_step give.
inline Step step_from_stream(int worker, SampleStream& stream, PartitionedSamples* parts, size_t batch,
                             std::vector<int32_t>& ids) {
  ids.clear();
  if (parts)
    parts->next(worker, batch, ids);
  else
    stream.next(batch, ids);
  Step step;
  step.worker = worker;
  step.ids = ids.data();
  step.m = ids.size();
  return step;
}

// The engine's API. What both runtimes (the simulator, asgdsim cluster) hold and do the
// same way is the run core, here once: the run's settings, model and recorder, the
// outcome and its RunMonitor (counters, rows, the learning rate, the stop rules), the
// topology, which workers are alive, the initial parameters. The virtual methods are what
// differs: the clock, how a step is launched and its gradient comes back, timers,
// collectives and the server's queue.
class Runtime {
 public:
  virtual ~Runtime() = default;

  virtual SimTime now() const = 0;  // virtual time (simulator) or run time in wall ns (MPI)
  int workers() const { return settings_.workers; }
  const RunSettings& settings() const { return settings_; }
  size_t num_params() const { return model_.num_params(); }
  const Model& model() const { return model_; }  // the model trained (its row layout: sparse stores)
  ExecContext& exec() { return exec_; }          // for the engine's own (server-side) arithmetic
  // The parameters engines start from: the model's seeded initialisation, unless
  // set_initial_params gave others (the single-replica warm-up hands on its result so).
  std::vector<float> initial_params() const;
  void set_initial_params(std::vector<float> w) { initial_override_ = std::move(w); }
  // History depth a parameter store needs for the configured forced staleness.
  size_t history_needed() const;

  // Worker w's next step on the next minibatch (the per-worker batch of the run's one
  // sample stream, into `ids`, which must outlive the launch): the engine then says where
  // the parameters come from and what travels, and launches it.
  virtual Step next_step(int worker, std::vector<int32_t>& ids) = 0;
  // Starts worker step.worker's next step: the messages it declares and its compute take
  // time; then engine.on_gradient gets the job, at the server when pushed, else on the
  // worker when computed (unless the worker failed meanwhile: then it is lost and
  // counted). The engine launches a worker's next step only once its last one is back.
  virtual void launch(const Step& step) = 0;
  // The server applies one update (an async gradient, a sync aggregate, an EASGD exchange,
  // a local-SGD averaging), one at a time in the order asked; `apply` (which makes the
  // update and goes on) runs when the update is done: at once when updates take no time.
  // `apply` is called once; it may own what it needs (a move-only capture, such as the job).
  template <class F>
  void server_update(F&& apply);
  // Abandons worker w's step in flight, if any (Dutta et al. 2018's cancellation): its
  // gradient never reaches the engine, and the worker is free now, for the engine to
  // launch its next step at once. What it costs (docs/algorithms.md, "Cancellation"): the
  // step's pull, compute and push time up to now, counted as the worker's wasted_time
  // (and as compute/comm time as far as it got); a push not yet started is never sent; a
  // push already on the wire has been sent (its link time stays spent). Nothing else but
  // the notice's send at the server (server.send_seconds; 0: free). Simulated with a failure's
  // mechanism (the job belongs to an ended life of its worker, so its next event discards
  // it); the MPI runtime does not (asgdsim cluster refuses configs that cancel).
  virtual void cancel(int worker) = 0;
  // Waits until every gradient job of `worker` still in flight has computed (a lost one
  // too: its deferred step is then applied and it reads its parameters no more).
  virtual void settle(int worker) = 0;
  virtual void recycle(std::unique_ptr<GradientJob> job) = 0;
  // Elementwise work over [0, n): f(ctx, begin, end) for consecutive blocks, maybe side by
  // side on several threads. f must give the same result however [0, n) is split.
  using BlockFn = std::function<void(ExecContext& ctx, size_t begin, size_t end)>;
  virtual void for_each_block(size_t n, const BlockFn& f) = 0;
  // Learning rate in force now (from the epoch reached), and that epoch.
  double lr() const { return monitor_.lr(); }
  double epoch() const { return monitor_.epoch(); }

  // Bookkeeping the engine reports (the shared RunMonitor counts it).
  // The job's gradient is applied (to the model of record, or to the worker's own model):
  // its samples count toward the epoch, so call it before reading lr() for its step.
  void applied(const GradientJob& job, uint64_t staleness);
  // The job's gradient is dropped: its whole step was work for nothing.
  void dropped(const GradientJob& job);
  void iteration_done(SimTime duration) { monitor_.iteration_done(sim_to_seconds(duration)); }
  // One update of the model of record is done: runs evaluation/stop checks. (The simulator
  // also checks the rows due in epochs and the stop limits on gradients and epochs after
  // every event, so engines whose steps do not update the model of record stop and
  // evaluate there too.)
  void updated() { monitor_.updated(); }
  // engine.on_timer(Timer{worker, payload}) at time `at`.
  virtual void schedule_timer(SimTime at, int worker, uint64_t payload) = 0;
  // Starts collective `kind` among `members` (worker indices, ascending) at `at` (>= now):
  // returns when it ends. `bytes`: what each member contributes (a compressed all-reduce's
  // P or Q, a fragment), < 0 for the parameter-sized message. The members' time from `at`
  // to the end is communication, unless `overlapped` (they compute meanwhile: Streaming
  // DiLoCo; a member that then waits for it waits). Several in a row: each starts at the
  // last one's end.
  virtual SimTime collective(Collective kind, const std::vector<int>& members, double bytes, SimTime at,
                             bool overlapped) = 0;
  SimTime collective(Collective kind, const std::vector<int>& members) {
    return collective(kind, members, -1.0, now(), false);
  }
  const Topology& topology() const { return *topology_; }
  bool stopping() const { return monitor_.stopping(); }
  bool worker_alive(int w) const { return alive_[size_t(w)]; }
  // A population (section clients): client c's training samples (its part of the data, or
  // an equal share of the run's one stream under iid). A client's step that its client
  // leaves unfinished comes back timed out (GradientJob::timed_out).
  virtual uint32_t client_samples(int64_t client) const { return 0; }

 protected:
  // `train`: the training set (null, or ignored, for a model that reads no data: an epoch
  // is then RunSettings::nominal_train_size samples). The derived runtime sets topology_
  // and alive_, and calls make_sample_streams.
  Runtime(const RunSettings& settings, const Model& model, const DeviceDataset* train, Recorder& recorder)
      : settings_(settings),
        model_(model),
        recorder_(recorder),
        train_size_(model.uses_data() && train ? train->n : settings.nominal_train_size),
        monitor_(settings, train_size_, model.is_classifier(), out_, recorder) {}

  // The run's one sample stream and, under a data.partition other than iid, each data
  // owner's part (parts_; null under iid) with its labels in out_; `run` draws the parts'
  // blocks side by side. Throws when an epoch would be 0 samples.
  void make_sample_streams(const DeviceDataset* train, const RunTasks& run = {});
  // How many workers are alive (0: every one was lost for good).
  int64_t live_workers() const;
  // Nothing is under way and nothing will come, before any stop limit: every worker was
  // lost (completed: the run went as far as its workers did), or the engine gave none of
  // its live workers a step: it is stuck, and the run is stalled (its results are not those
  // of a run that went on to its limits). (A population always has a client again: every
  // client's availability recurs, and there are at least as many clients as slots.)
  void end_with_no_work_left();

  const RunSettings& settings_;
  const Model& model_;
  Recorder& recorder_;
  ExecContext exec_;
  RunOutcome out_;
  const size_t train_size_;  // samples per epoch
  RunMonitor monitor_;       // counters, rows, the eval schedule and stop rules
  std::unique_ptr<SampleStream> stream_;
  std::unique_ptr<PartitionedSamples> parts_;  // data.partition not iid: each data owner's own stream
  std::unique_ptr<Topology> topology_;
  std::vector<bool> alive_;              // by worker
  std::vector<float> initial_override_;  // set_initial_params (empty: the model's init)

  // A server update waiting its turn (a move-only callable, type-erased).
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
  // True (and the update counted) when an update takes no time and the server is free:
  // server_update then runs it at once, without type-erasing it.
  virtual bool update_now() = 0;
  // Queues an update that takes time: the runtime runs it when it is done.
  virtual void defer_update(std::unique_ptr<ServerTask> task) = 0;
};

template <class F>
void Runtime::server_update(F&& apply) {
  if (update_now()) {
    apply();
    return;
  }
  using Task = std::decay_t<F>;
  defer_update(std::make_unique<ServerTaskOf<Task>>(Task(std::forward<F>(apply))));
}

}  // namespace asgd
