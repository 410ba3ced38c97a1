// kernels/rng.h — counter-based random streams (cuRAND's Philox4x32-10, device API,
// compiled for the host). A stream is keyed by (seed, purpose, worker, step), so a draw
// never depends on which thread ran first or on how many draws other streams made.
#pragma once
#include <cstdint>

namespace asgd {

// What a stream is for; part of its key so purposes never share numbers.
enum class RngPurpose : uint8_t {
  Shuffle = 1,          // sample-stream permutations (step = epoch)
  ComputeTime = 2,      // per-step compute durations
  GradientNoise = 3,    // additive gradient noise (quadratic model)
  Init = 4,             // parameter initialisation
  Data = 5,             // synthetic data generation
  Staleness = 6,        // forced-staleness draws
  Straggler = 7,        // transient straggler draws
  Failure = 8,          // worker failure draws
  Speed = 9,            // per-worker speed factors
  Network = 10,         // network jitter
  Partition = 11,       // non-IID data partitions (data.partition)
  Compression = 12,     // PowerSGD's initial Q (worker = the matrix's index)
  ClientSampling = 13,  // a population's draws of clients for free slots (step = the draw's index)
  ClientSpeed = 14,     // a population's per-client slowdown factors (worker = the client)
};

class Rng {
 public:
  Rng(uint64_t seed, RngPurpose purpose, uint32_t worker, uint32_t step);
  uint32_t next_u32();
  double uniform();            // in (0, 1]
  double normal();             // standard normal
  uint64_t below(uint64_t n);  // uniform integer in [0, n), n > 0

  // The 64-bit Philox subsequence that encodes (purpose, worker, step):
  // purpose in bits 56..63, worker in bits 32..55 (< 2^24), step in bits 0..31.
  static uint64_t subsequence(RngPurpose purpose, uint32_t worker, uint32_t step);

 private:
  alignas(16) unsigned char state_[64];  // curandStatePhilox4_32_10_t, opaque here
};

}  // namespace asgd
