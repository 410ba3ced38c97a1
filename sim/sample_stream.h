// sim/sample_stream.h — the run's single seeded stream of training-sample ids: epoch e
// is a permutation of [0, n) drawn from (seed, Shuffle, 0, e); batches are consecutive
// pieces of the concatenated permutations. In a synchronous iteration with N workers of
// batch M, worker i takes slice i of the next N*M ids, which is why sync N x M equals one
// worker with batch N*M.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace asgd {

class SampleStream {
 public:
  SampleStream(size_t n, uint64_t seed);
  // Appends the next m ids to out.
  void next(size_t m, std::vector<int32_t>& out);
  uint64_t taken() const { return taken_; }

 private:
  void reshuffle();
  size_t n_;
  uint64_t seed_;
  uint32_t epoch_ = 0;
  size_t pos_ = 0;
  uint64_t taken_ = 0;
  std::vector<int32_t> perm_;
};

}  // namespace asgd
