// kernels/layers/loss.cu — the output losses (see loss.h): one row per call
// (kernels/layers/row_loss.h).
#include "kernels/layers/loss.h"
#include <cmath>
#include <stdexcept>
#include <string>
#include "kernels/detail/backend.h"
#include "kernels/layers/row_loss.h"

namespace asgd::layers {

OutputLoss::OutputLoss(DenseLoss kind, int outputs) : kind_(kind), outputs_(outputs) {
  if (outputs < 1) throw std::invalid_argument("output loss: outputs must be >= 1");
  if (kind != DenseLoss::SoftmaxCrossEntropy && outputs != 1)
    throw std::invalid_argument("squared and logistic losses need exactly 1 output, got " + std::to_string(outputs));
}

void OutputLoss::apply(ExecContext& ctx, const float* z, size_t rows, const float* y, const int32_t* ids,
                       float* row_loss, float* row_correct, float* dz, float scale, const OutputBias& bias) const {
  const detail::PerRequest b{const_cast<float* const*>(bias.table), const_cast<float*>(bias.single), bias.offset};
  if (bias.table || bias.single)
    detail::for_each_index(ctx, rows,
                           RowLoss<true>{z, y, ids, row_loss, row_correct, dz, outputs_, int(kind_), scale, b, bias.m});
  else
    detail::for_each_index(
        ctx, rows, RowLoss<false>{z, y, ids, row_loss, row_correct, dz, outputs_, int(kind_), scale, b, bias.m});
}

}  // namespace asgd::layers
