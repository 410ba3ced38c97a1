// kernels/models/batch_model.h — kernel-internal: the base of the models that compute k
// requests of one minibatch size as one pass (Sequential, SparseLinear): loss_grad is
// that pass over one request, and loss_grad_batch of requests of mixed sizes goes one
// request at a time.
#pragma once
#include "kernels/model.h"

namespace asgd {

class BatchModel : public Model {
 public:
  double loss_grad(ExecContext& ctx, const float* w, const DeviceDataset* data, const int32_t* ids, size_t m,
                   const NoiseKey& noise, float* grad) const override {
    GradRequest r;
    r.w = w;
    r.ids = ids;
    r.m = m;
    r.noise = noise;
    r.grad = grad;
    run(ctx, data, &r, 1);
    return r.loss;
  }
  void loss_grad_batch(ExecContext& ctx, const DeviceDataset* data, GradRequest* reqs, size_t k) const override {
    if (k == 0) return;
    for (size_t i = 1; i < k; ++i)
      if (reqs[i].m != reqs[0].m) return Model::loss_grad_batch(ctx, data, reqs, k);
    run(ctx, data, reqs, k);
  }

 protected:
  // The k requests' losses and gradients, all of minibatch size reqs[0].m; each request's
  // arithmetic as it is alone on CPU backends.
  virtual void run(ExecContext& ctx, const DeviceDataset* data, GradRequest* reqs, size_t k) const = 0;
};

}  // namespace asgd
