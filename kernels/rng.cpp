// kernels/rng.cpp — host side of the counter-based streams: cuRAND's Philox4x32-10
// device API compiled by the host compiler (this file is C++ on every backend).
#include "kernels/rng.h"
#include <cuda_runtime.h>  // host definitions (uint4, qualifiers) curand_kernel.h needs
#include <curand_kernel.h>
#include <stdexcept>

namespace asgd {

static_assert(sizeof(curandStatePhilox4_32_10_t) <= 64, "Rng state storage too small");

namespace {
curandStatePhilox4_32_10_t& st(unsigned char* p) { return *reinterpret_cast<curandStatePhilox4_32_10_t*>(p); }
}  // namespace

uint64_t Rng::subsequence(RngPurpose purpose, uint32_t worker, uint32_t step) {
  if (worker >= (1u << 24)) throw std::out_of_range("Rng: worker index must be < 2^24");
  return (uint64_t(purpose) << 56) | (uint64_t(worker) << 32) | uint64_t(step);
}

Rng::Rng(uint64_t seed, RngPurpose purpose, uint32_t worker, uint32_t step) {
  curand_init(seed, subsequence(purpose, worker, step), 0, &st(state_));
}

uint32_t Rng::next_u32() { return curand(&st(state_)); }
double Rng::uniform() { return curand_uniform_double(&st(state_)); }
double Rng::normal() { return curand_normal_double(&st(state_)); }

uint64_t Rng::below(uint64_t n) {
  if (n == 0) throw std::invalid_argument("Rng::below(0)");
  // 64 random bits, rejection-free multiply-shift is biased by < 2^-64 * n: fine here.
  uint64_t x = (uint64_t(next_u32()) << 32) | next_u32();
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
}

}  // namespace asgd
