// engines/powersgd.h — PowerSGD (Vogels, Karimireddy & Jaggi 2019, arXiv 1905.13727,
// Algorithm 1 with the warm start and error feedback of its Algorithm 2), the compressor
// of sync's all-reduce (cluster.network.compression "powersgd"), computed as
// torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook (torch 1.13) computes it, so
// the two agree to rounding (tests/python/test_powersgd.py). One all-reduce of the member
// gradients g_i (n values each):
//   M_i = g_i + e_i                       (error feedback; e_i = 0 without)
//   for each compressed matrix (rows x cols, rank r = min(rows, cols, rank)):
//     Q = orth(Q_last) (warm start; the first time, or without it: orth of a normal draw)
//     P = sum_i M_i Q                     (all-reduce 1: r rows values)
//     P = orth(P)
//     Q = (1/n) sum_i M_i^T P             (all-reduce 2: r cols values)
//     M = P Q^T                           (the decompressed mean)
//   every other tensor: (1/n) sum_i M_i   (all-reduced whole, before P: all-reduce 0)
//   e_i = M_i - the result                (the whole vector, the uncompressed tensors too,
//                                          as the hook's input - output)
// A matrix is compressed when r (rows + cols) x min_compression_rate < rows x cols (the
// hook's rule; vectors never are). Model::param_blocks gives the tensors (a layer's W as
// its outputs x inputs, as tensor.view(shape[0], -1) sees PyTorch's weight). orth is the
// modified Gram-Schmidt of kernels/lowrank.h; the hook uses Householder QR for r > 2,
// which differs only in the columns' signs, which the result does not depend on. The
// first Q of matrix c is a normal draw of (seed, Compression, c, 0), or given (set_q: a
// test giving both sides the same). Sums over the members in the order given.
// What it costs is the engine's to charge: three all-reduces of values_uncompressed(),
// values_p() and values_q() values (engines/sync.cpp). Not here: the time.
#pragma once
#include <cstdint>
#include <vector>
#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/shape.h"
#include "sim/base/state_archive.h"
#include "sim/net/message_size.h"

namespace asgd {

class PowerSgd {
 public:
  // blocks cover [0, n); workers: the residuals kept (one per worker index).
  PowerSgd(const std::vector<ParamBlock>& blocks, size_t n, const CompressionSpec& spec, int workers);

  size_t values_uncompressed() const { return uncompressed_values_; }
  size_t values_p() const { return p_values_; }
  size_t values_q() const { return q_values_; }
  // The compressed matrices, in order: their blocks and ranks.
  const std::vector<ParamBlock>& matrices() const { return matrices_; }
  size_t rank_of(size_t c) const { return ranks_[c]; }

  // The first Q of matrix c (cols x rank_of(c), row-major), instead of the draw.
  void set_q(size_t c, const std::vector<float>& q);
  // Every matrix's first Q not given by set_q drawn from (seed, Compression, c, 0); without
  // warm start, the k-th all-reduce's from (seed, Compression, c, k).
  void draw_q(uint64_t seed);

  // One all-reduce: inputs[i] (n values) is the gradient of worker workers[i]; `out` (n)
  // gets the result every member ends with. Updates the residuals and Q.
  void reduce(ExecContext& ctx, const std::vector<const float*>& inputs, const std::vector<int>& workers, float* out);

  // Worker w's residual e_w (n values; zeros until its first all-reduce).
  const DeviceArray<float>& residual(int w) const { return residual_[size_t(w)]; }
  // A checkpoint of what carries from one all-reduce to the next: Q, the draws' place and
  // the residuals.
  void checkpoint(StateArchive& a) {
    a.tag("powersgd");
    a.io(q_);
    a.io(q_ready_);
    a.io(seed_);
    a.io(draws_);
    a.io(residual_);
  }

 private:
  CompressionSpec spec_;
  size_t n_;
  std::vector<ParamBlock> matrices_;  // compressed
  std::vector<size_t> ranks_;
  std::vector<ParamBlock> whole_;  // all-reduced as they are
  size_t uncompressed_values_ = 0, p_values_ = 0, q_values_ = 0;
  std::vector<DeviceArray<float>> q_;  // by matrix: Q (cols x r)
  std::vector<bool> q_ready_;          // Q holds a value (given, drawn, or the last iteration's)
  uint64_t seed_ = 0;                  // of the draws (draw_q)
  uint32_t draws_ = 0;                 // all-reduces so far without warm start: the next draw's key
  std::vector<DeviceArray<float>> residual_;
  std::vector<DeviceArray<float>> m_;  // by member: M_i
  DeviceArray<float> p_, p_part_, q_part_;
};

}  // namespace asgd
