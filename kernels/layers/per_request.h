// kernels/layers/per_request.h — kernel-internal: a request's parameters or gradient as
// functors see them (the single request's own pointer, or the pass's staged table).
#pragma once
#include "kernels/detail/backend.h"
#include "kernels/layers/layer.h"

namespace asgd::layers {

// Request i's parameters (gradient) from `offset`, for functors: the single request's own
// pointer, or the staged table when the pass has tables (Pass::tables).
inline detail::PerRequest params_of(const Pass& p, size_t offset) {
  return !p.tables ? detail::PerRequest{nullptr, const_cast<float*>(p.w[0]), offset}
                   : detail::PerRequest{const_cast<float* const*>(p.w_table), nullptr, offset};
}
inline detail::PerRequest grads_of(const Pass& p, size_t offset) {
  return !p.tables ? detail::PerRequest{nullptr, p.g[0], offset} : detail::PerRequest{p.g_table, nullptr, offset};
}

}  // namespace asgd::layers
