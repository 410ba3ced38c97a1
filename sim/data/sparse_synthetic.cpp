// sim/data/sparse_synthetic.cpp — the sparse generator and its Zipf sampler.
#include "sim/data/sparse_synthetic.h"
#include "sim/base/interrupt.h"
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace asgd {
namespace {

constexpr uint32_t kTeacherStream = 100, kTrainStream = 110, kTestStream = 120;

// log1p(x) / x and expm1(x) / x, with their series near 0 (where the quotients lose
// precision): the helpers of the rejection-inversion sampler.
double log1p_over(double x) {
  return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
double expm1_over(double x) {
  return std::fabs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

// The teacher's weights of one feature, (classes) normals from its own stream: a
// function of (seed, feature) alone.
void teacher_row(uint64_t seed, uint32_t feature, std::vector<double>& out) {
  Rng rng(seed, RngPurpose::Data, kTeacherStream, feature);
  for (double& t : out) t = rng.normal();
}

HostDataset sparse_part(const SparseSyntheticSpec& s, const std::vector<ZipfSampler>& fields,
                        const std::vector<size_t>& field_start, size_t n, uint64_t seed, uint32_t stream) {
  if (n > UINT32_MAX) throw std::invalid_argument("sparse_synthetic: at most 2^32 - 1 samples per set");
  HostDataset d;
  d.n = n;
  d.dim = s.features;
  d.classes = s.classes;
  d.row_ptr.resize(n + 1);
  d.col.resize(n * s.nnz);
  d.val.assign(n * s.nnz, 1.0f);
  d.y.resize(n);
  const double scale = 1.0 / std::sqrt(double(s.nnz));
  std::vector<double> logits(size_t(s.classes)), weights(size_t(s.classes));
  for (size_t i = 0; i < n; ++i) {
    if (i % 1024 == 0) throw_if_interrupted("making sparse synthetic data");
    Rng rng(seed, RngPurpose::Data, stream, uint32_t(i));
    d.row_ptr[i] = int64_t(i * s.nnz);
    std::fill(logits.begin(), logits.end(), 0.0);
    for (size_t f = 0; f < s.nnz; ++f) {  // fields are in id order, so the row is sorted
      const uint32_t feature = uint32_t(field_start[f] + fields[f](rng) - 1);
      d.col[i * s.nnz + f] = int32_t(feature);
      teacher_row(seed, feature, weights);
      for (size_t c = 0; c < logits.size(); ++c) logits[c] += weights[c];
    }
    size_t best = 0;
    for (size_t c = 0; c < logits.size(); ++c) {
      logits[c] = logits[c] * scale + s.noise * rng.normal();
      if (logits[c] > logits[best]) best = c;
    }
    d.y[i] = float(best);
  }
  d.row_ptr[n] = int64_t(n * s.nnz);
  return d;
}

}  // namespace

ZipfSampler::ZipfSampler(uint64_t n, double s) : n_(n), s_(s) {
  if (n < 1) throw std::invalid_argument("ZipfSampler: n must be >= 1");
  if (!(s >= 0) || !std::isfinite(s)) throw std::invalid_argument("ZipfSampler: exponent must be >= 0");
  h_integral_x1_ = h_integral(1.5) - 1.0;
  h_integral_n_ = h_integral(double(n) + 0.5);
  accept_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
}

double ZipfSampler::h(double x) const { return std::exp(-s_ * std::log(x)); }

double ZipfSampler::h_integral(double x) const {
  const double log_x = std::log(x);
  return expm1_over((1.0 - s_) * log_x) * log_x;
}

double ZipfSampler::h_integral_inverse(double x) const {
  double t = x * (1.0 - s_);
  if (t < -1.0) t = -1.0;  // rounding only: the exact value is > -1
  return std::exp(log1p_over(t) * x);
}

uint64_t ZipfSampler::operator()(Rng& rng) const {
  for (;;) {
    // u is uniform on [h_integral_x1_, h_integral_n_): Rng::uniform is in (0, 1]
    const double u = h_integral_n_ + rng.uniform() * (h_integral_x1_ - h_integral_n_);
    const double x = h_integral_inverse(u);
    double k = std::floor(x + 0.5);
    if (k < 1.0)
      k = 1.0;
    else if (k > double(n_))
      k = double(n_);
    if (k - x <= accept_ || u >= h_integral(k + 0.5) - h(k)) return uint64_t(k);
  }
}

DataSplit make_sparse_synthetic(const SparseSyntheticSpec& s, uint64_t seed) {
  if (s.nnz < 1 || s.nnz > s.features)
    throw std::invalid_argument("sparse_synthetic: nnz must be in 1..features (" + std::to_string(s.features) + ")");
  if (s.features > size_t(INT32_MAX)) throw std::invalid_argument("sparse_synthetic: features must be < 2^31");
  if (s.classes < 2) throw std::invalid_argument("sparse_synthetic: classes must be >= 2");
  std::vector<ZipfSampler> fields;
  std::vector<size_t> field_start;
  for (size_t f = 0; f < s.nnz; ++f) {
    const size_t begin = f * s.features / s.nnz, end = (f + 1) * s.features / s.nnz;
    field_start.push_back(begin);
    fields.emplace_back(end - begin, s.zipf);
  }
  DataSplit split;
  split.train = sparse_part(s, fields, field_start, s.train_samples, seed, kTrainStream);
  split.test = sparse_part(s, fields, field_start, s.test_samples, seed, kTestStream);
  split.description = "sparse synthetic: " + std::to_string(s.features) + " features, " + std::to_string(s.nnz) +
                      " per sample, zipf " + std::to_string(s.zipf);
  return split;
}

}  // namespace asgd
