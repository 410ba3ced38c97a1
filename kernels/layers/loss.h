// kernels/layers/loss.h — the output loss of a model, applied to the last layer's
// outputs z (rows, outputs): squared error (1 output, regression), logistic (1 output,
// binary labels) or softmax cross-entropy (classes). Per row: the loss, whether the
// prediction was right, and, when training, dz = d loss / d z times a scale (1 / m for a
// mean over the minibatch). Plain C++.
#pragma once
#include <cstddef>
#include <cstdint>
#include "kernels/exec.h"
#include "kernels/model.h"

namespace asgd::layers {

// A bias that the layer below left for the loss to add to its outputs z (LayerStack's
// leave_output_bias): row r's outputs get request r / m's bias, table[r / m] + offset, or
// single + offset when table is null. All backend memory; none when both are null.
struct OutputBias {
  const float* const* table = nullptr;
  const float* single = nullptr;
  size_t offset = 0;
  size_t m = 1;  // rows per request
};

class OutputLoss {
 public:
  OutputLoss(DenseLoss kind, int outputs);  // throws std::invalid_argument
  DenseLoss kind() const { return kind_; }
  int outputs() const { return outputs_; }
  bool is_classifier() const { return kind_ != DenseLoss::Squared; }
  // Row r's label is y[ids[r]] (y[r] when ids is null): the target, or the class index
  // as a float. row_correct and dz may be null. All arrays in backend memory. With a bias,
  // the outputs are z + bias (added in float, as a bias-add pass would write them).
  void apply(ExecContext& ctx, const float* z, size_t rows, const float* y, const int32_t* ids, float* row_loss,
             float* row_correct, float* dz, float scale, const OutputBias& bias = {}) const;

 private:
  DenseLoss kind_;
  int outputs_;
};

}  // namespace asgd::layers
