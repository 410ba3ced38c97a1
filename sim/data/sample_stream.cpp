// sim/data/sample_stream.cpp — Fisher-Yates per epoch from a keyed Philox stream.
#include "sim/data/sample_stream.h"
#include <numeric>
#include <stdexcept>
#include "kernels/rng.h"

namespace asgd {

SampleStream::SampleStream(size_t n, uint64_t seed, bool shuffle, uint32_t stream)
    : n_(n), seed_(seed), shuffle_(shuffle), stream_(stream) {
  if (n == 0) throw std::invalid_argument("SampleStream: empty training set");
  if (n > size_t(INT32_MAX)) throw std::invalid_argument("SampleStream: training set too large");
  perm_.resize(n);
  reshuffle();
}

void SampleStream::reshuffle() {
  pos_ = 0;
  if (!shuffle_ && epoch_ > 0) return;  // the identity permutation, made once
  std::iota(perm_.begin(), perm_.end(), 0);
  if (!shuffle_) return;
  Rng rng(seed_, RngPurpose::Shuffle, stream_, epoch_);
  for (size_t i = n_ - 1; i > 0; --i) std::swap(perm_[i], perm_[rng.below(i + 1)]);
}

void SampleStream::next(size_t m, std::vector<int32_t>& out) {
  out.reserve(out.size() + m);
  while (m > 0) {
    if (pos_ == n_) {
      ++epoch_;
      reshuffle();
    }
    size_t k = std::min(m, n_ - pos_);
    out.insert(out.end(), perm_.begin() + pos_, perm_.begin() + pos_ + k);
    pos_ += k;
    m -= k;
    taken_ += k;
  }
}

void SampleStream::checkpoint(StateArchive& a) {
  uint32_t epoch = epoch_;
  uint64_t pos = pos_;
  a.io(epoch);
  a.io(pos);
  a.io(taken_);
  if (a.saving()) return;
  if (pos > n_)
    a.fail("a sample stream's position " + std::to_string(pos) + " is past its " + std::to_string(n_) + " ids");
  if (epoch != epoch_) {
    epoch_ = epoch;
    reshuffle();
  }
  pos_ = size_t(pos);
}

}  // namespace asgd
