// sim/data/sparse_synthetic.h — sparse classification data generated from the seed, shaped
// like click-through data: the feature space is cut into `nnz` fields (as a CTR set's
// categorical columns), each sample takes exactly one feature from every field, and
// within a field the feature of popularity rank k is drawn with probability ∝ k^-zipf.
// So a few features are in a large share of the samples and most sit in a long tail.
// Every value is 1 (one-hot fields). Labels come from a hidden teacher: a weight per
// (feature, class) ~ N(0, 1); a sample's label is argmax_c (sum of its features' weights
// for c / sqrt(nnz) + noise N(0, 1)). Not here: reading files (sim/data/svmlight_reader.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include "kernels/rng.h"
#include "sim/data/dataset.h"

namespace asgd {

struct SparseSyntheticSpec {
  size_t features = 100000;  // field f holds features [f F / nnz, (f + 1) F / nnz)
  size_t nnz = 20;           // features per sample = fields; 1 <= nnz <= features
  double zipf = 1.1;         // popularity exponent within a field (>= 0; 0: uniform)
  int classes = 2;
  size_t train_samples = 10000;
  size_t test_samples = 2000;
  double noise = 0.1;  // std of the noise on the teacher's logits
};

// Draws from Zipf(n, s): P(k) = k^-s / H(n, s) for k = 1..n, by rejection-inversion
// (Hörmann and Derflinger 1996, as in Apache Commons RNG): O(1) per draw and O(1)
// memory whatever n, about 1.1 uniforms per draw. s >= 0 (s = 0: uniform).
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s);
  uint64_t operator()(Rng& rng) const;  // in 1..n

 private:
  double h(double x) const;           // x^-s
  double h_integral(double x) const;  // integral of h from 1 to x
  double h_integral_inverse(double x) const;
  uint64_t n_;
  double s_, h_integral_x1_, h_integral_n_, accept_;
};

// Train and test sets; the same seed gives the same bytes. Sample i of the training set
// draws from stream (seed, Data, 110, i), of the test set from (seed, Data, 120, i); the
// teacher's weights of feature j from (seed, Data, 100, j).
DataSplit make_sparse_synthetic(const SparseSyntheticSpec& spec, uint64_t seed);

}  // namespace asgd
