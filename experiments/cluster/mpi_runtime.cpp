// experiments/cluster/mpi_runtime.cpp — the wire protocol, the worker process and MpiRuntime of
// `asgdsim cluster` (see mpi_runtime.h). The server never blocks on a worker: its sends
// are nonblocking and it polls for messages, so a dead worker is noticed (by its silence)
// instead of hanging the run.
#include "experiments/cluster/mpi_runtime.h"
#if ASGD_WITH_MPI
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <iostream>
#include <limits>
#include <thread>
#include "kernels/ops.h"
#include "sim/base/interrupt.h"

namespace asgd {
namespace wire {

void Message::pack(std::vector<char>& buf) const {
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

void Message::unpack(const std::vector<char>& buf) {
  if (buf.size() < sizeof(Header)) throw std::runtime_error("cluster: short message");
  std::memcpy(&h, buf.data(), sizeof(Header));
  size_t need = sizeof(Header) + size_t(h.ids) * 4 + size_t(h.values) * 4 + h.text;
  if (buf.size() != need)
    throw std::runtime_error("cluster: message of " + std::to_string(buf.size()) + " bytes, header says " +
                             std::to_string(need));
  const char* p = buf.data() + sizeof(Header);
  ids.resize(h.ids);
  if (h.ids) std::memcpy(ids.data(), p, size_t(h.ids) * 4);
  p += size_t(h.ids) * 4;
  values.resize(h.values);
  if (h.values) std::memcpy(values.data(), p, size_t(h.values) * 4);
  p += size_t(h.values) * 4;
  text.assign(p, h.text);
}

const ServerWatch* g_watch = nullptr;
bool g_peer_lost = false;

bool ServerWatch::lost(double silent) const {
  if (mpi->lost_peer() == 0) return true;
  if (mpi->silent_for(0) > timeout) return true;
  return !mpi->has_heartbeat() && silent > timeout;
}

void ServerWatch::fail() const {
  mpi->note_peer_lost();
  throw PeerLost("worker rank " + std::to_string(mpi->rank()) + ": the server (rank 0) sent nothing for " +
                 format_number(timeout) + " s (real.worker_timeout): it died or hangs");
}

double wall_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

namespace {
// Sleeps a little between polls: on a shared machine the CPU belongs to the workers.
void pause_briefly() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

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
}  // namespace

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

void tell_workers(int workers, std::vector<bool>& dead, double timeout, Kind kind, int code) {
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

}  // namespace wire

using namespace wire;

namespace {
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

void wait_for_stop(Message& m, std::vector<char>& buf) {
  while (Kind(m.h.kind) != Kind::Stop) receive(0, kTagToWorker, m, buf, -1);
}
}  // namespace

RunParts rank_parts(const RunSpec& run, RunSettings s, const std::string& base_dir,
                    std::shared_ptr<LoadedData>& cache) {
  if (!cache || cache->key != data_key(run)) {
    cache.reset();  // one data set at a time
    cache = load_data(run, base_dir);
  }
  return make_run_parts(run, std::move(s), cache, base_dir);
}

// ------------------------------------------------------------------ worker (ranks 1..N)

WorkerProcess::WorkerProcess(const RunSpec& run, const RunParts& parts, int worker)
    : s_(parts.settings),
      model_(*parts.model),
      data_(parts.model->uses_data() ? &parts.data->train : nullptr),
      compute_(*parts.compute),
      worker_(worker),
      shape_(shape_of(*parts.model, *parts.data)) {
  delay_scale_ = run.settings.real_delay_scale;
  die_at_ = std::numeric_limits<double>::infinity();
  for (const auto& f : s_.failures)
    if (f.worker == worker) die_at_ = std::min(die_at_, sim_to_seconds(f.at));
}

void WorkerProcess::run(Message& done) {
  t0_ = Clock::now();
  Message m;
  receive(0, kTagToWorker, m, buf_, -1);
  if (Kind(m.h.kind) == Kind::Stop) return;  // the server skipped this run, or gave it no work
  if (Kind(m.h.kind) == Kind::Done) {        // the server gave up before this run
    done = std::move(m);
    return;
  }
  if (m.text != shape_) {  // its first Work says what the server computes on
    Message err;
    err.h.kind = uint32_t(Kind::Error);
    err.h.tag = kErrorMismatch;
    err.text = "its data or model differ from rank 0's (here: " + shape_ + "; rank 0: " + m.text + ")";
    send_blocking(0, err, buf_);
    wait_for_stop(m, buf_);
    return;
  }
  try {
    grad_.resize_discard(model_.num_params());
    Message out;
    out.h.kind = uint32_t(Kind::Gradient);
    for (;;) {
      if (Kind(m.h.kind) == Kind::Stop) return;
      if (Kind(m.h.kind) != Kind::Work) throw std::runtime_error("cluster: unexpected message from the server");
      w_.upload(m.values);
      busy_ = 0;
      out.h.loss = gradient(w_.data(), m.ids, m.h.step);
      out.h.step = m.h.step;
      out.h.busy = busy_;
      grad_.download(out.values);
      send_blocking(0, out, buf_);
      receive(0, kTagToWorker, m, buf_, -1);
    }
  } catch (const PeerLost&) {
    throw;  // the server is gone: nobody to tell
  } catch (const std::exception& ex) {
    Message err;
    err.h.kind = uint32_t(Kind::Error);
    err.text = ex.what();
    send_blocking(0, err, buf_);
    Message stop;
    wait_for_stop(stop, buf_);
  }
}

double WorkerProcess::gradient(const float* w, const std::vector<int32_t>& ids, uint32_t step) {
  double start = wall_since(t0_);
  if (start >= die_at_) {
    std::cout.flush();
    std::raise(SIGKILL);  // the injected failure: the process really dies
  }
  // the simulator's gradient job: the same kernels and the same noise key
  double loss = model_.loss_grad(ctx_, w, data_, ids.data(), ids.size(), NoiseKey{s_.seed, uint32_t(worker_), step},
                                 grad_.data());
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

void worker_cannot_run(const std::string& why, Message& done) {
  Message m;
  std::vector<char> buf;
  receive(0, kTagToWorker, m, buf, -1);
  if (Kind(m.h.kind) == Kind::Stop) return;
  if (Kind(m.h.kind) == Kind::Done) {
    done = std::move(m);
    return;
  }
  Message err;
  err.h.kind = uint32_t(Kind::Error);
  err.text = why;
  send_blocking(0, err, buf);
  wait_for_stop(m, buf);
}

// ------------------------------------------------------------------ server (rank 0)

MpiRuntime::MpiRuntime(const RunSpec& run, const RunParts& parts, Recorder& rec)
    : Runtime(parts.settings, *parts.model, &parts.data->train, rec), run_(run), run_parts_(parts) {
  const RunSettings& s = parts.settings;
  timeout_ = run.settings.real_worker_timeout;
  shape_ = shape_of(model_, *parts.data);
  const size_t workers = size_t(s.workers);
  topology_ = make_star_topology(s.network, s.workers);
  make_sample_streams(&parts.data->train);  // the run's one sample stream, as the simulator's
  steps_.assign(workers, 0);
  alive_.assign(workers, true);
  zombie_.assign(workers, false);
  in_flight_.resize(workers);
  given_at_.assign(workers, 0.0);
  idle_since_.assign(workers, 0.0);
  down_since_.assign(workers, 0.0);
  outbox_.resize(workers);
  layout_ = model_.row_layout();
  lost_push_.assign(workers, LostPush{});
  out_.workers.assign(workers, WorkerStats{});
  next_eval_time_ = s.eval_every;
  monitor_.bind([this] { return now(); },
                [this] {
                  // the simulator's evaluation (its chunks, summed in order: the same sums), on
                  // this thread alone; its time is not run time
                  auto t = Clock::now();
                  Snapshot snap = engine_->model_of_record();
                  const EvalPair sums = evaluate_params(model_, eval_pool_, exec_, snap.data(), &run_parts_.data->train,
                                                        settings_.eval_train_samples, &run_parts_.data->test,
                                                        settings_.eval_test_samples);
                  eval_seconds_ += wall_since(t);
                  return std::make_pair(sums.train, sums.test);
                });
}

double MpiRuntime::seconds() const { return wall_since(t0_) - eval_seconds_; }
SimTime MpiRuntime::now() const { return seconds_to_sim(seconds()); }

std::string MpiRuntime::who(int w) const {
  return "worker " + std::to_string(w) + " (rank " + std::to_string(rank_of(w)) + ")";
}

Step MpiRuntime::next_step(int worker, std::vector<int32_t>& ids) {
  return step_from_stream(worker, *stream_, parts_.get(), settings_.batch_size, ids);
}

void MpiRuntime::launch(const Step& step) {
  const int w = step.worker;
  if (in_flight_[size_t(w)]) throw std::logic_error("cluster: a second step launched for " + who(w));
  if (step.time_budget != kNever)  // check_supported refuses the engines that set one
    throw std::logic_error("cluster: a step with a time budget (a rank computing cannot be cut off)");
  std::unique_ptr<GradientJob> job;
  if (spare_jobs_.empty()) {
    job = std::make_unique<GradientJob>();
  } else {
    job = std::move(spare_jobs_.back());
    spare_jobs_.pop_back();
  }
  job->worker = w;
  job->step = steps_[size_t(w)]++;
  job->ids.assign(step.ids, step.ids + step.m);
  job->tag = step.tag;
  job->source = step.pull;
  job->pushed = step.push;
  job->received = step.pull || step.reply;
  job->start = now();
  if (step.pull) {
    job->read = step.pull->current();  // read as the pull is served: now
  } else {
    job->read = step.own;
    const DeferredStep& d = step.before;
    if (d.params) {  // the engine's deferred local step, before the parameters leave
      ops::sgd_step(exec_, d.params, d.params, d.grad, d.lr, num_params());
      if (d.grad_buffer) std::swap(job->grad, *d.grad_buffer);  // (as the simulator hands buffers over)
    }
  }
  job->read_version = job->read.version;
  // the messages the step declares, at the sizes the simulator charges (mpi_runtime.h)
  rows_.clear();
  if (layout_.rows > 0)
    model_.touched_rows(model_.uses_data() ? &run_parts_.data->train : nullptr, step.ids, step.m, rows_);
  const StepMessageBytes sizes =
      step_message_bytes(settings_.network, num_params(), layout_.rows, layout_.width, rows_.size(),
                         step.gradient && step.pull, settings_.sparse_pull, settings_.compression);
  job->pull_bytes = sizes.pull;
  job->push_bytes = sizes.push;
  Message m;
  m.h.kind = uint32_t(Kind::Work);
  m.h.step = job->step;
  if (job->step == 0) m.text = shape_;  // the worker checks it is the same problem
  m.ids = job->ids;
  job->read.params->download(m.values);
  if (!engine_->keeps_read_params()) job->read = Snapshot{};
  send(w, m);
  if (job->received) {  // the pull or reply leaves with this message
    out_.messages_to_workers++;
    out_.bytes_to_workers += job->pull_bytes;
    out_.peak_sync_bytes = std::max(out_.peak_sync_bytes, job->pull_bytes);
  }
  const double t = seconds();
  given_at_[size_t(w)] = t;
  if (idle_since_[size_t(w)] >= 0 && t > idle_since_[size_t(w)])
    recorder_.add_span(w + 1, "wait", seconds_to_sim(idle_since_[size_t(w)]), seconds_to_sim(t));
  idle_since_[size_t(w)] = -1;
  in_flight_[size_t(w)] = std::move(job);
}

void MpiRuntime::send(int w, const Message& m) {
  Outbox& o = outbox_[size_t(w)];
  if (o.has_request) wait_send(o.req, timeout_);
  m.pack(o.buf);
  MPI_Isend(o.buf.data(), int(o.buf.size()), MPI_BYTE, rank_of(w), kTagToWorker, MPI_COMM_WORLD, &o.req);
  o.has_request = true;
}

void MpiRuntime::finish_send(int w) {
  Outbox& o = outbox_[size_t(w)];
  if (!o.has_request) return;
  if (alive_[size_t(w)] || zombie_[size_t(w)])
    wait_send(o.req, timeout_);
  else
    MPI_Request_free(&o.req);
  o.has_request = false;
}

void MpiRuntime::recycle(std::unique_ptr<GradientJob> job) {
  job->read = Snapshot{};
  spare_jobs_.push_back(std::move(job));
}

void MpiRuntime::schedule_timer(SimTime at, int worker, uint64_t payload) {
  timers_.emplace(at, std::make_pair(worker, payload));
}

SimTime MpiRuntime::collective(Collective, const std::vector<int>&, double, SimTime, bool) {
  throw std::logic_error("asgdsim cluster: collectives are simulated only (engine.comm must be \"ps\")");
}

RunOutcome MpiRuntime::run(Engine& engine) {
  engine_ = &engine;
  t0_ = Clock::now();
  engine.start(*this);
  monitor_.evaluate_row();  // the starting point (no update has been applied yet)
  loop();
  if (!monitor_.evaluated_now()) monitor_.evaluate_row();
  out_.staleness_unit = engine.staleness_unit();
  wind_down();
  finish_outcome();
  return out_;
}

void MpiRuntime::loop() {
  Message m;
  std::vector<char> buf;
  while (!monitor_.stopping()) {
    if (interrupt_requested()) {
      monitor_.request_stop("interrupted", "interrupted by a signal");
      break;
    }
    if (settings_.stop_time != kNever && now() >= settings_.stop_time) {
      monitor_.request_stop("completed", "reached stop.time");
      break;
    }
    if (settings_.eval_unit == EvalUnit::Time && seconds() >= next_eval_time_) {
      while (next_eval_time_ <= seconds()) next_eval_time_ += settings_.eval_every;
      monitor_.evaluate_row();
      if (monitor_.stopping()) break;
    }
    while (!timers_.empty() && timers_.begin()->first <= now() && !monitor_.stopping()) {
      const Timer t{timers_.begin()->second.first, timers_.begin()->second.second};
      timers_.erase(timers_.begin());
      engine_->on_timer(*this, t);
    }
    check_timeouts();
    if (monitor_.stopping()) break;
    bool waiting = !timers_.empty();
    for (int w = 0; w < settings_.workers; ++w) waiting = waiting || (alive_[size_t(w)] && in_flight_[size_t(w)]);
    if (!waiting) {  // nothing under way can make progress any more
      if (live_workers() > 0)
        end_with_no_work_left();
      else
        monitor_.request_stop("failed", failure_ = "every worker died");
      break;
    }
    int src = receive(MPI_ANY_SOURCE, kTagToServer, m, buf, 0.05);
    if (src < 1) continue;
    on_message(src - 1, m);
    monitor_.check_progress();
  }
}

void MpiRuntime::on_message(int w, const Message& m) {
  if (!alive_[size_t(w)]) {     // declared dead, then spoke after all: its work was counted lost
    zombie_[size_t(w)] = true;  // it waits for an answer: Stop, at the end
    count_late_push(w, m);
    return;
  }
  if (Kind(m.h.kind) == Kind::Error) {
    in_flight_[size_t(w)].reset();
    mismatch_ = mismatch_ || m.h.tag == kErrorMismatch;
    failure_ = who(w) + (m.h.tag == kErrorMismatch ? ": " : " failed: ") + m.text;
    monitor_.request_stop("failed", failure_);
    return;
  }
  std::unique_ptr<GradientJob> job = std::move(in_flight_[size_t(w)]);
  if (Kind(m.h.kind) != Kind::Gradient || !job || m.h.step != job->step || m.values.size() != num_params())
    throw std::runtime_error("cluster: unexpected message from " + who(w));
  if (job->pushed) count_push(job->push_bytes);
  job->grad.upload(m.values);
  job->loss = m.h.loss;
  const double t = seconds();
  job->arrival = now();
  // (real runs do not split out communication: it is in wait_time)
  out_.workers[size_t(w)].compute += seconds_to_sim(m.h.busy);
  recorder_.add_span(w + 1, "compute", seconds_to_sim(std::max(0.0, t - m.h.busy)), seconds_to_sim(t));
  idle_since_[size_t(w)] = t;
  if (!monitor_.arrived(w, job->ids.size(), job->loss)) {  // a loss not finite: the run diverged
    recycle(std::move(job));
    return;
  }
  engine_->on_gradient(*this, std::move(job));
}

void MpiRuntime::check_timeouts() {
  const double t = seconds();
  for (int w = 0; w < settings_.workers && !monitor_.stopping(); ++w) {
    if (!alive_[size_t(w)] || !in_flight_[size_t(w)] || t - given_at_[size_t(w)] <= timeout_) continue;
    declare_dead(
        w, who(w) + " sent nothing for " + format_number(timeout_) + " s (real.worker_timeout): it died or hangs");
    engine_->on_worker_down(*this, w);  // the engine goes on without it, as simulated
  }
}

void MpiRuntime::declare_dead(int w, const std::string& what) {
  alive_[size_t(w)] = false;
  if (in_flight_[size_t(w)]) {
    const GradientJob& job = *in_flight_[size_t(w)];
    if (job.pushed) lost_push_[size_t(w)] = LostPush{true, job.step, job.push_bytes};
    recycle(std::move(in_flight_[size_t(w)]));
    out_.lost++;
    out_.workers[size_t(w)].lost++;
  }
  out_.failures++;
  down_since_[size_t(w)] = given_at_[size_t(w)];  // last heard of then
  notes_.push_back(what);
  std::cerr << "asgdsim cluster: " << run_.run_id << ": " << what << "\n";
}

void MpiRuntime::wind_down() {
  if (wound_down_) return;
  wound_down_ = true;
  // every live worker's outstanding answer is taken in (and discarded), then each gets
  // Stop: no worker is left blocked in a send, none waits for work that never comes
  Message m;
  std::vector<char> buf;
  for (;;) {
    bool waiting = false;
    for (int w = 0; w < settings_.workers; ++w) waiting = waiting || (alive_[size_t(w)] && in_flight_[size_t(w)]);
    if (!waiting) break;
    int src = receive(MPI_ANY_SOURCE, kTagToServer, m, buf, 0.05);
    if (src >= 1) {  // a step in flight at the stop: the worker finished it and sent its push
      const size_t w = size_t(src - 1);
      if (in_flight_[w]) {
        if (alive_[w] && in_flight_[w]->pushed && Kind(m.h.kind) == Kind::Gradient && m.h.step == in_flight_[w]->step)
          count_push(in_flight_[w]->push_bytes);
        recycle(std::move(in_flight_[w]));
      }
      if (!alive_[w]) {
        zombie_[w] = true;
        count_late_push(int(w), m);
      }
      continue;
    }
    const double t = seconds();
    for (int w = 0; w < settings_.workers; ++w)
      if (alive_[size_t(w)] && in_flight_[size_t(w)] && t - given_at_[size_t(w)] > timeout_)
        declare_dead(w, who(w) + " sent nothing for " + format_number(timeout_) + " s at the end of the run");
  }
  Message stop;
  stop.h.kind = uint32_t(Kind::Stop);
  if (!dead_ranks().empty()) stop.h.tag = kStopPeerLost;
  for (int w = 0; w < settings_.workers; ++w)
    if (alive_[size_t(w)] || zombie_[size_t(w)]) send(w, stop);
  for (int w = 0; w < settings_.workers; ++w) finish_send(w);
}

void MpiRuntime::count_push(double bytes) {
  out_.messages_to_server++;
  out_.bytes_to_server += bytes;
  out_.peak_sync_bytes = std::max(out_.peak_sync_bytes, bytes);
}

// A worker declared dead whose gradient arrives after all: its step stays lost (the engine
// went on without it), but the push left the worker, so it counts as a message sent.
void MpiRuntime::count_late_push(int w, const Message& m) {
  LostPush& p = lost_push_[size_t(w)];
  if (!p.pending || Kind(m.h.kind) != Kind::Gradient || m.h.step != p.step) return;
  p.pending = false;
  count_push(p.bytes);
}

void MpiRuntime::abandon() noexcept {
  try {
    wind_down();
  } catch (...) {
  }
}

std::vector<int> MpiRuntime::dead_ranks() const {
  std::vector<int> out;
  for (int w = 0; w < settings_.workers; ++w)
    if (!alive_[size_t(w)] && !zombie_[size_t(w)]) out.push_back(rank_of(w));
  return out;
}

void MpiRuntime::finish_outcome() {
  out_.time = now();
  for (int w = 0; w < settings_.workers; ++w)
    if (!alive_[size_t(w)]) {
      out_.workers[size_t(w)].down += seconds_to_sim(seconds() - down_since_[size_t(w)]);
      recorder_.add_span(w + 1, "down", seconds_to_sim(down_since_[size_t(w)]), out_.time);
    }
  monitor_.finish();
}

}  // namespace asgd
#endif  // ASGD_WITH_MPI
