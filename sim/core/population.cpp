// sim/core/population.cpp — drawing clients for free slots (see population.h).
#include "sim/core/population.h"
#include <algorithm>
#include <limits>
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

int64_t Population::draw(double t, const ClientDevices* devices) {
  const uint64_t n = samples_.size();
  if (training_ >= n) throw std::logic_error("every client of the population is training: none to draw");
  if (devices && devices->always_available()) devices = nullptr;
  // available now, and for a while (not at the very end of its interval)
  auto eligible = [&](uint64_t c) {
    return !busy_[c] && (!devices || (devices->available(size_t(c), t) && devices->available_until(size_t(c), t) > t));
  };
  Rng rng(seed_, RngPurpose::ClientSampling, uint32_t(tries_ >> 32), uint32_t(tries_));
  ++tries_;
  uint64_t c = 0;
  bool found = false;
  for (int i = 0; i < kCandidates && !found; ++i) {
    if (cumulative_.empty()) {
      c = rng.below(n);
    } else {  // the client whose cumulative range holds a uniform draw in [0, total)
      const uint64_t u = rng.below(cumulative_.back());
      c = uint64_t(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
    }
    found = eligible(c);
  }
  for (uint64_t k = 0; k < n && !found; ++k) {
    c = (c + 1) % n;
    found = eligible(c);
  }
  if (!found) return -1;
  ++draws_;
  busy_[c] = 1;
  ++training_;
  if (!seen_[c]) {
    seen_[c] = 1;
    ++distinct_;
  }
  return int64_t(c);
}

double Population::next_available(double t, const ClientDevices& devices) const {
  double first = std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < samples_.size(); ++c)
    if (!busy_[c]) first = std::min(first, devices.next_available(c, t));
  return first;
}

void Population::release(int64_t client) {
  if (!busy_[size_t(client)]) throw std::logic_error("client " + std::to_string(client) + " released twice");
  busy_[size_t(client)] = 0;
  --training_;
}

void Population::checkpoint(StateArchive& a) {
  a.tag("population");
  a.io(busy_);
  a.io(seen_);
  a.io(draws_);
  a.io(tries_);
  a.io(distinct_);
  a.io(training_);
  if (!a.saving() && (busy_.size() != samples_.size() || seen_.size() != samples_.size()))
    a.fail("the population does not match this run's " + std::to_string(samples_.size()) + " clients");
}

}  // namespace asgd
