// experiments/cluster/mpi_runtime.h — the real runtime of `asgdsim cluster`: the engines of
// engines/ run unchanged on the server rank (rank 0) against worker processes (ranks
// 1..N), in wall time. What this file holds is MPI only: the wire protocol, the bounded
// waits, a worker process (it computes gradients with the simulator's kernels, nothing
// else), and MpiRuntime, which implements sim/core/runtime.h's interface with real messages.
// It holds no update rule: every engine's arithmetic is its engines/ file.
//
// How a Step maps onto messages (the simplest faithful mapping; docs/cluster.md): every
// launched step is one round trip. The server sends worker w a Work message with the
// parameters the step computes on and its minibatch's sample ids, and the worker answers
// with the gradient and its loss. For a pull those parameters are the store's version at
// the send (the moment the simulator reads a pull); for the worker's own parameters
// (EASGD, local SGD, the warm-up) they are the engine's copy of them, which lives on the
// server with the engine's other state (a deferred local step is applied before the
// send). So an engine's arithmetic is the same in both runtimes; what the real mode does
// not reproduce is EASGD's and local SGD's saving of messages between exchanges.
//
// What summary.json's `messages` count (MpiRuntime): the messages the engine declares, as
// the simulator counts them, at the simulator's sizes (step_message_bytes): a pull or
// reply when its Work message is sent, a push when the worker's gradient reaches the
// server (also at the end of the run, or from a worker already declared dead). The Work
// message and answer of a step that declares none (a local step), Stop, Done, Error and
// the heartbeats are this protocol's, not the engine's: not counted.
#pragma once
#if ASGD_WITH_MPI
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <mpi.h>
#include "experiments/config/config.h"
#include "experiments/cluster/mpi_env.h"
#include "experiments/run/run_parts.h"
#include "sim/timing/compute_time.h"
#include "sim/core/engine.h"
#include "sim/run/recorder.h"
#include "sim/run/run_monitor.h"
#include "sim/core/runtime.h"
#include "sim/data/sample_stream.h"
#include "sim/net/message_size.h"
#include "sim/core/simulation.h"  // RunOutcome, evaluate_params

namespace asgd {
namespace wire {

using Clock = std::chrono::steady_clock;
constexpr int kTagToWorker = 11;
constexpr int kTagToServer = 12;

enum class Kind : uint32_t {
  Work = 1,      // server -> worker: parameters + the minibatch's sample ids
  Stop = 2,      // server -> worker: the run is over (tag kStopPeerLost: a rank died)
  Gradient = 3,  // worker -> server: the gradient + its minibatch loss
  Error = 6,     // worker -> server: the worker failed; the text follows
  Done = 7,      // server -> worker: every run is over; tag: the exit code, steps: a peer died
};

// Every message: this header, then `ids` int32 sample ids, then `values` floats, then
// `text` bytes.
struct Header {
  uint32_t kind = 0;
  uint32_t step = 0;   // the worker's step (Work, Gradient): its noise and its drawn time
  uint64_t tag = 0;    // Stop, Done, Error: see the constants
  double loss = 0;     // Gradient: minibatch loss
  double busy = 0;     // Gradient: seconds computing (+ injected delay)
  uint64_t steps = 0;  // Done: a peer died
  uint32_t ids = 0, values = 0, text = 0, pad = 0;
};

struct Message {
  Header h;
  std::vector<int32_t> ids;
  std::vector<float> values;
  std::string text;
  void pack(std::vector<char>& buf) const;
  void unpack(const std::vector<char>& buf);
};

constexpr uint64_t kStopPeerLost = 1;   // Stop's tag: a worker rank of the job died
constexpr uint64_t kErrorMismatch = 1;  // Error's tag: the worker's data or model differ

// How long a worker waits on the server (rank 0): until its heartbeat has been silent for
// `timeout` seconds (real.worker_timeout), or, without a heartbeat, until nothing at all
// has come for that long. The server's own silences (evaluating, writing a run's files,
// loading the next run's data) do not count while its heartbeat goes on.
struct ServerWatch {
  const MpiEnv* mpi = nullptr;
  double timeout = 60;
  bool lost(double silent) const;
  [[noreturn]] void fail() const;
};
extern const ServerWatch* g_watch;  // worker ranks: set while a run's config is known
extern bool g_peer_lost;            // worker ranks: a Stop said a peer died

double wall_since(Clock::time_point t0);
// Receives the next message with `tag` from `source` (or any), waiting at most `timeout`
// seconds (< 0: as long as the server lives: worker ranks, through g_watch). Returns the
// sender's rank, or -1 on timeout.
int receive(int source, int tag, Message& m, std::vector<char>& buf, double timeout);
// Worker side: sends and waits until the buffer is free, as long as the server lives.
void send_blocking(int dest, const Message& m, std::vector<char>& buf);
// Tells every live worker rank (dead: by rank) that a run is skipped (Stop), or with Done
// that every run is over and `code` is the exit code. A rank that does not take it within
// `timeout` seconds is marked dead.
void tell_workers(int workers, std::vector<bool>& dead, double timeout, Kind kind, int code = 0);

}  // namespace wire

// A run's parts on a rank (make_run_parts, the simulator's assembly), its data read once per
// data key across the runs of an experiment (`cache` holds the last one).
RunParts rank_parts(const RunSpec& run, RunSettings s, const std::string& base_dir, std::shared_ptr<LoadedData>& cache);

// A worker rank's part of one run: Work in, gradient out, until Stop. A Done in place of
// the run's first message (the server gave up before the run: its folder could not be
// made, say) is left in `done`. It dies for real
// (SIGKILL) when cluster.failures.events says so, and with real.delay_scale > 0 each step
// lasts at least that times the compute time the simulator draws for it.
class WorkerProcess {
 public:
  WorkerProcess(const RunSpec& run, const RunParts& parts, int worker);
  void run(wire::Message& done);

 private:
  double gradient(const float* w, const std::vector<int32_t>& ids, uint32_t step);
  const RunSettings& s_;
  const Model& model_;
  const DeviceDataset* data_;
  const ComputeTimeModel& compute_;
  const int worker_;
  const std::string shape_;
  double delay_scale_ = 0, die_at_ = 0, busy_ = 0;
  wire::Clock::time_point t0_;
  ExecContext ctx_;
  DeviceArray<float> w_, grad_;
  std::vector<char> buf_;
};

// A worker rank that cannot make a run (its data or model failed to load): it takes the
// run's first message and, unless the run is skipped, tells the server why, then waits
// for Stop (or takes Done, into `done`, as WorkerProcess::run does).
void worker_cannot_run(const std::string& why, wire::Message& done);

// The server rank's runtime for one run: the engine drives it through Runtime. The clock
// is wall time since the start less the time spent evaluating; arrivals are MPI messages
// polled with bounded waits; a worker silent for real.worker_timeout with a step in
// flight is declared dead (its gradient lost, engine.on_worker_down). Server updates take
// their real time (cluster.server.update_seconds is ignored); collectives and forced
// staleness are refused before a run starts (simulated only).
class MpiRuntime final : public Runtime {
 public:
  MpiRuntime(const RunSpec& run, const RunParts& parts, Recorder& rec);
  RunOutcome run(Engine& engine);
  // After an error on the server: every worker is told to stop (none is left waiting).
  void abandon() noexcept;
  const std::string& failure() const { return failure_; }
  bool mismatch() const { return mismatch_; }  // a worker computes on other data or another model
  std::vector<int> dead_ranks() const;         // declared dead, and never heard from again
  const std::vector<std::string>& notes() const { return notes_; }

  // ---- Runtime ----
  SimTime now() const override;
  Step next_step(int worker, std::vector<int32_t>& ids) override;
  void launch(const Step& step) override;
  void settle(int) override {}  // a step's parameters are copied into its Work message
  // Not implemented: a rank computing cannot be interrupted by this protocol, so
  // check_supported (cluster.cpp) refuses the configs that cancel (engine.late "cancel").
  void cancel(int) override { throw std::logic_error("asgdsim cluster cannot cancel a step (engine.late \"cancel\")"); }
  void recycle(std::unique_ptr<GradientJob> job) override;
  void for_each_block(size_t n, const BlockFn& f) override { f(exec_, 0, n); }
  void schedule_timer(SimTime at, int worker, uint64_t payload) override;
  using Runtime::collective;
  SimTime collective(Collective, const std::vector<int>&, double, SimTime, bool) override;

 private:
  bool update_now() override {
    out_.server_updates++;
    return true;
  }
  void defer_update(std::unique_ptr<ServerTask> task) override { task->run(); }
  double seconds() const;  // now() in seconds
  int rank_of(int w) const { return w + 1; }
  std::string who(int w) const;
  void loop();
  void on_message(int w, const wire::Message& m);
  void check_timeouts();
  void declare_dead(int w, const std::string& what);
  void wind_down();
  void finish_outcome();
  void count_push(double bytes);                        // a push reached the server
  void count_late_push(int w, const wire::Message& m);  // from a worker declared dead

  // One nonblocking send in flight per worker.
  struct Outbox {
    std::vector<char> buf;
    MPI_Request req = MPI_REQUEST_NULL;
    bool has_request = false;
  };
  // Waits for the previous send to w (a zombie's may never be taken: it is let go after
  // the timeout), then starts this one.
  void send(int w, const wire::Message& m);
  void finish_send(int w);

  const RunSpec& run_;
  const RunParts& run_parts_;
  double timeout_ = 60;
  std::string shape_;
  Engine* engine_ = nullptr;
  std::vector<uint32_t> steps_;
  std::vector<bool> zombie_;
  std::vector<std::unique_ptr<GradientJob>> in_flight_;  // by worker: at most one each
  std::vector<std::unique_ptr<GradientJob>> spare_jobs_;
  std::vector<double> given_at_, idle_since_, down_since_;
  RowLayout layout_;           // model_.row_layout(): a sparse model's messages are its rows
  std::vector<int32_t> rows_;  // scratch: the rows a step touches (its messages' sizes)
  // By worker: the push of the step it had in flight when it was declared dead, should it
  // arrive after all (it left the worker: counted then).
  struct LostPush {
    bool pending = false;
    uint32_t step = 0;
    double bytes = 0;
  };
  std::vector<LostPush> lost_push_;
  std::vector<Outbox> outbox_;
  std::multimap<SimTime, std::pair<int, uint64_t>> timers_;
  WorkerPool eval_pool_{1, true};  // evaluation runs on the calling thread
  wire::Clock::time_point t0_;
  double eval_seconds_ = 0, next_eval_time_ = 0;
  bool wound_down_ = false;
  std::string failure_;
  bool mismatch_ = false;
  std::vector<std::string> notes_;
};

}  // namespace asgd
#endif  // ASGD_WITH_MPI
