// tests/kernel_test_helpers.h — what the kernel-level suites (test_kernels.cpp,
// test_layers.cpp) share: random vectors, backend memory from host vectors, float bits,
// a tolerance check that reports the first misses, a thread that runs kernels as a pool
// thread does, and the fixture that skips on a CUDA build without a GPU.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/buffer.h"
#include "tests/test_paths.h"
#include "kernels/exec.h"

namespace asgd {

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

inline DeviceArray<float> to_device(const std::vector<float>& h) {
  DeviceArray<float> d;
  d.upload(h);
  return d;
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// |got - want| <= atol + rtol * |want| elementwise; reports the first few misses.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                                            double atol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      if (++bad <= 5) first += " [" + std::to_string(i) + "] got " + std::to_string(g) + " want " + std::to_string(w);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " differ:" << first;
}

// Runs fn on a fresh thread whose kernels run single-threaded, as on a worker-pool thread.
// For hundreds of tiny kernel calls this avoids OpenMP fork/join barriers, which on a
// loaded machine (more runnable threads than cores) cost milliseconds each.
template <class F>
void on_worker_thread(F fn) {
  std::thread t([&] {
    kernels_use_one_thread_here();
    fn();
  });
  t.join();
}

// Tests that touch backend memory skip on a CUDA build when no GPU is visible (CI
// compiles the CUDA targets on machines without one).
class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels_device_available()) GTEST_SKIP() << "backend " << kernels_backend() << ": no device";
  }
};
}  // namespace asgd
