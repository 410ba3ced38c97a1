// sim/timing/distribution.cpp — the distributions; sampling by inversion from one uniform draw
// where possible (normal draws for the lognormal).
#include "sim/timing/distribution.h"
#include <cctype>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include "sim/config/field.h"
#include "sim/config/type_family.h"
#include "sim/base/errors.h"
#include "sim/base/interrupt.h"
#include "sim/base/time.h"
#include "sim/timing/measured_trace.h"

namespace asgd {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class Constant final : public Distribution {
 public:
  explicit Constant(double v) : v_(v) {}
  double sample(Rng&, uint32_t, uint32_t) const override { return v_; }
  double mean() const override { return v_; }
  double variance() const override { return 0.0; }

 private:
  double v_;
};

class Uniform final : public Distribution {
 public:
  Uniform(double lo, double hi) : lo_(lo), hi_(hi) {}
  double sample(Rng& r, uint32_t, uint32_t) const override { return lo_ + (hi_ - lo_) * (1.0 - r.uniform()); }
  double mean() const override { return 0.5 * (lo_ + hi_); }
  double variance() const override { return (hi_ - lo_) * (hi_ - lo_) / 12.0; }

 private:
  double lo_, hi_;
};

// shift + Exp(mean); shift = 0 is the plain exponential
class ShiftedExponential final : public Distribution {
 public:
  ShiftedExponential(double shift, double mean) : shift_(shift), mean_(mean) {}
  double sample(Rng& r, uint32_t, uint32_t) const override { return shift_ - mean_ * std::log(r.uniform()); }
  double mean() const override { return shift_ + mean_; }
  double variance() const override { return mean_ * mean_; }

 private:
  double shift_, mean_;
};

// exp(N(mu, sigma^2)) parameterised by its mean: mu = ln(mean) - sigma^2 / 2
class LogNormal final : public Distribution {
 public:
  LogNormal(double mean, double sigma) : mean_(mean), sigma_(sigma), mu_(std::log(mean) - 0.5 * sigma * sigma) {}
  double sample(Rng& r, uint32_t, uint32_t) const override { return std::exp(mu_ + sigma_ * r.normal()); }
  double mean() const override { return mean_; }
  double variance() const override { return (std::exp(sigma_ * sigma_) - 1.0) * mean_ * mean_; }

 private:
  double mean_, sigma_, mu_;
};

// Pareto type I: P(X > x) = (scale / x)^alpha for x >= scale
class Pareto final : public Distribution {
 public:
  Pareto(double scale, double alpha) : scale_(scale), alpha_(alpha) {}
  double sample(Rng& r, uint32_t, uint32_t) const override { return scale_ * std::pow(r.uniform(), -1.0 / alpha_); }
  double mean() const override { return alpha_ > 1 ? alpha_ * scale_ / (alpha_ - 1) : kInf; }
  double variance() const override {
    if (alpha_ <= 2) return kInf;
    return scale_ * scale_ * alpha_ / ((alpha_ - 1) * (alpha_ - 1) * (alpha_ - 2));
  }

 private:
  double scale_, alpha_;
};

// Weibull: P(X > x) = exp(-(x / scale)^shape), drawn by inversion: scale (-ln U)^(1/shape)
class Weibull final : public Distribution {
 public:
  Weibull(double scale, double shape) : scale_(scale), shape_(shape) {}
  double sample(Rng& r, uint32_t, uint32_t) const override {
    return scale_ * std::pow(-std::log(r.uniform()), 1.0 / shape_);
  }
  double mean() const override { return scale_ * std::tgamma(1 + 1 / shape_); }
  double variance() const override {
    const double g1 = std::tgamma(1 + 1 / shape_);
    return scale_ * scale_ * (std::tgamma(1 + 2 / shape_) - g1 * g1);
  }

 private:
  double scale_, shape_;
};

// A recorded sequence of step durations that every worker draws from: worker w's step k
// takes values[i], i uniform in [0, n) from the step's own stream (seed, ComputeTime, w, k),
// so workers are independent and each replays the trace's distribution, not its order (a
// replay in order would start every worker on the same step at the same time: workers that
// move in lockstep, which no real cluster does).
class Trace final : public Distribution {
 public:
  explicit Trace(std::vector<double> v) : v_(std::move(v)) {}
  double sample(Rng& rng, uint32_t, uint32_t) const override { return v_[rng.below(v_.size())]; }
  double mean() const override { return mean_of(v_); }
  double variance() const override { return variance_of(v_); }

  static double mean_of(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / double(v.size());
  }
  static double variance_of(const std::vector<double>& v) {  // of the values (population)
    double m = mean_of(v), s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return s / double(v.size());
  }

 private:
  std::vector<double> v_;
};

// One recorded sequence per worker (a real job's per-worker step log): worker w's step k
// takes its own sequence's value k mod n_w, in order, so the run replays the job's
// arrival order. mean and variance are those of every value together.
class PerWorkerTrace final : public Distribution {
 public:
  explicit PerWorkerTrace(std::vector<std::vector<double>> v) : v_(std::move(v)) {
    for (const auto& seq : v_) all_.insert(all_.end(), seq.begin(), seq.end());
  }
  double sample(Rng&, uint32_t worker, uint32_t step) const override {
    if (worker >= v_.size())
      throw std::invalid_argument("trace: worker " + std::to_string(worker) + " has no sequence (the trace has " +
                                  std::to_string(v_.size()) + " workers')");
    return v_[worker][step % v_[worker].size()];
  }
  double mean() const override { return Trace::mean_of(all_); }
  double variance() const override { return Trace::variance_of(all_); }
  size_t worker_sequences() const override { return v_.size(); }

 private:
  std::vector<std::vector<double>> v_;
  std::vector<double> all_;
};

// A trace file's limits: a line is one number, and a trace of more durations than this
// is not a trace but a mistake (or /dev/zero): reading stops there with an error instead
// of growing without bound.
constexpr size_t kMaxTraceLineBytes = 1024;
constexpr size_t kMaxTraceValues = 10000000;

// Reads one line of at most kMaxTraceLineBytes into `line`; false at the end of the input.
bool read_bounded_line(std::istream& in, std::string& line, const std::string& path, int lineno) {
  line.clear();
  for (int c; (c = in.get()) != EOF;) {
    if (c == '\n') return true;
    if (line.size() == kMaxTraceLineBytes)
      throw std::invalid_argument("trace file " + path + " line " + std::to_string(lineno) + ": longer than " +
                                  std::to_string(kMaxTraceLineBytes) + " bytes (expected one duration per line)");
    line += char(c);
  }
  return !line.empty();
}

}  // namespace

namespace {

// A line split at commas, each field without surrounding blanks; one trailing empty field
// (a line ending in a comma, as a one-column CSV may) is dropped.
std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> fields;
  for (size_t start = 0;;) {
    size_t comma = line.find(',', start);
    std::string f = line.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t b = f.find_first_not_of(" \t\r"), e = f.find_last_not_of(" \t\r");
    fields.push_back(b == std::string::npos ? "" : f.substr(b, e - b + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (fields.size() > 1 && fields.back().empty()) fields.pop_back();
  return fields;
}

// The whole field as a finite number, or false (a NUL or anything after the number is not one).
bool parse_number(const std::string& field, double& v) {
  if (field.empty()) return false;
  char* end = nullptr;
  v = std::strtod(field.c_str(), &end);
  return end == field.c_str() + field.size() && std::isfinite(v);
}

}  // namespace

namespace {

// A trace file read line by line: its form is known at its first line of data (a header
// of more than one name: per worker, as rows worker,step,seconds or a column per worker;
// else one duration per line), and each line is checked as it comes.
class TraceReader {
 public:
  explicit TraceReader(const std::string& path) : path_(path) {}

  // One line's fields (not blank, not a comment).
  void line(const std::vector<std::string>& fields, int lineno) {
    lineno_ = lineno;
    if (form_ == Form::Unknown && header(fields)) return;
    switch (form_) {
      case Form::Single:
        if (fields.size() != 1)
          throw std::invalid_argument(at() + std::to_string(fields.size()) +
                                      " values in a line: one duration per line, or a header (worker,step,seconds; or "
                                      "a name per worker's column) for a per-worker trace");
        t_.sequences[0].push_back(duration(fields[0], ""));
        break;
      case Form::Rows:
        row(fields);
        break;
      case Form::Columns:
        columns(fields);
        break;
      case Form::Unknown:
        break;
    }
  }

  // The trace read, once every line was: every sequence holds a duration.
  TraceFile finish() {
    if (t_.sequences.empty()) throw std::invalid_argument("trace file " + path_ + ": holds no durations");
    for (size_t w = 0; w < t_.sequences.size(); ++w)
      if (t_.sequences[w].empty())
        throw std::invalid_argument("trace file " + path_ + ": " +
                                    (t_.per_worker ? "worker " + std::to_string(w) +
                                                         " has no durations (a per-worker "
                                                         "trace gives every worker 0.." +
                                                         std::to_string(t_.sequences.size() - 1) + " its steps)"
                                                   : std::string("holds no durations")));
    return std::move(t_);
  }

 private:
  enum class Form { Unknown, Single, Rows, Columns };

  std::string at() const { return "trace file " + path_ + " line " + std::to_string(lineno_) + ": "; }

  // The first line of data sets the form; true when it was a header (no durations in it).
  bool header(const std::vector<std::string>& fields) {
    bool numbers = true;
    for (const auto& f : fields) {
      double v;
      numbers = numbers && parse_number(f, v);
    }
    if (!numbers && fields.size() > 1) {  // a header: the per-worker forms
      std::vector<std::string> names;
      for (std::string f : fields) {
        for (char& c : f) c = char(std::tolower(static_cast<unsigned char>(c)));
        if (f.empty()) throw std::invalid_argument(at() + "a header names every column (an empty name)");
        names.push_back(f);
      }
      t_.per_worker = true;
      if (names == std::vector<std::string>{"worker", "step", "seconds"}) {
        form_ = Form::Rows;
      } else {
        form_ = Form::Columns;
        t_.sequences.resize(fields.size());
        ended_.assign(fields.size(), false);
      }
      return true;
    }
    form_ = Form::Single;
    t_.sequences.resize(1);
    return !numbers;  // a one-column file's header ("seconds"): one sequence
  }

  void row(const std::vector<std::string>& fields) {
    if (fields.size() != 3)
      throw std::invalid_argument(at() + "expected worker,step,seconds; got " + std::to_string(fields.size()) +
                                  " fields");
    const long long w = index(fields[0], "worker", double(1 << 24));
    const long long step = index(fields[1], "step", 4294967296.0);
    if (size_t(w) >= t_.sequences.size()) {
      t_.sequences.resize(size_t(w) + 1);
      last_step_.resize(size_t(w) + 1, -1);
    }
    if (!t_.sequences[w].empty() && step != last_step_[w] + 1)
      throw std::invalid_argument(at() + "worker " + fields[0] + "'s step " + fields[1] + " follows its step " +
                                  std::to_string(last_step_[w]) + " (a worker's steps are consecutive, in order)");
    last_step_[w] = step;
    t_.sequences[w].push_back(duration(fields[2], "worker " + fields[0] + ": "));
  }

  void columns(const std::vector<std::string>& fields) {
    if (fields.size() > t_.sequences.size())
      throw std::invalid_argument(at() + std::to_string(fields.size()) + " fields; the header names " +
                                  std::to_string(t_.sequences.size()) + " workers' columns");
    for (size_t c = 0; c < t_.sequences.size(); ++c) {
      const std::string f = c < fields.size() ? fields[c] : "";
      if (f.empty()) {
        ended_[c] = true;
        continue;
      }
      if (ended_[c])
        throw std::invalid_argument(at() + "worker " + std::to_string(c) +
                                    "'s column has a duration after an empty cell (a column ends at its first "
                                    "empty cell)");
      t_.sequences[c].push_back(duration(f, "worker " + std::to_string(c) + ": "));
    }
  }

  double duration(const std::string& field, const std::string& what) {
    double v = 0;
    if (!parse_number(field, v))
      throw std::invalid_argument(at() + what + "'" + printable(field) + "' is not a number");
    if (v < 0) throw std::invalid_argument(at() + what + "duration " + printable(field) + " is negative");
    if (v > kMaxConfigSeconds)
      throw std::invalid_argument(at() + what + "duration " + printable(field) + " is more than " +
                                  std::to_string(long(kMaxConfigSeconds)) + " s");
    if (++count_ > kMaxTraceValues)
      throw std::invalid_argument("trace file " + path_ + ": more than " + std::to_string(kMaxTraceValues) +
                                  " durations (a trace is replayed cyclically: give a representative part)");
    return v;
  }

  long long index(const std::string& field, const char* what, double limit) const {
    double v = 0;
    if (!parse_number(field, v) || v < 0 || v != std::floor(v) || v >= limit)
      throw std::invalid_argument(at() + what + " '" + printable(field) + "' is not an integer in [0, " +
                                  std::to_string((long long)limit) + ")");
    return (long long)v;
  }

  const std::string& path_;
  Form form_ = Form::Unknown;
  TraceFile t_;
  std::vector<long long> last_step_;  // Rows: each worker's last step
  std::vector<bool> ended_;           // Columns: a column that has had an empty cell
  size_t count_ = 0;
  int lineno_ = 0;
};

}  // namespace

TraceFile read_trace_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("trace file " + path + ": cannot be opened");
  TraceReader reader(path);
  std::string line;
  for (int lineno = 1; read_bounded_line(in, line, path, lineno); ++lineno) {
    if (lineno % 65536 == 0) throw_if_interrupted("reading " + path);
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    reader.line(split_fields(line), lineno);
  }
  return reader.finish();
}

namespace {

// ---- each distribution's typed config ----
struct ConstantConfig {
  double value = 0;
};
struct UniformConfig {
  double low = 0, high = 0;
};
struct ExponentialConfig {
  double mean = 0;
};
struct ShiftedExponentialConfig {
  double shift = 0, mean = 0;
};
struct LogNormalConfig {
  double mean = 0, sigma = 0;
};
struct ParetoConfig {
  double scale = 0, alpha = 0;
};
struct WeibullConfig {
  double scale = 0, shape = 0;
};
struct FlopsConfig {
  double rate = 0;     // the device's FLOP/s
  std::string device;  // the datasheet peak it names ("": `flops` is the number)
  double efficiency = 1;
};
using MeasuredConfig = CalibrationBudget;
struct TraceConfig {
  std::vector<double> values;
  std::string file;
};

// A distribution's typed hooks over its config: `make` builds it; `resolve` (left out: the
// run draws the distribution itself) says what a run's compute draws.
template <class Config>
struct DistHooks {
  std::function<std::unique_ptr<Distribution>(const Config&, const std::string& base_dir)> make;
  std::function<ComputeResolution(const Config&, const ComputeRunView&)> resolve;
};

template <class Config>
struct DeclaredDist {
  std::string type;
  std::vector<Field<Config>> fields;
  DistHooks<Config> hooks;
};

template <class Config>
class BoundDistributionOf final : public BoundDistribution,
                                  public std::enable_shared_from_this<BoundDistributionOf<Config>> {
 public:
  BoundDistributionOf(std::shared_ptr<const DeclaredDist<Config>> d, Config c) : d_(std::move(d)), c_(std::move(c)) {}
  const std::string& type() const override { return d_->type; }
  nlohmann::json keys() const override { return get_fields(d_->fields, c_); }
  std::unique_ptr<Distribution> make(const std::string& base_dir) const override {
    return d_->hooks.make(c_, base_dir);
  }
  ComputeResolution resolve(const ComputeRunView& run) const override {
    if (d_->hooks.resolve) return d_->hooks.resolve(c_, run);
    return {this->shared_from_this(), {{"dist", d_->type}}};
  }
  const Config& config() const { return c_; }

 private:
  std::shared_ptr<const DeclaredDist<Config>> d_;
  Config c_;
};

// One distribution type: its keys (declared once, with ranges and docs), bound to its typed
// config, and the hooks that read it.
struct DistType {
  std::string name, doc;
  std::vector<ParamInfo> params;
  std::function<std::shared_ptr<BoundDistribution>(const DistType& self, const nlohmann::json& spec)> bind;
  std::function<void(const nlohmann::json& spec, const std::string& path, Validator& v)> check_values;
};

template <class Config>
DistType dist_type(std::string name, std::string doc, std::vector<Field<Config>> fields, DistHooks<Config> hooks) {
  DistType t;
  t.name = name;
  t.doc = std::move(doc);
  t.params = params_of(fields);
  using Declared = DeclaredDist<Config>;
  auto d = std::make_shared<const Declared>(Declared{name, std::move(fields), std::move(hooks)});
  t.bind = [d](const DistType&, const nlohmann::json& spec) -> std::shared_ptr<BoundDistribution> {
    for (const auto& f : d->fields)  // a spec built in code (tests, bench) may leave out a required key
      if (f.info.required() && !spec.contains(f.info.name))
        throw std::invalid_argument(d->type + ": missing key '" + f.info.name + "'");
    Config c;
    set_fields(d->fields, spec, c);
    return std::make_shared<BoundDistributionOf<Config>>(d, std::move(c));
  };
  t.check_values = [d](const nlohmann::json& spec, const std::string& path, Validator& v) {
    check_values(d->fields, spec, path, v);
  };
  return t;
}

// Every parameter is a duration (seconds) or a factor: at most kMaxConfigSeconds.
template <class C>
Field<C> seconds_param(double C::*member, std::string name, std::string doc, double min = 0, bool exclusive = true) {
  return field(member, ParamInfo{std::move(name), ParamType::Number, nullptr, std::move(doc), min, kMaxConfigSeconds,
                                 exclusive});
}

// Datasheet peaks, dense (no sparsity), FLOP/s: H100 SXM, A100 SXM, V100 SXM2.
const std::vector<std::pair<std::string, double>>& device_peaks() {
  static const std::vector<std::pair<std::string, double>> named = {{"h100-fp32", 67e12},
                                                                    {"a100-fp32", 19.5e12},
                                                                    {"v100-fp32", 15.7e12},
                                                                    {"h100-bf16", 989e12},
                                                                    {"a100-bf16", 312e12}};
  return named;
}
std::vector<std::string> device_names() {
  std::vector<std::string> out;
  for (const auto& d : device_peaks()) out.push_back(d.first);
  return out;
}
std::string device_names_text() {
  std::string out;
  for (const auto& name : device_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// dist "flops": a constant draw of the model's FLOPs per sample at the device's rate (per
// step: the batch's); a PyTorch module's count is known once `asgdsim run` builds it.
ComputeResolution resolve_flops(const FlopsConfig& c, const ComputeRunView& run) {
  const double rate = c.rate;
  ComputeResolution r;
  r.model = {{"dist", "flops"}, {"device_flops", rate}, {"efficiency", c.efficiency}};
  const std::optional<double> counted = run.flops_per_sample ? run.flops_per_sample() : std::nullopt;
  if (!counted) {
    r.note =
        "cluster.compute \"flops\": `asgdsim run` counts the PyTorch module's FLOPs when it builds it "
        "(asgdsim.flops: forward and backward of 8 training samples, matrix products and convolutions as the "
        "native models count theirs); the runs then draw that many FLOPs per sample at the device's rate";
    return r;
  }
  const double fps = *counted;
  if (!(fps > 0)) {
    r.error = "\"flops\" needs a model that counts its FLOPs; model '" + run.model + "' has none (give a duration)";
    return r;
  }
  const double per_sample = fps / (rate * c.efficiency);
  const double draw = run.per_sample ? per_sample : per_sample * double(run.batch_size);
  r.draw = bind_distribution({{"dist", "constant"}, {"value", draw}});
  r.model["flops_per_sample"] = fps;
  r.model["seconds_per_sample"] = per_sample;
  if (!run.flops_counter.empty()) r.model["flops_counter"] = run.flops_counter;
  return r;
}

// dist "measured": a draw is the whole step, replayed from the experiment's trace once
// `asgdsim run` has measured or found it (experiments/run/calibration.h).
ComputeResolution resolve_measured(const MeasuredConfig& c, const ComputeRunView& run) {
  const std::string name = run.trace_name ? run.trace_name() : "";
  ComputeResolution r;
  r.per_step = true;  // the trace holds whole steps' times
  if (run.trace) {
    r.draw = bind_distribution({{"dist", "trace"}, {"file", run.trace_path}});
    r.model = measured_compute_model(*run.trace, name);
    return r;
  }
  r.model = {{"dist", "measured"}, {"trace", name}};
  r.note = "cluster.compute \"measured\": `asgdsim run` first times the real gradient of model " + run.model +
           " at batch " + std::to_string(run.batch_size) + " on this machine (one thread; " +
           nlohmann::json(c.warmup).dump() + " warm-up steps, then up to " + nlohmann::json(c.steps).dump() +
           " steps or " + nlohmann::json(c.seconds).dump() + " s) into OUT/<name>/" + name +
           ", or reuses that file where it exists (--recalibrate measures again); the runs replay it (dist \"trace\", "
           "a draw per step)";
  return r;
}

const TypeFamily<DistType>& dist_family() {
  static const TypeFamily<DistType> family("distribution", "dist", [] {
    using Const = ConstantConfig;
    using U = UniformConfig;
    using Exp = ExponentialConfig;
    using SExp = ShiftedExponentialConfig;
    using LN = LogNormalConfig;
    using Par = ParetoConfig;
    using Wei = WeibullConfig;
    using F = FlopsConfig;
    using M = MeasuredConfig;
    using T = TraceConfig;
    return std::vector<DistType>{
        dist_type<Const>("constant", "always the same value",
                         {seconds_param(&Const::value, "value", "the value (seconds)", 0, false)},
                         {[](const Const& c, const std::string&) { return std::make_unique<Constant>(c.value); }}),
        dist_type<U>("uniform", "uniform on [low, high]",
                     {seconds_param(&U::low, "low", "lower bound", 0, false),
                      seconds_param(&U::high, "high", "upper bound (>= low)", 0, false)},
                     {[](const U& c, const std::string&) {
                       if (c.high < c.low) throw std::invalid_argument("uniform: high must be >= low");
                       return std::make_unique<Uniform>(c.low, c.high);
                     }}),
        dist_type<Exp>(
            "exponential", "exponential with the given mean", {seconds_param(&Exp::mean, "mean", "mean")},
            {[](const Exp& c, const std::string&) { return std::make_unique<ShiftedExponential>(0.0, c.mean); }}),
        dist_type<SExp>(
            "shifted_exponential", "shift + exponential(mean): a fixed minimum plus a random tail",
            {seconds_param(&SExp::shift, "shift", "fixed part", 0, false),
             seconds_param(&SExp::mean, "mean", "mean of the exponential part")},
            {[](const SExp& c, const std::string&) { return std::make_unique<ShiftedExponential>(c.shift, c.mean); }}),
        dist_type<LN>("lognormal", "exp(N(mu, sigma^2)) with mu chosen so the mean is `mean`",
                      {seconds_param(&LN::mean, "mean", "mean"),
                       seconds_param(&LN::sigma, "sigma", "std of the underlying normal", 0, false)},
                      {[](const LN& c, const std::string&) { return std::make_unique<LogNormal>(c.mean, c.sigma); }}),
        dist_type<Par>("pareto", "Pareto type I, heavy tail: P(X > x) = (scale/x)^alpha",
                       {seconds_param(&Par::scale, "scale", "minimum value x_m"),
                        seconds_param(&Par::alpha, "alpha", "tail index (mean finite for alpha > 1)")},
                       {[](const Par& c, const std::string&) { return std::make_unique<Pareto>(c.scale, c.alpha); }}),
        dist_type<Wei>(
            "weibull",
            "Weibull, P(X > x) = exp(-(x/scale)^shape): shape < 1 a heavy tail, 1 the exponential, > 1 a light one "
            "(a common fit of measured step times)",
            {seconds_param(&Wei::scale, "scale", "scale lambda (the 63rd percentile)"),
             seconds_param(&Wei::shape, "shape", "shape k (at least 0.05: the moments need Gamma(1 + 2/k))", 0.05,
                           false)},
            {[](const Wei& c, const std::string&) { return std::make_unique<Weibull>(c.scale, c.shape); }}),
        dist_type<F>(
            "flops",
            "the model's own cost: a sample takes the model's FLOPs per sample (Model::flops_per_sample) / (flops x "
            "efficiency) seconds, and a step on m samples m times that, plus overhead (per sample or per step alike). "
            "Counts the GEMMs only: memory-bound layers, elementwise work and kernel launches are not in it",
            {number_or_word<F>(
                 ParamInfo{"flops", ParamType::Any, nullptr,
                           std::string("the device's FLOP/s: a number > 0, or a named datasheet peak (") +
                               device_names_text() + ")"},
                 {keys::num("", nullptr, "", 0, true), device_names(),
                  [](F& c, double rate) {
                    c.device.clear();
                    c.rate = rate;
                  },
                  [](F& c, const std::string& device) {
                    c.device = device;
                    c.rate = device_flops(device);
                  },
                  [](const F& c) { return c.device.empty() ? nlohmann::json(c.rate) : nlohmann::json(c.device); },
                  " (FLOP/s)"}),
             field(&F::efficiency, ParamInfo{"efficiency", ParamType::Number, 1.0,
                                             "the fraction of that peak the model reaches", 0, 1, true})},
            {[](const F&, const std::string&) -> std::unique_ptr<Distribution> {
               throw std::invalid_argument(
                   "flops: a step's time follows the model; it is resolved with the run's model (resolve_experiment)");
             },
             resolve_flops}),
        dist_type<M>(
            "measured",
            "the model's own cost on this machine: before the runs, `asgdsim run` times the model's real "
            "loss+gradient at each per-worker batch size the experiment uses (one thread, as a run's job computes; "
            "`warmup` untimed steps, then up to `steps` steps or `seconds` of them, at least `min_steps`), writes the "
            "step times to OUT/NAME/calibration/MODEL-bBATCH-HASH.trace (with machine, backend, commit and date) and "
            "every run draws its steps from that trace as dist \"trace\" does (each worker and step independently); "
            "a draw is a whole step (`per` does not apply: config.json shows it as \"step\"), plus overhead. An "
            "existing trace is reused, and one "
            "measured by another experiment on this machine and build is copied from the calibration cache "
            "(~/.cache/asgdsim/calibration, or $ASGDSIM_CACHE_DIR; \"off\": none) (`asgdsim run --recalibrate` "
            "measures again)",
            {field(&M::seconds, ParamInfo{"seconds", ParamType::Number, 2.0,
                                          "seconds of timed steps per model x batch, at most (the calibration clock: "
                                          "the thread's CPU time, on CUDA wall time)",
                                          0, 600, true}),
             field(&M::steps,
                   ParamInfo{"steps", ParamType::Integer, 200, "timed steps per model x batch, at most", 1, 100000}),
             // 30: the median of n steps has a standard error of about 1.25 CV / sqrt(n), so a
             // step time that varies by 20% (CV) is known to within 5% (one standard error)
             field(&M::min_steps, ParamInfo{"min_steps", ParamType::Integer, 30,
                                            "timed steps per model x batch, at least, whatever `seconds` says (at "
                                            "most `steps`): the median of 30 steps that vary by 20% is within 5%",
                                            1, 100000}),
             field(&M::warmup, ParamInfo{"warmup", ParamType::Integer, 5,
                                         "untimed steps first (workspaces, caches, page faults)", 0, 10000})},
            {[](const M&, const std::string&) -> std::unique_ptr<Distribution> {
               throw std::invalid_argument(
                   "measured: a step's time is replayed from the experiment's calibration trace, which `asgdsim run` "
                   "makes before the runs (experiments/run/calibration.h)");
             },
             resolve_measured}),
        dist_type<T>(
            "trace",
            "recorded step durations: with `values` or a one-column file, every worker draws each step's duration "
            "from them (independently, seeded: the trace's distribution, not its order); with a per-worker file "
            "(header worker,step,seconds and a row per step, or a header naming one column per worker) each worker "
            "replays its own sequence in order, cyclically: a real job's per-worker step log replayed as it ran",
            {field(&T::values, ParamInfo{"values", ParamType::NumberList, nlohmann::json::array(),
                                         "the durations (or give `file`)", 0.0, kMaxConfigSeconds}),
             field(&T::file, ParamInfo{"file", ParamType::String, "",
                                       "CSV/text file: one duration per line, or a per-worker trace "
                                       "(docs/architecture.md, \"Traces\")"})},
            {[](const T& c, const std::string& base_dir) -> std::unique_ptr<Distribution> {
              std::vector<double> values = c.values;
              std::string file = c.file;
              if (!file.empty()) {
                if (!values.empty()) throw std::invalid_argument("trace: give either values or file, not both");
                if (file[0] != '/' && !base_dir.empty()) file = base_dir + "/" + file;
                TraceFile t = read_trace_file(file);
                if (t.per_worker) return std::make_unique<PerWorkerTrace>(std::move(t.sequences));
                values = std::move(t.sequences[0]);
              }
              if (values.empty()) throw std::invalid_argument("trace: needs values or file");
              for (double v : values)
                if (!(v >= 0)) throw std::invalid_argument("trace: durations must be >= 0");
              return std::make_unique<Trace>(std::move(values));
            }}),
    };
  }());
  return family;
}

}  // namespace

double device_flops(const std::string& device) {
  for (const auto& [name, flops] : device_peaks())
    if (name == device) return flops;
  return 0;
}

const std::vector<ComponentInfo>& distribution_catalog() { return dist_family().catalog(); }

nlohmann::json BoundDistribution::spec() const {
  nlohmann::json s = keys();
  s["dist"] = type();
  return s;
}

std::shared_ptr<const BoundDistribution> bind_distribution(const nlohmann::json& spec) {
  return dist_family().bind(spec);
}

nlohmann::json bind_distribution(const nlohmann::json& user, const std::string& path, Validator& v,
                                 std::shared_ptr<const BoundDistribution>& out, const std::vector<ParamInfo>& common) {
  const size_t before = v.issues().size();
  return dist_family().resolve(
      user, path, v, out,
      [&](const DistType& t, const nlohmann::json& resolved) {
        if (v.issues().size() == before) t.check_values(resolved, path, v);  // once its keys' types are right
      },
      common);
}

const CalibrationBudget& calibration_budget(const BoundDistribution& measured) {
  const auto* m = dynamic_cast<const BoundDistributionOf<MeasuredConfig>*>(&measured);
  if (!m) throw std::invalid_argument("calibration_budget: dist '" + measured.type() + "', not \"measured\"");
  return m->config();
}

std::unique_ptr<Distribution> make_distribution(const nlohmann::json& spec, const std::string& base_dir) {
  return bind_distribution(spec)->make(base_dir);
}

}  // namespace asgd
