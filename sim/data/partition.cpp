// sim/data/partition.cpp — shards and Dirichlet splits of the training set (see partition.h).
#include "sim/data/partition.h"
#include <boost/math/special_functions/beta.hpp>
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include "kernels/model.h"
#include "kernels/rng.h"
#include "sim/base/errors.h"
#include "sim/base/interrupt.h"

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

// Each class's sample ids in a seeded order (seed, Partition, class + 1, 0): what the
// Dirichlet splits cut or deal from.
std::vector<std::vector<int32_t>> ids_by_class(const std::vector<int32_t>& labels, int classes, uint64_t seed) {
  std::vector<std::vector<int32_t>> by_class(static_cast<size_t>(classes));
  for (size_t i = 0; i < labels.size(); ++i) by_class[size_t(labels[i])].push_back(int32_t(i));
  for (size_t c = 0; c < by_class.size(); ++c) shuffle(by_class[c], seed, uint32_t(c + 1), 0);
  return by_class;
}

}  // namespace

std::vector<std::vector<double>> dirichlet_mixes(const std::vector<double>& prior, int workers, double alpha,
                                                 uint64_t seed) {
  const size_t classes = prior.size();
  std::vector<std::vector<double>> mix(size_t(std::max(0, workers)), std::vector<double>(classes, 0.0));
  for (size_t w = 0; w < mix.size(); ++w) {
    if ((w & 1023) == 0) throw_if_interrupted("drawing the label mixes of the training set's parts (data.partition)");
    for (uint32_t draw = 1;; ++draw) {
      Rng rng(seed, RngPurpose::Partition, uint32_t(classes + 1 + w), draw);
      double total = 0;
      for (size_t c = 0; c < classes; ++c) total += mix[w][c] = prior[c] > 0 ? gamma_draw(rng, alpha * prior[c]) : 0.0;
      if (total > 0) {
        for (double& q : mix[w]) q /= total;
        break;
      }
      if (draw == 100)
        throw ConfigError("", {{"data.partition_alpha", "100 Dirichlet draws of worker " + std::to_string(w) +
                                                            "'s label mix all underflowed to 0; raise alpha"}});
    }
  }
  return mix;
}

std::vector<std::vector<int32_t>> partition_samples(const std::vector<int32_t>& labels, int classes, int workers,
                                                    const PartitionSpec& spec, uint64_t seed, const RunTasks& run) {
  const size_t n = labels.size(), p = size_t(workers);
  std::vector<std::vector<int32_t>> parts(p);
  if (spec.kind == PartitionSpec::Kind::Shards) {
    std::vector<int32_t> sorted(n);
    std::iota(sorted.begin(), sorted.end(), 0);
    std::stable_sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) { return labels[a] < labels[b]; });
    const size_t shards = p * size_t(spec.shards);
    if (shards > n)
      throw ConfigError("", {{"data.partition_shards", std::to_string(p) + " workers x " + std::to_string(spec.shards) +
                                                           " shards of " + std::to_string(n) +
                                                           " training samples would leave some empty"}});
    std::vector<int32_t> deal(shards);
    std::iota(deal.begin(), deal.end(), 0);
    shuffle(deal, seed, 0, 0);
    for (size_t i = 0; i < shards; ++i) {
      const size_t s = size_t(deal[i]), begin = s * n / shards, end = (s + 1) * n / shards;
      auto& part = parts[i / size_t(spec.shards)];
      part.insert(part.end(), sorted.begin() + long(begin), sorted.begin() + long(end));
    }
  } else if (spec.kind == PartitionSpec::Kind::Dirichlet) {
    const std::vector<std::vector<int32_t>> by_class = ids_by_class(labels, classes, seed);
    // One draw: every class's shares and cuts. Only the non-empty cuts are kept (at most n
    // of them), and each worker's count, so that a draw that leaves a worker empty costs
    // its Gamma draws alone; the parts are filled from the cuts of the draw that serves.
    // Classes draw from streams of their own, so blocks of them run side by side (`run`)
    // and their cuts are the same whichever thread drew them.
    struct Cut {
      uint32_t worker;
      size_t begin, end;
    };
    std::vector<std::vector<Cut>> cuts(by_class.size());
    std::vector<size_t> count(p);
    for (uint32_t draw = 0;; ++draw) {
      auto draw_classes = [&, draw](size_t from, size_t to) {
        std::vector<double> share(p);
        for (size_t c = from; c < to; ++c) {
          throw_if_interrupted("drawing the Dirichlet partition of the training set (data.partition)");
          Rng rng(seed, RngPurpose::Partition, uint32_t(c + 1), draw + 1);
          double total = 0;
          for (size_t w = 0; w < p; ++w) total += share[w] = gamma_draw(rng, spec.alpha);
          // cut the class's ids at the cumulative shares: worker w gets [floor(m S_w), floor(m S_{w+1}))
          const size_t m = by_class[c].size();
          double cum = 0;
          size_t begin = 0;
          cuts[c].clear();
          for (size_t w = 0; w < p; ++w) {
            cum += share[w];
            const size_t end = w + 1 == p || total <= 0 ? m : std::min(m, size_t(std::floor(double(m) * cum / total)));
            if (end > begin) cuts[c].push_back({uint32_t(w), begin, end});
            begin = std::max(begin, end);
          }
        }
      };
      // blocks of about 2^18 Gamma draws: worth a task, and many of them for many workers
      const size_t per_block = std::max<size_t>(1, (size_t(1) << 18) / std::max<size_t>(1, p));
      std::vector<std::function<void()>> blocks;
      for (size_t c = 0; c < by_class.size(); c += per_block)
        blocks.push_back([&, c] { draw_classes(c, std::min(by_class.size(), c + per_block)); });
      if (run && blocks.size() > 1)
        run(std::move(blocks));
      else
        for (auto& b : blocks) b();
      std::fill(count.begin(), count.end(), 0);
      for (const auto& class_cuts : cuts)
        for (const Cut& k : class_cuts) count[k.worker] += k.end - k.begin;
      if (std::find(count.begin(), count.end(), size_t(0)) == count.end()) break;
      if (draw == 99)
        throw ConfigError("", {{"data.partition_alpha",
                                "100 Dirichlet draws each left a worker without samples (" + std::to_string(n) +
                                    " samples of " + std::to_string(classes) + " classes over " + std::to_string(p) +
                                    " workers); raise alpha or use fewer workers"}});
    }
    for (size_t w = 0; w < p; ++w) parts[w].reserve(count[w]);
    for (size_t c = 0; c < cuts.size(); ++c)  // class by class, as the shares were cut
      for (const Cut& k : cuts[c])
        parts[k.worker].insert(parts[k.worker].end(), by_class[c].begin() + long(k.begin),
                               by_class[c].begin() + long(k.end));
  } else if (spec.kind == PartitionSpec::Kind::DirichletMix) {
    if (p > n)
      throw ConfigError("", {{"data.partition", std::to_string(p) + " workers but " + std::to_string(n) +
                                                    " training samples: a worker would get none"}});
    const std::vector<std::vector<int32_t>> by_class = ids_by_class(labels, classes, seed);
    std::vector<double> prior(by_class.size());
    for (size_t c = 0; c < prior.size(); ++c) prior[c] = double(by_class[c].size()) / double(n);
    const std::vector<std::vector<double>> mix = dirichlet_mixes(prior, workers, spec.alpha, seed);
    std::vector<size_t> next(by_class.size(), 0), size(p);
    for (size_t w = 0; w < p; ++w) {
      size[w] = (w + 1) * n / p - w * n / p;
      parts[w].reserve(size[w]);
    }
    // the picks: worker w's k-th from (seed, Partition, classes + 1 + w, 0), one Rng per worker
    std::vector<Rng> rngs;
    rngs.reserve(p);
    for (size_t w = 0; w < p; ++w) rngs.emplace_back(seed, RngPurpose::Partition, uint32_t(by_class.size() + 1 + w), 0);
    const size_t turns = (n + p - 1) / p;
    for (size_t k = 0; k < turns; ++k) {
      throw_if_interrupted("dealing the training set's parts (data.partition)");
      for (size_t w = 0; w < p; ++w) {
        if (k >= size[w]) continue;
        double left = 0;  // the mix over the classes that still have samples
        for (size_t c = 0; c < by_class.size(); ++c)
          if (next[c] < by_class[c].size()) left += mix[w][c];
        size_t pick = by_class.size();
        if (left > 0) {
          const double u = rngs[w].uniform() * left;  // in (0, left]
          double cum = 0;
          for (size_t c = 0; c < by_class.size(); ++c) {
            if (next[c] >= by_class[c].size() || mix[w][c] <= 0) continue;
            cum += mix[w][c];
            pick = c;
            if (u <= cum) break;
          }
        } else {  // every class of its mix has run out: the first class with samples left
          for (size_t c = 0; c < by_class.size() && pick == by_class.size(); ++c)
            if (next[c] < by_class[c].size()) pick = c;
        }
        parts[w].push_back(by_class[pick][next[pick]++]);
      }
    }
  } else {
    throw std::logic_error("partition_samples: iid is the run's one stream");
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

std::string partition_impossible(const PartitionSpec& spec, int workers, double train, int classes) {
  if (spec.kind == PartitionSpec::Kind::Iid) return "";
  const double p = double(workers);
  auto n = [](double v) { return std::to_string(uint64_t(v)); };
  if (train > 0 && p > train)
    return n(p) + " workers but " + n(train) +
           " training samples: a worker would get none (use fewer workers, or "
           "more samples)";
  if (spec.kind == PartitionSpec::Kind::Shards) {
    if (train > 0 && p * spec.shards > train)
      return n(p) + " workers x " + n(spec.shards) + " shards is more shards than the " + n(train) +
             " training samples: some would be empty (lower data.partition_shards or the workers)";
    return "";
  }
  if (spec.kind == PartitionSpec::Kind::DirichletMix) return "";  // equal parts of >= 1 sample: checked above
  // Dirichlet: a worker gets no sample of a class of m samples with probability
  // q = E[max(0, 1 - m s)] over its share s ~ Beta(alpha, (P - 1) alpha) (the cut at
  // floor(m x cumulative share) gives it a sample with probability min(1, m s)), and a
  // Gamma(alpha) draw underflows to 0 with probability z = e^(-744 alpha) (then a class
  // whose P draws are all 0 goes whole to the last worker). A draw leaves about
  // E = (P - 1) q'^C workers empty, q' = z^P + (1 - z^P) q, and succeeds with probability
  // about e^-E. Refused when 100 draws would almost surely fail: E >= 15, or every class
  // going whole to the last worker (z^(P C) > 0.9999). The first worker is apart: its cut
  // starts at 0, so it gets a sample only when m s >= 1 (probability 1 - I_{1/m}(alpha,
  // beta)); when it would stay empty in every class of almost every draw (more workers
  // than a class has samples, and a concentrated alpha), the draws fail too.
  if (classes > 0 && train > 0 && p >= 2) {
    try {
      const double m = std::max(1.0, train / classes), a = spec.alpha, b = (p - 1) * a, x = 1 / m;
      const double below = boost::math::ibeta(a, b, x);  // P(s < 1/m)
      const double q = below - m * a / (a + b) * boost::math::ibeta(a + 1, b, x);
      const double all_zero = std::exp(-744 * a * p);  // z^P
      const double empty = (p - 1) * std::pow(all_zero + (1 - all_zero) * std::clamp(q, 0.0, 1.0), classes);
      const double first_empty = std::pow(below, classes);
      if (empty >= 15 || std::pow(all_zero, classes) > 0.9999 || first_empty > 0.9999) {
        char text[160];
        std::snprintf(text, sizeof(text),
                      "alpha %g over %s workers and %d classes of about %s samples leaves about %.3g "
                      "workers without a sample in each Dirichlet draw",
                      a, n(p).c_str(), classes, n(m).c_str(), std::max(empty, first_empty));
        return std::string(text) +
               ", so every one of the 100 draws would fail (raise alpha, use fewer workers or more "
               "samples)";
      }
    } catch (const std::exception&) {  // parameters beyond the special functions' range: left to the draws
    }
  }
  return "";
}

PartitionedSamples::PartitionedSamples(const std::vector<int32_t>& labels, int classes, int workers,
                                       const PartitionSpec& spec, uint64_t seed, bool shuffle, const RunTasks& run)
    : parts_(partition_samples(labels, classes, workers, spec, seed, run)) {
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

std::unique_ptr<PartitionedSamples> make_partitioned_samples(const PartitionSpec& spec, int owners, uint64_t seed,
                                                             const DeviceDataset* train, bool shuffle,
                                                             const RunTasks& run) {
  if (spec.kind == PartitionSpec::Kind::Iid) return nullptr;
  if (!train || train->classes < 2)
    throw std::invalid_argument("data.partition: splitting by label needs a classification training set");
  const std::vector<float> y = train->y.to_host();
  std::vector<int32_t> labels(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    labels[i] = int32_t(y[i]);
    if (labels[i] < 0 || labels[i] >= train->classes)
      throw std::invalid_argument("data.partition: sample " + std::to_string(i) + " has no class label");
  }
  return std::make_unique<PartitionedSamples>(labels, train->classes, owners, spec, seed, shuffle, run);
}

}  // namespace asgd
