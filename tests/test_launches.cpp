// tests/test_launches.cpp — the launch budget (issue 48): what one gradient of each model
// and one server step of each optimizer ask of the backend (kernels/exec.h, LaunchCounts:
// kernel launches, GEMM calls, copies between host and device, waits of the host).
// Counted on every backend at the sites that issue the CUDA calls, so the CPU build checks
// what the CUDA build launches. The budgets are exact: a change that adds a launch fails
// here, and one that removes one lowers its budget here and in docs/gpu.md.
// Not here: whether the kernels compute the right numbers (test_kernels, test_layers).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engines/optimizer.h"
#include "experiments/bench/bench.h"
#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/model.h"
#include "kernels/ops.h"
#include "sim/data/dataset.h"
#include "sim/data/sparse_synthetic.h"
#include "kernel_test_helpers.h"

namespace asgd {

void PrintTo(const LaunchCounts& c, std::ostream* os) {
  *os << "{kernels " << c.kernels << ", gemms " << c.gemms << ", copies " << c.copies << ", syncs " << c.syncs
      << ", events " << c.events << ", graphs " << c.graphs << "}";
}

namespace {

// kernels, gemms, copies, syncs (no events or graphs: a model's job records none).
LaunchCounts budget(uint64_t kernels, uint64_t gemms, uint64_t copies, uint64_t syncs) {
  LaunchCounts c;
  c.kernels = kernels;
  c.gemms = gemms;
  c.copies = copies;
  c.syncs = syncs;
  return c;
}

class LaunchBudget : public DeviceTest {};

// The workloads of `asgdsim bench`: batch 32, its models.
constexpr size_t kBatch = 32;

// What one loss_grad_batch call of k requests (k = 1: one loss_grad call) of model on data
// asks of a warm context (the count `asgdsim bench` reports).
LaunchCounts gradient_counts(const Model& model, const DeviceDataset& data, size_t k) {
  return count_job_launches(model, &data, data.n, kBatch, k).gradients;
}

DeviceDataset mnist_like(Shape image) {
  SyntheticSpec s;
  s.classes = 10;
  s.features = image.size();
  s.image = image;
  s.train_samples = 256;
  s.test_samples = 1;
  return upload(make_synthetic(s, 1).train);
}

// MLP 784-128-10 (the bench's workloads a and b), ReLU, softmax cross-entropy.
TEST_F(LaunchBudget, MlpGradient) {
  const DeviceDataset data = mnist_like(Shape{28, 28, 1});
  auto model = make_dense({784, 128, 10}, DenseLoss::SoftmaxCrossEntropy);
  // the gather; the first GEMM, its bias and ReLU; the second GEMM, its bias added in the
  // loss's kernel; the GEMMs of both layers' backward and one column-sum launch between
  // them (the ReLU's backward, both bias gradients, the loss sums); the ids up, the loss
  // sums back and one wait for them (issue 48: 9 kernels, 2 waits before)
  EXPECT_EQ(gradient_counts(*model, data, 1), budget(4, 5, 2, 1));
  // K requests: the same launches (batched GEMMs), and the pointer tables staged
  EXPECT_EQ(gradient_counts(*model, data, 4), budget(4, 5, 3, 1));
}

// LeNet-5 (the bench's workload f).
TEST_F(LaunchBudget, LeNetGradient) {
  const DeviceDataset data = mnist_like(Shape{28, 28, 1});
  auto model = make_cnn(Shape{28, 28, 1}, lenet5(), 10);
  // forward: the gather, per conv block im2col, the bias and ReLU, the pooling; per dense
  // layer the bias and ReLU; the loss with the last bias. Backward: one column-sum launch
  // per layer with an activation (two for a convolution's long columns), col2im, the
  // pooling's backward (issue 48: 30 kernels before)
  EXPECT_EQ(gradient_counts(*model, data, 1), budget(19, 14, 2, 1));
  EXPECT_EQ(gradient_counts(*model, data, 4), budget(19, 14, 3, 1));
}

// sparse_logistic on sparse_synthetic data (the bench's workload g, fewer features).
TEST_F(LaunchBudget, SparseGradient) {
  SparseSyntheticSpec s;
  s.features = 10000;
  s.train_samples = 512;
  s.test_samples = 1;
  const DeviceDataset data = upload(make_sparse_synthetic(s, 1).train);
  auto model = make_sparse_linear(s.features, 2, DenseLoss::Logistic);
  // the rows' logits and losses with the gradient's zeros; the touched rows' gradient
  // with the bias and the loss sum (issue 48: 5 kernels, 2 waits, and a batch of K was K
  // single gradients)
  EXPECT_EQ(gradient_counts(*model, data, 1), budget(2, 0, 2, 1));
  EXPECT_EQ(gradient_counts(*model, data, 4), budget(2, 0, 3, 1));
}

// The quadratic: its gradient writes the loss terms, then one reduction (issue 48: a pass
// of its own for the terms before).
TEST_F(LaunchBudget, QuadraticGradient) {
  auto model = make_quadratic(std::vector<float>(1000, 1.0f), 0.5f, 1.0f);
  EXPECT_EQ(count_job_launches(*model, nullptr, 1, 1, 1).gradients, budget(2, 0, 1, 2));
}

// Graph capture (ExecContext::set_graph_capture), three jobs of one shape on one context,
// each on other parameters into other gradients (a replay must read the new ones). CPU
// backends: the path without a capture (each request's pointers from a staged table)
// gives each job the plain path's bits, at one more copy for a single request's table.
// CUDA (not yet run on a GPU): the first job runs as it is, the second is captured, the
// third replays the graph: one launch and no kernel or GEMM of its own; each job agrees
// with the plain path to float rounding (cuBLAS's batched GEMM may round its own way).
TEST_F(LaunchBudget, GraphCapturePathGivesThePlainResults) {
  const DeviceDataset data = mnist_like(Shape{28, 28, 1});
  const bool cuda = std::string(kernels_backend()) == "CUDA";
  struct Case {
    std::string label;
    std::unique_ptr<Model> model;
    LaunchCounts plain;  // a CPU job's budget with the tables (k = 1: one copy more)
  };
  std::vector<Case> cases;
  cases.push_back({"mlp", make_dense({784, 128, 10}, DenseLoss::SoftmaxCrossEntropy), budget(4, 5, 3, 1)});
  cases.push_back({"lenet", make_cnn(Shape{28, 28, 1}, lenet5(), 10), budget(19, 14, 3, 1)});
  for (const Case& c : cases) {
    for (size_t k : {1, 3}) {
      SCOPED_TRACE(c.label + ", k = " + std::to_string(k));
      const size_t n = c.model->num_params();
      std::vector<std::vector<float>> ws;  // job j, request i: ws[j k + i]
      for (size_t j = 0; j < 3 * k; ++j) ws.push_back(random_vec(n, uint32_t(40 + j), -0.1f, 0.1f));
      std::vector<int32_t> ids(k * kBatch);
      for (size_t r = 0; r < ids.size(); ++r) ids[r] = int32_t((r * 13) % data.n);
      // job j's losses and gradients on a context with graph capture on or off; counts:
      // the last job's
      auto jobs = [&](bool graphs, std::vector<double>& losses, std::vector<std::vector<float>>& grads,
                      LaunchCounts& last) {
        on_worker_thread([&] {
          ExecContext ctx;
          ctx.set_graph_capture(graphs);
          std::vector<DeviceArray<float>> dw, dg;
          for (size_t j = 0; j < 3 * k; ++j) {
            dw.push_back(to_device(ws[j]));
            dg.emplace_back(n);
          }
          for (size_t j = 0; j < 3; ++j) {
            std::vector<GradRequest> reqs(k);
            for (size_t i = 0; i < k; ++i) {
              reqs[i].w = dw[j * k + i].data();
              reqs[i].ids = ids.data() + i * kBatch;
              reqs[i].m = kBatch;
              reqs[i].grad = dg[j * k + i].data();
            }
            const LaunchCounts before = ctx.counts();
            if (k == 1) {
              reqs[0].loss = c.model->loss_grad(ctx, reqs[0].w, &data, reqs[0].ids, kBatch, {}, reqs[0].grad);
            } else {
              c.model->loss_grad_batch(ctx, &data, reqs.data(), k);
            }
            last = ctx.counts() - before;
            for (size_t i = 0; i < k; ++i) losses.push_back(reqs[i].loss);
          }
          for (auto& g : dg) grads.push_back(g.to_host());
        });
      };
      std::vector<double> plain_loss, graph_loss;
      std::vector<std::vector<float>> plain_grad, graph_grad;
      LaunchCounts plain_counts, graph_counts;
      jobs(false, plain_loss, plain_grad, plain_counts);
      jobs(true, graph_loss, graph_grad, graph_counts);
      if (!cuda) {
        EXPECT_EQ(graph_loss, plain_loss);
        EXPECT_EQ(graph_grad, plain_grad);
        EXPECT_EQ(graph_counts, c.plain);
        continue;
      }
      for (size_t j = 0; j < 3 * k; ++j) {
        EXPECT_NEAR(graph_loss[j], plain_loss[j], 1e-5 * std::fabs(plain_loss[j])) << "request " << j;
        EXPECT_TRUE(all_close(graph_grad[j], plain_grad[j], 1e-4, 1e-6)) << "request " << j;
      }
      LaunchCounts replay;
      replay.graphs = 1;
      replay.copies = 3;
      replay.syncs = 1;
      EXPECT_EQ(graph_counts, replay);
    }
  }
}

// One server step of each optimizer (engines/optimizer.h, the step ServerUpdate applies):
// over the whole vector, and over a table's rows (a sparse model's step, which stages the
// row ids first).
TEST_F(LaunchBudget, ServerSteps) {
  const size_t n = 1000;
  std::vector<OptimizerSpec> specs(5);
  specs[1].momentum = 0.9;
  specs[2].momentum = 0.9;
  specs[2].nesterov = true;
  for (size_t i : {3, 4}) {
    specs[i].kind = i == 3 ? OptimizerKind::Adam : OptimizerKind::AdamW;
    specs[i].beta1 = 0.9;
    specs[i].beta2 = 0.999;
    specs[i].eps = 1e-8;
    specs[i].weight_decay = 0.01;
  }
  const std::vector<int32_t> rows = {1, 5, 9};
  for (const OptimizerSpec& spec : specs) {
    SCOPED_TRACE("optimizer " + std::to_string(int(spec.kind)) + ", momentum " + std::to_string(spec.momentum));
    ExecContext ctx;
    DeviceArray<float> w = to_device(random_vec(n, 1)), g = to_device(random_vec(n, 2));
    Optimizer opt(spec);
    opt.prepare(n);
    opt.begin_step(0.1f);
    LaunchCounts before = ctx.counts();
    opt.step(ctx, w.data(), w.data(), g.data(), 0, n);
    EXPECT_EQ(ctx.counts() - before, budget(1, 0, 0, 0));
    before = ctx.counts();
    opt.step(ctx, ops::Rows{rows.data(), rows.size(), 10}, w.data(), w.data(), g.data());
    EXPECT_EQ(ctx.counts() - before, budget(1, 0, 1, 0));
  }
}

// The counting points themselves: a reduction is one kernel up to CUB's tile (2048 8-byte
// or 4096 4-byte accumulators) and two past it, then a wait, a copy and a wait; GEMMs are
// cuBLAS calls; an empty range launches nothing.
TEST_F(LaunchBudget, CountingPoints) {
  ExecContext ctx;
  DeviceArray<float> x = to_device(random_vec(5000, 3));
  auto counted = [&](auto&& f) {
    const LaunchCounts before = ctx.counts();
    f();
    return ctx.counts() - before;
  };
  EXPECT_EQ(counted([&] { ops::sum(ctx, x.data(), 2048); }), budget(1, 0, 1, 2));
  EXPECT_EQ(counted([&] { ops::sum(ctx, x.data(), 2049); }), budget(2, 0, 1, 2));
  EXPECT_EQ(counted([&] { ops::all_finite(ctx, x.data(), 4096); }), budget(1, 0, 1, 2));
  EXPECT_EQ(counted([&] { ops::all_finite(ctx, x.data(), 4097); }), budget(2, 0, 1, 2));
  EXPECT_EQ(counted([&] { ops::sum(ctx, x.data(), 0); }), budget(0, 0, 0, 0));
  EXPECT_EQ(counted([&] { ops::scale(ctx, x.data(), 2.0f, 0); }), budget(0, 0, 0, 0));
  EXPECT_EQ(counted([&] { ops::scale(ctx, x.data(), 2.0f, 10); }), budget(1, 0, 0, 0));
  EXPECT_EQ(counted([&] { ctx.synchronize(); }), budget(0, 0, 0, 1));
  LaunchCounts events;
  events.events = 2;
  EXPECT_EQ(counted([&] { ctx.wait_for(ctx.mark()); }), events);
}

}  // namespace
}  // namespace asgd
