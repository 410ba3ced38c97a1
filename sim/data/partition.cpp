// sim/data/partition.cpp — shards and Dirichlet splits of the training set (see partition.h).
#include "sim/data/partition.h"
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include "kernels/model.h"
#include "kernels/rng.h"

namespace asgd {

namespace {

// Gamma(a, 1) (Marsaglia & Tsang 2000; a < 1 through Gamma(a + 1) * U^(1/a)).
double gamma_draw(Rng& rng, double a) {
  if (a < 1) return gamma_draw(rng, a + 1) * std::pow(rng.uniform(), 1 / a);
  const double d = a - 1.0 / 3, c = 1 / std::sqrt(9 * d);
  for (;;) {
    double x, v;
    do {
      x = rng.normal();
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = rng.uniform();
    if (u < 1 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
  }
}

// Fisher-Yates of `ids` from (seed, Partition, stream, draw).
void shuffle(std::vector<int32_t>& ids, uint64_t seed, uint32_t stream, uint32_t draw) {
  Rng rng(seed, RngPurpose::Partition, stream, draw);
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.below(i)]);
}

}  // namespace

std::vector<std::vector<int32_t>> partition_samples(const std::vector<int32_t>& labels, int classes, int workers,
                                                    const PartitionSpec& spec, uint64_t seed) {
  const size_t n = labels.size(), p = size_t(workers);
  std::vector<std::vector<int32_t>> parts(p);
  if (spec.kind == PartitionSpec::Kind::Shards) {
    std::vector<int32_t> sorted(n);
    std::iota(sorted.begin(), sorted.end(), 0);
    std::stable_sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) { return labels[a] < labels[b]; });
    const size_t shards = p * size_t(spec.shards);
    if (shards > n)
      throw std::invalid_argument("data.partition_shards: " + std::to_string(shards) + " shards of " +
                                  std::to_string(n) + " training samples would leave some empty");
    std::vector<int32_t> deal(shards);
    std::iota(deal.begin(), deal.end(), 0);
    shuffle(deal, seed, 0, 0);
    for (size_t i = 0; i < shards; ++i) {
      const size_t s = size_t(deal[i]), begin = s * n / shards, end = (s + 1) * n / shards;
      auto& part = parts[i / size_t(spec.shards)];
      part.insert(part.end(), sorted.begin() + long(begin), sorted.begin() + long(end));
    }
  } else if (spec.kind == PartitionSpec::Kind::Dirichlet) {
    std::vector<std::vector<int32_t>> by_class(static_cast<size_t>(classes));
    for (size_t i = 0; i < n; ++i) by_class[size_t(labels[i])].push_back(int32_t(i));
    for (size_t c = 0; c < by_class.size(); ++c) shuffle(by_class[c], seed, uint32_t(c + 1), 0);
    for (uint32_t draw = 0;; ++draw) {
      for (auto& part : parts) part.clear();
      std::vector<double> share(p);
      for (size_t c = 0; c < by_class.size(); ++c) {
        Rng rng(seed, RngPurpose::Partition, uint32_t(c + 1), draw + 1);
        double total = 0;
        for (size_t w = 0; w < p; ++w) total += share[w] = gamma_draw(rng, spec.alpha);
        // cut the class's ids at the cumulative shares: worker w gets [floor(m S_w), floor(m S_{w+1}))
        const size_t m = by_class[c].size();
        double cum = 0;
        size_t begin = 0;
        for (size_t w = 0; w < p; ++w) {
          cum += share[w];
          const size_t end = w + 1 == p || total <= 0 ? m : std::min(m, size_t(std::floor(double(m) * cum / total)));
          parts[w].insert(parts[w].end(), by_class[c].begin() + long(begin), by_class[c].begin() + long(end));
          begin = std::max(begin, end);
        }
      }
      if (std::none_of(parts.begin(), parts.end(), [](const auto& part) { return part.empty(); })) break;
      if (draw == 99)
        throw std::invalid_argument("data.partition_alpha: 100 Dirichlet draws each left a worker without samples (" +
                                    std::to_string(n) + " samples over " + std::to_string(p) +
                                    " workers); raise alpha or use fewer workers");
    }
  } else {
    throw std::logic_error("partition_samples: iid is the run's one stream");
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

PartitionedSamples::PartitionedSamples(const std::vector<int32_t>& labels, int classes, int workers,
                                       const PartitionSpec& spec, uint64_t seed, bool shuffle)
    : parts_(partition_samples(labels, classes, workers, spec, seed)) {
  histogram_.assign(parts_.size(), std::vector<uint64_t>(size_t(classes), 0));
  for (size_t w = 0; w < parts_.size(); ++w) {
    streams_.emplace_back(parts_[w].size(), seed, shuffle, uint32_t(w + 1));
    for (int32_t id : parts_[w]) histogram_[w][size_t(labels[size_t(id)])]++;
  }
}

void PartitionedSamples::next(int worker, size_t m, std::vector<int32_t>& out) {
  local_.clear();
  streams_[size_t(worker)].next(m, local_);
  const auto& part = parts_[size_t(worker)];
  for (int32_t i : local_) out.push_back(part[size_t(i)]);
}

std::unique_ptr<PartitionedSamples> make_partitioned_samples(const RunSettings& s, const DeviceDataset* train,
                                                             bool shuffle) {
  if (s.partition.kind == PartitionSpec::Kind::Iid) return nullptr;
  if (!train || train->classes < 2)
    throw std::invalid_argument("data.partition: splitting by label needs a classification training set");
  const std::vector<float> y = train->y.to_host();
  std::vector<int32_t> labels(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    labels[i] = int32_t(y[i]);
    if (labels[i] < 0 || labels[i] >= train->classes)
      throw std::invalid_argument("data.partition: sample " + std::to_string(i) + " has no class label");
  }
  return std::make_unique<PartitionedSamples>(labels, train->classes, s.workers, s.partition, s.seed, shuffle);
}

}  // namespace asgd
