// kernels/layers/row_loss.h — kernel-internal: one row's output loss (OutputLoss, loss.h),
// as a functor that other kernels call too (a sparse model computes a row's logits and
// its loss in one thread): each row's outputs read once.
#pragma once
#include <cmath>
#include "kernels/detail/backend.h"
#include "kernels/model.h"

namespace asgd::layers {

// Row r's logits: z's, plus the bias where one is left to the loss.
struct NoBias {
  const float* zr;
  ASGD_HD float operator[](int j) const { return zr[j]; }
};
struct WithBias {
  const float* zr;
  const float* b;
  ASGD_HD float operator[](int j) const { return zr[j] + b[j]; }
};
// Per-row loss of the logits (k outputs); optionally writes dz = dloss/dz * scale.
// label is the class index (classification) or the target (regression).
template <bool kBias>
struct RowLoss {
  const float* z;
  const float* y;
  const int32_t* ids;  // ids null: row r is sample r
  float* row_loss;
  float* row_correct;
  float* dz;  // row_correct, dz may be null
  int k;
  int loss;
  float scale;  // loss: DenseLoss as int
  detail::PerRequest bias;
  size_t m;  // kBias: row r's bias is bias.at(r / m)
  ASGD_HD void operator()(size_t r) const {
    if constexpr (kBias)
      run(r, WithBias{z + r * k, bias.at(r / m)});
    else
      run(r, NoBias{z + r * k});
  }
  template <class Z>
  ASGD_HD void run(size_t r, const Z& zr) const {
    float target = y[ids ? size_t(ids[r]) : r];
    float l = 0.0f, correct = 0.0f;
    if (loss == int(DenseLoss::Squared)) {
      float diff = zr[0] - target;
      l = 0.5f * diff * diff;
      if (dz) dz[r] = diff * scale;
    } else if (loss == int(DenseLoss::Logistic)) {
      float v = zr[0];
      float softplus = (v > 0.0f ? v : 0.0f) + log1pf(expf(-fabsf(v)));
      l = softplus - target * v;
      correct = ((v > 0.0f) == (target > 0.5f)) ? 1.0f : 0.0f;
      if (dz) dz[r] = (1.0f / (1.0f + expf(-v)) - target) * scale;
    } else {
      int label = int(target);
      float mx = zr[0];
      int arg = 0;
      for (int j = 1; j < k; ++j)
        if (zr[j] > mx) {
          mx = zr[j];
          arg = j;
        }
      float se = 0.0f;
      for (int j = 0; j < k; ++j) se += expf(zr[j] - mx);
      float lse = mx + logf(se);
      l = lse - zr[label];
      correct = (arg == label) ? 1.0f : 0.0f;
      if (dz) {
        float* dr = dz + r * k;
        for (int j = 0; j < k; ++j) dr[j] = (expf(zr[j] - lse) - (j == label ? 1.0f : 0.0f)) * scale;
      }
    }
    row_loss[r] = l;
    if (row_correct) row_correct[r] = correct;
  }
};

}  // namespace asgd::layers
