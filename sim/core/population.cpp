// sim/core/population.cpp — drawing clients for free slots (see population.h).
#include "sim/core/population.h"
#include <algorithm>
#include <stdexcept>
#include <string>
#include "kernels/rng.h"

namespace asgd {

namespace {
constexpr int kCandidates = 64;  // busy candidates before the cyclic scan
}

Population::Population(uint64_t seed, std::vector<uint32_t> samples, bool by_size)
    : seed_(seed), samples_(std::move(samples)), busy_(samples_.size(), 0), seen_(samples_.size(), 0) {
  if (samples_.empty()) throw std::invalid_argument("a population needs at least one client");
  for (size_t c = 0; c < samples_.size(); ++c)
    if (samples_[c] == 0) throw std::invalid_argument("client " + std::to_string(c) + " has no training sample");
  if (by_size) {
    cumulative_.resize(samples_.size());
    uint64_t total = 0;
    for (size_t c = 0; c < samples_.size(); ++c) cumulative_[c] = total += samples_[c];
  }
}

int64_t Population::draw() {
  const uint64_t n = samples_.size();
  if (training_ >= n) throw std::logic_error("every client of the population is training: none to draw");
  Rng rng(seed_, RngPurpose::ClientSampling, uint32_t(draws_ >> 32), uint32_t(draws_));
  ++draws_;
  uint64_t c = 0;
  for (int i = 0; i < kCandidates; ++i) {
    if (cumulative_.empty()) {
      c = rng.below(n);
    } else {  // the client whose cumulative range holds a uniform draw in [0, total)
      const uint64_t u = rng.below(cumulative_.back());
      c = uint64_t(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
    }
    if (!busy_[c]) break;
    if (i + 1 == kCandidates)
      while (busy_[c]) c = (c + 1) % n;
  }
  busy_[c] = 1;
  ++training_;
  if (!seen_[c]) {
    seen_[c] = 1;
    ++distinct_;
  }
  return int64_t(c);
}

void Population::release(int64_t client) {
  if (!busy_[size_t(client)]) throw std::logic_error("client " + std::to_string(client) + " released twice");
  busy_[size_t(client)] = 0;
  --training_;
}

}  // namespace asgd
