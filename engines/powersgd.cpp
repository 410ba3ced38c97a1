// engines/powersgd.cpp — PowerSGD's all-reduce (see powersgd.h).
#include "engines/powersgd.h"
#include <algorithm>
#include <stdexcept>
#include <string>
#include "kernels/lowrank.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

namespace asgd {

PowerSgd::PowerSgd(const std::vector<ParamBlock>& blocks, size_t n, const CompressionSpec& spec, int workers)
    : spec_(spec), n_(n) {
  if (spec.rank < 1) throw std::invalid_argument("powersgd: rank must be >= 1");
  size_t covered = 0;
  for (const ParamBlock& b : blocks) {
    covered += b.rows * b.cols;
    const size_t r = std::min({b.rows, b.cols, size_t(spec.rank)});
    // the hook's rule (_should_compress): compressed when r (rows + cols) x rate < rows x cols
    if (double(r) * double(b.rows + b.cols) * spec.min_compression_rate < double(b.rows) * double(b.cols)) {
      matrices_.push_back(b);
      ranks_.push_back(r);
      p_values_ += b.rows * r;
      q_values_ += b.cols * r;
    } else {
      whole_.push_back(b);
      uncompressed_values_ += b.rows * b.cols;
    }
  }
  if (covered != n) throw std::logic_error("powersgd: the model's parameter blocks do not cover its parameters");
  q_.resize(matrices_.size());
  q_ready_.assign(matrices_.size(), false);
  for (size_t c = 0; c < matrices_.size(); ++c) q_[c].resize_discard(matrices_[c].cols * ranks_[c]);
  residual_.resize(size_t(std::max(workers, 0)));
}

void PowerSgd::set_q(size_t c, const std::vector<float>& q) {
  if (c >= matrices_.size() || q.size() != q_[c].size())
    throw std::invalid_argument("powersgd: set_q of matrix " + std::to_string(c) + " with " + std::to_string(q.size()) +
                                " values");
  q_[c].upload(q);
  q_ready_[c] = true;
}

void PowerSgd::draw_q(uint64_t seed) {
  seed_ = seed;
  for (size_t c = 0; c < matrices_.size(); ++c) {
    if (q_ready_[c]) continue;
    std::vector<float> q(q_[c].size());
    Rng rng(seed, RngPurpose::Compression, uint32_t(c), 0);
    for (float& x : q) x = float(rng.normal());
    set_q(c, q);
  }
}

void PowerSgd::reduce(ExecContext& ctx, const std::vector<const float*>& inputs, const std::vector<int>& workers,
                      float* out) {
  const size_t members = inputs.size();
  if (members == 0 || workers.size() != members) throw std::logic_error("powersgd: reduce needs its members");
  // M_i = g_i + e_i
  if (m_.size() < members) m_.resize(members);
  for (size_t i = 0; i < members; ++i) {
    m_[i].resize_discard(n_);
    ops::copy(ctx, m_[i].data(), inputs[i], n_);
    if (!spec_.error_feedback) continue;
    DeviceArray<float>& e = residual_.at(size_t(workers[i]));
    if (e.size() != n_) {
      e.resize_discard(n_);
      e.fill(0.0f);
    }
    ops::add_into(ctx, m_[i].data(), e.data(), n_);
  }
  const float inv = 1.0f / float(members);
  // every tensor not compressed: the mean
  for (const ParamBlock& b : whole_) {
    const size_t len = b.rows * b.cols;
    ops::copy(ctx, out + b.offset, m_[0].data() + b.offset, len);
    for (size_t i = 1; i < members; ++i) ops::add_into(ctx, out + b.offset, m_[i].data() + b.offset, len);
    ops::scale(ctx, out + b.offset, inv, len);
  }
  const float eps = float(spec_.orthogonalization_epsilon);
  for (size_t c = 0; c < matrices_.size(); ++c) {
    const ParamBlock& b = matrices_[c];
    const size_t r = ranks_[c];
    if (!q_ready_[c]) throw std::logic_error("powersgd: no first Q (draw_q or set_q)");
    float* q = q_[c].data();
    lowrank::orthogonalize(ctx, q, b.cols, r, eps);
    p_.resize_discard(b.rows * r);
    p_part_.resize_discard(b.rows * r);
    lowrank::project(ctx, b, m_[0].data() + b.offset, q, p_.data(), r);
    for (size_t i = 1; i < members; ++i) {
      lowrank::project(ctx, b, m_[i].data() + b.offset, q, p_part_.data(), r);
      ops::add_into(ctx, p_.data(), p_part_.data(), b.rows * r);
    }
    lowrank::orthogonalize(ctx, p_.data(), b.rows, r, eps);
    q_part_.resize_discard(b.cols * r);
    lowrank::back_project(ctx, b, m_[0].data() + b.offset, p_.data(), q, r);
    for (size_t i = 1; i < members; ++i) {
      lowrank::back_project(ctx, b, m_[i].data() + b.offset, p_.data(), q_part_.data(), r);
      ops::add_into(ctx, q, q_part_.data(), b.cols * r);
    }
    ops::scale(ctx, q, inv, b.cols * r);
    lowrank::expand(ctx, b, p_.data(), q, out + b.offset, r);
  }
  if (spec_.error_feedback)  // e_i = M_i - out
    for (size_t i = 0; i < members; ++i)
      ops::sgd_step(ctx, residual_[size_t(workers[i])].data(), m_[i].data(), out, 1.0f, n_);
  if (!spec_.warm_start) {  // a fresh draw next time, keyed by the all-reduce's number
    ++draws_;
    for (size_t c = 0; c < matrices_.size(); ++c) {
      std::vector<float> fresh(q_[c].size());
      Rng rng(seed_, RngPurpose::Compression, uint32_t(c), uint32_t(draws_));
      for (float& x : fresh) x = float(rng.normal());
      q_[c].upload(fresh);
    }
  }
}

}  // namespace asgd
