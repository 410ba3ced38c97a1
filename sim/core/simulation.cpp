// sim/core/simulation.cpp — the event loop and the bookkeeping every engine shares.
#include "sim/core/simulation.h"
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "sim/base/interrupt.h"
#include "sim/net/catalog.h"

namespace asgd {
namespace {
constexpr size_t kEvalChunkRows = 2048;  // rows per evaluation task (fixed: deterministic sums; both runtimes)
// for_each_block: 4,096 floats (16 KiB) per array and block, so that the slices of a
// dozen arrays stay in L1/L2 from one pass to the next; vectors under 8 blocks run on
// the calling thread (handing ranges to the pool costs a few wake-ups: docs/benchmarks.md,
// "Measurements behind code choices").
constexpr size_t kBlockFloats = 4096;
constexpr size_t kSplitFromBlocks = 8;

// Before a job's gradient: its deferred step, and the pulled parameters rounded to 16
// bits when they travel so, into a buffer of the job's workspace frame (request `index`
// of a batch). Returns what to compute on.
const float* prepare(ExecContext& ctx, GradientJob& job, const JobSetup& s, int index) {
  const size_t n = s.model->num_params();
  if (job.before.params) ops::sgd_step(ctx, job.before.params, job.before.params, job.before.grad, job.before.lr, n);
  const float* w = job.read.data();
  if (s.precision == Precision::Fp32) return w;
  float* copy = ctx.workspace().take<float>("16-bit copy of the pulled parameters", n, index);
  ops::copy(ctx, copy, w, n);
  s.precision == Precision::Fp16 ? ops::round_fp16(ctx, copy, n) : ops::round_bf16(ctx, copy, n);
  return copy;
}

// After it: the pushed gradient rounded to 16 bits if so; the snapshot let go.
void finish(ExecContext& ctx, GradientJob& job, const JobSetup& s) {
  const size_t n = s.model->num_params();
  if (s.precision == Precision::Fp16) ops::round_fp16(ctx, job.grad.data(), n);
  if (s.precision == Precision::Bf16) ops::round_bf16(ctx, job.grad.data(), n);
  if (s.release_read) job.read = Snapshot{};
}
}  // namespace

void Simulation::flush_pending() {
  if (pending_.empty()) return;
  const JobSetup setup = setup_;
  const QueueMark after = exec_.mark();  // the engine's steps so far, on the scheduler's stream
  WorkerPool::Ticket ticket = pool_.submit([jobs = pending_, setup, after](ExecContext& ctx) {
    ctx.wait_for(after);
    Workspace::Frame frame(ctx.workspace());
    std::vector<GradRequest> reqs(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      GradientJob& j = *jobs[i];
      reqs[i].w = prepare(ctx, j, setup, int(i));
      reqs[i].ids = j.ids.data();
      reqs[i].m = j.ids.size();
      reqs[i].noise = NoiseKey{setup.seed, uint32_t(j.worker), j.step};
      reqs[i].grad = j.grad.data();
    }
    setup.model->loss_grad_batch(ctx, setup.data, reqs.data(), reqs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      jobs[i]->loss = reqs[i].loss;
      finish(ctx, *jobs[i], setup);
    }
  });
  for (GradientJob* j : pending_) j->ticket = ticket;  // one job: waiting on any waits for all
  pending_.clear();
}

void Simulation::await(GradientJob& job) {
  if (!job.submitted) return;        // a pull never served: nothing was computed
  if (!job.ticket) flush_pending();  // it is in the batch being gathered
  pool_.wait(job.ticket);
}

Simulation::Simulation(const RunSettings& settings, const Model& model, const DeviceDataset* train,
                       const DeviceDataset* test, WorkerPool& pool, const ComputeTimeModel& compute, Recorder& recorder)
    : Runtime(settings, model, train, recorder),
      train_(train),
      test_(test),
      pool_(pool),
      compute_(compute),
      host_kernels_(std::string(kernels_backend()) != "CUDA") {
  if (settings_.workers < 1) throw std::invalid_argument("workers must be >= 1");
  topology_ = make_topology(settings_.topology, settings_.network, settings_.workers);
  message_bytes_ = message_bytes(settings_.network, model_.num_params());
  layout_ = model_.row_layout();
  if (settings_.staleness == StalenessMode::PerLayer) {
    layers_ = param_layers(model_.param_blocks());
    if (settings_.staleness_layers.empty()) throw std::invalid_argument("staleness per_layer: no lags");
  }
  if (layout_.rows > 0 && settings_.compression.type != CompressionSpec::Type::None)
    throw std::invalid_argument("compression is for dense models; model " + model_.name() + " sends sparse rows");
  // a bad top-k ratio throws here, not at the first push
  (void)compressed_message_bytes(settings_.network, model_.num_params(), settings_.compression);
  contended_ = topology_->contended();
  free_network_ = topology_->free();
  if (!(settings_.server_update_seconds >= 0)) throw std::invalid_argument("server update_seconds must be >= 0");
  server_seconds_ = seconds_to_sim(settings_.server_update_seconds);
  if (!(settings_.server_send_seconds >= 0)) throw std::invalid_argument("server send_seconds must be >= 0");
  send_seconds_ = seconds_to_sim(settings_.server_send_seconds);
  kernels_use_one_thread_here();  // the scheduler's kernels are small; pool threads do the heavy work
  if (model_.uses_data() && (!train_ || !test_))
    throw std::invalid_argument("model " + model_.name() + " needs a training and a test set");
  make_sample_streams(train_, [this](std::vector<std::function<void()>>&& tasks) {
    std::vector<WorkerPool::Task> jobs;
    for (auto& t : tasks) jobs.push_back([t = std::move(t)](ExecContext&) { t(); });
    pool_.run_all(std::move(jobs));
  });
  if (settings_.clients.count > 0) {  // each client's samples: its part, or an equal share of the one stream
    const size_t n = size_t(settings_.clients.count);
    std::vector<uint32_t> samples(n);
    for (size_t c = 0; c < n; ++c)
      samples[c] = parts_ ? uint32_t(parts_->part_size(int(c)))
                          : uint32_t(std::max<size_t>(1, (c + 1) * train_size_ / n - c * train_size_ / n));
    population_ = std::make_unique<Population>(settings_.seed, std::move(samples), settings_.clients.by_size);
    slot_client_.assign(size_t(settings_.workers), -1);
    devices_ = compute_.client_devices();
  }
  steps_.assign(settings_.workers, 0);
  alive_.assign(settings_.workers, true);
  incarnation_.assign(settings_.workers, 0);
  failure_draws_.assign(settings_.workers, 0);
  down_since_.assign(settings_.workers, 0);
  idle_since_.assign(settings_.workers, 0);
  for (const auto& f : settings_.failures)
    if (f.worker < 0 || f.worker >= settings_.workers)
      throw std::invalid_argument("failure for worker " + std::to_string(f.worker) + ", which does not exist");
  out_.workers.assign(settings_.workers, WorkerStats{});
  monitor_.bind([this] { return now(); },
                [this] {
                  Snapshot snap = engine_->model_of_record();
                  const EvalPair sums =
                      evaluate_params(model_, pool_, exec_, snap.data(), train_, settings_.eval_train_samples, test_,
                                      settings_.eval_test_samples);
                  return std::make_pair(sums.train, sums.test);
                });
  monitor_.on_row = [this](const MetricsRow& row) {
    if (on_row) on_row(row);
  };
}

Simulation::~Simulation() { drain(); }

bool Simulation::staleness_window_open() const {
  const double ep = epoch();
  return ep >= settings_.staleness_from_epoch &&
         (settings_.staleness_until_epoch <= 0 || ep < settings_.staleness_until_epoch);
}

Snapshot Simulation::read_for(int worker, uint32_t step, const ParameterStore& store) {
  uint64_t lag = 0;
  switch (staleness_window_open() ? settings_.staleness : StalenessMode::Emergent) {
    case StalenessMode::Emergent:
    case StalenessMode::PerLayer:
      break;  // (read_params composes the layers' versions)
    case StalenessMode::Fixed:
      lag = settings_.staleness_tau;
      break;
    case StalenessMode::Uniform: {
      Rng rng(settings_.seed, RngPurpose::Staleness, uint32_t(worker), step);
      lag = rng.below(uint64_t(settings_.staleness_tau) + 1);
      break;
    }
    case StalenessMode::Geometric: {
      // failures before a success with p = 1 / (1 + mean): mean = (1 - p) / p
      Rng rng(settings_.seed, RngPurpose::Staleness, uint32_t(worker), step);
      double p = 1.0 / (1.0 + settings_.staleness_mean);
      double u = rng.uniform();
      double k = p >= 1.0 ? 0.0 : std::floor(std::log(u) / std::log1p(-p));
      lag = uint64_t(std::min<double>(k, settings_.staleness_tau));
      break;
    }
  }
  return store.lagged(lag);
}

void Simulation::read_params(GradientJob& job, const ParameterStore& store) {
  if (settings_.staleness == StalenessMode::PerLayer && staleness_window_open() && !job.read_rows) {
    read_layers(job, store);
    return;
  }
  Snapshot version = read_for(job.worker, job.step, store);
  job.read_version = version.version;
  if (!job.read_rows) {
    job.read = std::move(version);
    return;
  }
  const size_t n = model_.num_params(), table = layout_.rows * layout_.width;
  if (job.pulled.size() != n) {
    job.pulled.resize_discard(n);
    job.pulled.fill(0.0f);  // never read; defined all the same
  }
  ops::copy(exec_, ops::Rows{job.rows.data(), job.rows.size(), layout_.width}, job.pulled.data(), version.data());
  ops::copy(exec_, job.pulled.data() + table, version.data() + table, n - table);
  // Not owned: the job outlives its reads (recycle() lets go of them first).
  job.read = Snapshot{std::shared_ptr<const Params>(std::shared_ptr<const Params>(), &job.pulled), version.version};
}

// staleness.mode per_layer (PipeDream's per-stage delays): layer l of the version
// tau[l] updates older than the current one (or the oldest kept), into the job's own copy.
// Its read version, and so its staleness, is the oldest it read from.
void Simulation::read_layers(GradientJob& job, const ParameterStore& store) {
  const size_t n = model_.num_params();
  if (job.pulled.size() != n) job.pulled.resize_discard(n);
  const std::vector<uint32_t>& lags = settings_.staleness_layers;
  uint64_t oldest = store.version();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Snapshot v = store.lagged(lags[std::min(l, lags.size() - 1)]);
    ops::copy(exec_, job.pulled.data() + layers_[l].begin, v.data() + layers_[l].begin, layers_[l].len);
    oldest = std::min(oldest, v.version);
  }
  job.read_version = oldest;
  // Not owned: the job outlives its reads (recycle() lets go of them first).
  job.read = Snapshot{std::shared_ptr<const Params>(std::shared_ptr<const Params>(), &job.pulled), oldest};
}

Step Simulation::next_step(int worker, std::vector<int32_t>& ids) {
  if (!population_) return step_from_stream(worker, *stream_, parts_.get(), settings_.batch_size, ids);
  int64_t& client = slot_client_[size_t(worker)];
  if (client < 0) client = population_->draw(sim_to_seconds(now()), devices_);
  if (client < 0) {  // none available now: when one may be
    Step none;
    none.worker = worker;
    const double at = population_->next_available(sim_to_seconds(now()), *devices_);
    none.no_client_until = at < 9e9 ? std::max(now() + 1, seconds_to_sim(at)) : kNever;
    return none;
  }
  Step step = step_from_stream(int(client), *stream_, parts_.get(), settings_.batch_size, ids);
  step.worker = worker;
  step.client = client;
  return step;
}

SimTime Simulation::client_link(int64_t client, double bytes) const {
  if (client < 0 || !devices_ || bytes <= 0) return 0;
  return seconds_to_sim(bytes * 8.0 / 1000.0 / double(devices_->bandwidth_kbps[size_t(client)]));
}

void Simulation::end_client_job(GradientJob& job) {
  if (job.client < 0) return;
  int64_t& bound = slot_client_[size_t(job.worker)];
  if (job.ends_client_job || bound == job.client) population_->release(job.client);
  if (bound == job.client) bound = -1;
  job.client = -1;
}

std::unique_ptr<GradientJob> Simulation::new_job(const Step& st) {
  const int worker = st.worker;
  std::unique_ptr<GradientJob> job;
  if (!spare_jobs_.empty()) {
    job = std::move(spare_jobs_.back());
    spare_jobs_.pop_back();
  } else {
    job = std::make_unique<GradientJob>();
  }
  job->worker = worker;
  job->step = steps_[worker]++;
  job->ids.assign(st.ids, st.ids + st.m);
  job->grad.resize_discard(model_.num_params());
  job->loss = 0;
  job->tag = st.tag;
  job->source = st.pull;
  job->received = st.pull || st.reply;
  job->pushed = st.push;
  job->submitted = false;
  job->read_at_arrival = st.pull && settings_.staleness_at_apply && settings_.staleness != StalenessMode::Emergent;
  job->accounted = false;
  job->push_counted = false;
  job->cancelled = false;
  job->timed_out = false;
  job->before = st.before;
  job->client = st.client;
  job->ends_client_job = st.client >= 0 && !st.keep_client;
  if (job->ends_client_job) slot_client_[size_t(worker)] = -1;  // its next step draws the next client
  // Message sizes (docs/architecture.md, Message sizes): a sparse model's gradient step
  // moves only the rows its minibatch reads and touches, a dense one's push may be
  // compressed; everything else is a full parameter vector.
  job->rows.clear();
  job->sparse = layout_.rows > 0;  // the server then applies only these rows (ServerUpdate)
  if (job->sparse) model_.touched_rows(train_, st.ids, st.m, job->rows);
  job->read_rows = job->sparse && st.gradient && st.pull && !g_force_dense_updates;
  const StepMessageBytes sizes =
      step_message_bytes(settings_.network, model_.num_params(), layout_.rows, layout_.width, job->rows.size(),
                         st.gradient && st.pull, settings_.sparse_pull, settings_.compression);
  job->pull_bytes = sizes.pull;
  job->push_bytes = sizes.push;
  job->compress = sizes.compressed;
  if (st.before.grad_buffer) {  // the step's gradient buffer becomes the job's output (see DeferredStep)
    if (st.before.grad != st.before.grad_buffer->data() || st.before.grad_buffer->size() != job->grad.size())
      throw std::logic_error("launch: DeferredStep::grad_buffer must hold the step's gradient");
    std::swap(job->grad, *st.before.grad_buffer);
    job->before.grad_buffer = nullptr;
  }
  return job;
}

SimTime Simulation::time_step(GradientJob& job, const Step& st) {
  const int worker = st.worker;
  const double pull_bytes = job.pull_bytes;
  SimTime served = now();  // when the parameters are read
  job.compute_start = now();
  if (job.received) {  // a pull, or the server's reply: one message to the worker
    // sent by the server (cluster.server.send_seconds): its pull reads when the send starts
    const bool sent_by_server = send_seconds_ > 0 && st.reply_from == kServer;
    if (sent_by_server) served = server_send();
    const SimTime leaves = sent_by_server ? add_time(served, send_seconds_) : now();
    TransferTimes t =
        free_network_ ? TransferTimes{leaves, leaves} : topology_->transfer(st.reply_from, worker, pull_bytes, leaves);
    if (!sent_by_server) served = t.start;
    job.compute_start = add_time(t.arrival, client_link(st.client, pull_bytes));
    out_.messages_to_workers++;
    out_.bytes_to_workers += pull_bytes;
    out_.peak_sync_bytes = std::max(out_.peak_sync_bytes, pull_bytes);
  }
  SimTime compute = compute_.duration(uint32_t(worker), job.step, st.m, job.compute_start, st.client);
  if (compute > st.time_budget) {  // cut at its allowance: no gradient, no push
    compute = st.time_budget;
    job.timed_out = true;
    job.pushed = false;
  }
  job.compute_done = add_time(job.compute_start, compute);
  if (st.client >= 0 && devices_ && !devices_->always_available()) {  // its client must stay until its push has left
    const SimTime needed = add_time(job.compute_done, job.pushed ? client_link(st.client, job.push_bytes) : 0);
    const double until = devices_->available_until(size_t(st.client), sim_to_seconds(now()));
    if (until < 9e9 && needed > seconds_to_sim(until)) {  // it leaves first: the job is cut when it does
      job.compute_done = std::max(job.compute_start, seconds_to_sim(until));
      job.timed_out = true;
      job.pushed = false;
      out_.clients_departed++;
    }
  }
  job.arrival = kNever;
  return served;
}

void Simulation::launch(const Step& st) {
  const int worker = st.worker;
  if ((st.pull != nullptr) == bool(st.own.params) || (st.pull && (st.reply || st.before.params)))
    throw std::logic_error(
        "launch: a step computes on pulled parameters or on its own (with a reply or a deferred step)");
  std::unique_ptr<GradientJob> job = new_job(st);
  if (idle_since_[worker] >= 0 && now() > idle_since_[worker])
    recorder_.add_span(worker + 1, "wait", idle_since_[worker], now());  // e.g. at a sync barrier
  idle_since_[worker] = -1;
  job->incarnation = incarnation_[worker];
  job->start = now();
  const SimTime served = time_step(*job, st);

  GradientJob* raw = job.get();
  size_t slot = take_slot(std::move(job));
  if (st.pull && served > now()) {  // queued behind other transfers: read when served
    queue_.push(served, EventKind::PullServed, worker, slot);
    return;
  }
  if (st.pull && raw->read_at_arrival) {  // read when it arrives; nothing to compute before
    schedule_after_read(*raw, slot);
    return;
  }
  if (st.pull) {
    read_params(*raw, *st.pull);
  } else {
    raw->read = st.own;
    raw->read_version = raw->read.version;
  }
  if (!raw->timed_out) submit(raw);
  schedule_after_read(*raw, slot);
}

void Simulation::schedule_after_read(GradientJob& job, size_t slot) {
  if (job.pushed) {
    job.push_counted = true;
    out_.messages_to_server++;
    out_.bytes_to_server += job.push_bytes;
    out_.peak_sync_bytes = std::max(out_.peak_sync_bytes, job.push_bytes);
    if (contended_) {  // the push queues behind transfers requested before it: ask when it starts
      queue_.push(add_time(job.compute_done, client_link(job.client, job.push_bytes)), EventKind::ComputeDone,
                  job.worker, slot);
      return;
    }
    const SimTime sent =
        add_time(job.compute_done, client_link(job.client, job.push_bytes));  // over the client's own link first
    job.arrival = free_network_ ? sent : topology_->transfer(job.worker, kServer, job.push_bytes, sent).arrival;
  } else {
    job.arrival = job.compute_done;  // the result stays on the worker
  }
  queue_.push(job.arrival, EventKind::GradientArrival, job.worker, slot);
}

void Simulation::submit(GradientJob* raw) {
  raw->submitted = true;
  if (settings_.batched_gradients <= 1) {
    const JobSetup setup = setup_;
    const QueueMark after = exec_.mark();  // the engine's steps so far, on the scheduler's stream
    raw->ticket = pool_.submit([raw, setup, after](ExecContext& ctx) {
      ctx.wait_for(after);
      Workspace::Frame frame(ctx.workspace());
      const float* w = prepare(ctx, *raw, setup, 0);
      raw->loss = setup.model->loss_grad(ctx, w, setup.data, raw->ids.data(), raw->ids.size(),
                                         NoiseKey{setup.seed, uint32_t(raw->worker), raw->step}, raw->grad.data());
      finish(ctx, *raw, setup);
    });
  } else {
    pending_.push_back(raw);
    if (pending_.size() >= settings_.batched_gradients) flush_pending();
  }
}

void Simulation::handle_pull_served(const Event& e) {
  const size_t slot = size_t(e.payload);
  GradientJob& job = *in_flight_[slot];
  if (job.incarnation != incarnation_[job.worker]) {  // its worker failed while the pull queued
    std::unique_ptr<GradientJob> lost = std::move(in_flight_[slot]);
    free_slots_.push_back(slot);
    lose_if_stale(lost);
    return;
  }
  if (job.read_at_arrival) {
    schedule_after_read(job, slot);
    return;
  }
  read_params(job, *job.source);
  if (!job.timed_out) submit(&job);
  schedule_after_read(job, slot);
}

SimTime Simulation::server_send() {
  const SimTime start = std::max(now(), server_free_);
  server_free_ = add_time(start, send_seconds_);
  out_.server_busy += send_seconds_;
  recorder_.add_span(0, "send", start, server_free_);
  return start;
}

bool Simulation::update_now() {
  if (server_seconds_ != 0 || server_free_ > now()) return false;  // (sends keep it busy too)
  out_.server_updates++;
  return true;
}

void Simulation::defer_update(std::unique_ptr<ServerTask> task) {
  const SimTime start = std::max(now(), server_free_);
  server_free_ = add_time(start, server_seconds_);
  out_.server_busy += server_seconds_;
  recorder_.add_span(0, "apply", start, server_free_);
  server_tasks_.push_back(std::move(task));
  queue_.push(server_free_, EventKind::ServerDone);
}

void Simulation::handle_server_done() {
  out_.server_updates++;
  std::unique_ptr<ServerTask> task = std::move(server_tasks_.front());
  server_tasks_.pop_front();
  task->run();
}

void Simulation::account(GradientJob& job, SimTime until) {
  if (job.accounted) return;
  job.accounted = true;
  auto& ws = out_.workers[job.worker];
  const int track = job.worker + 1;
  auto part = [&](const char* name, SimTime a, SimTime b, SimTime& counter, double bytes) {
    b = std::min(b, until);
    if (b <= a) return;
    counter += b - a;
    recorder_.add_span(track, name, a, b, SpanArgs{int64_t(job.step), bytes});
  };
  // the bytes each message was charged: a sparse model's rows, a compressed gradient
  if (job.received) part("pull", job.start, job.compute_start, ws.comm, job.pull_bytes);
  part("compute", job.compute_start, job.compute_done, ws.compute, -1);
  if (job.pushed) part("push", job.compute_done, job.arrival == kNever ? until : job.arrival, ws.comm, job.push_bytes);
}

size_t Simulation::take_slot(std::unique_ptr<GradientJob> job) {
  if (!free_slots_.empty()) {
    size_t slot = free_slots_.back();
    free_slots_.pop_back();
    in_flight_[slot] = std::move(job);
    return slot;
  }
  in_flight_.push_back(std::move(job));
  return in_flight_.size() - 1;
}

void Simulation::settle(int worker) {
  for (auto& job : in_flight_) {
    if (!job || job->worker != worker || !job->submitted) continue;
    try {
      await(*job);
    } catch (...) {
      // rethrown when the job arrives (or is found lost)
    }
  }
}

bool Simulation::lose_if_stale(std::unique_ptr<GradientJob>& job) {
  if (job->incarnation == incarnation_[job->worker]) return false;
  end_client_job(*job);
  await(*job);
  if (!job->cancelled) {  // (a cancelled one was counted when cancelled)
    out_.lost++;
    out_.workers[job->worker].lost++;
  }
  recycle(std::move(job));
  return true;
}

// The failure's mechanism: ending the worker's life makes its job in flight stale, so the
// job's next event (pull served, compute done or arrival) discards it; the worker is alive
// and free now. At most one job of the current life is in flight (engines launch a
// worker's next step only once its last one is back or cancelled).
void Simulation::cancel(int w) {
  bool found = false;
  for (auto& job : in_flight_) {
    if (!job || job->worker != w || job->incarnation != incarnation_[w]) continue;
    account(*job, now());  // its time so far was spent
    job->cancelled = true;
    out_.workers[w].cancelled++;
    out_.workers[w].wasted += now() - job->start;
    uncount_unsent_push(*job);
    end_client_job(*job);
    found = true;
  }
  if (!found) return;
  if (send_seconds_ > 0) server_send();  // the cancel notice
  incarnation_[w]++;
  idle_since_[w] = now();
}

void Simulation::handle_compute_done(const Event& e) {
  GradientJob& job = *in_flight_[size_t(e.payload)];
  if (job.incarnation != incarnation_[job.worker]) {
    std::unique_ptr<GradientJob> lost = std::move(in_flight_[size_t(e.payload)]);
    free_slots_.push_back(size_t(e.payload));
    lose_if_stale(lost);
    return;
  }
  job.arrival = topology_->transfer(job.worker, kServer, job.push_bytes, now()).arrival;
  queue_.push(job.arrival, EventKind::GradientArrival, job.worker, e.payload);
}

SimTime Simulation::collective(Collective kind, const std::vector<int>& members, double size, SimTime at,
                               bool overlapped) {
  if (at < now()) throw std::logic_error("collective: it cannot start before now");
  const SimTime start = at;
  const double bytes = size < 0 ? message_bytes_ : size;
  if (members.empty()) return start;
  if (free_network_) {
    out_.peak_sync_bytes = std::max(out_.peak_sync_bytes, bytes);
    return start;
  }
  const SimTime end = run_collective(*topology_, kind, members, bytes, start, out_,
                                     [this] { return !(interrupt_requested() && !awaiting_checkpoint_); });
  out_.peak_sync_bytes = std::max(out_.peak_sync_bytes, bytes);
  if (overlapped) return end;  // the members compute meanwhile: not their communication time
  for (int w : members) {
    out_.workers[w].comm += end - start;
    recorder_.add_span(w + 1, "collective", start, end);
    idle_since_[w] = std::max(idle_since_[w], end);
  }
  last_collective_ = members;
  last_collective_end_ = end;
  return end;
}

void Simulation::worker_down(int w, SimTime down_for) {
  if (!alive_[w]) return;
  alive_[w] = false;
  incarnation_[w]++;            // its gradient in flight, if any, is lost
  for (auto& job : in_flight_)  // its time so far was spent; the rest never happens
    if (job && job->worker == w) {
      account(*job, now());
      end_client_job(*job);
    }
  out_.failures++;
  down_since_[w] = now();
  engine_->on_worker_down(*this, w);
  if (down_for != kNever) queue_.push(add_time(now(), down_for), EventKind::WorkerUp, w);
}

void Simulation::worker_up(int w) {
  if (alive_[w]) return;
  alive_[w] = true;
  out_.workers[w].down += now() - down_since_[w];
  recorder_.add_span(w + 1, "down", down_since_[w], now());
  if (settings_.failure_rate > 0) schedule_rate_failure(w);
  engine_->on_worker_up(*this, w);
}

void Simulation::schedule_rate_failure(int w) {
  Rng rng(settings_.seed, RngPurpose::Failure, uint32_t(w), failure_draws_[w]++);
  const double gap_seconds = -std::log(rng.uniform()) / settings_.failure_rate;
  if (!(sim_to_seconds(now()) + gap_seconds < 9e9)) return;  // beyond the clock's range: it never fails
  SimTime gap = seconds_to_sim(gap_seconds);
  queue_.push(add_time(now(), gap), EventKind::WorkerDown, w, uint64_t(settings_.failure_down_time));
}

void Simulation::recycle(std::unique_ptr<GradientJob> job) {
  job->read = Snapshot{};
  job->ticket.reset();
  spare_jobs_.push_back(std::move(job));
}

void Simulation::for_each_block(size_t n, const BlockFn& f) {
  if (!host_kernels_) {  // one kernel launch per pass does the whole vector
    f(exec_, 0, n);
    return;
  }
  auto blocks = [&f](ExecContext& ctx, size_t begin, size_t end) {
    for (size_t b = begin; b < end; b += kBlockFloats) f(ctx, b, std::min(end, b + kBlockFloats));
  };
  const size_t nblocks = (n + kBlockFloats - 1) / kBlockFloats;
  if (nblocks < kSplitFromBlocks) {
    blocks(exec_, 0, n);
    return;
  }
  // one range per thread that computes while the caller waits (the caller included)
  const size_t ranges = size_t(pool_.parallelism());
  const size_t per = (nblocks + ranges - 1) / ranges * kBlockFloats;
  std::vector<WorkerPool::Task> tasks;
  for (size_t b = 0; b < n; b += per) {
    size_t e = std::min(n, b + per);
    tasks.push_back([&blocks, b, e](ExecContext& ctx) { blocks(ctx, b, e); });
  }
  pool_.run_all(std::move(tasks));
}

void Simulation::schedule_timer(SimTime at, int worker, uint64_t payload) {
  queue_.push(at, EventKind::EngineTimer, worker, payload);
}

void Simulation::request_stop(const std::string& status, const std::string& note) {
  monitor_.request_stop(status, note);
}

void Simulation::handle_arrival(const Event& e) {
  size_t slot = size_t(e.payload);
  std::unique_ptr<GradientJob> job = std::move(in_flight_[slot]);
  free_slots_.push_back(slot);
  if (lose_if_stale(job)) return;
  if (job->ends_client_job) {  // back: its client may be drawn again
    population_->release(job->client);
    job->ends_client_job = false;
  }
  if (job->timed_out) {  // abandoned at its allowance (or by its client): no gradient arrives, only the news
    end_client_job(*job);
    job->read = Snapshot{};
    account(*job, now());
    idle_since_[job->worker] = now();
    out_.workers[job->worker].cancelled++;
    out_.workers[job->worker].wasted += now() - job->start;
    engine_->on_gradient(*this, std::move(job));
    return;
  }
  if (job->read_at_arrival) {  // staleness.at = apply: the lag counts back from the version now
    read_params(*job, *job->source);
    submit(job.get());
  }
  await(*job);
  if (!engine_->keeps_read_params()) job->read = Snapshot{};

  account(*job, now());
  idle_since_[job->worker] = job->arrival;
  if (!monitor_.arrived(job->worker, job->ids.size(), job->loss)) {  // a loss not finite: the run diverged
    recycle(std::move(job));
    return;
  }
  if (job->compress) compress(*job);
  engine_->on_gradient(*this, std::move(job));
}

// On the scheduler thread, in arrival order: a worker's residual sees its gradients in the
// order they reached the server, and a gradient that never arrives (lost) changes nothing.
void Simulation::compress(GradientJob& job) {
  const CompressionSpec& c = settings_.compression;
  const size_t n = model_.num_params();
  float* residual = nullptr;
  if (c.error_feedback) {
    if (residual_.empty()) residual_.resize(size_t(settings_.workers));
    DeviceArray<float>& r = residual_[size_t(job.worker)];
    if (r.size() != n) {
      r.resize_discard(n);
      r.fill(0.0f);
    }
    residual = r.data();
  }
  if (c.type == CompressionSpec::Type::TopK)
    ops::compress_topk(exec_, job.grad.data(), residual, n, topk_count(c.ratio, n));
  if (c.type == CompressionSpec::Type::Int8) ops::compress_int8(exec_, job.grad.data(), residual, n);
}

EvalPair evaluate_params(const Model& model, WorkerPool& pool, ExecContext& exec, const float* w,
                         const DeviceDataset* train, size_t train_limit, const DeviceDataset* test, size_t test_limit) {
  EvalPair out;
  exec.synchronize();  // w may have been written on the caller's stream; the pool reads it on others
  if (!model.uses_data()) {
    out.train = model.evaluate(exec, w, nullptr, 0, 1);
    out.test = model.evaluate(exec, w, nullptr, 0, 1);
    return out;
  }
  // The fixed chunks of both sets go to the pool as one set of tasks, larger first:
  // evaluated one set after the other, the default 2,000 training rows (one chunk) and
  // the test set's last, short chunk each left a core idle. Which thread computes a
  // chunk, and when, does not matter: each set's sums are added in chunk order.
  struct Chunk {
    const DeviceDataset* data;
    size_t begin, end;
    EvalSums sums;
  };
  std::vector<Chunk> chunks;
  auto add_chunks = [&](const DeviceDataset* data, size_t limit) {
    const size_t n = (limit > 0 && limit < data->n) ? limit : data->n;
    for (size_t b = 0; b < n; b += kEvalChunkRows) chunks.push_back({data, b, std::min(n, b + kEvalChunkRows), {}});
    return chunks.size();
  };
  const size_t train_chunks = add_chunks(train, train_limit);
  add_chunks(test, test_limit);
  std::vector<size_t> order(chunks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return chunks[a].end - chunks[a].begin > chunks[b].end - chunks[b].begin;
  });
  std::vector<WorkerPool::Task> tasks;
  for (size_t i : order)
    tasks.push_back([&, i](ExecContext& ctx) {
      Chunk& c = chunks[i];
      c.sums = model.evaluate(ctx, w, c.data, c.begin, c.end);
    });
  pool.run_all(std::move(tasks));
  auto total = [&](size_t from, size_t to) {
    EvalSums t;
    for (size_t i = from; i < to; ++i) {  // chunk order: independent of the thread count
      t.loss_sum += chunks[i].sums.loss_sum;
      t.correct += chunks[i].sums.correct;
      t.count += chunks[i].sums.count;
    }
    return t;
  };
  out.train = total(0, train_chunks);
  out.test = total(train_chunks, chunks.size());
  return out;
}

void Simulation::evaluate_row() { monitor_.evaluate_row(); }

// A push is counted when its job's times are set (schedule_after_read); a job cancelled or
// cut off by the end before its compute is done never sends it: not a message sent.
void Simulation::uncount_unsent_push(GradientJob& job) {
  if (!job.push_counted || now() >= job.compute_done) return;
  job.push_counted = false;
  out_.messages_to_server--;
  out_.bytes_to_server -= job.push_bytes;
}

void Simulation::drain() {
  for (auto& job : in_flight_) {
    if (!job) continue;
    try {
      await(*job);
    } catch (...) {
      // the run is over; its error was (or will be) reported by the arrival that failed
    }
    job.reset();
  }
  in_flight_.clear();
  free_slots_.clear();
}

void Simulation::start_run(Engine& engine) {
  if (settings_.stop_time != kNever) queue_.push(settings_.stop_time, EventKind::StopTime);
  if (settings_.eval_unit == EvalUnit::Time) queue_.push(seconds_to_sim(settings_.eval_every), EventKind::Evaluate);
  for (const auto& f : settings_.failures) queue_.push(f.at, EventKind::WorkerDown, f.worker, uint64_t(f.down_for));
  if (settings_.failure_rate > 0)
    for (int w = 0; w < settings_.workers; ++w) schedule_rate_failure(w);
  engine.start(*this);
  evaluate_row();  // the starting point (no update has been applied yet)
}

void Simulation::handle(const Event& e) {
  switch (e.kind) {
    case EventKind::GradientArrival:
      handle_arrival(e);
      break;
    case EventKind::ComputeDone:
      handle_compute_done(e);
      break;
    case EventKind::PullServed:
      handle_pull_served(e);
      break;
    case EventKind::ServerDone:
      handle_server_done();
      break;
    case EventKind::Evaluate:
      evaluate_row();
      // Only while work remains: a stalled run must end, not evaluate forever.
      if (!queue_.empty()) queue_.push(add_time(e.time, seconds_to_sim(settings_.eval_every)), EventKind::Evaluate);
      break;
    case EventKind::StopTime:
      request_stop("completed", "reached stop.time");
      break;
    case EventKind::EngineTimer:
      engine_->on_timer(*this, Timer{e.worker, e.payload});
      break;
    case EventKind::WorkerDown:
      worker_down(e.worker, SimTime(e.payload));
      break;
    case EventKind::WorkerUp:
      worker_up(e.worker);
      break;
  }
}

void Simulation::finish_run() {
  if (!monitor_.evaluated_now()) evaluate_row();
  for (auto& job : in_flight_)  // steps under way at the end: their time so far was spent
    if (job && job->incarnation == incarnation_[job->worker]) {
      account(*job, now());
      uncount_unsent_push(*job);
    }
  drain();

  out_.time = now();
  out_.staleness_unit = engine_->staleness_unit();
  if (population_) {
    out_.clients = population_->count();
    out_.client_draws = population_->draws();
    out_.clients_distinct = population_->distinct();
  }
  if (server_free_ > out_.time) out_.server_busy -= server_free_ - out_.time;  // updates cut off by the end
  if (last_collective_end_ > out_.time)  // a collective cut off by the end: only its time so far
    for (int w : last_collective_) out_.workers[w].comm -= last_collective_end_ - out_.time;
  for (int w = 0; w < settings_.workers; ++w)
    if (!alive_[w]) {
      out_.workers[w].down += now() - down_since_[w];
      recorder_.add_span(w + 1, "down", down_since_[w], now());
    }
  monitor_.finish();
}

RunOutcome Simulation::run(Engine& engine, StateArchive* from) {
  engine_ = &engine;
  // Unless the engine wants the parameters back at arrival (DC-ASGD), a job lets go of
  // its snapshot as soon as the gradient is computed: memory then follows the versions
  // being computed on, not the versions whose gradients are still travelling.
  setup_ = JobSetup{&model_, train_, settings_.seed, settings_.precision, !engine.keeps_read_params()};
  if (from)
    restore(engine, *from);
  else
    start_run(engine);

  // No progress in virtual time: with stop.time as the only limit, a run whose steps take
  // 0 ns (cluster.compute drawing durations that round to 0 ns, over a free network)
  // would go round at one instant forever. A worker whose steps take >= 1 ns has a bounded
  // number of events at one instant (its pull, compute, push, arrival, failure, timers:
  // about 10), so more than kStuckEventsPerWorker per worker (plus kStuckEventsBase) in a
  // row at one instant happens only when nearly every step is 0 ns; the run then fails
  // with NoProgress (exit 2), naming cluster.compute. With any other limit the run ends
  // by it, unless no gradient arrives and no update is applied: so many events in a row at
  // one instant with neither are an engine going round without work (it would never end,
  // and its queue may grow until memory runs out), also NoProgress.
  const bool only_time_limit = settings_.stop_time != kNever && settings_.stop_updates == 0 &&
                               settings_.stop_gradients == 0 && !(settings_.stop_epochs > 0);
  const uint64_t stuck_after = kStuckEventsBase + kStuckEventsPerWorker * uint64_t(settings_.workers);
  checkpoint_refused_ = checkpoints_.write ? checkpoint_refusal(engine) : "";
  const bool checkpoints = checkpoints_.write && checkpoint_refused_.empty();
  uint64_t deferred = 0;  // events run after an interruption, waiting for a checkpoint
  while (!monitor_.stopping()) {
    if (interrupt_requested()) {
      // (an interruption's checkpoint, at the first point that has one)
      const bool wait = checkpoints && !checkpoint_point() && ++deferred <= kCheckpointDeferEvents;
      awaiting_checkpoint_ = wait;  // (the events till then run as they would have)
      if (!wait) {
        if (checkpoints && checkpoint_point())
          save_checkpoint();
        else if (checkpoints)  // (a saturated server: its updates are closures, not state)
          checkpoint_refused_ = "for " + std::to_string(kCheckpointDeferEvents) +
                                " events after the interruption the server had an update under way, or a batch of "
                                "gradients was being gathered";
        request_stop("interrupted", "interrupted by a signal");
        break;
      }
    }
    if (queue_.empty()) {
      end_with_no_work_left();
      break;
    }
    Event e = queue_.pop();
    if (e.time != instant_) {
      instant_ = e.time;
      same_instant_ = 0;
      work_seen_ = out_.gradients + out_.updates;
    } else if (++same_instant_ % stuck_after == 0 && !only_time_limit) {
      if (out_.gradients + out_.updates == work_seen_)
        throw NoProgress("virtual time stayed at " + format_number(sim_to_seconds(instant_)) + " s for " +
                         std::to_string(same_instant_) +
                         " events in a row with no gradient arriving and no update applied (" +
                         std::to_string(out_.updates) +
                         " updates so far): the engine goes round without work, and the run would never end");
      work_seen_ = out_.gradients + out_.updates;
    } else if (same_instant_ > stuck_after && only_time_limit) {
      throw NoProgress("virtual time stayed at " + format_number(sim_to_seconds(instant_)) + " s for " +
                       std::to_string(same_instant_) + " events in a row (" + std::to_string(out_.updates) +
                       " updates so far) while stop.time " + format_number(sim_to_seconds(settings_.stop_time)) +
                       " s is the run's only limit: the steps take 0 ns, so it would never end; give "
                       "cluster.compute durations of at least 1 ns (its draws round to whole nanoseconds), or "
                       "add stop.updates, stop.gradients or stop.epochs");
    }
    handle(e);
    monitor_.check_progress();
    if (checkpoints_.due && checkpoints_.due(out_.updates) && checkpoints && !monitor_.stopping() &&
        checkpoint_point() && !interrupt_requested())
      save_checkpoint();
  }
  finish_run();
  return out_;
}

// ---- checkpoints ----

void checkpoint(StateArchive& a, GradientJob& job, const std::vector<const ParameterStore*>& stores) {
  if (job.before.params && !job.submitted)
    throw std::logic_error("checkpoint: a job whose deferred step is not applied");
  a.tag("job");
  a.io(job.worker);
  a.io(job.step);
  checkpoint(a, job.read);
  a.io(job.read_version);
  a.io(job.ids);
  a.io(job.grad);
  a.io(job.rows);
  a.io(job.sparse);
  a.io(job.read_rows);
  a.io(job.pulled);
  for (double* d : {&job.push_bytes, &job.pull_bytes, &job.loss}) a.io(*d);
  a.io(job.compress);
  for (SimTime* t : {&job.start, &job.compute_start, &job.compute_done, &job.arrival}) a.io(*t);
  a.io(job.incarnation);
  a.io(job.tag);
  int32_t source = -1;
  if (a.saving() && job.source) {
    auto it = std::find(stores.begin(), stores.end(), job.source);
    if (it == stores.end()) throw std::logic_error("checkpoint: a job pulls from a store its engine does not name");
    source = int32_t(it - stores.begin());
  }
  a.io(source);
  if (!a.saving()) {
    if (source >= int32_t(stores.size()))
      a.fail("a job pulls from store " + std::to_string(source) + " of " + std::to_string(stores.size()));
    job.source = source < 0 ? nullptr : stores[size_t(source)];
  }
  for (bool* b : {&job.received, &job.pushed, &job.submitted, &job.read_at_arrival, &job.accounted, &job.push_counted,
                  &job.cancelled, &job.timed_out, &job.ends_client_job})
    a.io(*b);
  a.io(job.client);
  if (!a.saving()) {
    job.submitted = false;  // computed already (or not yet handed over): nothing to wait for
    job.before = DeferredStep{};
    job.ticket.reset();
  }
}

void checkpoint(StateArchive& a, std::vector<std::unique_ptr<GradientJob>>& jobs,
                const std::vector<const ParameterStore*>& stores) {
  uint64_t n = jobs.size();
  a.io(n);
  if (!a.saving()) {
    if (n > (uint64_t(1) << 32)) a.fail("a count of " + std::to_string(n) + " jobs");
    jobs.clear();
    jobs.resize(size_t(n));
  }
  for (auto& job : jobs) {
    bool present = bool(job);
    a.io(present);
    if (!present) continue;
    if (!a.saving()) job = std::make_unique<GradientJob>();
    checkpoint(a, *job, stores);
  }
}

std::string Simulation::checkpoint_refusal(const Engine& engine) const { return engine.checkpoint_refusal(); }

bool Simulation::save_checkpoint() {
  for (auto& job : in_flight_) {
    if (!job || !job->submitted) continue;
    try {
      await(*job);
    } catch (...) {
      return false;  // rethrown when the job arrives (or is found lost)
    }
  }
  exec_.synchronize();  // the engine's own kernels, before their arrays are read
  std::string state;
  StateArchive a(&state);
  engine_->checkpoint(*this, a);
  checkpoint_state(a);
  checkpoints_.write(std::move(state), out_.updates, now());
  return true;
}

void Simulation::restore(Engine& engine, StateArchive& a) {
  const std::string refusal = checkpoint_refusal(engine);
  if (!refusal.empty()) throw std::logic_error("restore: " + refusal);
  engine.checkpoint(*this, a);
  checkpoint_state(a);
  if (!a.done()) a.fail("bytes left after the run's state");
}

// The simulator's part, in the order written (the engine's part comes first).
void Simulation::checkpoint_state(StateArchive& a) {
  a.tag("simulation");
  queue_.checkpoint(a);
  stream_->checkpoint(a);
  bool parts = bool(parts_);
  a.io(parts);
  if (parts != bool(parts_)) a.fail("the data's partition does not match this run's");
  if (parts_) parts_->checkpoint(a);
  topology_->checkpoint(a);
  // the jobs in flight, in their slots (events name them by slot), and the free slots' order
  checkpoint(a, in_flight_, engine_->pull_stores());
  a.io(free_slots_);
  a.io(steps_);
  a.io(alive_);
  a.io(incarnation_);
  a.io(failure_draws_);
  a.io(down_since_);
  a.io(idle_since_);
  if (!a.saving() && (steps_.size() != size_t(settings_.workers) || alive_.size() != size_t(settings_.workers)))
    a.fail("the workers do not match this run's " + std::to_string(settings_.workers));
  bool population = bool(population_);
  a.io(population);
  if (population != bool(population_)) a.fail("the population of clients does not match this run's");
  if (population_) {
    population_->checkpoint(a);
    a.io(slot_client_);
  }
  a.io(initial_override_);
  a.io(residual_);
  a.io(server_free_);
  a.io(last_collective_);
  a.io(last_collective_end_);
  a.io(instant_);
  a.io(same_instant_);
  monitor_.checkpoint(a);
  recorder_.checkpoint(a);
  a.tag("end");
}

}  // namespace asgd
