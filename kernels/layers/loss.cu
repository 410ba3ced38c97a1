// kernels/layers/loss.cu — the output losses (see loss.h): one row per call, each row's
// outputs read once.
#include "kernels/layers/loss.h"
#include <cmath>
#include <stdexcept>
#include <string>
#include "kernels/detail/backend.h"

namespace asgd::layers {
namespace {

// Per-row loss of the logits (k outputs); optionally writes dz = dloss/dz * scale.
// label is the class index (classification) or the target (regression).
struct RowLoss {
  const float* z; const float* y; const int32_t* ids;  // ids null: row r is sample r
  float* row_loss; float* row_correct; float* dz;      // row_correct, dz may be null
  int k; int loss; float scale;                        // loss: DenseLoss as int
  ASGD_HD void operator()(size_t r) const {
    float target = y[ids ? size_t(ids[r]) : r];
    const float* zr = z + r * k;
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
        if (zr[j] > mx) { mx = zr[j]; arg = j; }
      float se = 0.0f;
      for (int j = 0; j < k; ++j) se += expf(zr[j] - mx);
      float lse = mx + logf(se);
      l = lse - zr[label];
      correct = (arg == label) ? 1.0f : 0.0f;
      if (dz) {
        float* dr = dz + r * k;
        for (int j = 0; j < k; ++j)
          dr[j] = (expf(zr[j] - lse) - (j == label ? 1.0f : 0.0f)) * scale;
      }
    }
    row_loss[r] = l;
    if (row_correct) row_correct[r] = correct;
  }
};

}  // namespace

OutputLoss::OutputLoss(DenseLoss kind, int outputs) : kind_(kind), outputs_(outputs) {
  if (outputs < 1) throw std::invalid_argument("output loss: outputs must be >= 1");
  if (kind != DenseLoss::SoftmaxCrossEntropy && outputs != 1)
    throw std::invalid_argument("squared and logistic losses need exactly 1 output, got " + std::to_string(outputs));
}

void OutputLoss::apply(ExecContext& ctx, const float* z, size_t rows, const float* y, const int32_t* ids,
                       float* row_loss, float* row_correct, float* dz, float scale) const {
  detail::for_each_index(ctx, rows, RowLoss{z, y, ids, row_loss, row_correct, dz, outputs_, int(kind_), scale});
}

}  // namespace asgd::layers
