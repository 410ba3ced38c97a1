// sim/data/partition.h — training data that is not IID across workers (data.partition): each
// worker draws its minibatches from its own part of the training set, through its own
// seeded sample stream (SampleStream stream w + 1), instead of from the run's one stream.
//   shards     (McMahan et al. 2017's pathological split) the sample ids sorted by label
//              (then id) are cut into workers x `shards` contiguous shards of equal size
//              (boundaries floor(i n / S)); a seeded permutation deals `shards` of them to
//              each worker. With balanced classes a worker sees about `shards` labels.
//   dirichlet  (Yurochkin et al. 2019; NIID-Bench, Li et al. 2022) for each class, the
//              workers' shares are drawn from Dirichlet(alpha) (normalised Gamma(alpha)
//              draws) and the class's ids, in a seeded order, are cut at the cumulative
//              shares: the workers' sizes differ. alpha -> infinity is IID, alpha = 0.1
//              highly skewed. Redrawn (next draw index) while a worker gets no sample, up
//              to 100 times.
//   dirichlet_mix  (Hsu, Qi & Brown 2019) each worker w draws its label mix
//              q_w ~ Dirichlet(alpha p), p the classes' shares of the training set, and
//              gets an equal part (floor((w+1) n / P) - floor(w n / P) samples), filled one
//              sample per worker in turn (w = 0..P-1, then again): a class drawn from q_w
//              over the classes that still have samples (q_w renormalised over them), its
//              next id in a seeded order. The parts are disjoint and cover the set; the
//              mixes are exact until classes run out, which bends every worker's last
//              samples alike (the turns) towards what remains.
// Every draw is from (seed, Partition, ., .): the parts depend on the seed, the labels and
// the worker count only. Not here: which samples a step takes from its part (SampleStream).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "sim/data/sample_stream.h"

namespace asgd {

struct DeviceDataset;

// How the training set is split over the workers (data.partition, bound with the data set:
// BoundData::partition, sim/data/catalog.h; the run's copy is RunSettings::partition).
struct PartitionSpec {
  enum class Kind { Iid, Shards, Dirichlet, DirichletMix } kind = Kind::Iid;  // iid: the run's one sample stream
  double alpha = 0;  // dirichlet: concentration of each class's split; dirichlet_mix: of each worker's label mix
  int shards = 0;    // shards: label-sorted shards per worker
};

// Runs tasks side by side and returns when all are done, rethrowing the first error (the
// run's worker pool); empty: one after another on the calling thread.
using RunTasks = std::function<void(std::vector<std::function<void()>>&&)>;

// The parts (sample ids, ascending) of `labels` (class index per sample, in [0, classes))
// over `workers`. Throws ConfigError naming data.partition_shards or data.partition_alpha
// when a part would be empty, and Interrupted on a signal (polled between classes).
// A Dirichlet draw costs workers x classes Gamma draws (in blocks of classes, side by
// side through `run`), and O(samples) to fill the parts; the parts do not depend on `run`.
std::vector<std::vector<int32_t>> partition_samples(const std::vector<int32_t>& labels, int classes, int workers,
                                                    const PartitionSpec& spec, uint64_t seed, const RunTasks& run = {});

// dirichlet_mix's label mixes: for each of `workers`, q ~ Dirichlet(alpha x prior) (prior:
// the classes' shares, summing to 1), from (seed, Partition, classes + 1 + w, draw) with
// draw 1, 2, ... while a worker's Gamma draws all underflow to 0 (up to 100 times).
std::vector<std::vector<double>> dirichlet_mixes(const std::vector<double>& prior, int workers, double alpha,
                                                 uint64_t seed);

// Why `spec` cannot split `train` samples of `classes` classes (0 for either: not known
// before the data is read) over `workers`, or "" when it may: more workers than samples,
// more shards than samples, or Dirichlet draws that would leave so many workers empty
// (in expectation, for balanced classes) that all 100 would fail at run time. For validation.
std::string partition_impossible(const PartitionSpec& spec, int workers, double train, int classes);

// Each worker's stream over its part: the ids a runtime's next_step hands out.
class PartitionedSamples {
 public:
  PartitionedSamples(const std::vector<int32_t>& labels, int classes, int workers, const PartitionSpec& spec,
                     uint64_t seed, bool shuffle, const RunTasks& run = {});
  // Appends worker w's next m ids (ids of the whole training set).
  void next(int worker, size_t m, std::vector<int32_t>& out);
  size_t part_size(int worker) const { return parts_[size_t(worker)].size(); }
  // (workers, classes) label counts of each part: the run folder's partition.csv.
  const std::vector<std::vector<uint64_t>>& histogram() const { return histogram_; }
  // A checkpoint: where each part's stream is.
  void checkpoint(StateArchive& a) {
    for (SampleStream& s : streams_) s.checkpoint(a);
  }

 private:
  std::vector<std::vector<int32_t>> parts_;
  std::vector<SampleStream> streams_;
  std::vector<std::vector<uint64_t>> histogram_;
  std::vector<int32_t> local_;
};

// For a runtime: null under iid (the run's one stream serves), else the parts of `train`'s
// labels over `owners` (RunSettings::data_owners: the clients of a population, else the
// workers) (a classification set; the validator refuses the rest), drawn from `seed`.
std::unique_ptr<PartitionedSamples> make_partitioned_samples(const PartitionSpec& spec, int owners, uint64_t seed,
                                                             const DeviceDataset* train, bool shuffle,
                                                             const RunTasks& run = {});

}  // namespace asgd
