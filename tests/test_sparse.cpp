// tests/test_sparse.cpp — sparse data and sparse models (issue #16, parts 1 and 2): the
// minibatch transpose against a naive one; sparse_logistic and sparse_softmax against a
// double-precision scalar reference and finite differences, the rows a gradient touches,
// evaluation, determinism; the sparse_synthetic generator (determinism, structure, Zipf
// sampler against exact probabilities, log-log rank-frequency slope); the svmlight
// reader (good files, every malformed case naming file and line, exit 2 from the CLI,
// label rules, memory refusal); config validation; a short run of every engine that learns;
// the server's sparse updates (only the touched rows, the dense result's bits) and the
// parameter store's row patches.
// Not here: byte-identical output across thread counts (tests/test_engines.cpp, Determinism).
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/model.h"
#include "kernels/sparse_batch.h"
#include "engines/server_update.h"
#include "sim/data/dataset.h"
#include "sim/timing/distribution.h"
#include "sim/data/idx_reader.h"
#include "sim/core/parameter_store.h"
#include "sim/core/simulation.h"
#include "sim/data/sparse_synthetic.h"
#include "sim/data/svmlight_reader.h"
#include "test_helpers.h"

namespace asgd {
namespace {

using json = nlohmann::json;
using namespace asgd::testing;

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels_device_available()) GTEST_SKIP() << "backend " << kernels_backend() << ": no device";
  }
};
class SparseModel : public DeviceTest {};

// The message of the exception f throws (of type E), or "" with a failure if none.
template <class E = DataError>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return "";
}

// ------------------------------------------------------------------ helpers: data

// A random sparse set: F features, rows of 0..max_len features (some empty), values in
// [-2, 2], labels in 0..classes-1.
HostDataset random_sparse(size_t n, size_t F, int classes, size_t max_len, uint32_t seed) {
  std::mt19937 gen(seed);
  HostDataset d;
  d.n = n;
  d.dim = F;
  d.classes = classes;
  d.row_ptr.push_back(0);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (size_t i = 0; i < n; ++i) {
    size_t len = gen() % (max_len + 1);
    std::set<int32_t> cols;
    while (cols.size() < len) cols.insert(int32_t(gen() % F));
    for (int32_t c : cols) {
      d.col.push_back(c);
      d.val.push_back(value(gen));
    }
    d.row_ptr.push_back(int64_t(d.col.size()));
    d.y.push_back(float(gen() % uint32_t(classes)));
  }
  return d;
}

std::vector<int32_t> random_ids(size_t m, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> ids(m);
  for (auto& id : ids) id = int32_t(gen() % n);
  return ids;
}

// ------------------------------------------------------------------ minibatch transpose

// Feature counts that need 1, 2 and 4 passes of the radix sort.
TEST(SparseBatchTest, MatchesANaiveTranspose) {
  for (auto [F, seed] : {std::pair<size_t, uint32_t>{25, 1}, {70000, 2}, {size_t(1) << 30, 3}}) {
    HostDataset d = random_sparse(60, F, 2, 7, seed);
    SCOPED_TRACE(F);
    auto ids = random_ids(30, d.n, seed);  // repeats likely: 30 draws of 60
    ids.push_back(ids[0]);                 // and certain
    SparseBatch b;
    build_sparse_batch(d.row_ptr.data(), d.col.data(), ids.data(), ids.size(), b);
    // naive: feature -> (r, offset) in minibatch order
    std::map<int32_t, std::vector<std::pair<int32_t, int32_t>>> want;
    for (size_t r = 0; r < ids.size(); ++r)
      for (int64_t e = d.row_ptr[ids[r]]; e < d.row_ptr[ids[r] + 1]; ++e)
        want[d.col[e]].push_back({int32_t(r), int32_t(e - d.row_ptr[ids[r]])});
    ASSERT_EQ(b.rows.size(), want.size());
    ASSERT_EQ(b.seg.size(), want.size() + 1);
    size_t p = 0;
    for (const auto& [feature, entries] : want) {
      EXPECT_EQ(b.rows[p], feature);
      ASSERT_EQ(size_t(b.seg[p + 1] - b.seg[p]), entries.size()) << "feature " << feature;
      for (size_t j = 0; j < entries.size(); ++j) {
        EXPECT_EQ(b.sample[b.seg[p] + j], entries[j].first);
        EXPECT_EQ(b.offset[b.seg[p] + j], entries[j].second);
      }
      ++p;
    }
    std::vector<int32_t> rows;
    std::vector<uint64_t> keys, sorted;
    sparse_batch_rows(d.row_ptr.data(), d.col.data(), ids.data(), ids.size(), rows, keys, sorted);
    EXPECT_EQ(rows, b.rows);
    if (F == 25) {
      EXPECT_LT(b.rows.size(), size_t(F)) << "repeated features expected";
    }
  }
  // only empty samples: nothing touched
  HostDataset empty = random_sparse(3, 5, 2, 0, 1);
  SparseBatch b;
  std::vector<int32_t> ids = {0, 1, 2};
  build_sparse_batch(empty.row_ptr.data(), empty.col.data(), ids.data(), 3, b);
  EXPECT_TRUE(b.rows.empty());
  EXPECT_EQ(b.seg, std::vector<int32_t>{0});
}

// ------------------------------------------------------------------ models: reference

struct SparseCase {
  const char* label;
  DenseLoss loss;
  int classes;
};
const SparseCase kCases[] = {{"sparse_logistic", DenseLoss::Logistic, 2},
                             {"sparse_softmax", DenseLoss::SoftmaxCrossEntropy, 4}};

size_t outputs(const SparseCase& c) { return c.loss == DenseLoss::Logistic ? 1 : size_t(c.classes); }

// Sample s's loss (and whether it is classified right) at parameters w, in double.
double ref_row_loss(const SparseCase& c, const HostDataset& d, const std::vector<double>& w, size_t s,
                    bool* correct = nullptr, std::vector<double>* dz = nullptr) {
  const size_t k = outputs(c), b_off = d.dim * k;
  std::vector<double> z(k);
  for (size_t j = 0; j < k; ++j) {
    z[j] = w[b_off + j];
    for (int64_t e = d.row_ptr[s]; e < d.row_ptr[s + 1]; ++e) z[j] += double(d.val[e]) * w[size_t(d.col[e]) * k + j];
  }
  const double y = d.y[s];
  if (dz) dz->assign(k, 0.0);
  if (c.loss == DenseLoss::Logistic) {
    if (correct) *correct = (z[0] > 0) == (y > 0.5);
    if (dz) (*dz)[0] = 1.0 / (1.0 + std::exp(-z[0])) - y;
    return std::max(z[0], 0.0) + std::log1p(std::exp(-std::fabs(z[0]))) - y * z[0];
  }
  size_t arg = 0;
  for (size_t j = 1; j < k; ++j)
    if (z[j] > z[arg]) arg = j;
  double se = 0;
  for (size_t j = 0; j < k; ++j) se += std::exp(z[j] - z[arg]);
  const double lse = z[arg] + std::log(se);
  if (correct) *correct = arg == size_t(y);
  if (dz)
    for (size_t j = 0; j < k; ++j) (*dz)[j] = std::exp(z[j] - lse) - (j == size_t(y) ? 1.0 : 0.0);
  return lse - z[size_t(y)];
}

double ref_mean_loss(const SparseCase& c, const HostDataset& d, const std::vector<double>& w,
                     const std::vector<int32_t>& ids) {
  double s = 0;
  for (int32_t id : ids) s += ref_row_loss(c, d, w, size_t(id));
  return s / double(ids.size());
}

// The mean gradient, written out from the chain rule in double.
std::vector<double> ref_grad(const SparseCase& c, const HostDataset& d, const std::vector<double>& w,
                             const std::vector<int32_t>& ids) {
  const size_t k = outputs(c), b_off = d.dim * k;
  std::vector<double> g(w.size(), 0.0), dz;
  for (int32_t id : ids) {
    ref_row_loss(c, d, w, size_t(id), nullptr, &dz);
    for (size_t j = 0; j < k; ++j) {
      g[b_off + j] += dz[j] / double(ids.size());
      for (int64_t e = d.row_ptr[id]; e < d.row_ptr[id + 1]; ++e)
        g[size_t(d.col[e]) * k + j] += double(d.val[e]) * dz[j] / double(ids.size());
    }
  }
  return g;
}

std::vector<float> test_params(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> w(n);
  for (auto& x : w) x = u(gen);
  return w;
}

struct GradResult {
  std::vector<float> g;
  double loss;
};
GradResult model_grad(const Model& model, ExecContext& ctx, const std::vector<float>& w, const DeviceDataset& data,
                      const std::vector<int32_t>& ids) {
  DeviceArray<float> dw, g(w.size());
  dw.upload(w);
  g.fill(NAN);  // every coordinate must be written: touched rows, zeros, the bias
  double loss = model.loss_grad(ctx, dw.data(), &data, ids.data(), ids.size(), {}, g.data());
  ctx.synchronize();
  return {g.to_host(), loss};
}

// A random sparse set (random_sparse's arguments), uploaded, and a model for it.
struct Problem {
  HostDataset host;
  DeviceDataset data;
  std::unique_ptr<Model> model;
  Problem(const SparseCase& c, size_t n, size_t F, size_t max_len, uint32_t seed)
      : host(random_sparse(n, F, c.classes, max_len, seed)),
        data(upload(host)),
        model(make_sparse_linear(F, c.classes, c.loss)) {}
};

TEST_F(SparseModel, DescribesItselfAndChecksItsArguments) {
  auto lg = make_sparse_linear(1000, 2, DenseLoss::Logistic);
  EXPECT_EQ(lg->name(), "sparse_logistic");
  EXPECT_EQ(lg->num_params(), 1001u);
  EXPECT_EQ(lg->row_layout().rows, 1000u);
  EXPECT_EQ(lg->row_layout().width, 1u);
  auto sm = make_sparse_linear(1000, 7, DenseLoss::SoftmaxCrossEntropy);
  EXPECT_EQ(sm->name(), "sparse_softmax");
  EXPECT_EQ(sm->num_params(), 7007u);
  EXPECT_EQ(sm->row_layout().rows, 1000u);
  EXPECT_EQ(sm->row_layout().width, 7u);
  EXPECT_TRUE(sm->is_classifier());
  std::vector<float> w;
  sm->init_params(3, w);
  EXPECT_EQ(w, std::vector<float>(7007, 0.0f));
  EXPECT_THROW(make_sparse_linear(10, 3, DenseLoss::Logistic), std::invalid_argument);
  EXPECT_THROW(make_sparse_linear(10, 2, DenseLoss::Squared), std::invalid_argument);
  EXPECT_THROW(make_sparse_linear(0, 2, DenseLoss::Logistic), std::invalid_argument);

  // Dense models have no table: every parameter is dense, no row is listed.
  auto dense = make_dense({5, 3}, DenseLoss::SoftmaxCrossEntropy);
  EXPECT_EQ(dense->row_layout().rows, 0u);
  std::vector<int32_t> rows = {1, 2}, ids = {0};
  dense->touched_rows(nullptr, ids.data(), 1, rows);
  EXPECT_TRUE(rows.empty());

  // Wrong data: dense, another feature count, other classes; and dense models refuse sparse data.
  ExecContext ctx;
  DeviceDataset sparse = upload(random_sparse(10, 1000, 7, 3, 1));
  DeviceDataset other = upload(random_sparse(10, 999, 7, 3, 1));
  SyntheticSpec spec;
  spec.features = 5;
  spec.classes = 3;
  DeviceDataset dense_data = upload(make_synthetic(spec, 1).train);
  std::vector<float> p(sm->num_params(), 0.0f);
  EXPECT_NO_THROW(model_grad(*sm, ctx, p, sparse, ids));
  EXPECT_THROW(model_grad(*sm, ctx, p, other, ids), std::invalid_argument);
  EXPECT_THROW(model_grad(*sm, ctx, p, dense_data, ids), std::invalid_argument);
  EXPECT_THROW(model_grad(*lg, ctx, std::vector<float>(1001, 0.0f), sparse, ids), std::invalid_argument);  // 7 classes
  DeviceDataset sparse5 = upload(random_sparse(10, 5, 3, 3, 1));
  std::vector<float> dp(dense->num_params(), 0.0f);
  EXPECT_THROW(model_grad(*dense, ctx, dp, sparse5, ids), std::invalid_argument);
}

// Loss and gradient against the double-precision reference: the loss, every coordinate
// of the chain-rule gradient, central differences of the reference loss on every
// touched row, the bias and a sample of untouched rows (h = 1e-6), and exact zeros on
// every row the minibatch does not name.
TEST_F(SparseModel, GradientMatchesTheScalarReferenceAndFiniteDifferences) {
  ExecContext ctx;
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.label);
    Problem p(c, 80, 40, 6, 5);
    const HostDataset& host = p.host;
    const DeviceDataset& data = p.data;
    const Model* model = p.model.get();
    auto ids = random_ids(24, host.n, 9);
    ids.push_back(ids[3]);  // a repeated sample counts twice
    auto w = test_params(model->num_params(), 11);
    GradResult got = model_grad(*model, ctx, w, data, ids);
    std::vector<double> wd(w.begin(), w.end());
    EXPECT_NEAR(got.loss, ref_mean_loss(c, host, wd, ids), 1e-5 * (1 + got.loss));

    std::vector<int32_t> touched;
    model->touched_rows(&data, ids.data(), ids.size(), touched);
    std::set<int32_t> named;
    for (int32_t id : ids)
      for (int64_t e = host.row_ptr[id]; e < host.row_ptr[id + 1]; ++e) named.insert(host.col[e]);
    EXPECT_EQ(touched, std::vector<int32_t>(named.begin(), named.end()));
    ASSERT_LT(named.size(), host.dim) << "degenerate test: every row touched";

    const std::vector<double> ref = ref_grad(c, host, wd, ids);
    const size_t k = outputs(c);
    double scale = 0;
    for (double x : ref) scale = std::max(scale, std::fabs(x));
    ASSERT_GT(scale, 1e-3);
    for (size_t i = 0; i < w.size(); ++i) {
      const size_t row = i / k;
      if (row < host.dim && !named.count(int32_t(row))) {
        EXPECT_TRUE(got.g[i] == 0.0f && !std::signbit(got.g[i])) << "untouched param " << i << " is not +0";
        continue;
      }
      EXPECT_NEAR(got.g[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-6 * scale) << "param " << i;
    }
    const double h = 1e-6;
    for (size_t i = 0; i < w.size(); ++i) {
      const size_t row = i / k;
      if (row < host.dim && !named.count(int32_t(row)) && row % 5 != 0) continue;  // some untouched ones too
      auto wp = wd, wm = wd;
      wp[i] += h;
      wm[i] -= h;
      double fd = (ref_mean_loss(c, host, wp, ids) - ref_mean_loss(c, host, wm, ids)) / (2 * h);
      EXPECT_NEAR(got.g[i], fd, 3e-5 * std::fabs(fd) + 3e-6 * scale) << "param " << i;
    }
  }
}

// The gradient against central differences of the model's own float loss.
TEST_F(SparseModel, GradientMatchesFiniteDifferencesOfItsOwnLoss) {
  ExecContext ctx;
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.label);
    Problem p(c, 50, 12, 5, 6);
    const HostDataset& host = p.host;
    const DeviceDataset& data = p.data;
    const Model* model = p.model.get();
    auto ids = random_ids(16, host.n, 4);
    auto w = test_params(model->num_params(), 12);
    GradResult got = model_grad(*model, ctx, w, data, ids);
    double scale = 0;
    for (float v : got.g) scale = std::max(scale, double(std::fabs(v)));
    const float h = 1e-3f;
    for (size_t i = 0; i < w.size(); ++i) {
      auto wp = w, wm = w;
      wp[i] = w[i] + h;
      wm[i] = w[i] - h;
      double fd = (model_grad(*model, ctx, wp, data, ids).loss - model_grad(*model, ctx, wm, data, ids).loss) /
                  (double(wp[i]) - double(wm[i]));
      EXPECT_NEAR(got.g[i], fd, 1e-2 * std::fabs(fd) + 1e-3 * scale) << "param " << i;
    }
  }
}

// Evaluation over a range that crosses the model's 1024-row chunks, against the reference.
TEST_F(SparseModel, EvaluateMatchesTheScalarReference) {
  ExecContext ctx;
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.label);
    Problem p(c, 2600, 30, 5, 7);
    const HostDataset& host = p.host;
    const DeviceDataset& data = p.data;
    const Model* model = p.model.get();
    auto w = test_params(model->num_params(), 13);
    DeviceArray<float> dw;
    dw.upload(w);
    std::vector<double> wd(w.begin(), w.end());
    for (auto [begin, end] : {std::pair<size_t, size_t>{0, 2600}, {7, 2100}, {1024, 1025}}) {
      EvalSums s = model->evaluate(ctx, dw.data(), &data, begin, end);
      double loss = 0, correct = 0;
      for (size_t i = begin; i < end; ++i) {
        bool ok = false;
        loss += ref_row_loss(c, host, wd, i, &ok);
        correct += ok;
      }
      EXPECT_EQ(s.count, end - begin);
      EXPECT_NEAR(s.loss_sum, loss, 1e-5 * loss);
      EXPECT_NEAR(s.correct, correct, 2.0);  // a row within float rounding of a tie may flip
    }
  }
}

// A gradient is the same bits on any thread, computed again, or after another minibatch.
TEST_F(SparseModel, GradientIsDeterministic) {
  Problem p({"sparse_softmax", DenseLoss::SoftmaxCrossEntropy, 5}, 300, 500, 20, 8);
  const HostDataset& host = p.host;
  const DeviceDataset& data = p.data;
  const Model* model = p.model.get();
  auto ids = random_ids(64, host.n, 2), other = random_ids(40, host.n, 3);
  auto w = test_params(model->num_params(), 14);
  ExecContext ctx;
  GradResult a = model_grad(*model, ctx, w, data, ids);
  model_grad(*model, ctx, w, data, other);
  GradResult b = model_grad(*model, ctx, w, data, ids);
  GradResult c;
  std::thread t([&] {
    kernels_use_one_thread_here();
    ExecContext own;
    c = model_grad(*model, own, w, data, ids);
  });
  t.join();
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.loss, c.loss);
  EXPECT_EQ(0, std::memcmp(a.g.data(), b.g.data(), a.g.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.g.data(), c.g.data(), a.g.size() * 4));
}

// ------------------------------------------------------------------ generator

SparseSyntheticSpec small_spec() {
  SparseSyntheticSpec s;
  s.features = 3000;
  s.nnz = 6;
  s.zipf = 1.1;
  s.classes = 3;
  s.train_samples = 2000;
  s.test_samples = 500;
  return s;
}

TEST(SparseSynthetic, SameSeedSameBytesOtherSeedOtherData) {
  DataSplit a = make_sparse_synthetic(small_spec(), 7), b = make_sparse_synthetic(small_spec(), 7);
  DataSplit c = make_sparse_synthetic(small_spec(), 8);
  for (auto [x, y] : {std::pair<HostDataset*, HostDataset*>{&a.train, &b.train}, {&a.test, &b.test}}) {
    EXPECT_EQ(x->row_ptr, y->row_ptr);
    EXPECT_EQ(x->col, y->col);
    EXPECT_EQ(x->val, y->val);
    EXPECT_EQ(x->y, y->y);
  }
  EXPECT_NE(a.train.col, c.train.col);
  EXPECT_NE(a.train.col, std::vector<int32_t>(a.test.col.begin(), a.test.col.end()));
  // a sample is a function of (seed, its index): a larger set starts with the smaller one
  SparseSyntheticSpec more = small_spec();
  more.train_samples = 2500;
  DataSplit d = make_sparse_synthetic(more, 7);
  EXPECT_TRUE(std::equal(a.train.col.begin(), a.train.col.end(), d.train.col.begin()));
  EXPECT_TRUE(std::equal(a.train.y.begin(), a.train.y.end(), d.train.y.begin()));
}

TEST(SparseSynthetic, OneFeaturePerFieldSortedOneHotAndEveryClass) {
  const SparseSyntheticSpec s = small_spec();
  DataSplit split = make_sparse_synthetic(s, 3);
  for (const HostDataset* d : {&split.train, &split.test}) {
    ASSERT_TRUE(d->sparse());
    EXPECT_EQ(d->dim, s.features);
    EXPECT_EQ(d->classes, s.classes);
    ASSERT_EQ(d->row_ptr.size(), d->n + 1);
    std::vector<size_t> per_class(size_t(s.classes));
    for (size_t i = 0; i < d->n; ++i) {
      ASSERT_EQ(d->row_ptr[i + 1] - d->row_ptr[i], int64_t(s.nnz));
      for (size_t f = 0; f < s.nnz; ++f) {
        const int32_t c = d->col[size_t(d->row_ptr[i]) + f];
        EXPECT_GE(size_t(c), f * s.features / s.nnz);
        EXPECT_LT(size_t(c), (f + 1) * s.features / s.nnz);
      }
      per_class[size_t(d->y[i])]++;
    }
    for (float v : d->val) EXPECT_EQ(v, 1.0f);
    for (size_t c = 0; c < per_class.size(); ++c) EXPECT_GT(per_class[c], d->n / 20) << "class " << c;
  }
  EXPECT_THROW(make_sparse_synthetic(
                   [] {
                     auto x = small_spec();
                     x.nnz = 3001;
                     return x;
                   }(),
                   1),
               std::invalid_argument);
}

// H(n, s) = sum_{k=1..n} k^-s
double harmonic(uint64_t n, double s) {
  double h = 0;
  for (uint64_t k = n; k >= 1; --k) h += std::pow(double(k), -s);  // small terms first
  return h;
}

// Each value's frequency within 5 binomial standard deviations of k^-s / H(n, s).
TEST(SparseSynthetic, ZipfSamplerDrawsTheExactProbabilities) {
  for (double s : {0.0, 0.5, 1.0, 1.8, 3.0}) {
    SCOPED_TRACE(s);
    const uint64_t n = 12;
    ZipfSampler zipf(n, s);
    Rng rng(5, RngPurpose::Data, 1, 0);
    const int draws = 200000;
    std::vector<int> count(n + 1);
    for (int i = 0; i < draws; ++i) {
      uint64_t k = zipf(rng);
      ASSERT_GE(k, 1u);
      ASSERT_LE(k, n);
      count[k]++;
    }
    const double h = harmonic(n, s);
    for (uint64_t k = 1; k <= n; ++k) {
      const double p = std::pow(double(k), -s) / h;
      EXPECT_NEAR(count[k], draws * p, 5 * std::sqrt(draws * p * (1 - p)) + 1) << "k = " << k;
    }
  }
  // a field of ten million: the head still has its exact share
  ZipfSampler big(10000000, 1.1);
  Rng rng(6, RngPurpose::Data, 1, 0);
  const int draws = 200000;
  int ones = 0, twos = 0;
  for (int i = 0; i < draws; ++i) {
    uint64_t k = big(rng);
    ones += k == 1;
    twos += k == 2;
  }
  const double h = harmonic(10000000, 1.1);
  for (auto [k, c] : {std::pair<double, int>{1, ones}, {2, twos}}) {
    const double p = std::pow(k, -1.1) / h;
    EXPECT_NEAR(c, draws * p, 5 * std::sqrt(draws * p * (1 - p)));
  }
}

// Feature frequency against popularity rank on log-log axes: a line of slope -zipf.
TEST(SparseSynthetic, RankFrequencyIsAPowerLawOfTheZipfExponent) {
  for (double z : {0.8, 1.5}) {
    SCOPED_TRACE(z);
    SparseSyntheticSpec s;
    s.features = 20000;
    s.nnz = 2;  // two fields of 10000
    s.zipf = z;
    s.train_samples = 60000;
    s.test_samples = 1;
    DataSplit split = make_sparse_synthetic(s, 9);
    std::vector<double> freq(s.features, 0.0);
    for (int32_t c : split.train.col) freq[size_t(c)] += 1;
    std::vector<double> field0(freq.begin(), freq.begin() + 10000);
    std::sort(field0.rbegin(), field0.rend());
    // least-squares slope of log(count) on log(rank) over ranks 1..100 (counts >= ~30)
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const int R = 100;
    for (int r = 1; r <= R; ++r) {
      ASSERT_GT(field0[r - 1], 0);
      double x = std::log(double(r)), y = std::log(field0[r - 1]);
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
    const double slope = (R * sxy - sx * sy) / (R * sxx - sx * sx);
    EXPECT_NEAR(slope, -z, 0.08);
    // the head: the most popular feature is in a large share of the samples
    const double head = field0[0] / double(s.train_samples);
    EXPECT_NEAR(head, 1.0 / harmonic(10000, z), 0.01);
  }
}

// ------------------------------------------------------------------ svmlight

std::string write_svm(const std::string& dir, const std::string& name, const std::string& text) {
  std::string path = dir + "/" + name;
  write_text(path, text);
  return path;
}

TEST(Svmlight, ParsesLabelsIndicesValuesCommentsAndBlankLines) {
  SvmlightFile f = parse_svmlight(
      "# a comment line\n"
      "+1 1:0.5 3:-2 7:1e-3   # trailing comment\n"
      "\n"
      "-1\t2:4\r\n"
      "  1 7:+3.25\n"
      "-1",  // a last line without '\n', and no features
      "mem", 0, 1);
  ASSERT_EQ(f.samples(), 4u);
  EXPECT_EQ(f.label, (std::vector<int64_t>{1, -1, 1, -1}));
  EXPECT_EQ(f.line, (std::vector<uint32_t>{2, 4, 5, 6}));
  EXPECT_EQ(f.row_ptr, (std::vector<int64_t>{0, 3, 4, 5, 5}));
  EXPECT_EQ(f.col, (std::vector<int32_t>{0, 2, 6, 1, 6}));
  EXPECT_EQ(f.val, (std::vector<float>{0.5f, -2.0f, 1e-3f, 4.0f, 3.25f}));
  EXPECT_EQ(f.max_col, 6);
  SvmlightFile zero_based = parse_svmlight("0 0:1 4:2\n", "mem", 5, 0);
  EXPECT_EQ(zero_based.col, (std::vector<int32_t>{0, 4}));
}

// Every malformed case: a DataError naming the file and the line, and what is wrong.
struct BadCase {
  const char* what;
  const char* text;
  int line;
  const char* message;
};
const BadCase kBadCases[] = {
    {"non-numeric index", "1 1:1\n0 x:1\n", 2, "bad index 'x'"},
    {"fractional index", "1 1.5:1\n", 1, "bad index '1.5'"},
    {"index below the base", "1 1:1\n1 0:1\n", 2, "index 0 is below the first index 1"},
    {"unsorted indices", "1 1:1 2:1\n0 5:1 3:1\n", 2, "index 3 after 5: indices must be increasing"},
    {"duplicate index", "0 4:1 4:2\n", 1, "index 4 appears twice"},
    {"non-numeric value", "1 1:1\n1 1:1\n0 2:abc\n", 3, "value 'abc' of index 2 is not a number"},
    {"empty value", "1 2:\n", 1, "value '' of index 2 is not a number"},
    {"infinite value", "1 2:inf\n", 1, "value of index 2 is not finite"},
    {"index beyond features", "1 1:1\n0 11:1\n", 2, "index 11 is beyond data.features 10"},
    {"non-numeric label", "1 1:1\nyes 1:1\n", 2, "bad label 'yes'"},
    {"fractional label", "0.5 1:1\n", 1, "bad label '0.5'"},
    {"no colon", "1 1:1 7\n", 1, "expected index:value, got '7'"},
    {"ranking data", "1 qid:3 1:1\n", 1, "qid (ranking data) is not supported"},
    {"negative class", "0 1:1\n-1 2:1\n2 1:1\n", 2, "bad label -1"},
    {"label beyond classes", "0 1:1\n1 1:1\n5 2:1\n", 3, "bad label 5: beyond data.classes 3"},
};

SvmlightSpec spec_for(const std::string& path) {
  SvmlightSpec s;
  s.path = path;
  s.features = 10;
  s.classes = 3;
  s.holdout = 0.5;
  return s;
}

TEST(Svmlight, EveryMalformedLineIsADataErrorNamingFileAndLine) {
  const std::string dir = temp_dir("svm");
  for (const auto& c : kBadCases) {
    SCOPED_TRACE(c.what);
    const std::string path = write_svm(dir, "bad.svm", c.text);
    const std::string msg = error_of([&] { load_svmlight(spec_for(path)); });
    EXPECT_NE(msg.find(path + ":" + std::to_string(c.line) + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
  }
  // whole-file problems name the file
  for (const char* text : {"", "# only a comment\n\n"}) {
    const std::string path = write_svm(dir, "empty.svm", text);
    const std::string msg = error_of([&] { load_svmlight(spec_for(path)); });
    EXPECT_NE(msg.find(path + ": no samples"), std::string::npos) << msg;
  }
  const std::string bz = write_svm(dir, "x.svm.bz2", std::string("BZh91AY&SY\x01\x02", 12));
  EXPECT_NE(error_of([&] { load_svmlight(spec_for(bz)); }).find("decompress it first"), std::string::npos);
  EXPECT_NE(error_of([&] { load_svmlight(spec_for(dir + "/missing.svm")); }).find("cannot open"), std::string::npos);
  // the test file's errors name the test file
  SvmlightSpec both = spec_for(write_svm(dir, "ok.svm", "0 1:1\n1 2:1\n"));
  both.test_path = write_svm(dir, "t.svm", "0 1:1\n1 3:1 2:1\n");
  EXPECT_NE(error_of([&] { load_svmlight(both); }).find(both.test_path + ":2: index 2 after 3"), std::string::npos);
}

// The same cases through `asgdsim run`: exit 2, and the message names file and line.
TEST(Svmlight, TheCliExitsTwoNamingFileAndLine) {
  const std::string dir = temp_dir("svmcli");
  int i = 0;
  for (const auto& c : kBadCases) {
    SCOPED_TRACE(c.what);
    const std::string path = write_svm(dir, "bad" + std::to_string(i++) + ".svm", c.text);
    json cfg = {{"name", "svm"},
                {"model", {{"type", "sparse_softmax"}}},
                {"data", {{"type", "svmlight"}, {"path", path}, {"features", 10}, {"classes", 3}, {"holdout", 0.5}}},
                {"stop", {{"updates", 3}}},
                {"engines", json::array({json{{"type", "async"}}})}};
    write_text(dir + "/c.json", cfg.dump());
    CommandResult r = run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out" + std::to_string(i));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(path + ":" + std::to_string(c.line) + ": "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
  }
  json empty = {{"name", "svm"},
                {"model", {{"type", "sparse_logistic"}}},
                {"data", {{"type", "svmlight"}, {"path", write_svm(dir, "empty.svm", "")}}},
                {"engines", json::array({json{{"type", "sync"}}})}};
  write_text(dir + "/e.json", empty.dump());
  CommandResult r = run_cli("run " + dir + "/e.json --quiet --out " + dir + "/out");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("empty.svm: no samples"), std::string::npos) << r.output;
  // three classes in the file, a binary model: found once the labels are read
  empty["data"]["path"] = write_svm(dir, "three.svm", "1 1:1\n2 2:1\n3 1:1\n1 3:1\n2 2:1\n");
  write_text(dir + "/e.json", empty.dump());
  r = run_cli("run " + dir + "/e.json --quiet --out " + dir + "/out_three");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model sparse_logistic is binary"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("has 3 classes: use sparse_softmax"), std::string::npos) << r.output;
}

TEST(Svmlight, LabelsBecomeClassesByTheDocumentedRules) {
  const std::string dir = temp_dir("svmlab");
  auto load = [&](const std::string& text, int classes = 0) {
    SvmlightSpec s;
    s.path = write_svm(dir, "l.svm", text);
    s.classes = classes;
    s.holdout = 0.25;
    return load_svmlight(s);
  };
  auto labels = [](const DataSplit& d) {
    std::vector<float> y = d.train.y;
    y.insert(y.end(), d.test.y.begin(), d.test.y.end());
    return y;
  };
  DataSplit pm = load("+1 1:1\n-1 2:1\n-1 1:1\n+1 3:1\n");  // binary -1/+1
  EXPECT_EQ(labels(pm), (std::vector<float>{1, 0, 0, 1}));
  EXPECT_EQ(pm.train.classes, 2);
  DataSplit one = load("1 1:1\n3 2:1\n2 1:1\n3 3:1\n");  // 1-based
  EXPECT_EQ(labels(one), (std::vector<float>{0, 2, 1, 2}));
  EXPECT_EQ(one.train.classes, 3);
  DataSplit zero = load("1 1:1\n0 2:1\n2 1:1\n1 3:1\n");  // 0-based
  EXPECT_EQ(labels(zero), (std::vector<float>{1, 0, 2, 1}));
  EXPECT_EQ(zero.train.classes, 3);
  EXPECT_EQ(load("1 1:1\n0 2:1\n1 1:1\n1 3:1\n", 5).train.classes, 5);  // classes given
  EXPECT_NE(error_of([&] { load("0 1:1\n0 2:1\n0 1:1\n0 3:1\n"); }).find("every label is the same class"),
            std::string::npos);
  // features: one past the largest index of either file, unless given
  EXPECT_EQ(pm.train.dim, 3u);
  EXPECT_EQ(pm.test.dim, 3u);
  // holdout: the last quarter of the file is the test set
  EXPECT_EQ(pm.train.n, 3u);
  EXPECT_EQ(pm.test.n, 1u);
  EXPECT_EQ(pm.test.col, std::vector<int32_t>{2});
  EXPECT_EQ(pm.test.row_ptr, (std::vector<int64_t>{0, 1}));
}

// sparse_synthetic written as a gzip svmlight file (1-based, 0-based labels) reads back
// as the same sets.
void write_svmlight_gz(const std::string& path, const HostDataset& d) {
  std::string text;
  for (size_t i = 0; i < d.n; ++i) {
    text += std::to_string(int(d.y[i]));
    for (int64_t e = d.row_ptr[i]; e < d.row_ptr[i + 1]; ++e)
      text += " " + std::to_string(d.col[e] + 1) + ":" + std::to_string(d.val[e]);
    text += "\n";
  }
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(f);
}

TEST(Svmlight, GeneratedDataRoundTripsThroughGzipFiles) {
  const std::string dir = temp_dir("svmrt");
  SparseSyntheticSpec s = small_spec();
  DataSplit gen = make_sparse_synthetic(s, 4);
  write_svmlight_gz(dir + "/train.svm.gz", gen.train);
  write_svmlight_gz(dir + "/test.svm.gz", gen.test);
  SvmlightSpec spec;
  spec.path = dir + "/train.svm.gz";
  spec.test_path = dir + "/test.svm.gz";
  spec.features = s.features;
  spec.classes = s.classes;
  DataSplit back = load_svmlight(spec);
  for (auto [a, b] : {std::pair<HostDataset*, HostDataset*>{&gen.train, &back.train}, {&gen.test, &back.test}}) {
    EXPECT_EQ(a->n, b->n);
    EXPECT_EQ(a->dim, b->dim);
    EXPECT_EQ(a->classes, b->classes);
    EXPECT_EQ(a->row_ptr, b->row_ptr);
    EXPECT_EQ(a->col, b->col);
    EXPECT_EQ(a->val, b->val);
    EXPECT_EQ(a->y, b->y);
  }
}

TEST(Svmlight, AFileTooLargeForMemoryIsRefusedBeforeItIsStored) {
  const std::string dir = temp_dir("svmmem");
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "1 1:1 2:1 3:1\n0 4:1\n";
  SvmlightSpec s;
  s.path = write_svm(dir, "big.svm", text);
  s.memory_limit = 20000;  // bytes: 2000 samples and 4000 features take more
  const std::string msg = error_of([&] { load_svmlight(s); });
  EXPECT_NE(msg.find("data.path: " + s.path), std::string::npos) << msg;
  EXPECT_NE(msg.find("2000 samples and 4000 stored features"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs about"), std::string::npos) << msg;
  s.memory_limit = 0;  // the machine's memory: fine
  EXPECT_EQ(load_svmlight(s).train.n, 1800u);
}

// ------------------------------------------------------------------ config

json sparse_config() {
  return {{"name", "sp"},
          {"model", {{"type", "sparse_softmax"}}},
          {"data",
           {{"type", "sparse_synthetic"},
            {"features", 5000},
            {"nnz", 10},
            {"zipf", 1.0},
            {"classes", 3},
            {"train_samples", 3000},
            {"test_samples", 1000}}},
          {"train", {{"batch_size", 32}, {"lr", 2.0}}},
          {"stop", {{"epochs", 3}}},
          {"eval", {{"every", 1}}},
          {"cluster", {{"workers", 4}}},
          {"engines", json::array({json{{"type", "async"}}})}};
}

TEST(SparseConfig, ValidationNamesTheKeyAtFault) {
  const std::string dir = temp_dir("spcfg");
  struct Case {
    std::vector<std::string> sets;
    const char* path;
    const char* words;
  };
  const Case cases[] = {
      {{"data.type=synthetic"}, "data.type", "reads sparse data: sparse_synthetic or svmlight"},
      {{"model.type=softmax"}, "data.type", "use sparse_logistic or sparse_softmax"},
      {{"data.features=10", "data.nnz=20"},
       "data.nnz",
       "must be <= data.features"},  // (nnz in its range: checked typed)
      {{"model.type=sparse_logistic"}, "data.classes", "is binary"},
      {{"data.features=20000000"}, "data.features", "in [1, 10000000]"},
      {{"data.zipf=-1"}, "data.zipf", "in [0, 5]"},
      {{"data.type=svmlight"}, "data.path", "missing required key"},
      {{"data.featurs=10"}, "data.featurs", "features"},
      {{"data.train_samples=100000000", "data.nnz=1000", "data.features=1000000"},
       "data.train_samples",
       "would need about"},
      {{"data.classes=1000", "data.features=10000000", "cluster.workers=64"}, "data.features", "would need about"},
  };
  write_text(dir + "/c.json", sparse_config().dump());
  CommandResult ok = run_cli("validate " + dir + "/c.json");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  for (const auto& c : cases) {
    std::string args = "validate " + dir + "/c.json";
    for (const auto& s : c.sets) args += " --set " + s;
    SCOPED_TRACE(args);
    CommandResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(std::string(c.path) + ": "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.words), std::string::npos) << r.output;
  }
}

TEST(SparseConfig, ListNamesTheSparseModelsAndData) {
  CommandResult r = run_cli("list");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* name : {"sparse_logistic", "sparse_softmax", "sparse_synthetic", "svmlight", "zipf", "nnz",
                           "index_base", "holdout", "test_path"})
    EXPECT_NE(r.output.find(name), std::string::npos) << name;
}

// ------------------------------------------------------------------ learning

// The share of the most common class in a set: what always guessing it scores.
double majority_share(const HostDataset& d) {
  std::map<float, size_t> count;
  for (float y : d.y) count[y]++;
  size_t best = 0;
  for (const auto& [y, n] : count) best = std::max(best, n);
  return double(best) / double(d.n);
}

// Every engine, a few epochs of sparse_softmax on sparse_synthetic: the training loss
// falls by a quarter and the test accuracy beats always guessing the majority class by
// 0.1 or more.
TEST(SparseLearning, EveryEngineLearns) {
  json c = sparse_config();
  c["engines"] = json::array({json{{"type", "async"}}, json{{"type", "sync"}}, json{{"type", "sync_backup"}},
                              json{{"type", "ssp"}}, json{{"type", "local_sgd"}}, json{{"type", "easgd"}},
                              json{{"type", "easgd"}, {"name", "easgd_sync"}, {"mode", "sync"}}});
  const std::string exp = run_config(c, temp_dir("splearn"), 2);
  SparseSyntheticSpec s;
  s.features = 5000;
  s.nnz = 10;
  s.zipf = 1.0;
  s.classes = 3;
  s.train_samples = 3000;
  s.test_samples = 1000;
  const double chance = majority_share(make_sparse_synthetic(s, 1).test);
  for (const char* run : {"async", "sync", "sync_backup", "ssp", "local_sgd", "easgd", "easgd_sync"}) {
    SCOPED_TRACE(run);
    Metrics m = read_metrics(exp + "/" + run + "-seed1/metrics.csv");
    auto loss = m.column("train_loss"), acc = m.column("test_accuracy");
    ASSERT_GE(loss.size(), 3u);
    EXPECT_LT(loss.back(), 0.75 * loss.front());
    EXPECT_GT(acc.back(), chance + 0.1) << "majority class share " << chance;
  }
}

// svmlight data through a whole run: the generated sets written as files learn as well.
TEST(SparseLearning, SvmlightFilesTrainASparseLogisticModel) {
  const std::string dir = temp_dir("spsvm");
  SparseSyntheticSpec s;
  s.features = 4000;
  s.nnz = 8;
  s.classes = 2;
  s.train_samples = 3000;
  s.test_samples = 1000;
  DataSplit gen = make_sparse_synthetic(s, 2);
  write_svmlight_gz(dir + "/train.svm.gz", gen.train);
  write_svmlight_gz(dir + "/test.svm.gz", gen.test);
  json c = sparse_config();
  c["model"] = {{"type", "sparse_logistic"}};
  c["data"] = {{"type", "svmlight"}, {"path", "train.svm.gz"}, {"test_path", "test.svm.gz"}};
  c["engines"] = json::array({json{{"type", "async"}}});
  write_text(dir + "/c.json", c.dump());  // relative paths: from the config's folder
  CommandResult r = run_cli("run " + dir + "/c.json --quiet --out " + dir + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Metrics m = read_metrics(dir + "/out/sp/async-seed1/metrics.csv");
  auto loss = m.column("train_loss"), acc = m.column("test_accuracy");
  ASSERT_GE(loss.size(), 3u);
  EXPECT_LT(loss.back(), 0.8 * loss.front());
  EXPECT_GT(acc.back(), majority_share(gen.test) + 0.05);
}

// ------------------------------------------------------------------ sparse server updates

// A Simulation around a sparse_softmax model of 4000 features x 3 classes (a 4000 x 3
// table and 3 biases), for driving ServerUpdate and ParameterStore directly.
struct ServerRig {
  std::unique_ptr<Model> model = make_sparse_linear(4000, 3, DenseLoss::SoftmaxCrossEntropy);
  DeviceDataset data = upload(random_sparse(64, 4000, 3, 5, 1));
  WorkerPool pool{2};
  RunSettings settings = default_settings();
  ComputeTimeModel compute{3, make_distribution(json{{"dist", "constant"}, {"value", 0.01}}), {}};
  Recorder recorder{false};
  std::unique_ptr<Simulation> sim;
  ServerRig() {
    settings.nominal_train_size = 512;
    sim = std::make_unique<Simulation>(settings, *model, &data, &data, pool, compute, recorder);
  }
};

// Bitwise equality of two float vectors (NaN payloads and signed zeros count).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

enum class Rule { Sgd, Momentum, Dc, Sum, Nesterov, Adam, AdamSum, AdamW };

OptimizerSpec rule_optimizer(Rule rule) {
  OptimizerSpec o;
  if (rule == Rule::Momentum || rule == Rule::Nesterov) o.momentum = 0.9;
  o.nesterov = rule == Rule::Nesterov;
  if (rule == Rule::Adam || rule == Rule::AdamSum || rule == Rule::AdamW) {
    o.kind = rule == Rule::AdamW ? OptimizerKind::AdamW : OptimizerKind::Adam;
    o.beta1 = 0.9, o.beta2 = 0.999, o.eps = 1e-8;
    o.weight_decay = rule == Rule::AdamW ? 0.01 : 0.0;  // decay moves every row: dense steps
  }
  return o;
}
// Rules whose state makes every row touched so far move on every update.
bool stateful(Rule rule) { return rule_optimizer(rule).stateful(); }

// 60 server updates of random sparse gradients (1 to 8 of the 4000 rows, the bias always)
// by `rule`, with readers holding older versions (so that most versions go to recycled
// buffers that the store patches) and, with keep > 0, a history for forced staleness.
// poison: the gradients hold NaN, not +0, outside their rows (outside every part's rows,
// for a sum). Returns every version the
// store made, and checks that a version a reader holds never changes.
struct Replay {
  std::vector<std::vector<float>> versions;
  uint64_t whole_copies = 0;
};
Replay replay(Rule rule, bool force_dense, bool poison, size_t keep) {
  ServerRig rig;
  const size_t n = rig.model->num_params(), width = 3, table_rows = 4000;
  g_force_dense_updates = force_dense;
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> init(n);
  for (auto& x : init) x = u(gen);
  ParameterStore store(init, keep, rig.model->row_layout());
  ServerUpdate server(rule_optimizer(rule));
  Replay out;
  out.versions.push_back(init);
  std::deque<std::pair<Snapshot, std::vector<float>>> held;  // readers, with what they read
  const int parts = rule == Rule::Sum || rule == Rule::AdamSum ? 3 : 1;
  std::vector<DeviceArray<float>> grads(parts);
  for (int step = 0; step < 60; ++step) {
    std::vector<std::vector<int32_t>> rows(parts);
    std::set<int32_t> all;  // every part's rows: a sum reads each part on all of them
    for (int p = 0; p < parts; ++p) {
      std::set<int32_t> pick;
      const int count = 1 + int(gen() % 8);
      while (int(pick.size()) < count) pick.insert(int32_t(gen() % table_rows));
      rows[p].assign(pick.begin(), pick.end());
      all.insert(pick.begin(), pick.end());
    }
    for (int p = 0; p < parts; ++p) {
      std::vector<float> g(n, poison ? NAN : 0.0f);
      for (int32_t r : all)
        for (size_t c = 0; c < width; ++c) g[size_t(r) * width + c] = 0.0f;
      for (int32_t r : rows[p])
        for (size_t c = 0; c < width; ++c) g[size_t(r) * width + c] = u(gen);
      for (size_t i = table_rows * width; i < n; ++i) g[i] = u(gen);
      grads[p].upload(g);
    }
    const float lr = 0.05f + 0.01f * float(step % 3);
    if (parts > 1) {
      std::vector<float*> ptrs;
      std::vector<const std::vector<int32_t>*> prs;
      for (int p = 0; p < parts; ++p) ptrs.push_back(grads[p].data()), prs.push_back(&rows[p]);
      server.apply_sum(*rig.sim, store, ptrs, 1.0f / 3.0f, lr, prs);
    } else if (rule == Rule::Dc) {
      const Snapshot backup = held.empty() ? store.current() : held.front().first;
      server.apply_delay_compensated(*rig.sim, store, grads[0].data(), backup.data(), lr, 0.7f, &rows[0]);
    } else {
      server.apply(*rig.sim, store, grads[0].data(), lr, &rows[0]);
    }
    rig.sim->exec().synchronize();
    out.versions.push_back(store.current().params->to_host());
    if (keep > 0) {
      const Snapshot old = store.lagged(std::min<uint64_t>(keep, store.version()));
      EXPECT_TRUE(same_bits(old.params->to_host(), out.versions[old.version])) << "history version " << old.version;
    }
    if (step % 3 != 2) held.emplace_back(store.current(), out.versions.back());  // a reader of this version
    while (held.size() > 4) {
      EXPECT_TRUE(same_bits(held.front().first.params->to_host(), held.front().second))
          << "a version a reader held changed (version " << held.front().first.version << ")";
      held.pop_front();
    }
  }
  g_force_dense_updates = false;
  out.whole_copies = store.whole_copies();
  return out;
}

// The server's update of a sparse gradient, on its rows only, gives every version the
// bits of the dense update of the same gradient (zeros elsewhere): plain SGD, momentum
// (dense heavy-ball decay), Nesterov, dense Adam (not lazy: its moments decay on every row
// touched so far), AdamW with weight decay (then every step is dense), DC-ASGD and a sum of
// three workers' parts (SGD and Adam), with readers holding
// old versions and with a history for forced staleness. And only the touched rows change
// (plain SGD, DC, the sum): with NaN instead of +0 outside the rows, the sparse path gives
// the same versions (the dense path writes NaN there, which the test checks, so the
// comparison can fail).
TEST(SparseServerUpdate, TouchesOnlyTheRowsAndGivesTheDenseBits) {
  if (!kernels_device_available()) GTEST_SKIP() << "no device";
  for (Rule rule :
       {Rule::Sgd, Rule::Momentum, Rule::Dc, Rule::Sum, Rule::Nesterov, Rule::Adam, Rule::AdamSum, Rule::AdamW}) {
    for (size_t keep : {size_t(0), size_t(2)}) {
      SCOPED_TRACE("rule " + std::to_string(int(rule)) + ", history " + std::to_string(keep));
      const Replay dense = replay(rule, true, false, keep), sparse = replay(rule, false, false, keep);
      ASSERT_EQ(dense.versions.size(), sparse.versions.size());
      for (size_t v = 0; v < dense.versions.size(); ++v)
        ASSERT_TRUE(same_bits(dense.versions[v], sparse.versions[v])) << "version " << v;
      // Patched, not copied: only fresh buffers (the first few) are copied whole; later
      // versions go to recycled buffers a few versions old. (Momentum steps every row
      // touched so far: its versions soon differ in too many rows to patch.)
      if (!stateful(rule)) {
        EXPECT_LE(sparse.whole_copies, 8u) << "whole-table copies";
      }
      if (stateful(rule)) continue;  // it reads g on every row touched so far (their state decays)
      const Replay poisoned = replay(rule, false, true, keep);
      for (size_t v = 0; v < dense.versions.size(); ++v)
        ASSERT_TRUE(same_bits(poisoned.versions[v], sparse.versions[v]))
            << "version " << v << ": an untouched row changed";
      const Replay dense_poisoned = replay(rule, true, true, keep);
      EXPECT_TRUE(std::isnan(dense_poisoned.versions.back()[0]) || std::isnan(dense_poisoned.versions.back()[60]))
          << "the dense path should have written the poison";
    }
  }
}

// A run of a sparse model gives the same metrics.csv, workers.csv and summary.json (wall
// clock aside) with the sparse server updates as with every update forced dense, under
// the server's rules with state: momentum, Nesterov, Adam, DC-ASGD, the staleness-aware
// rate, forced staleness (with its version history) and the single-replica warm-up.
// (Every engine form with plain SGD: tests/test_conformance.cpp.)
TEST(SparseServerUpdate, RunsAreByteIdenticalToForcedDenseUpdates) {
  json c = sparse_config();
  c["stop"] = {{"epochs", 1}};
  c["eval"] = {{"every", 0.25}};
  c["cluster"]["compute"] = {{"dist", "lognormal"}, {"mean", 1e-3}, {"sigma", 0.8}, {"per", "step"}};
  json mom = c;
  mom["name"] = "spmom";
  mom["train"]["momentum"] = 0.9;
  mom["train"]["single_replica_epochs"] = 0.25;
  mom["engines"] = json::array({json{{"type", "async"}}, json{{"type", "sync"}}, json{{"type", "ssp"}, {"bound", 1}}});
  json stale = c;
  stale["name"] = "spstale";
  stale["staleness"] = {{"mode", "fixed"}, {"tau", 3}};
  stale["engines"] =
      json::array({json{{"type", "async"}}, json{{"type", "async"}, {"name", "dc"}, {"delay_compensation", 0.5}}});
  json adam = mom;  // dense Adam on the rows touched so far, the warm-up's Adam, forced staleness
  adam["name"] = "spadam";
  adam["train"]["momentum"] = 0.0;
  adam["train"]["optimizer"] = "adam";
  adam["train"]["lr"] = 0.05;
  adam["staleness"] = {{"mode", "fixed"}, {"tau", 2}};
  adam["engines"].push_back(json{{"type", "async"}, {"name", "divide"}, {"lr_staleness", "divide"}});
  json nesterov = mom;
  nesterov["name"] = "spnest";
  nesterov["train"]["nesterov"] = true;
  for (const json& cfg : {mom, stale, adam, nesterov}) {
    const std::string name = cfg["name"].get<std::string>();
    const std::string sparse_dir = run_config(cfg, temp_dir(name + "sparse"), 2);
    g_force_dense_updates = true;
    const std::string dense_dir = run_config(cfg, temp_dir(name + "dense"), 2);
    g_force_dense_updates = false;
    for (const auto& e : cfg["engines"]) {
      const std::string run = e.value("name", e["type"].get<std::string>()) + "-seed1";
      SCOPED_TRACE(name + "/" + run);
      for (const char* file : {"metrics.csv", "workers.csv"}) {
        const std::string a = read_file(sparse_dir + "/" + run + "/" + file);
        EXPECT_FALSE(a.empty()) << file;
        EXPECT_EQ(a, read_file(dense_dir + "/" + run + "/" + file)) << file;
      }
      json s1 = json::parse(read_file(sparse_dir + "/" + run + "/summary.json"));
      json s2 = json::parse(read_file(dense_dir + "/" + run + "/summary.json"));
      s1["wall_seconds"] = s2["wall_seconds"] = 0;
      EXPECT_EQ(s1, s2);
    }
  }
}

}  // namespace
}  // namespace asgd
