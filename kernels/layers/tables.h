// kernels/layers/tables.h — kernel-internal: the pointer tables a batched pass gives its
// batched GEMMs (detail::gemm_batched reads each operand's k pointers from backend
// memory). Layers register sections while they bind, then one copy stages all of them.
#pragma once
#include <cstddef>
#include <vector>
#include "kernels/detail/backend.h"
#include "kernels/layers/layer.h"

namespace asgd::layers {

class PointerTables {
 public:
  // Uses the context's host staging vector (kept across calls: a warm pass allocates
  // nothing) and stage_pointers' table in backend memory: one pass at a time per context.
  PointerTables(ExecContext& ctx, size_t k) : ctx_(ctx), host_(ctx.impl().host_pointers), k_(k) { host_.clear(); }
  PointerTables(const PointerTables&) = delete;
  PointerTables& operator=(const PointerTables&) = delete;

  // A section of k pointers: base + i stride (request i's rows of a stacked buffer).
  size_t stacked(const float* base, size_t stride) {
    return add([&](size_t i) { return const_cast<float*>(base) + i * stride; });
  }
  // Request i's parameters or gradient, from offset.
  size_t params(const Pass& p, size_t offset) {
    return add([&](size_t i) { return const_cast<float*>(p.w[i]) + offset; });
  }
  size_t grads(const Pass& p, size_t offset) {
    return add([&](size_t i) { return p.g[i] + offset; });
  }
  // Copies every section to backend memory (after the last registration).
  void stage() { staged_ = ctx_.stage_pointers(host_.data(), host_.size()); }
  float* const* operator[](size_t section) const { return staged_ + section; }

 private:
  template <class F>
  size_t add(F&& pointer_of) {
    size_t at = host_.size();
    for (size_t i = 0; i < k_; ++i) host_.push_back(pointer_of(i));
    return at;
  }
  ExecContext& ctx_;
  std::vector<float*>& host_;
  size_t k_;
  float* const* staged_ = nullptr;
};

// Request i's parameters (gradient) from `offset`, for functors: the single request's own
// pointer, or the staged table.
inline detail::PerRequest params_of(const Pass& p, size_t offset) {
  return p.k == 1 ? detail::PerRequest{nullptr, const_cast<float*>(p.w[0]), offset}
                  : detail::PerRequest{const_cast<float* const*>(p.w_table), nullptr, offset};
}
inline detail::PerRequest grads_of(const Pass& p, size_t offset) {
  return p.k == 1 ? detail::PerRequest{nullptr, p.g[0], offset} : detail::PerRequest{p.g_table, nullptr, offset};
}

}  // namespace asgd::layers
