// engines/streaming_diloco.cpp — Streaming DiLoCo (Douillard, Donchev, Rush, Kale, Charles,
// Garrett, Teston, Lacey, McIlroy, Shen, Ramé, Szlam, Ranzato & Barham 2025, "Streaming
// DiLoCo with overlapping communication", arXiv 2501.18512, Algorithm 2). Every worker m
// trains its own copy x_m with H = `steps` inner steps of train.optimizer between a
// fragment's synchronisations, and the parameters are split into P = `fragments`
// fragments synchronised at staggered steps: fragment p at t = t_p + k H, with
// t_p = floor((p + 1) H / P) (torchft's schedule: one fragment every H/P steps; P = 1 is
// DiLoCo's every H). At such a step each worker sends its outer gradient for p,
//   Delta_m,p = theta_p - x_m,p            (theta: the global parameters, identical on all)
// (quantised to 4-bit E3M0 floats with `quantize`: kernels/fp4.h), and the ring
// all-reduce of the fragment starts once every worker has sent it; the workers go on
// training meanwhile. tau = `overlap` inner steps later (t + tau) each worker takes the
// result (waiting for it if the all-reduce has not ended: the only stall):
//   theta_p <- OuterOpt(theta_p, (1/M) sum_m Delta_m,p)     (Nesterov, lr 0.7, momentum 0.9)
//   x_m,p   <- alpha x_m,p + (1 - alpha) theta_p             (alpha = `alpha`; 0: replaced)
// The global update is made when the all-reduce ends (one update of the model of record,
// theta, which train_loss is measured on); each worker's mix at its step t + tau. P = 1,
// tau = 0, alpha = 0 is DiLoCo with its outer all-reduce (tested against diloco).
// Fragments: the model's layers (a weight and the vectors after it, Model::param_blocks)
// dealt to fragments in turn (layer l to fragment l mod P: the paper's strided pattern);
// a model with fewer layers than P (the quadratic) is cut into P contiguous parts.
// Virtual time: inner steps send nothing; a fragment's all-reduce is Runtime::collective
// (a ring over the workers, of the fragment's bytes: value bytes, or n/2 + 4 quantised)
// overlapped with compute, so a worker's only communication time is its wait at t + tau,
// max(0, ring time - tau c) per synchronisation (steady state: compute utilisation
// H c / (H c + P max(0, T(S/P) - tau c)), Charles et al. 2025 App. A; tested to 1e-9).
// Not modelled: failures (refused), asgdsim cluster (refused: collectives are simulated).
#include <algorithm>
#include <cmath>
#include "engines/engine_registry.h"
#include "engines/optimizer.h"
#include "kernels/fp4.h"
#include "kernels/ops.h"
#include "sim/core/runtime.h"
#include "sim/net/message_size.h"

namespace asgd {

namespace {

struct StreamingDilocoConfig {
  int steps{};      // H
  int fragments{};  // P
  int overlap{};    // tau
  double alpha{};   // the mix of the local fragment with the new global one
  double outer_lr{}, outer_momentum{};
  bool outer_nesterov{};
  bool quantize{};  // 4-bit E3M0 outer gradients
};

using Range = ParamRange;

// The parameters' fragments: layers dealt in turn, or contiguous parts (see above).
std::vector<std::vector<Range>> split_fragments(const std::vector<ParamBlock>& blocks, size_t n, int parts) {
  const std::vector<Range> layers = param_layers(blocks);
  std::vector<std::vector<Range>> out(static_cast<size_t>(parts));
  if (int(layers.size()) >= parts) {
    for (size_t l = 0; l < layers.size(); ++l) out[l % size_t(parts)].push_back(layers[l]);
    return out;
  }
  for (int p = 0; p < parts; ++p) {
    const size_t b = n * size_t(p) / size_t(parts), e = n * size_t(p + 1) / size_t(parts);
    out[size_t(p)].push_back({b, e - b});
  }
  return out;
}

constexpr uint64_t kFragmentReduced = 1;  // timer payload: a fragment's all-reduce ended

class StreamingDilocoEngine final : public Engine {
 public:
  StreamingDilocoEngine(const StreamingDilocoConfig& c) : c_(c) {}
  std::string type() const override { return "streaming_diloco"; }
  Snapshot model_of_record() const override { return store_->current(); }

  void start(Runtime& sim) override {
    configure(sim, sim.initial_params());
    last_update_ = sim.now();
    for (int m = 0; m < sim.workers(); ++m) launch(sim, m);
  }

  std::string checkpoint_refusal() const override { return ""; }
  void checkpoint(Runtime& sim, StateArchive& a) override {
    a.tag("streaming_diloco");
    if (!a.saving()) configure(sim, std::vector<float>(sim.num_params()));
    store_->checkpoint(a);
    outer_->checkpoint(a);
    for (Sync& s : syncs_) {
      a.io(s.sent);
      a.io(s.count);
      a.io(s.reduced);
    }
    for (auto& x : local_) x->checkpoint(a);
    for (auto& o : inner_) o->checkpoint(a);
    a.io(delta_);
    a.io(done_);
    a.io(waiting_);
    a.io(members_);
    a.io(last_update_);
    if (!a.saving() && delta_.size() != size_t(sim.workers())) a.fail("the workers' copies do not match this run's");
  }

  // What start() sets up before the first steps: theta, the fragments, each worker's copy.
  void configure(Runtime& sim, const std::vector<float>& init) {
    const int w = sim.workers();
    n_ = sim.num_params();
    store_ = std::make_unique<ParameterStore>(init, 0);
    OptimizerSpec outer;
    outer.momentum = c_.outer_momentum;
    outer.nesterov = c_.outer_nesterov;
    outer_ = std::make_unique<Optimizer>(outer);
    outer_->reset(n_);
    frags_ = split_fragments(sim.model().param_blocks(), n_, c_.fragments);
    const NetworkSpec& net = sim.settings().network;
    for (int p = 0; p < c_.fragments; ++p) {
      size_t values = 0;
      for (const Range& r : frags_[size_t(p)]) values += r.len;
      const double exact = c_.quantize ? fp4::encoded_bytes(values) : double(values) * net.bytes_per_value;
      bytes_.push_back(scaled_message_bytes(net, n_, exact));
      offset_.push_back(std::max(1, int(std::floor(double(p + 1) * c_.steps / c_.fragments))));
    }
    syncs_.assign(size_t(c_.fragments), Sync{});
    for (Sync& s : syncs_) s.sent.assign(size_t(w), false);
    local_.clear();
    inner_.clear();
    delta_.resize(size_t(w));
    for (int m = 0; m < w; ++m) {
      local_.push_back(std::make_unique<ParameterStore>(init, 0));
      inner_.push_back(std::make_unique<Optimizer>(sim.settings().optimizer));
      inner_.back()->reset(n_);
      delta_[size_t(m)].resize_discard(n_);
    }
    mean_.resize_discard(n_);
    done_.assign(size_t(w), 0);
    waiting_.assign(size_t(w), -1);
  }

  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override {
    const int m = job->worker;
    ExecContext& ctx = sim.exec();
    sim.applied(*job, 0);  // (its samples count toward the epoch, and so the rate)
    Optimizer& opt = *inner_[size_t(m)];
    opt.begin_step(float(sim.lr()));
    const float* g = job->grad.data();
    local_[size_t(m)]->update([&](float* out, const float* in) { opt.step(ctx, out, in, g, 0, n_); });
    sim.recycle(std::move(job));
    const int t = ++done_[size_t(m)];
    for (int p = 0; p < c_.fragments; ++p)  // (send before taking: with tau = 0 both at t)
      if (t >= offset_[size_t(p)] && (t - offset_[size_t(p)]) % c_.steps == 0) send(sim, m, p);
    for (int p = 0; p < c_.fragments; ++p) {
      const int at = offset_[size_t(p)] + c_.overlap;
      if (t < at || (t - at) % c_.steps != 0) continue;
      const int round = (t - at) / c_.steps;     // this worker's round of fragment p
      if (syncs_[size_t(p)].reduced <= round) {  // its all-reduce has not ended: wait for it
        waiting_[size_t(m)] = p;
        return;
      }
      mix(sim, m, p);
    }
    if (!sim.stopping()) launch(sim, m);
  }

  void on_timer(Runtime& sim, const Timer& e) override {
    if (e.payload != kFragmentReduced) return;
    const int p = e.worker;
    apply(sim, p);
    for (int m = 0; m < sim.workers(); ++m)
      if (waiting_[size_t(m)] == p) {
        waiting_[size_t(m)] = -1;
        mix(sim, m, p);
        if (!sim.stopping()) launch(sim, m);
      }
  }

 private:
  struct Sync {
    std::vector<bool> sent;  // by worker: its Delta for the round under way
    int count = 0;
    int reduced = 0;  // rounds whose all-reduce has ended (and theta_p been updated)
  };

  void launch(Runtime& sim, int m) {
    Step step = sim.next_step(m, ids_);
    step.own = local_[size_t(m)]->current();
    step.own.version = store_->version();
    step.push = false;
    sim.launch(step);
  }

  // Worker m's outer gradient for fragment p (quantised if so); the all-reduce starts when
  // every worker's is in.
  void send(Runtime& sim, int m, int p) {
    ExecContext& ctx = sim.exec();
    const float* theta = store_->current().data();
    const float* x = local_[size_t(m)]->current().data();
    float* d = delta_[size_t(m)].data();
    float scale = 0;
    for (const Range& r : frags_[size_t(p)]) {
      ops::sgd_step(ctx, d + r.begin, theta + r.begin, x + r.begin, 1.0f, r.len);  // theta - x
      if (c_.quantize) scale = std::max(scale, fp4::max_abs(ctx, d + r.begin, r.len));
    }
    if (c_.quantize)
      for (const Range& r : frags_[size_t(p)]) fp4::round_e3m0(ctx, d + r.begin, r.len, scale);
    Sync& s = syncs_[size_t(p)];
    s.sent[size_t(m)] = true;
    if (++s.count < sim.workers()) return;
    members_.clear();
    for (int v = 0; v < sim.workers(); ++v) members_.push_back(v);
    const SimTime end = sim.collective(Collective::RingAllReduce, members_, bytes_[size_t(p)], sim.now(), true);
    sim.schedule_timer(end, p, kFragmentReduced);
  }

  // The all-reduce of fragment p ended: theta_p <- OuterOpt(theta_p, mean Delta) (worker order).
  void apply(Runtime& sim, int p) {
    ExecContext& ctx = sim.exec();
    Sync& s = syncs_[size_t(p)];
    const float inv = 1.0f / float(s.count);
    for (const Range& r : frags_[size_t(p)]) {
      ops::copy(ctx, mean_.data() + r.begin, delta_[0].data() + r.begin, r.len);
      for (size_t m = 1; m < delta_.size(); ++m)
        ops::add_into(ctx, mean_.data() + r.begin, delta_[m].data() + r.begin, r.len);
      ops::scale(ctx, mean_.data() + r.begin, inv, r.len);
    }
    outer_->begin_step(float(c_.outer_lr));
    store_->update([&](float* out, const float* in) {
      if (out != in) ops::copy(ctx, out, in, n_);
      for (const Range& r : frags_[size_t(p)])
        outer_->step(ctx, out + r.begin, out + r.begin, mean_.data() + r.begin, r.begin, r.len);
    });
    std::fill(s.sent.begin(), s.sent.end(), false);
    s.count = 0;
    ++s.reduced;
    sim.iteration_done(sim.now() - last_update_);
    last_update_ = sim.now();
    sim.updated();
  }

  // x_m,p <- alpha x_m,p + (1 - alpha) theta_p
  void mix(Runtime& sim, int m, int p) {
    ExecContext& ctx = sim.exec();
    const float* theta = store_->current().data();
    const float beta = float(1.0 - c_.alpha);
    local_[size_t(m)]->update([&](float* out, const float* in) {
      if (out != in) ops::copy(ctx, out, in, n_);
      for (const Range& r : frags_[size_t(p)]) ops::move_towards(ctx, out + r.begin, theta + r.begin, beta, r.len);
    });
  }
  StreamingDilocoConfig c_;
  size_t n_ = 0;
  std::unique_ptr<ParameterStore> store_;  // theta, the model of record
  std::unique_ptr<Optimizer> outer_;       // one state: fragments are disjoint ranges
  std::vector<std::vector<Range>> frags_;
  std::vector<double> bytes_;  // by fragment: one all-reduce's payload
  std::vector<int> offset_;    // t_p
  std::vector<Sync> syncs_;
  std::vector<std::unique_ptr<ParameterStore>> local_;  // x_m
  std::vector<std::unique_ptr<Optimizer>> inner_;
  std::vector<DeviceArray<float>> delta_;  // by worker: its outer gradients (their fragments' ranges)
  DeviceArray<float> mean_;
  std::vector<int> done_;     // by worker: inner steps done
  std::vector<int> waiting_;  // by worker: the fragment it waits for (-1: none)
  std::vector<int> members_;
  std::vector<int32_t> ids_;
  SimTime last_update_ = 0;
};

}  // namespace

EngineType streaming_diloco_engine_type() {
  using C = StreamingDilocoConfig;
  return engine_type<C>(
      "streaming_diloco",
      "Streaming DiLoCo (Douillard et al. 2025): DiLoCo whose P fragments are all-reduced at staggered steps, "
      "overlapped with `overlap` inner steps, the result mixed into each worker's copy (alpha), optionally in "
      "4-bit floats",
      {field(&C::steps, keys::integer("steps", 100, "H: inner steps between two synchronisations of a fragment", 1)),
       field(&C::fragments, keys::integer("fragments", 2, "P: fragments, synchronised one every H/P steps", 1)),
       field(&C::overlap,
             keys::integer("overlap", 1, "tau: inner steps a fragment's all-reduce overlaps (0: it blocks)", 0)),
       field(&C::alpha, keys::num("alpha", 0.5, "the mix x <- alpha x + (1 - alpha) theta of a synchronised fragment",
                                  0, false, 1)),
       field(&C::outer_lr, keys::num("outer_lr", 0.7, "outer step size on the averaged outer gradient", 0, true)),
       field(&C::outer_momentum, keys::num("outer_momentum", 0.9, "outer momentum", 0, false, 0.999999)),
       field(&C::outer_nesterov, keys::boolean("outer_nesterov", true, "outer Nesterov momentum (PyTorch's form)")),
       field(&C::quantize,
             keys::boolean("quantize", false,
                           "send the outer gradients as 4-bit E3M0 floats with a max scale (n/2 + 4 bytes)"))},
      {[](const C& c) { return std::make_unique<StreamingDilocoEngine>(c); },
       [](const C& c, int) {
         return EngineCost{0, double(std::max(1, c.steps)), 4, true};
       },
       [](const C& c, const EngineRunView& run, Validator& v) {
         refuse_compression(run, "streaming_diloco all-reduces outer gradients (its own 4-bit form: quantize)", v);
         const int64_t h = c.steps, p = c.fragments, tau = c.overlap;
         if (p > h)
           v.error("engine.fragments", "at most one fragment per inner step: fragments " + std::to_string(p) +
                                           " > steps " + std::to_string(h));
         else if (tau >= std::max<int64_t>(1, h / p))
           v.error("engine.overlap", "a fragment's all-reduce must end before the next one starts: overlap " +
                                         std::to_string(tau) +
                                         " must be < steps / fragments = " + std::to_string(h / p));
         if (c.outer_nesterov && c.outer_momentum <= 0)
           v.error("engine.outer_nesterov", "outer Nesterov momentum needs outer_momentum > 0");
         if (run.failures)
           v.error("cluster.failures",
                   "streaming_diloco does not model failures (a worker lost in a fragment's "
                   "all-reduce): remove cluster.failures");
         if (!run.staleness.empty() && run.staleness != "emergent")
           v.error("staleness.mode",
                   "streaming_diloco's workers compute on their own copies: forced staleness does "
                   "not apply; use \"emergent\"");
       },
       [](const C&, Validator& v) {
         v.error("engine.type",
                 "\"streaming_diloco\" all-reduces fragments between the workers: collectives are "
                 "simulated only (a real run exchanges through the parameter-server rank)");
       }});
}

}  // namespace asgd
