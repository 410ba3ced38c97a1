// kernels/layers/affine.h — kernel-internal: the affine map that dense and convolution
// layers share. Per request i of a pass, Z_i (R, N) = A_i (R, K) W_i (K, N) + b_i with
// W_i = w_i + w_off (row-major) and b_i = w_i + b_off; A and Z are stacked (request i's R
// rows from row i R). A dense layer's A is its input (R = m samples); a convolution's is
// its im2col matrix (R = m x output positions). One request without pointer tables: plain
// GEMMs; with tables (k > 1, or a pass to be captured as a CUDA graph): one batched GEMM
// per product (detail::gemm_batched: on CUDA one cuBLAS call for all k,
// on the CPU the k GEMMs in order, so every request gets the single request's bits).
// Around the GEMMs, one kernel each way: forward, the bias add and the fused activation
// (LayerIO::act) in one pass, or nothing when the bias is left to the stack's consumer
// (LayerIO::leave_bias); backward, the activation's backward and the bias gradient in one
// column-sum job (kernels/layers/sums.h), run before the GEMMs that read d loss / d z, or
// queued for a later launch when there is no activation.
#pragma once
#include "kernels/detail/backend.h"
#include "kernels/layers/activation.h"
#include "kernels/layers/layer.h"
#include "kernels/layers/per_request.h"
#include "kernels/layers/sums.h"

namespace asgd::layers {

// z (rows, n) = A(z + b_i) for rows of request i = r / R (detail::for_each_row_element)
template <class A>
struct AddBiasActivate {
  float* z;
  detail::PerRequest b;
  size_t n, R;
  struct Row {
    float* z;
    const float* b;
    ASGD_HD void operator()(size_t c) const { z[c] = A::f(z[c] + b[c]); }
  };
  ASGD_HD Row row(size_t r) const { return Row{z + r * n, b.at(r / R)}; }
};

struct Affine {
  size_t K = 0, N = 0, w_off = 0, b_off = 0;
  // W as a matrix of N outputs by K inputs, stored transposed (K, N), then b (ParamBlock).
  std::vector<ParamBlock> blocks() const { return {ParamBlock{w_off, N, K, true}, ParamBlock{b_off, N, 1, false}}; }
  // io.table sections: 0 A, 1 W, 2 Z, 3 dZ, 4 dW, 5 dA.
  enum { kA, kW, kZ, kDZ, kDW, kDA };

  // With tables: registers the operands' (dA may be null; dZ and dW only when training).
  void bind(const Pass& p, size_t R, const float* A, float* Z, const float* dZ, float* dA, LayerIO& io) const {
    if (!p.tables) return;
    PointerTables& t = *p.tables;
    io.table[kA] = t.stacked(A, R * K);
    io.table[kW] = t.params(p, w_off);
    io.table[kZ] = t.stacked(Z, R * N);
    if (!p.training()) return;
    io.table[kDZ] = t.stacked(dZ, R * N);
    io.table[kDW] = t.grads(p, w_off);
    if (dA) io.table[kDA] = dA == A ? io.table[kA] : t.stacked(dA, R * K);
  }

  void forward(ExecContext& ctx, const Pass& p, size_t R, const float* A, float* Z, const LayerIO& io) const {
    if (!p.tables) {
      detail::gemm(ctx, false, false, int(R), int(N), int(K), 1.0f, A, int(K), p.w[0] + w_off, int(N), 0.0f, Z, int(N));
    } else {
      const PointerTables& t = *p.tables;
      detail::gemm_batched(ctx, false, false, int(R), int(N), int(K), 1.0f, t[io.table[kA]], int(K), t[io.table[kW]],
                           int(N), 0.0f, t[io.table[kZ]], int(N), int(p.k));
    }
    if (io.leave_bias) return;
    with_activation(io.act, [&](auto a) {
      detail::for_each_row_element(ctx, p.k * R, N, AddBiasActivate<decltype(a)>{Z, params_of(p, b_off), N, R});
    });
  }

  // dW_i = A_i^T dZ_i, db_i = column sums of dZ_i (into p.g[i]), and dA = dZ W^T when dA
  // is not null (dA may be A: A is read first). dZ is io.d_out; with a fused activation it
  // holds d loss / d (the activation's output, io.out) on entry and becomes dZ first.
  void backward(ExecContext& ctx, const Pass& p, size_t R, const float* A, float* dA, const LayerIO& io) const {
    const float* dZ = io.d_out;
    queue_sum(ctx, *p.sums, ColumnSumJob{const_cast<float*>(dZ), io.out, io.act, R, N, grads_of(p, b_off)});
    if (io.act != Act::None) run_sums(ctx, *p.sums);
    if (!p.tables) {
      detail::gemm(ctx, true, false, int(K), int(N), int(R), 1.0f, A, int(K), dZ, int(N), 0.0f, p.g[0] + w_off, int(N));
    } else {
      const PointerTables& t = *p.tables;
      detail::gemm_batched(ctx, true, false, int(K), int(N), int(R), 1.0f, t[io.table[kA]], int(K), t[io.table[kDZ]],
                           int(N), 0.0f, t[io.table[kDW]], int(N), int(p.k));
    }
    if (!dA) return;
    if (!p.tables) {
      detail::gemm(ctx, false, true, int(R), int(K), int(N), 1.0f, dZ, int(N), p.w[0] + w_off, int(N), 0.0f, dA,
                   int(K));
    } else {
      const PointerTables& t = *p.tables;
      detail::gemm_batched(ctx, false, true, int(R), int(K), int(N), 1.0f, t[io.table[kDZ]], int(N), t[io.table[kW]],
                           int(N), 0.0f, t[io.table[kDA]], int(K), int(p.k));
    }
  }

  // Multiply-adds x 2 per row: forward, dW, and dA when wanted.
  double flops_per_row(bool d_input) const { return 2.0 * double(K) * double(N) * (d_input ? 3 : 2); }
};

// He/LeCun normal weights N(0, gain / K) from Rng (seed, Init, stream, 0), in order; zero
// biases. w: host, the layer's K N + N parameters.
void init_affine(uint64_t seed, uint32_t stream, double gain, size_t K, size_t N, float* w);

}  // namespace asgd::layers
