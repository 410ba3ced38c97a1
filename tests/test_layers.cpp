// tests/test_layers.cpp — each layer alone against its scalar reference
// (kernels/layers/layers_ref.h): forward values; backward against central finite
// differences of the reference in double (the gradient with respect to the input and to
// the parameters); a batch of requests, each on its own parameters, against each request
// alone; stacks that run activations in place; and the output losses. Everything goes
// through backend memory, so the same tests run on CUDA (with tolerances where cuBLAS
// rounds its own way). Not here: whole models (tests/test_kernels.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernel_test_helpers.h"
#include "kernels/layers/layer.h"
#include "kernels/layers/layers_ref.h"
#include "kernels/layers/loss.h"
#include "kernels/layers/stack.h"
#include "kernels/ops.h"

namespace asgd {
namespace {

using layers::Layer;
using layers::LayerStack;
using layers::StackPass;
using layers_ref::Batch;

class Layers : public DeviceTest {};

bool cuda() { return std::string(kernels_backend()) == "CUDA"; }

// One layer's case: how to make it and its reference forward pass. With `act`, the layer
// runs with that activation on top, which the stack has the layer's own kernels apply
// (LayerIO::act), against the reference activation of the reference output.
struct LayerCase {
  std::string label;
  std::function<std::unique_ptr<Layer>()> make;
  std::function<Batch(const Batch& x, size_t rows, const double* w)> ref;
  layers::Act act = layers::Act::None;
};

std::vector<LayerCase> layer_cases() {
  using namespace layers;
  std::vector<LayerCase> c;
  using layers::Act;
  c.push_back({"dense 7->5",
               [] {
                 return make_dense(Shape{1, 1, 7}, 5);
               },
               [](const Batch& x, size_t rows, const double* w) { return layers_ref::dense(x, rows, 7, 5, w); }});
  c.push_back({"dense on a 2x3x2 image -> 4",
               [] {
                 return make_dense(Shape{2, 3, 2}, 4);
               },
               [](const Batch& x, size_t rows, const double* w) { return layers_ref::dense(x, rows, 12, 4, w); }});
  struct Conv {
    Shape in;
    int ch, k, s, p;
  };
  for (Conv v : {Conv{{5, 6, 2}, 3, 3, 1, 1}, Conv{{7, 7, 3}, 4, 3, 2, 0}, Conv{{6, 5, 1}, 2, 5, 1, 2},
                 Conv{{8, 7, 2}, 3, 4, 3, 2}, Conv{{3, 4, 5}, 2, 1, 1, 0}}) {
    c.push_back({"conv2d " + v.in.text() + " " + std::to_string(v.ch) + " filters k" + std::to_string(v.k) + " s" +
                     std::to_string(v.s) + " p" + std::to_string(v.p),
                 [v] { return make_conv2d(v.in, v.ch, v.k, v.s, v.p); },
                 [v](const Batch& x, size_t rows, const double* w) {
                   return layers_ref::conv2d(x, rows, v.in, v.ch, v.k, v.s, v.p, w);
                 }});
  }
  struct Pool {
    Shape in;
    int window;
  };
  for (Pool v : {Pool{{6, 6, 2}, 2}, Pool{{7, 5, 3}, 3}, Pool{{4, 4, 1}, 1}}) {
    c.push_back(
        {"maxpool " + v.in.text() + " window " + std::to_string(v.window), [v] { return make_maxpool(v.in, v.window); },
         [v](const Batch& x, size_t rows, const double*) { return layers_ref::maxpool(x, rows, v.in, v.window); }});
  }
  c.push_back({"relu",
               [] {
                 return make_relu(Shape{4, 3, 2});
               },
               [](const Batch& x, size_t, const double*) { return layers_ref::relu(x); }});
  c.push_back({"tanh",
               [] {
                 return make_tanh(Shape{4, 3, 2});
               },
               [](const Batch& x, size_t, const double*) { return layers_ref::tanh(x); }});
  c.push_back({"flatten",
               [] {
                 return make_flatten(Shape{2, 3, 2});
               },
               [](const Batch& x, size_t, const double*) { return x; }});
  // The layers that end with a bias add again, each with a ReLU or a tanh fused on top.
  const size_t plain = c.size();
  for (size_t i = 0; i < plain; ++i) {
    if (c[i].make()->bias_offset() == Layer::npos) continue;
    for (Act a : {Act::ReLU, Act::Tanh}) {
      LayerCase f = c[i];
      f.label += a == Act::ReLU ? " + relu (fused)" : " + tanh (fused)";
      f.act = a;
      f.ref = [ref = c[i].ref, a](const Batch& x, size_t rows, const double* w) {
        return a == Act::ReLU ? layers_ref::relu(ref(x, rows, w)) : layers_ref::tanh(ref(x, rows, w));
      };
      c.push_back(f);
    }
  }
  return c;
}

LayerStack single(const LayerCase& c) {
  std::vector<std::unique_ptr<Layer>> v;
  v.push_back(c.make());
  const Shape out = v.back()->out_shape();
  if (c.act == layers::Act::ReLU) v.push_back(layers::make_relu(out));
  if (c.act == layers::Act::Tanh) v.push_back(layers::make_tanh(out));
  return LayerStack(std::move(v));
}

// One pass over k requests (request i: parameters w[i], rows [i m, (i+1) m) of x). With
// d_out, also backward: the parameters' gradients and the input's.
struct PassResult {
  std::vector<float> out, d_in;
  std::vector<std::vector<float>> grads;
};

PassResult run_pass(const LayerStack& stack, size_t k, size_t m, const std::vector<std::vector<float>>& w,
                    const std::vector<float>& x, const std::vector<float>* d_out) {
  PassResult r;
  on_worker_thread([&] {
    ExecContext ctx;
    Workspace::Frame frame(ctx.workspace());
    std::vector<DeviceArray<float>> dw, dg;
    std::vector<const float*> wp;
    std::vector<float*> gp;
    for (size_t i = 0; i < k; ++i) {
      dw.push_back(to_device(w[i]));
      dg.emplace_back(stack.num_params());
      dg.back().fill(NAN);  // every coordinate must be written
    }
    for (size_t i = 0; i < k; ++i) {
      wp.push_back(dw[i].data());
      gp.push_back(dg[i].data());
    }
    auto dx = to_device(x);
    DeviceArray<float> din(x.size());
    din.fill(NAN);
    StackPass pass(ctx, stack, k, m, wp.data(), d_out ? gp.data() : nullptr, dx.data(), d_out ? din.data() : nullptr);
    pass.forward();
    const size_t n_out = k * m * stack.out_shape().size();
    DeviceArray<float> out(n_out);
    ops::copy(ctx, out.data(), pass.output(), n_out);
    if (d_out) {
      auto ddo = to_device(*d_out);
      ops::copy(ctx, pass.d_output(), ddo.data(), n_out);
      pass.backward();
    }
    ctx.synchronize();
    r.out = out.to_host();
    if (d_out) {
      r.d_in = din.to_host();
      for (auto& g : dg) r.grads.push_back(g.to_host());
    }
  });
  return r;
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// sum of d_out . f(x, w), the scalar whose gradient backward computes.
double contracted(const LayerCase& c, const Batch& x, size_t rows, const Batch& w, const std::vector<float>& d_out) {
  Batch y = c.ref(x, rows, w.data());
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * d_out[i];
  return s;
}

// Forward against the reference, and backward against central differences (h = 1e-6 in
// double: truncation ~1e-12, rounding ~1e-10, and practically never across a ReLU kink or
// a max-pool tie).
TEST_F(Layers, ForwardMatchesTheReferenceAndBackwardItsFiniteDifferences) {
  const size_t m = 3;
  for (const auto& c : layer_cases()) {
    SCOPED_TRACE(c.label);
    LayerStack stack = single(c);
    const size_t n_in = m * stack.in_shape().size(), n_out = m * stack.out_shape().size();
    auto x = random_vec(n_in, 1);
    auto w = random_vec(stack.num_params(), 2, -1.0f, 1.0f);
    auto d_out = random_vec(n_out, 3);
    PassResult got = run_pass(stack, 1, m, {w}, x, &d_out);

    const Batch xd = to_double(x), wd = to_double(w);
    Batch want = c.ref(xd, m, wd.data());
    std::vector<float> want_f(want.begin(), want.end());
    EXPECT_TRUE(all_close(got.out, want_f, 1e-5, 1e-5)) << "forward";

    const double h = 1e-6;
    double scale = 0;
    std::vector<double> fd_x(n_in), fd_w(w.size());
    for (size_t i = 0; i < n_in; ++i) {
      Batch xp = xd, xm = xd;
      xp[i] += h;
      xm[i] -= h;
      fd_x[i] = (contracted(c, xp, m, wd, d_out) - contracted(c, xm, m, wd, d_out)) / (2 * h);
      scale = std::max(scale, std::fabs(fd_x[i]));
    }
    for (size_t i = 0; i < w.size(); ++i) {
      Batch wp = wd, wm = wd;
      wp[i] += h;
      wm[i] -= h;
      fd_w[i] = (contracted(c, xd, m, wp, d_out) - contracted(c, xd, m, wm, d_out)) / (2 * h);
      scale = std::max(scale, std::fabs(fd_w[i]));
    }
    ASSERT_GT(scale, 1e-2) << "degenerate test: the gradient is ~0";
    // float sums of up to ~150 products: relative 1e-4 plus 1e-5 of the gradient's scale
    for (size_t i = 0; i < n_in; ++i)
      ASSERT_NEAR(got.d_in[i], fd_x[i], 1e-4 * std::fabs(fd_x[i]) + 1e-5 * scale) << "input " << i;
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(got.grads[0][i], fd_w[i], 1e-4 * std::fabs(fd_w[i]) + 1e-5 * scale) << "parameter " << i;
  }
}

// k requests, each with its own parameters and rows, in one pass: on CPU backends each
// request gets exactly the bits it gets alone; on CUDA the batched GEMMs may round
// differently, so there to float rounding.
TEST_F(Layers, ABatchOfRequestsGivesEachWhatItGetsAlone) {
  const size_t m = 4, k = 3;
  for (const auto& c : layer_cases()) {
    SCOPED_TRACE(c.label);
    LayerStack stack = single(c);
    const size_t n_in = m * stack.in_shape().size(), n_out = m * stack.out_shape().size();
    std::vector<std::vector<float>> ws;
    std::vector<float> x, d_out;
    for (size_t i = 0; i < k; ++i) {
      ws.push_back(random_vec(stack.num_params(), uint32_t(10 + i), -1.0f, 1.0f));
      auto xi = random_vec(n_in, uint32_t(20 + i)), di = random_vec(n_out, uint32_t(30 + i));
      x.insert(x.end(), xi.begin(), xi.end());
      d_out.insert(d_out.end(), di.begin(), di.end());
    }
    PassResult all = run_pass(stack, k, m, ws, x, &d_out);
    for (size_t i = 0; i < k; ++i) {
      std::vector<float> xi(x.begin() + long(i * n_in), x.begin() + long((i + 1) * n_in));
      std::vector<float> di(d_out.begin() + long(i * n_out), d_out.begin() + long((i + 1) * n_out));
      PassResult one = run_pass(stack, 1, m, {ws[i]}, xi, &di);
      std::vector<float> out_i(all.out.begin() + long(i * n_out), all.out.begin() + long((i + 1) * n_out));
      std::vector<float> din_i(all.d_in.begin() + long(i * n_in), all.d_in.begin() + long((i + 1) * n_in));
      if (cuda()) {
        EXPECT_TRUE(all_close(out_i, one.out, 1e-5, 1e-6)) << "request " << i;
        EXPECT_TRUE(all_close(din_i, one.d_in, 1e-5, 1e-6)) << "request " << i;
        EXPECT_TRUE(all_close(all.grads[i], one.grads[0], 1e-5, 1e-6)) << "request " << i;
      } else {
        EXPECT_EQ(out_i, one.out) << "request " << i;
        EXPECT_EQ(din_i, one.d_in) << "request " << i;
        ASSERT_EQ(all.grads[i].size(), one.grads[0].size()) << "request " << i;
        // (a layer without parameters has no gradient: memcmp may not see null pointers)
        if (!one.grads[0].empty()) {
          EXPECT_EQ(0, std::memcmp(all.grads[i].data(), one.grads[0].data(), one.grads[0].size() * 4))
              << "request " << i;
        }
      }
    }
  }
}

// In a stack an activation after a dense or convolution layer writes over that layer's
// output (nothing reads it later), but never over the caller's input, and never over an
// output that its producer's backward reads (tanh then relu). The results are the
// reference composition's either way.
TEST_F(Layers, ActivationsRunInPlaceOnlyWhereNothingReadsWhatTheyOverwrite) {
  using namespace layers;
  std::vector<std::unique_ptr<Layer>> v;
  v.push_back(make_relu(Shape{1, 1, 6}));      // 0: the caller's input: not in place
  v.push_back(make_dense(Shape{1, 1, 6}, 5));  // 1
  v.push_back(make_tanh(Shape{1, 1, 5}));      // 2: in place over the dense output
  v.push_back(make_flatten(Shape{1, 1, 5}));   // 3: a view
  v.push_back(make_relu(Shape{1, 1, 5}));      // 4: tanh's backward reads its output: not in place
  v.push_back(make_dense(Shape{1, 1, 5}, 3));  // 5
  LayerStack stack(std::move(v));
  const size_t m = 4;
  auto x = random_vec(m * 6, 5);
  auto w = random_vec(stack.num_params(), 6, -1.0f, 1.0f);
  on_worker_thread([&] {
    ExecContext ctx;
    Workspace::Frame frame(ctx.workspace());
    auto dx = to_device(x), dw = to_device(w);
    DeviceArray<float> dg(w.size());
    const float* wp[1] = {dw.data()};
    float* gp[1] = {dg.data()};
    StackPass pass(ctx, stack, 1, m, wp, gp, dx.data(), nullptr);
    EXPECT_NE(pass.io(0).out, pass.io(0).in);
    EXPECT_EQ(pass.io(2).out, pass.io(2).in);
    EXPECT_EQ(pass.io(2).d_in, pass.io(2).d_out);
    EXPECT_EQ(pass.io(3).out, pass.io(3).in);
    EXPECT_NE(pass.io(4).out, pass.io(4).in);
    EXPECT_EQ(pass.io(0).d_in, nullptr) << "no gradient with respect to the caller's input was asked for";
    // the tanh in place over the dense output runs in the dense layer's kernels; the ReLU
    // that is not in place runs on its own
    EXPECT_EQ(pass.io(1).act, Act::Tanh);
    EXPECT_TRUE(pass.io(2).fused);
    EXPECT_FALSE(pass.io(4).fused);
    EXPECT_EQ(pass.io(5).act, Act::None);
    EXPECT_EQ(pass.output_bias(), Layer::npos) << "the output's bias is left out only when asked";
    StackPass leaving(ctx, stack, 1, m, wp, gp, dx.data(), nullptr, /*leave_output_bias=*/true);
    EXPECT_EQ(leaving.output_bias(), 35u + 15u) << "the top dense layer's bias: after 6x5+5 and 5x3 parameters";
  });
  Batch xd = to_double(x), wd = to_double(w);
  Batch h = layers_ref::tanh(layers_ref::dense(layers_ref::relu(xd), m, 6, 5, wd.data()));
  Batch want = layers_ref::dense(layers_ref::relu(h), m, 5, 3, wd.data() + 35);
  PassResult got = run_pass(stack, 1, m, {w}, x, nullptr);
  EXPECT_TRUE(all_close(got.out, std::vector<float>(want.begin(), want.end()), 1e-5, 1e-5));
}

// Each loss's rows against the reference, and dz against central differences of the
// reference row loss, times the scale.
TEST_F(Layers, OutputLossesMatchTheReferenceAndItsFiniteDifferences) {
  struct Case {
    DenseLoss kind;
    int outputs;
  };
  const size_t rows = 9;
  const float scale = 1.0f / 9;
  for (Case c : {Case{DenseLoss::Squared, 1}, Case{DenseLoss::Logistic, 1}, Case{DenseLoss::SoftmaxCrossEntropy, 5}}) {
    SCOPED_TRACE(int(c.kind));
    layers::OutputLoss loss(c.kind, c.outputs);
    auto z = random_vec(rows * size_t(c.outputs), 7, -3.0f, 3.0f);
    std::vector<float> y(rows);
    for (size_t r = 0; r < rows; ++r)
      y[r] = c.kind == DenseLoss::Squared ? float(r) * 0.3f - 1.0f
                                          : float(r % size_t(c.kind == DenseLoss::Logistic ? 2 : c.outputs));
    std::vector<int32_t> ids(rows);
    for (size_t r = 0; r < rows; ++r) ids[r] = int32_t(rows - 1 - r);  // row r's label is y[ids[r]]
    std::vector<float> row_loss, correct, dz;
    on_worker_thread([&] {
      ExecContext ctx;
      auto dzv = to_device(z), dy = to_device(y);
      DeviceArray<int32_t> did;
      did.upload(ids);
      DeviceArray<float> l(rows), k(rows), d(z.size());
      loss.apply(ctx, dzv.data(), rows, dy.data(), did.data(), l.data(), k.data(), d.data(), scale);
      ctx.synchronize();
      row_loss = l.to_host();
      correct = k.to_host();
      dz = d.to_host();
    });
    for (size_t r = 0; r < rows; ++r) {
      std::vector<double> zr(z.begin() + long(r * c.outputs), z.begin() + long((r + 1) * c.outputs));
      const double label = y[ids[r]];
      EXPECT_NEAR(row_loss[r], layers_ref::row_loss(c.kind, zr.data(), c.outputs, label), 1e-5) << "row " << r;
      if (c.kind == DenseLoss::SoftmaxCrossEntropy) {
        int arg = int(std::max_element(zr.begin(), zr.end()) - zr.begin());
        EXPECT_EQ(correct[r], arg == int(label) ? 1.0f : 0.0f) << "row " << r;
      }
      for (int j = 0; j < c.outputs; ++j) {
        auto zp = zr, zm = zr;
        zp[j] += 1e-6;
        zm[j] -= 1e-6;
        double fd = (layers_ref::row_loss(c.kind, zp.data(), c.outputs, label) -
                     layers_ref::row_loss(c.kind, zm.data(), c.outputs, label)) /
                    2e-6;
        EXPECT_NEAR(dz[r * c.outputs + j], fd * scale, 1e-5 * std::fabs(fd) + 1e-7) << "row " << r << " output " << j;
      }
    }
  }
  EXPECT_THROW(layers::OutputLoss(DenseLoss::Squared, 2), std::invalid_argument);
}

TEST(LayerShapes, ConvolutionAndPoolingArithmeticAndItsErrors) {
  EXPECT_EQ(conv2d_out_shape(Shape{28, 28, 1}, 6, 5, 1, 2), (Shape{28, 28, 6}));
  EXPECT_EQ(conv2d_out_shape(Shape{14, 14, 6}, 16, 5, 1, 0), (Shape{10, 10, 16}));
  EXPECT_EQ(conv2d_out_shape(Shape{8, 7, 2}, 3, 4, 3, 2), (Shape{3, 3, 3}));  // (8+4-4)/3+1, (7+4-4)/3+1
  EXPECT_EQ(maxpool_out_shape(Shape{7, 5, 3}, 3), (Shape{2, 1, 3}));
  auto key_of = [](auto&& f) {
    try {
      f();
    } catch (const ShapeError& e) {
      return e.key;
    }
    return std::string("no error");
  };
  EXPECT_EQ(key_of([] { conv2d_out_shape(Shape{4, 4, 1}, 2, 5, 1, 0); }), "kernel");
  EXPECT_EQ(key_of([] { conv2d_out_shape(Shape{4, 4, 1}, 2, 3, 0, 0); }), "stride");
  EXPECT_EQ(key_of([] { conv2d_out_shape(Shape{4, 4, 1}, 2, 3, 1, 3); }), "padding");
  EXPECT_EQ(key_of([] { conv2d_out_shape(Shape{4, 4, 1}, 0, 3, 1, 0); }), "channels");
  EXPECT_EQ(key_of([] { maxpool_out_shape(Shape{3, 8, 1}, 4); }), "pool");
  EXPECT_THROW(layers::make_conv2d(Shape{4, 4, 1}, 2, 5, 1, 0), ShapeError);
  std::vector<std::unique_ptr<Layer>> bad;
  bad.push_back(layers::make_dense(Shape{1, 1, 4}, 3));
  bad.push_back(layers::make_relu(Shape{1, 1, 4}));
  EXPECT_THROW(LayerStack(std::move(bad)), std::invalid_argument);
}

}  // namespace
}  // namespace asgd
