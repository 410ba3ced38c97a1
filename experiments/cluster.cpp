// experiments/cluster.cpp — the engines for real over MPI (see cluster.h for what carries
// over from the config). One protocol for every engine: the server (rank 0) hands a
// worker work (parameters, and the sample ids of its minibatch) and the worker answers
// with a gradient; EASGD workers step on their own and answer every `period` steps with
// their parameters for an elastic exchange. The server never blocks on a worker: its
// sends are nonblocking and it polls for messages, so a dead worker is noticed (by its
// silence) instead of hanging the run.
#include "experiments/cluster.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <thread>
#include <unistd.h>
#include "experiments/run_parts.h"
#include "experiments/runner.h"
#include "kernels/ops.h"
#include "sim/atomic_file.h"
#include "sim/interrupt.h"
#include "sim/lr_schedule.h"
#include "sim/recorder.h"
#include "sim/run_monitor.h"
#include "sim/sample_stream.h"
#include "sim/simulation.h"  // RunOutcome
#if ASGD_WITH_MPI
#include <mpi.h>
#endif

namespace asgd {

std::string cluster_experiment_name(const Experiment& exp) {
  return exp.resolved.value("name", std::string("experiment")) + "-cluster";
}

namespace {

// What `asgdsim cluster` cannot do with a run's config, each with its JSON path; checked
// on every rank before anything is sent, so all ranks refuse alike.
void check_supported(const RunSpec& run, int workers_available) {
  const json& c = run.config;
  Validator v;
  const std::string type = c["engine"]["type"];
  if (type != "async" && type != "sync" && type != "sync_backup" && type != "easgd")
    v.error("engine.type", "'" + type + "': asgdsim cluster runs async, sync, sync_backup and easgd (simulate " + type +
                               " with asgdsim run)");
  int workers = c["cluster"]["workers"];
  if (workers != workers_available)
    v.error("cluster.workers", std::to_string(workers) + ", but the MPI job has " + std::to_string(workers_available) +
                                   " worker rank(s): start it with mpirun -np " + std::to_string(workers + 1) +
                                   " (rank 0 is the server)");
  if (c["staleness"]["mode"] != "emergent")
    v.error("staleness.mode", c["staleness"]["mode"].dump() + ": forced staleness is a simulator feature; a real run "
                                                              "measures the staleness it gets (use emergent)");
  if (c["train"]["single_replica_epochs"].get<double>() > 0)
    v.error("train.single_replica_epochs", "the single-replica warm-up is simulated only (set it to 0)");
  if (c["cluster"]["network"]["precision"] != "fp32")
    v.error("cluster.network.precision", c["cluster"]["network"]["precision"].dump() +
                                             ": real transfers are fp32 (16-bit transfers are simulated only)");
  if (c["cluster"]["network"]["compression"]["type"] != "none")
    v.error("cluster.network.compression.type", c["cluster"]["network"]["compression"]["type"].dump() +
                                                    ": real transfers are uncompressed (compression is simulated only)");
  if (c["cluster"].contains("topology"))  // the real machines' links are what they are
    v.error("cluster.topology", "boxes and links are simulated only: a real run uses the machines mpirun starts "
                                "(remove cluster.topology)");
  if (c["engine"].value("comm", std::string("ps")) != "ps")
    v.error("engine.comm", c["engine"]["comm"].dump() + ": a real run exchanges through the parameter-server rank "
                                                        "(collectives are simulated only; use \"ps\")");
  const json& f = c["cluster"]["failures"];
  if (f["rate"].get<double>() > 0)
    v.error("cluster.failures.rate", "failures at a rate are simulated only (real failures: failures.events)");
  for (size_t i = 0; i < f["events"].size(); ++i)
    if (f["events"][i]["down_for"].get<double>() > 0)
      v.error("cluster.failures.events[" + std::to_string(i) + "].down_for",
              "a real worker that died stays dead (set down_for to 0)");
  if (!v.ok()) throw ConfigError(run.run_id + " (asgdsim cluster)", v.issues());
}

}  // namespace

#if !ASGD_WITH_MPI

int run_cluster(const Experiment& exp, const ClusterOptions&, const MpiEnv&) {
  (void)check_supported;
  throw std::runtime_error(
      "asgdsim cluster needs MPI: this build has none. Install Open MPI (Debian: libopenmpi-dev openmpi-bin), "
      "configure with -DASGD_MPI=ON (scripts/test.sh does both), and start it with mpirun -np N+1");
}

#else  // ASGD_WITH_MPI

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTagToWorker = 11;
constexpr int kTagToServer = 12;

enum class Kind : uint32_t {
  Work = 1,      // server -> worker: parameters (+ ids); EASGD: the starting point
  Stop = 2,      // server -> worker: the run is over
  Gradient = 3,  // worker -> server: a gradient (+ its minibatch loss)
  Exchange = 4,  // worker -> server (EASGD): local parameters after `period` steps
  Reply = 5,     // server -> worker (EASGD): the parameters after the exchange
  Error = 6,     // worker -> server: the worker failed; the text follows
  Done = 7,      // server -> worker: every run is over; tag: the exit code, steps: a peer died
};

// Every message: this header, then `ids` int32 sample ids, then `values` floats, then
// `text` bytes.
struct Header {
  uint32_t kind = 0;
  uint32_t step = 0;        // the worker's step (Work, Gradient)
  uint64_t version = 0;     // Work: the version sent; Gradient: the version it was computed on
  uint64_t tag = 0;         // sync: the iteration
  double lr = 0;            // Work, Reply: the rate in force (EASGD local steps)
  double epoch = 0;         // Work, Reply: epochs so far (EASGD)
  double loss = 0;          // Gradient: minibatch loss; Exchange: sum over its steps
  double busy = 0;          // Gradient, Exchange: seconds computing (+ injected delay)
  uint64_t steps = 0;       // Exchange: local steps since the last exchange
  uint64_t samples = 0;     // Exchange: samples of those steps
  uint32_t ids = 0, values = 0, text = 0, pad = 0;
};

struct Message {
  Header h;
  std::vector<int32_t> ids;
  std::vector<float> values;
  std::string text;

  void pack(std::vector<char>& buf) const {
    Header hh = h;
    hh.ids = uint32_t(ids.size());
    hh.values = uint32_t(values.size());
    hh.text = uint32_t(text.size());
    buf.resize(sizeof(Header) + ids.size() * 4 + values.size() * 4 + text.size());
    char* p = buf.data();
    std::memcpy(p, &hh, sizeof(Header));
    p += sizeof(Header);
    if (!ids.empty()) std::memcpy(p, ids.data(), ids.size() * 4);
    p += ids.size() * 4;
    if (!values.empty()) std::memcpy(p, values.data(), values.size() * 4);
    p += values.size() * 4;
    if (!text.empty()) std::memcpy(p, text.data(), text.size());
  }
  void unpack(const std::vector<char>& buf) {
    if (buf.size() < sizeof(Header)) throw std::runtime_error("cluster: short message");
    std::memcpy(&h, buf.data(), sizeof(Header));
    size_t need = sizeof(Header) + size_t(h.ids) * 4 + size_t(h.values) * 4 + h.text;
    if (buf.size() != need) throw std::runtime_error("cluster: message of " + std::to_string(buf.size()) +
                                                     " bytes, header says " + std::to_string(need));
    const char* p = buf.data() + sizeof(Header);
    ids.resize(h.ids);
    if (h.ids) std::memcpy(ids.data(), p, size_t(h.ids) * 4);
    p += size_t(h.ids) * 4;
    values.resize(h.values);
    if (h.values) std::memcpy(values.data(), p, size_t(h.values) * 4);
    p += size_t(h.values) * 4;
    text.assign(p, h.text);
  }
};

// Stop messages carry this in h.tag when a worker rank of the job has died: the ranks
// still alive then must not call MPI_Finalize (it would wait for the dead one).
constexpr uint64_t kStopPeerLost = 1;
bool g_peer_lost = false;  // a Stop said so (worker ranks)
// Error messages carry this in h.tag when the worker's data or model differ from the
// server's (the first Work of a run carries the server's in its text).
constexpr uint64_t kErrorMismatch = 1;

// The shape of what a run computes on, in words: two ranks that print it differently
// would train different problems.
std::string shape_of(const Model& model, const LoadedData& data) {
  std::string s = "model " + std::to_string(model.num_params()) + " parameters";
  if (model.uses_data())
    s += ", train " + std::to_string(data.train.n) + " x " + std::to_string(data.train.dim) + ", test " +
         std::to_string(data.test.n) + " x " + std::to_string(data.test.dim) + ", " +
         std::to_string(data.train.classes) + " classes";
  return s;
}

// How long a worker waits on the server (rank 0): until its heartbeat has been silent for
// `timeout` seconds (real.worker_timeout), or, without a heartbeat, until nothing at all has
// come for that long. The server's own silences (evaluating, writing a run's files,
// loading the next run's data) do not count while its heartbeat goes on.
struct ServerWatch {
  const MpiEnv* mpi = nullptr;
  double timeout = 60;
  bool lost(double silent) const {
    if (mpi->lost_peer() == 0) return true;
    if (mpi->silent_for(0) > timeout) return true;
    return !mpi->has_heartbeat() && silent > timeout;
  }
  [[noreturn]] void fail() const {
    mpi->note_peer_lost();
    throw PeerLost("worker rank " + std::to_string(mpi->rank()) + ": the server (rank 0) sent nothing for " +
                   format_number(timeout) + " s (real.worker_timeout): it died or hangs");
  }
};
const ServerWatch* g_watch = nullptr;  // worker ranks: set while a run's config is known

double wall_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Sleeps a little between polls: on a shared machine the CPU belongs to the workers.
void pause_briefly() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

// Receives the next message with `tag` from `source` (or any), waiting at most `timeout`
// seconds (< 0: as long as the server lives: worker ranks, through g_watch). Returns the
// sender's rank, or -1 on timeout.
int receive(int source, int tag, Message& m, std::vector<char>& buf, double timeout) {
  const auto start = Clock::now();
  auto deadline = start + std::chrono::duration<double>(timeout < 0 ? 1e9 : timeout);
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, &st);
    if (flag) {
      int bytes = 0;
      MPI_Get_count(&st, MPI_BYTE, &bytes);
      buf.resize(size_t(bytes));
      MPI_Recv(buf.data(), bytes, MPI_BYTE, st.MPI_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      m.unpack(buf);
      if (Kind(m.h.kind) == Kind::Stop && m.h.tag == kStopPeerLost) g_peer_lost = true;
      return st.MPI_SOURCE;
    }
    if (Clock::now() >= deadline) return -1;
    if (timeout < 0 && g_watch && g_watch->lost(wall_since(start))) g_watch->fail();
    pause_briefly();
  }
}

// Waits for a send to complete, polling; gives up after `timeout` seconds (the peer is
// dead or stuck: the request is let go) and returns false.
bool wait_send(MPI_Request& req, double timeout) {
  const auto start = Clock::now();
  for (;;) {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (wall_since(start) > timeout) {
      MPI_Request_free(&req);
      return false;
    }
    pause_briefly();
  }
}

// Worker side: sends and waits until the buffer is free (the server always listens), as
// long as the server lives.
void send_blocking(int dest, const Message& m, std::vector<char>& buf) {
  m.pack(buf);
  MPI_Request req;
  MPI_Isend(buf.data(), int(buf.size()), MPI_BYTE, dest, kTagToServer, MPI_COMM_WORLD, &req);
  const auto start = Clock::now();
  for (;;) {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (g_watch && g_watch->lost(wall_since(start))) {
      MPI_Request_free(&req);
      g_watch->fail();
    }
    pause_briefly();
  }
}

// Server side: one nonblocking send in flight per worker.
struct Outbox {
  std::vector<char> buf;
  MPI_Request req = MPI_REQUEST_NULL;
  bool has_request = false;
  double timeout = 60;  // real.worker_timeout: a send not taken in that long is let go

  // Waits for the previous send to this worker (it has been received: the worker answered
  // it; a zombie's Stop may not be), then starts this one.
  void send(int dest, const Message& m) {
    if (has_request) wait_send(req, timeout);
    m.pack(buf);
    MPI_Isend(buf.data(), int(buf.size()), MPI_BYTE, dest, kTagToWorker, MPI_COMM_WORLD, &req);
    has_request = true;
  }
  // At the end: waits for the last send unless its worker is dead (then lets it go).
  void finish(bool alive) {
    if (!has_request) return;
    if (alive) wait_send(req, timeout);
    else MPI_Request_free(&req);
    has_request = false;
  }
};


// Data and model for a run, loaded once per data key across the runs of an experiment.
struct RunInputs {
  std::shared_ptr<LoadedData> data;
  std::unique_ptr<Model> model;
};

RunInputs inputs_for(const RunSpec& run, const std::string& base_dir, std::shared_ptr<LoadedData>& cache) {
  if (!cache || cache->key != data_key(run.config)) {
    cache.reset();  // one data set at a time
    cache = load_data(run.config, base_dir);
  }
  RunInputs in;
  in.data = cache;
  in.model = build_model(run.config["model"], *cache);
  return in;
}

// ------------------------------------------------------------------ worker (ranks 1..N)

class WorkerProcess {
 public:
  WorkerProcess(const RunSpec& run, const RunSettings& s, const RunInputs& in, const ComputeTimeModel& compute,
                int worker)
      : run_(run), s_(s), model_(*in.model), data_(in.model->uses_data() ? &in.data->train : nullptr),
        compute_(compute), worker_(worker), n_(in.model->num_params()), shape_(shape_of(*in.model, *in.data)) {
    const json& real = run.config["real"];
    delay_scale_ = real["delay_scale"];
    die_at_ = std::numeric_limits<double>::infinity();
    for (const auto& f : s.failures)
      if (f.worker == worker) die_at_ = std::min(die_at_, sim_to_seconds(f.at));
    const json& e = run.config["engine"];
    easgd_ = e["type"] == "easgd";
    if (easgd_) {
      period_ = e["period"];
      delta_ = e["delta"];
    }
  }

  void run() {
    t0_ = Clock::now();
    Message m;
    receive(0, kTagToWorker, m, buf_, -1);
    if (Kind(m.h.kind) == Kind::Stop) return;  // the server skipped this run
    if (m.text != shape_) {  // the first Work says what the server computes on
      Message err;
      err.h.kind = uint32_t(Kind::Error);
      err.h.tag = kErrorMismatch;
      err.text = "its data or model differ from rank 0's (here: " + shape_ + "; rank 0: " + m.text + ")";
      send_blocking(0, err, buf_);
      while (Kind(m.h.kind) != Kind::Stop) receive(0, kTagToWorker, m, buf_, -1);
      return;
    }
    try {
      easgd_ ? run_easgd(m) : run_gradients(m);
    } catch (const PeerLost&) {
      throw;  // the server is gone: nobody to tell
    } catch (const std::exception& ex) {
      Message err;
      err.h.kind = uint32_t(Kind::Error);
      err.text = ex.what();
      send_blocking(0, err, buf_);
      Message stop;
      while (Kind(stop.h.kind) != Kind::Stop) receive(0, kTagToWorker, stop, buf_, -1);
    }
  }

 private:
  // One step's gradient at w (backend memory) on `ids`; dies here if a failure is due.
  double gradient(const float* w, const std::vector<int32_t>& ids, uint32_t step) {
    double start = wall_since(t0_);
    if (start >= die_at_) {
      std::cout.flush();
      std::raise(SIGKILL);  // the injected failure: the process really dies
    }
    NoiseKey noise{s_.seed, uint32_t(worker_), step};
    double loss = model_.loss_grad(ctx_, w, data_, ids.data(), ids.size(), noise, grad_.data());
    ctx_.synchronize();
    if (delay_scale_ > 0) {
      double want =
          delay_scale_ * sim_to_seconds(compute_.duration(uint32_t(worker_), step, ids.size(), seconds_to_sim(start)));
      double left = want - (wall_since(t0_) - start);
      if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
    }
    busy_ += wall_since(t0_) - start;
    return loss;
  }

  // async, sync, sync_backup: work in, gradient out, until Stop.
  void run_gradients(Message m) {
    grad_.resize_discard(n_);
    Message out;
    out.h.kind = uint32_t(Kind::Gradient);
    for (;;) {
      if (Kind(m.h.kind) == Kind::Stop) return;
      w_.upload(m.values);
      busy_ = 0;
      double loss = gradient(w_.data(), m.ids, m.h.step);
      out.h.step = m.h.step;
      out.h.version = m.h.version;
      out.h.tag = m.h.tag;
      out.h.loss = loss;
      out.h.busy = busy_;
      grad_.download(out.values);
      send_blocking(0, out, buf_);
      receive(0, kTagToWorker, m, buf_, -1);
    }
  }

  // easgd: local steps on x, an exchange every `period` steps, until Stop.
  void run_easgd(Message m) {
    grad_.resize_discard(n_);
    x_.upload(m.values);
    DeviceArray<float> v, look;
    if (delta_ > 0) {
      v.resize_discard(n_);
      v.fill(0.0f);
      look.resize_discard(n_);
    }
    LrSchedule schedule(s_.lr);
    const size_t train_n = data_ ? data_->n : s_.nominal_train_size;
    // Each worker its own shuffle of the training set: (seed, worker) as the stream's seed.
    SampleStream stream(train_n, s_.seed * 0x9E3779B97F4A7C15ull + uint64_t(worker_) + 1);
    std::vector<int32_t> ids;
    double epoch_at_reply = m.h.epoch;
    uint32_t step = 0;
    Message out;
    out.h.kind = uint32_t(Kind::Exchange);
    for (;;) {
      double loss_sum = 0;
      uint64_t samples = 0;
      busy_ = 0;
      for (int k = 0; k < period_; ++k) {
        // the global epoch, estimated from this worker's share since the last exchange
        double epoch = epoch_at_reply + double(samples) * s_.workers / double(train_n);
        float lr = float(schedule.at(epoch));
        ids.clear();
        stream.next(s_.batch_size, ids);
        const float* at = x_.data();
        if (delta_ > 0) {  // gradient at the look-ahead point x - lr delta V
          ops::sgd_step(ctx_, look.data(), x_.data(), v.data(), lr * delta_, n_);
          at = look.data();
        }
        loss_sum += gradient(at, ids, step++);
        if (delta_ > 0) ops::momentum_step(ctx_, x_.data(), x_.data(), v.data(), grad_.data(), lr, delta_, n_);
        else ops::sgd_step(ctx_, x_.data(), x_.data(), grad_.data(), lr, n_);
        samples += ids.size();
      }
      out.h.loss = loss_sum;
      out.h.steps = uint64_t(period_);
      out.h.samples = samples;
      out.h.busy = busy_;
      x_.download(out.values);
      send_blocking(0, out, buf_);
      receive(0, kTagToWorker, m, buf_, -1);
      if (Kind(m.h.kind) == Kind::Stop) return;
      x_.upload(m.values);
      epoch_at_reply = m.h.epoch;
    }
  }

  const RunSpec& run_;
  const RunSettings& s_;
  const Model& model_;
  const DeviceDataset* data_;
  const ComputeTimeModel& compute_;
  const int worker_;
  const size_t n_;
  const std::string shape_;
  double delay_scale_ = 0, die_at_ = 0;
  bool easgd_ = false;
  int period_ = 1;
  float delta_ = 0;
  Clock::time_point t0_;
  double busy_ = 0;
  ExecContext ctx_;
  DeviceArray<float> w_, x_, grad_;
  std::vector<char> buf_;
};

// ------------------------------------------------------------------ server (rank 0)

struct WorkerState {
  bool alive = true;
  bool busy = false;            // has work (or local steps) the server waits on
  double given_at = 0;          // wall time the work went out (or the last exchange)
  uint64_t read_version = 0;
  uint32_t step = 0;
  uint64_t tag = 0;
  std::vector<float> read;      // DC-ASGD: the parameters this worker was sent
  bool zombie = false;          // declared dead, but it answered later: it gets Stop
  Outbox out;
};

class ServerProcess {
 public:
  ServerProcess(const RunSpec& run, const RunSettings& s, const RunInputs& in, Recorder& rec)
      : run_(run), s_(s), model_(*in.model), in_(in), rec_(rec), n_(in.model->num_params()),
        monitor_(s, in.model->uses_data() ? in.data->train.n : s.nominal_train_size, in.model->is_classifier(), out_,
                 rec) {
    const json& e = run.config["engine"];
    type_ = e["type"];
    timeout_ = run.config["real"]["worker_timeout"];
    if (type_ == "async") {
      divide_ = e["lr_staleness"] == "divide";
      lambda_ = e["delay_compensation"];
    } else if (type_ == "sync_backup") {
      backups_ = e["backups"];
    } else if (type_ == "easgd") {
      easgd_sync_ = e["mode"] == "sync";
      alpha_ = e["alpha"].is_string() ? 0.9 / s.workers : e["alpha"].get<double>();
    }
    train_n_ = model_.uses_data() ? in.data->train.n : s.nominal_train_size;
    stream_ = std::make_unique<SampleStream>(train_n_, s.seed);
    out_.workers.assign(size_t(s.workers), WorkerStats{});
    ws_.resize(size_t(s.workers));
    for (auto& st : ws_) st.out.timeout = timeout_;
    shape_ = shape_of(model_, *in.data);
    idle_since_.assign(size_t(s.workers), 0.0);
    down_since_.assign(size_t(s.workers), 0.0);
    next_eval_time_ = s.eval_every;
    monitor_.bind([this] { return seconds_to_sim(now()); },
                  [this] {
                    // the simulator's evaluation (its chunks, summed in order: the same sums), on
                    // this thread alone; its time is not run time
                    auto t = Clock::now();
                    const EvalPair sums = evaluate_params(model_, eval_pool_, ctx_, w_.data(), &in_.data->train,
                                                          s_.eval_train_samples, &in_.data->test, s_.eval_test_samples);
                    eval_seconds_ += wall_since(t);
                    return std::make_pair(sums.train, sums.test);
                  });
    monitor_.on_row = [this](const MetricsRow& row) {
      if (on_row) on_row(row);
    };
  }

  RunOutcome run() {
    std::vector<float> init;
    model_.init_params(s_.seed, init);
    w_.upload(init);
    if (s_.momentum > 0) {
      velocity_.resize_discard(n_);
      velocity_.fill(0.0f);
    }
    t0_ = Clock::now();
    monitor_.evaluate_row();
    if (type_ == "easgd") {
      xs_.assign(size_t(s_.workers), {});
      for (int w = 0; w < s_.workers; ++w) hand_out(w);
    } else {
      needed_ = s_.workers - backups_;
      for (int w = 0; w < s_.workers; ++w) hand_out(w);
    }
    loop();
    if (!monitor_.evaluated_now()) monitor_.evaluate_row();
    wind_down();
    finish_outcome();
    return out_;
  }

  // After an error on the server: every worker is told to stop (none is left waiting).
  void abandon() noexcept {
    try {
      wind_down();
    } catch (...) {
    }
  }

  const std::string& failure() const { return failure_; }
  bool mismatch() const { return mismatch_; }  // a worker computes on other data or another model
  // Worker ranks that are dead (declared so, and never heard from again).
  std::vector<int> dead_ranks() const {
    std::vector<int> out;
    for (int w = 0; w < s_.workers; ++w)
      if (!ws_[size_t(w)].alive && !ws_[size_t(w)].zombie) out.push_back(rank_of(w));
    return out;
  }
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  double now() const { return wall_since(t0_) - eval_seconds_; }  // run time: evaluation excluded
  double epoch() const { return monitor_.epoch(); }
  int rank_of(int w) const { return w + 1; }
  std::string who(int w) const { return "worker " + std::to_string(w) + " (rank " + std::to_string(rank_of(w)) + ")"; }

  // Sends worker w its next work: the current parameters and its minibatch's ids (EASGD:
  // its starting point, or the end of an exchange: handled by the exchange).
  void hand_out(int w) {
    WorkerState& st = ws_[size_t(w)];
    if (!st.alive || monitor_.stopping()) return;
    Message m;
    m.h.kind = uint32_t(Kind::Work);
    if (st.step == 0) m.text = shape_;  // the worker checks it is the same problem
    m.h.step = st.step++;
    m.h.version = version_;
    m.h.tag = iteration_;
    m.h.lr = monitor_.lr();
    m.h.epoch = epoch();
    if (type_ != "easgd") stream_->next(s_.batch_size, m.ids);
    w_.download(m.values);
    if (lambda_ > 0) st.read = m.values;
    st.read_version = version_;
    st.tag = iteration_;
    st.busy = true;
    st.given_at = now();
    st.out.send(rank_of(w), m);
    if (idle_since_[size_t(w)] >= 0 && now() > idle_since_[size_t(w)])
      rec_.add_span(w + 1, "wait", seconds_to_sim(idle_since_[size_t(w)]), seconds_to_sim(now()));
    idle_since_[size_t(w)] = -1;
  }

  void loop() {
    Message m;
    std::vector<char> buf;
    while (!monitor_.stopping()) {
      if (interrupt_requested()) {
        request_stop("interrupted", "interrupted by a signal");
        break;
      }
      if (s_.stop_time != kNever && now() >= sim_to_seconds(s_.stop_time)) {
        request_stop("completed", "reached stop.time");
        break;
      }
      if (s_.eval_unit == EvalUnit::Time && now() >= next_eval_time_) {
        while (next_eval_time_ <= now()) next_eval_time_ += s_.eval_every;
        monitor_.evaluate_row();
        if (monitor_.stopping()) break;
      }
      check_timeouts();
      if (monitor_.stopping()) break;
      int src = receive(MPI_ANY_SOURCE, kTagToServer, m, buf, 0.05);
      if (src < 1) continue;
      int w = src - 1;
      WorkerState& st = ws_[size_t(w)];
      if (!st.alive) {  // declared dead, then spoke after all: its work was counted lost
        st.zombie = true;  // it waits for an answer: Stop, at the end
        continue;
      }
      st.busy = false;
      switch (Kind(m.h.kind)) {
        case Kind::Gradient: on_gradient(w, m); break;
        case Kind::Exchange: on_exchange(w, m); break;
        case Kind::Error:
          mismatch_ = mismatch_ || m.h.tag == kErrorMismatch;
          failure_ = who(w) + (m.h.tag == kErrorMismatch ? ": " : " failed: ") + m.text;
          request_stop("failed", failure_);
          break;
        default: throw std::runtime_error("cluster: unexpected message from " + who(w));
      }
    }
  }

  void check_timeouts() {
    double t = now();
    for (int w = 0; w < s_.workers; ++w) {
      WorkerState& st = ws_[size_t(w)];
      if (!st.alive || !st.busy || t - st.given_at <= timeout_) continue;
      st.alive = false;
      st.busy = false;
      out_.failures++;
      out_.lost++;
      out_.workers[size_t(w)].lost++;
      down_since_[size_t(w)] = st.given_at;  // last heard of then
      std::string what = who(w) + " sent nothing for " + format_number(timeout_) +
                         " s (real.worker_timeout): it died or hangs";
      notes_.push_back(what);
      std::cerr << "asgdsim cluster: " << run_.run_id << ": " << what << "\n";
      int live = 0;
      for (const auto& x : ws_) live += x.alive;
      bool waits_for_all = type_ == "sync" || (type_ == "easgd" && easgd_sync_);
      if (waits_for_all) {
        failure_ = what + "; " + type_ + (type_ == "easgd" ? " (mode sync)" : "") +
                   " waits for every worker, so the run cannot go on";
        request_stop("failed", failure_);
        return;
      }
      if (type_ == "sync_backup" && live < needed_) {
        failure_ = what + "; sync_backup needs " + std::to_string(needed_) + " gradients per iteration and only " +
                   std::to_string(live) + " worker(s) live";
        request_stop("failed", failure_);
        return;
      }
      if (live == 0) {
        failure_ = "every worker died";
        request_stop("failed", failure_);
        return;
      }
      if (type_ == "sync_backup") maybe_finish_iteration();
    }
  }

  // The message's gradients arrived (monitor_.arrived) and took `busy` seconds of the
  // worker's compute; false when their loss is not finite (the run then diverged).
  bool arrived(int w, const Message& m, uint64_t samples, double busy) {
    out_.workers[size_t(w)].compute += seconds_to_sim(busy);  // (real runs do not split out communication: it is in wait_time)
    const double t = now();  // (as the server sees it: the worker's busy seconds up to their arrival)
    rec_.add_span(w + 1, "compute", seconds_to_sim(std::max(0.0, t - busy)), seconds_to_sim(t));
    idle_since_[size_t(w)] = t;
    return monitor_.arrived(w, samples, m.h.loss, std::max<uint64_t>(1, m.h.steps));
  }

  void step_params(const float* g, float lr) {
    grad_.upload(g, n_);
    if (s_.momentum > 0)
      ops::momentum_step(ctx_, w_.data(), w_.data(), velocity_.data(), grad_.data(), lr, float(s_.momentum), n_);
    else
      ops::sgd_step(ctx_, w_.data(), w_.data(), grad_.data(), lr, n_);
    version_++;
  }

  void on_gradient(int w, const Message& m) {
    const uint64_t samples = m.ids.empty() ? s_.batch_size : m.ids.size();
    if (!arrived(w, m, samples, m.h.busy)) return;
    WorkerState& st = ws_[size_t(w)];
    if (type_ == "async") {
      uint64_t staleness = version_ - m.h.version;
      monitor_.applied(w, samples, staleness);  // its samples count before its rate is read
      float lr = float(monitor_.lr());
      if (divide_) lr /= float(std::max<uint64_t>(staleness, 1));
      if (lambda_ > 0) {
        grad_.upload(m.values);
        read_.upload(st.read);
        ops::dc_sgd_step(ctx_, w_.data(), w_.data(), grad_.data(), read_.data(), lr, lambda_, n_);
        version_++;
      } else {
        step_params(m.values.data(), lr);
      }
      updated();
      hand_out(w);
      return;
    }
    // sync, sync_backup
    if (m.h.tag != iteration_ || received_ >= needed_) {  // late: its iteration is over
      monitor_.dropped(w);  // (epochs count applied samples only)
      hand_out(w);  // it joins the iteration in progress
      return;
    }
    if (accepted_.empty()) accepted_.resize(size_t(s_.workers));
    accepted_[size_t(w)] = m.values;
    accepted_version_.resize(size_t(s_.workers));
    accepted_version_[size_t(w)] = m.h.version;
    accepted_samples_.resize(size_t(s_.workers));
    accepted_samples_[size_t(w)] = samples;
    ++received_;
    maybe_finish_iteration();
  }

  void maybe_finish_iteration() {
    if (received_ < needed_) return;
    // summed in worker-index order, as the simulator does
    sum_.assign(n_, 0.0f);
    bool first = true;
    std::vector<int> from;
    for (int w = 0; w < s_.workers; ++w) {
      if (size_t(w) >= accepted_.size() || accepted_[size_t(w)].empty()) continue;
      const auto& g = accepted_[size_t(w)];
      if (first) std::copy(g.begin(), g.end(), sum_.begin());
      else for (size_t i = 0; i < n_; ++i) sum_[i] += g[i];
      first = false;
      from.push_back(w);
    }
    float weight = s_.aggregate_sum ? 1.0f : 1.0f / float(received_);
    if (weight != 1.0f)
      for (auto& x : sum_) x *= weight;
    for (int w : from) {  // their samples count before the iteration's rate is read
      monitor_.applied(w, accepted_samples_[size_t(w)], version_ - accepted_version_[size_t(w)]);
      accepted_[size_t(w)].clear();
    }
    step_params(sum_.data(), float(monitor_.lr()));
    monitor_.iteration_done(now() - iteration_start_);
    iteration_start_ = now();
    ++iteration_;
    received_ = 0;
    updated();
    for (int w : from) hand_out(w);
    for (int w = 0; w < s_.workers; ++w)  // anyone idle (none in a healthy run)
      if (ws_[size_t(w)].alive && !ws_[size_t(w)].busy) hand_out(w);
  }

  void on_exchange(int w, const Message& m) {
    if (!arrived(w, m, m.h.samples, m.h.busy)) return;
    monitor_.applied(w, m.h.samples, 0, m.h.steps);  // local steps: on the worker's own parameters
    if (!easgd_sync_) {
      // e = alpha (x_i - c); x_i <- x_i - e; c <- c + e; the worker gets x_i back
      x_.upload(m.values);
      ops::elastic_exchange(ctx_, x_.data(), w_.data(), float(alpha_), n_);
      version_++;
      updated();
      reply(w, x_);
      return;
    }
    xs_[size_t(w)] = m.values;
    waiting_.resize(size_t(s_.workers), false);
    waiting_[size_t(w)] = true;
    for (int k = 0; k < s_.workers; ++k)
      if (ws_[size_t(k)].alive && !waiting_[size_t(k)]) return;  // someone is still stepping
    // mean_i x_i (worker order), then x_i <- x_i + alpha (c - x_i), c <- c + N alpha (mean - c)
    std::vector<int> group;
    for (int k = 0; k < s_.workers; ++k)
      if (ws_[size_t(k)].alive && waiting_[size_t(k)]) group.push_back(k);
    mean_.upload(xs_[size_t(group[0])]);
    for (size_t k = 1; k < group.size(); ++k) {
      x_.upload(xs_[size_t(group[k])]);
      ops::add_into(ctx_, mean_.data(), x_.data(), n_);
    }
    ops::scale(ctx_, mean_.data(), 1.0f / float(group.size()), n_);
    std::vector<DeviceArray<float>> moved(group.size());
    for (size_t k = 0; k < group.size(); ++k) {
      moved[k].upload(xs_[size_t(group[k])]);
      ops::move_towards(ctx_, moved[k].data(), w_.data(), float(alpha_), n_);
    }
    ops::move_towards(ctx_, w_.data(), mean_.data(), float(alpha_ * double(group.size())), n_);
    version_++;
    for (int k : group) waiting_[size_t(k)] = false;
    updated();
    for (size_t k = 0; k < group.size(); ++k) reply(group[k], moved[k]);
  }

  // EASGD: the worker's parameters after the exchange, with the epoch and rate now.
  void reply(int w, const DeviceArray<float>& x) {
    WorkerState& st = ws_[size_t(w)];
    if (monitor_.stopping() || !st.alive) return;
    Message r;
    r.h.kind = uint32_t(Kind::Reply);
    r.h.epoch = epoch();
    r.h.lr = monitor_.lr();
    x.download(r.values);
    st.busy = true;
    st.given_at = now();
    st.out.send(rank_of(w), r);
    idle_since_[size_t(w)] = -1;
  }

  void updated() { monitor_.updated(); }
  void request_stop(const std::string& status, const std::string& note) { monitor_.request_stop(status, note); }

  // Every live worker's outstanding answer is taken in (and discarded), then each gets
  // Stop: no worker is left blocked in a send, none waits for work that never comes.
  void wind_down() {
    if (wound_down_) return;
    wound_down_ = true;
    Message m;
    std::vector<char> buf;
    for (;;) {
      int waiting = 0;
      for (const auto& st : ws_) waiting += st.alive && st.busy;
      if (waiting == 0) break;
      int src = receive(MPI_ANY_SOURCE, kTagToServer, m, buf, 0.05);
      if (src >= 1) {
        WorkerState& st = ws_[size_t(src - 1)];
        st.busy = false;
        if (!st.alive) st.zombie = true;
        continue;
      }
      double t = now();
      for (int w = 0; w < s_.workers; ++w) {
        WorkerState& st = ws_[size_t(w)];
        if (st.alive && st.busy && t - st.given_at > timeout_) {
          st.alive = false;
          st.busy = false;
          out_.failures++;
          out_.lost++;
          out_.workers[size_t(w)].lost++;
          down_since_[size_t(w)] = st.given_at;
          notes_.push_back(who(w) + " sent nothing for " + format_number(timeout_) + " s at the end of the run");
        }
      }
    }
    Message stop;
    stop.h.kind = uint32_t(Kind::Stop);
    if (!dead_ranks().empty()) stop.h.tag = kStopPeerLost;
    for (int w = 0; w < s_.workers; ++w)
      if (ws_[size_t(w)].alive || ws_[size_t(w)].zombie) ws_[size_t(w)].out.send(rank_of(w), stop);
    for (auto& st : ws_) st.out.finish(st.alive || st.zombie);
  }

  void finish_outcome() {
    out_.time = seconds_to_sim(now());
    for (int w = 0; w < s_.workers; ++w)
      if (!ws_[size_t(w)].alive) {
        out_.workers[size_t(w)].down += seconds_to_sim(now() - down_since_[size_t(w)]);
        rec_.add_span(w + 1, "down", seconds_to_sim(down_since_[size_t(w)]), seconds_to_sim(now()));
      }
    monitor_.finish();
  }

 public:
  std::function<void(const MetricsRow&)> on_row;

 private:
  const RunSpec& run_;
  const RunSettings& s_;
  const Model& model_;
  const RunInputs& in_;
  Recorder& rec_;
  const size_t n_;
  std::string type_;
  double timeout_ = 60;
  bool divide_ = false;
  float lambda_ = 0;
  int backups_ = 0;
  int needed_ = 0;
  bool easgd_sync_ = false;
  double alpha_ = 0;
  size_t train_n_ = 0;
  std::unique_ptr<SampleStream> stream_;
  std::vector<WorkerState> ws_;
  std::vector<double> idle_since_, down_since_;
  ExecContext ctx_;
  WorkerPool eval_pool_{1, true};  // evaluation runs on the calling thread
  DeviceArray<float> w_, velocity_, grad_, read_, x_, mean_;
  std::vector<float> sum_;
  std::vector<std::vector<float>> accepted_, xs_;
  std::vector<uint64_t> accepted_version_, accepted_samples_;
  std::vector<bool> waiting_;
  uint64_t version_ = 0, iteration_ = 0;
  int received_ = 0;
  double iteration_start_ = 0;
  Clock::time_point t0_;
  double eval_seconds_ = 0;
  double next_eval_time_ = 0;
  bool wound_down_ = false;
  RunOutcome out_;
  RunMonitor monitor_;  // counting, rows, the eval schedule and stop rules: the simulator's
  std::string failure_;
  std::string shape_;
  bool mismatch_ = false;
  std::vector<std::string> notes_;
};

// Tells every live worker rank to skip a run (they wait for its first message).
// (Or, with Done, that every run is over: `code` is the exit code they leave with.)
void skip_run_on_workers(int workers, std::vector<bool>& dead, double timeout, Kind kind = Kind::Stop,
                         int code = 0) {
  Message stop;
  stop.h.kind = uint32_t(kind);
  const bool lost = std::count(dead.begin(), dead.end(), true) > 0;
  if (kind == Kind::Stop && lost) stop.h.tag = kStopPeerLost;
  if (kind == Kind::Done) {
    stop.h.tag = uint64_t(code);
    stop.h.steps = lost ? 1 : 0;
  }
  std::vector<char> buf;
  stop.pack(buf);
  std::vector<MPI_Request> req(size_t(workers) + 1, MPI_REQUEST_NULL);
  for (int r = 1; r <= workers; ++r)
    if (!dead[size_t(r)])
      MPI_Isend(buf.data(), int(buf.size()), MPI_BYTE, r, kTagToWorker, MPI_COMM_WORLD, &req[size_t(r)]);
  for (int r = 1; r <= workers; ++r)
    if (req[size_t(r)] != MPI_REQUEST_NULL && !wait_send(req[size_t(r)], timeout)) dead[size_t(r)] = true;
}

// The exit code main() gives `error` (0: none), for the workers to leave with.
int exit_code_of(std::exception_ptr error, bool interrupted) {
  if (!error) return interrupted ? 130 : 0;
  try {
    std::rethrow_exception(error);
  } catch (const ConfigError&) {
    return 2;
  } catch (const IoError&) {
    return 2;
  } catch (const DataError&) {
    return 2;
  } catch (...) {
    return 1;
  }
}

// A worker rank that cannot make a run (its data or model failed to load): it takes the
// run's first message and, unless the run is skipped, tells the server why, then waits
// for Stop.
int serve(const Experiment& exp, const ClusterOptions& opts, const MpiEnv& mpi, std::vector<bool>& dead);

void worker_cannot_run(const std::string& why) {
  Message m;
  std::vector<char> buf;
  receive(0, kTagToWorker, m, buf, -1);
  if (Kind(m.h.kind) == Kind::Stop) return;
  Message err;
  err.h.kind = uint32_t(Kind::Error);
  err.text = why;
  send_blocking(0, err, buf);
  while (Kind(m.h.kind) != Kind::Stop) receive(0, kTagToWorker, m, buf, -1);
}

}  // namespace

int run_cluster(const Experiment& exp, const ClusterOptions& opts, const MpiEnv& mpi) {
  if (!mpi.active() || mpi.size() < 2)
    throw std::runtime_error("asgdsim cluster runs under MPI with one server and N workers: mpirun -np N+1 " +
                             std::string("asgdsim cluster CONFIG (") +
                             (mpi.active() ? "this job has 1 rank" : "this process was not started by mpirun") + ")");
  const int workers = mpi.size() - 1;
  for (const auto& run : exp.runs) check_supported(run, workers);  // every rank refuses alike
  kernels_use_one_thread_here();  // one process per worker: parallelism comes from the ranks

  const std::string name = cluster_experiment_name(exp);
  const std::string exp_dir = opts.out_dir + "/" + name;
  std::shared_ptr<LoadedData> cache;
  const size_t total = exp.runs.size();

  if (mpi.rank() != 0) {
    ServerWatch watch;
    watch.mpi = &mpi;
    g_watch = &watch;
    for (size_t k = 0; k < total; ++k) {
      const RunSpec& run = exp.runs[k];
      watch.timeout = run.config["real"]["worker_timeout"];
      RunSettings s = settings_from_config(run.config);
      RunInputs in;
      std::unique_ptr<ComputeTimeModel> compute;
      try {
        in = inputs_for(run, exp.base_dir, cache);
        compute = std::make_unique<ComputeTimeModel>(build_compute_model(run.config, s, exp.base_dir));
      } catch (const std::exception& e) {
        worker_cannot_run(std::string(e.what()) + " (on host " + host_name() + ")");
        continue;
      }
      WorkerProcess(run, s, in, *compute, mpi.rank() - 1).run();
    }
    Message done;  // the server's verdict: the exit code of the whole job
    std::vector<char> buf;
    while (Kind(done.h.kind) != Kind::Done) receive(0, kTagToWorker, done, buf, -1);
    g_watch = nullptr;
    if (g_peer_lost || done.h.steps) mpi.note_peer_lost();
    return int(done.h.tag);
  }

  // ---- rank 0: the server, and the run folders. Whatever happens, every live worker
  // gets Done with the exit code: none is left waiting for a server that has gone.
  std::vector<bool> dead(size_t(workers) + 1, false);  // by rank: died in an earlier run
  const double timeout = exp.runs.empty() ? 60.0 : exp.runs[0].config["real"]["worker_timeout"].get<double>();
  try {
    int code = serve(exp, opts, mpi, dead);
    skip_run_on_workers(workers, dead, timeout, Kind::Done, code);
    if (std::count(dead.begin(), dead.end(), true) > 0) mpi.note_peer_lost();
    return code;
  } catch (...) {
    skip_run_on_workers(workers, dead, timeout, Kind::Done, exit_code_of(std::current_exception(), false));
    if (std::count(dead.begin(), dead.end(), true) > 0) mpi.note_peer_lost();
    throw;
  }
}

namespace {
// Rank 0's part of run_cluster: the runs one after another, their folders and index.csv.
int serve(const Experiment& exp, const ClusterOptions& opts, const MpiEnv& mpi, std::vector<bool>& dead) {
  const int workers = mpi.size() - 1;
  const std::string name = cluster_experiment_name(exp);
  const std::string exp_dir = opts.out_dir + "/" + name;
  std::shared_ptr<LoadedData> cache;
  const size_t total = exp.runs.size();
  bool interrupted = false;
  make_directories(exp_dir);
  json resolved = exp.resolved;
  resolved["name"] = name;
  write_file_atomic(exp_dir + "/experiment.json", resolved.dump(2) + "\n");
  Experiment named = exp;
  named.resolved = resolved;
  std::exception_ptr first_error;
  std::string first_error_run;
  for (size_t k = 0; k < total; ++k) {
    const RunSpec& run = exp.runs[k];
    const std::string dir = exp_dir + "/" + run.run_id;
    const std::string tag = "[" + std::to_string(k + 1) + "/" + std::to_string(total) + "] " + run.run_id;
    json cfg = run.config;
    cfg["run"]["experiment"] = name;
    cfg["run"]["mode"] = "cluster";
    json old_config, old_summary;
    bool has_config = read_json(dir + "/config.json", old_config);
    bool has_summary = read_json(dir + "/summary.json", old_summary);
    bool skip = first_error || interrupted || interrupt_requested();
    if (!skip && has_config && old_config != cfg && !opts.force) {
      first_error = std::make_exception_ptr(IoError(dir + " holds a run of a different config (" +
                                                    config_differences(old_config, cfg) +
                                                    "); pass --force to overwrite it, or choose another --out"));
      first_error_run = run.run_id;
      skip = true;
    }
    if (!skip && has_config && has_summary && !opts.force) {
      std::string status = old_summary.value("status", "");
      if (status == "completed" || status == "diverged") {
        if (!opts.quiet) std::cout << tag << ": " << status << " earlier, skipped (--force re-runs it)\n" << std::flush;
        skip = true;
      }
    }
    if (!skip && std::count(dead.begin(), dead.end(), true) > 0) {
      std::string ranks;
      for (int r = 1; r <= workers; ++r)
        if (dead[size_t(r)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      first_error = std::make_exception_ptr(std::runtime_error(
          "worker rank(s) " + ranks + " died in an earlier run; cluster.workers needs all " + std::to_string(workers)));
      first_error_run = run.run_id;
      skip = true;
    }
    if (skip) {
      skip_run_on_workers(workers, dead, run.config["real"]["worker_timeout"]);
      continue;
    }

    RunSettings s = settings_from_config(run.config);
    s.trace = s.trace || opts.trace;
    RunInputs in;
    try {
      in = inputs_for(run, exp.base_dir, cache);
      make_directories(dir);
      std::error_code ec;
      std::filesystem::remove(dir + "/summary.json", ec);
      write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
    } catch (...) {
      skip_run_on_workers(workers, dead, run.config["real"]["worker_timeout"]);
      first_error = std::current_exception();
      first_error_run = run.run_id;
      continue;
    }
    json meta = run_meta(opts.command_line);
    meta["mode"] = "cluster";
    meta["ranks"] = mpi.size();
    write_file_atomic(dir + "/meta.json", meta.dump(2) + "\n");

    Recorder recorder(s.trace);
    ServerProcess server(run, s, in, recorder);
    RunOutcome outcome;
    try {
      outcome = server.run();
    } catch (...) {
      server.abandon();
      for (int r : server.dead_ranks()) dead[size_t(r)] = true;
      first_error = std::current_exception();
      first_error_run = run.run_id;
      continue;
    }
    for (int r : server.dead_ranks()) dead[size_t(r)] = true;
    std::string note = outcome.note;
    for (const auto& n : server.notes())
      if (note.find(n) == std::string::npos) note += "; " + n;
    const json& net = run.config["cluster"]["network"];
    if (net["latency"].get<double>() > 0 || net["bandwidth"].get<double>() > 0 || net["shards"].get<int>() > 1 ||
        net["worker_bandwidth"].get<double>() > 0 || net["message_bytes"].get<double>() > 0)
      note += "; cluster.network ignored: the transfers were real";
    if (run.config["cluster"]["server"]["update_seconds"].get<double>() > 0)
      note += "; cluster.server ignored: the server's updates took their real time";

    const MetricsRow& last = recorder.rows().back();
    json summary = summary_json(run, outcome, last, run.config["engine"], note, sim_to_seconds(outcome.time));
    summary["mode"] = "cluster";
    write_run_results(dir, recorder, outcome, s.workers, meta, summary);
    if (!opts.quiet) {
      std::string text = tag + ": " + outcome.status + " (" + note + "), train_loss " + format_number(last.train_loss);
      if (!std::isnan(last.test_accuracy)) text += ", test_accuracy " + format_number(last.test_accuracy);
      text += ", " + format_number(std::round(sim_to_seconds(outcome.time) * 100) / 100) + " s wall, " +
              std::to_string(outcome.updates) + " updates, mean staleness " + format_number(outcome.staleness_mean);
      std::cout << text << "\n" << std::flush;
    }
    if (outcome.status == "interrupted") interrupted = true;
    if (outcome.status == "failed" && !first_error) {
      first_error = server.mismatch()
                        ? std::make_exception_ptr(RankMismatch("the ranks compute different problems: " + server.failure()))
                        : std::make_exception_ptr(std::runtime_error(server.failure()));
      first_error_run = run.run_id;
    }
  }
  if (std::count(dead.begin(), dead.end(), true) > 0) mpi.note_peer_lost();
  write_index(named, exp_dir);
  if (first_error) {
    try {
      std::rethrow_exception(first_error);
    } catch (const ConfigError&) {
      throw;
    } catch (const IoError& e) {
      throw IoError("run " + first_error_run + ": " + e.what());
    } catch (const DataError& e) {
      throw DataError("run " + first_error_run + ": " + e.what());
    } catch (const std::exception& e) {
      throw std::runtime_error("run " + first_error_run + ": " + e.what());
    }
  }
  std::cout << "results: " << exp_dir << "\n";
  return interrupted ? 130 : 0;
}
}  // namespace

#endif  // ASGD_WITH_MPI

}  // namespace asgd
