// sim/distribution.cpp — the distributions; sampling by inversion from one uniform draw
// where possible (normal draws for the lognormal).
#include "sim/distribution.h"
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include "sim/interrupt.h"
#include "sim/time.h"

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

// Replays values[step % n] for every worker (each worker starts at the trace's start).
class Trace final : public Distribution {
 public:
  explicit Trace(std::vector<double> v) : v_(std::move(v)) {}
  double sample(Rng&, uint32_t, uint32_t step) const override { return v_[step % v_.size()]; }
  double mean() const override {
    double s = 0;
    for (double x : v_) s += x;
    return s / double(v_.size());
  }
  double variance() const override {
    double m = mean(), s = 0;
    for (double x : v_) s += (x - m) * (x - m);
    return s / double(v_.size());
  }
 private:
  std::vector<double> v_;
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

std::vector<double> read_trace_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("trace file " + path + ": cannot be opened");
  std::vector<double> values;
  std::string line;
  for (int lineno = 1; read_bounded_line(in, line, path, lineno); ++lineno) {
    if (lineno % 65536 == 0) throw_if_interrupted("reading " + path);
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    size_t e = line.find_last_not_of(" \t\r,");
    std::string field = line.substr(b, e - b + 1);
    char* end = nullptr;
    double v = std::strtod(field.c_str(), &end);
    if (end == field.c_str() || *end != '\0' || !std::isfinite(v))
      throw std::invalid_argument("trace file " + path + " line " + std::to_string(lineno) +
                                  ": '" + field + "' is not a number");
    if (v < 0)
      throw std::invalid_argument("trace file " + path + " line " + std::to_string(lineno) +
                                  ": duration " + field + " is negative");
    if (v > kMaxConfigSeconds)
      throw std::invalid_argument("trace file " + path + " line " + std::to_string(lineno) + ": duration " + field +
                                  " is more than " + std::to_string(long(kMaxConfigSeconds)) + " s");
    if (values.size() == kMaxTraceValues)
      throw std::invalid_argument("trace file " + path + ": more than " + std::to_string(kMaxTraceValues) +
                                  " durations (a trace is replayed cyclically: give a representative part)");
    values.push_back(v);
  }
  if (values.empty()) throw std::invalid_argument("trace file " + path + ": holds no durations");
  return values;
}

}  // namespace

const std::vector<ComponentInfo>& distribution_catalog() {
  static const std::vector<ComponentInfo> catalog = [] {
    // Every parameter is a duration (seconds) or a factor: at most kMaxConfigSeconds.
    ParamInfo pos{"", ParamType::Number, nullptr, "", 0.0, kMaxConfigSeconds, true};
    auto p = [&](std::string name, std::string doc, nlohmann::json def = nullptr, double min = 0,
                 bool exclusive = true) {
      ParamInfo q = pos;
      q.name = std::move(name);
      q.doc = std::move(doc);
      q.default_value = std::move(def);
      q.min = min;
      q.min_exclusive = exclusive;
      return q;
    };
    return std::vector<ComponentInfo>{
        {"constant", "always the same value", {p("value", "the value (seconds)", nullptr, 0, false)}},
        {"uniform", "uniform on [low, high]",
         {p("low", "lower bound", nullptr, 0, false), p("high", "upper bound (>= low)", nullptr, 0, false)}},
        {"exponential", "exponential with the given mean", {p("mean", "mean")}},
        {"shifted_exponential", "shift + exponential(mean): a fixed minimum plus a random tail",
         {p("shift", "fixed part", nullptr, 0, false), p("mean", "mean of the exponential part")}},
        {"lognormal", "exp(N(mu, sigma^2)) with mu chosen so the mean is `mean`",
         {p("mean", "mean"), p("sigma", "std of the underlying normal", nullptr, 0, false)}},
        {"pareto", "Pareto type I, heavy tail: P(X > x) = (scale/x)^alpha",
         {p("scale", "minimum value x_m"), p("alpha", "tail index (mean finite for alpha > 1)")}},
        {"trace", "replays a list of durations, per worker from the start, cyclically",
         {ParamInfo{"values", ParamType::NumberList, nlohmann::json::array(),
                    "the durations (or give `file`)", 0.0, kMaxConfigSeconds},
          ParamInfo{"file", ParamType::String, "", "CSV/text file, one duration per line"}}},
    };
  }();
  return catalog;
}

std::unique_ptr<Distribution> make_distribution(const nlohmann::json& spec,
                                                const std::string& base_dir) {
  const std::string dist = spec.at("dist").get<std::string>();
  auto num = [&](const char* k) { return spec.at(k).get<double>(); };
  if (dist == "constant") return std::make_unique<Constant>(num("value"));
  if (dist == "uniform") {
    if (num("high") < num("low")) throw std::invalid_argument("uniform: high must be >= low");
    return std::make_unique<Uniform>(num("low"), num("high"));
  }
  if (dist == "exponential") return std::make_unique<ShiftedExponential>(0.0, num("mean"));
  if (dist == "shifted_exponential") return std::make_unique<ShiftedExponential>(num("shift"), num("mean"));
  if (dist == "lognormal") return std::make_unique<LogNormal>(num("mean"), num("sigma"));
  if (dist == "pareto") return std::make_unique<Pareto>(num("scale"), num("alpha"));
  if (dist == "trace") {
    std::vector<double> values = spec.value("values", std::vector<double>{});
    std::string file = spec.value("file", std::string());
    if (!file.empty()) {
      if (!values.empty()) throw std::invalid_argument("trace: give either values or file, not both");
      if (file[0] != '/' && !base_dir.empty()) file = base_dir + "/" + file;
      values = read_trace_file(file);
    }
    if (values.empty()) throw std::invalid_argument("trace: needs values or file");
    for (double v : values)
      if (!(v >= 0)) throw std::invalid_argument("trace: durations must be >= 0");
    return std::make_unique<Trace>(std::move(values));
  }
  throw std::invalid_argument("unknown distribution '" + dist + "'");
}

}  // namespace asgd
