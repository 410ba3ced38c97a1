// sim/data/sample_stream.h — the run's single seeded stream of training-sample ids: epoch e
// is a permutation of [0, n) drawn from (seed, Shuffle, 0, e); batches are consecutive
// pieces of the concatenated permutations. In a synchronous iteration with N workers of
// batch M, worker i takes slice i of the next N*M ids, which is why sync N x M equals one
// worker with batch N*M. For a model that reads no data the ids only count samples
// (epochs): shuffle = false then hands out 0, 1, ..., n-1 in every epoch and draws
// nothing (what that saves: docs/benchmarks.md, "Measurements behind code choices").
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>
#include "sim/base/state_archive.h"

namespace asgd {

class SampleStream {
 public:
  // stream: which of the run's streams (0: the one shared stream; w + 1: worker w's own, over
  // its partition), keying the permutations (seed, Shuffle, stream, epoch).
  SampleStream(size_t n, uint64_t seed, bool shuffle = true, uint32_t stream = 0);
  // Appends the next m ids to out.
  void next(size_t m, std::vector<int32_t>& out);
  uint64_t taken() const { return taken_; }
  // A checkpoint: where the stream is (its permutation is drawn again from the epoch).
  void checkpoint(StateArchive& a);

 private:
  void reshuffle();
  size_t n_;
  uint64_t seed_;
  bool shuffle_;
  uint32_t stream_;
  uint32_t epoch_ = 0;
  size_t pos_ = 0;
  uint64_t taken_ = 0;
  std::vector<int32_t> perm_;
};

}  // namespace asgd
