// tests/test_kernels.cpp — the kernels/ layer against plain scalar references: update rules
// and reductions (kernels/ops.h vs kernels/ops_ref.h), fp16/bf16 rounding, the models'
// gradients (central finite differences in double), evaluation, determinism, the keyed
// RNG and DeviceArray. Everything goes through upload/download, so the same tests run on
// the CUDA backend. Not here: timing, workers, engines (tests/test_sim.cpp and later).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <cuda_runtime.h>  // host definitions curand_kernel.h needs under g++
#include <curand_kernel.h>

#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/fp4.h"
#include "kernels/fp4_ref.h"
#include "kernels/layers/layers_ref.h"
#include "kernels/lowrank.h"
#include "kernels/lowrank_ref.h"
#include "kernels/model.h"
#include "kernels/ops.h"
#include "kernels/ops_ref.h"
#include "kernels/rng.h"
#include "sim/data/dataset.h"
#include "kernel_test_helpers.h"

namespace asgd {
namespace {

// ---------------------------------------------------------------------------------------
// helpers

// Awkward sizes: empty, one, not a multiple of any vector width, odd and large.
const size_t kSizes[] = {0, 1, 7, 1000, 100003};

// Elementwise ops are one or two float operations per element; the reference does the
// same operations, so they agree to a few ulps (exactly on CPU; CUDA may fuse into FMAs).
constexpr double kOpRtol = 1e-6, kOpAtol = 1e-6;

class Ops : public DeviceTest {};
class Rounding : public DeviceTest {};
class DenseModel : public DeviceTest {};
class QuadraticModel : public DeviceTest {};
class CnnModel : public DeviceTest {};
class DeviceArrayTest : public DeviceTest {};
class ExecContextTest : public DeviceTest {};

// ---------------------------------------------------------------------------------------
// ops vs ops_ref

TEST_F(Ops, SgdStepMatchesReferenceSeparateAndAliased) {
  ExecContext ctx;
  const float lr = 0.05f;
  for (size_t n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto w = random_vec(n, 1), g = random_vec(n, 2);
    auto want = w;
    ops_ref::sgd_step(want, g, lr);

    auto dw = to_device(w), dg = to_device(g);
    DeviceArray<float> dout(n);
    ops::sgd_step(ctx, dout.data(), dw.data(), dg.data(), lr, n);
    ctx.synchronize();
    EXPECT_TRUE(all_close(dout.to_host(), want, kOpRtol, kOpAtol));
    EXPECT_EQ(dw.to_host(), w) << "input changed although out != in";

    ops::sgd_step(ctx, dw.data(), dw.data(), dg.data(), lr, n);  // out == in
    ctx.synchronize();
    EXPECT_TRUE(all_close(dw.to_host(), want, kOpRtol, kOpAtol));
  }
}

// Large out-of-place steps on the CPU stream their output (ops.cu); the result must be
// bit for bit the plain loop's, whatever the output's alignment and length, since a
// server step writes in place or out of place depending on who still holds a version.
// Run on a thread with one kernel thread, as pool threads and the scheduler are.
TEST_F(Ops, LargeOutOfPlaceSgdStepIsBitIdenticalToThePlainLoop) {
  std::thread t([] {
    kernels_use_one_thread_here();
    ExecContext ctx;
    const float lr = 0.0371f;
    for (size_t n : {size_t(1) << 16, (size_t(1) << 17) + 3, size_t(101770)}) {
      for (size_t offset : {0, 1, 2, 3}) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", output offset " + std::to_string(offset));
        auto w = random_vec(n, 11), g = random_vec(n, 12);
        auto want = w;
        ops_ref::sgd_step(want, g, lr);
        auto dw = to_device(w), dg = to_device(g);
        DeviceArray<float> dout(n + offset);
        ops::sgd_step(ctx, dout.data() + offset, dw.data(), dg.data(), lr, n);
        ctx.synchronize();
        std::vector<float> got = dout.to_host();
        got.erase(got.begin(), got.begin() + long(offset));
        EXPECT_EQ(got, want);
        ops::sgd_step(ctx, dw.data(), dw.data(), dg.data(), lr, n);  // in place: the plain loop
        ctx.synchronize();
        EXPECT_EQ(dw.to_host(), want);
      }
    }
  });
  t.join();
}

// A velocity step (heavy-ball or Nesterov) against its scalar reference, out of place
// and in place: `ref` is the ops_ref form, `dev` the kernel.
template <class Ref, class Dev>
void check_velocity_step(Ref ref, Dev dev) {
  ExecContext ctx;
  const float lr = 0.03f, mu = 0.9f;
  for (size_t n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto w = random_vec(n, 3), v = random_vec(n, 4), g = random_vec(n, 5);
    auto want_w = w, want_v = v;
    ref(want_w, want_v, g, lr, mu);

    auto dw = to_device(w), dv = to_device(v), dg = to_device(g);
    DeviceArray<float> dout(n);
    dev(ctx, dout.data(), dw.data(), dv.data(), dg.data(), lr, mu, n);
    ctx.synchronize();
    EXPECT_TRUE(all_close(dout.to_host(), want_w, kOpRtol, kOpAtol));
    EXPECT_TRUE(all_close(dv.to_host(), want_v, kOpRtol, kOpAtol));
    EXPECT_EQ(dw.to_host(), w);

    dv.upload(v);
    dev(ctx, dw.data(), dw.data(), dv.data(), dg.data(), lr, mu, n);
    ctx.synchronize();
    EXPECT_TRUE(all_close(dw.to_host(), want_w, kOpRtol, kOpAtol));
    EXPECT_TRUE(all_close(dv.to_host(), want_v, kOpRtol, kOpAtol));
  }
}

TEST_F(Ops, MomentumStepMatchesReferenceSeparateAndAliased) {
  check_velocity_step([](auto&&... a) { ops_ref::momentum_step(a...); }, [](auto&&... a) { ops::momentum_step(a...); });
}

TEST_F(Ops, DcSgdStepMatchesReferenceSeparateAndAliased) {
  ExecContext ctx;
  const float lr = 0.1f, lambda = 0.7f;
  for (size_t n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto w = random_vec(n, 6), g = random_vec(n, 7), backup = random_vec(n, 8);
    auto want = w;
    ops_ref::dc_sgd_step(want, g, backup, lr, lambda);

    auto dw = to_device(w), dg = to_device(g), db = to_device(backup);
    DeviceArray<float> dout(n);
    ops::dc_sgd_step(ctx, dout.data(), dw.data(), dg.data(), db.data(), lr, lambda, n);
    ctx.synchronize();
    EXPECT_TRUE(all_close(dout.to_host(), want, kOpRtol, kOpAtol));
    EXPECT_EQ(dw.to_host(), w);

    ops::dc_sgd_step(ctx, dw.data(), dw.data(), dg.data(), db.data(), lr, lambda, n);
    ctx.synchronize();
    EXPECT_TRUE(all_close(dw.to_host(), want, kOpRtol, kOpAtol));
  }
}

TEST_F(Ops, NesterovStepMatchesReferenceSeparateAndAliased) {
  check_velocity_step([](auto&&... a) { ops_ref::nesterov_step(a...); }, [](auto&&... a) { ops::nesterov_step(a...); });
}

// The bias-corrected parameters of step t, as engines/optimizer.h sets them.
ops::AdamParams adam_params(float lr, double b1, double b2, double eps, double wd, bool decoupled, int t) {
  ops::AdamParams p;
  p.lr = lr;
  p.beta1 = float(b1);
  p.beta2 = float(b2);
  p.one_minus_beta1 = float(1.0 - b1);
  p.one_minus_beta2 = float(1.0 - b2);
  p.eps = float(eps);
  p.weight_decay = float(wd);
  p.decoupled = decoupled;
  p.c1 = float(1.0 - std::pow(b1, t));
  p.c2 = float(1.0 - std::pow(b2, t));
  return p;
}

// Five steps of Adam (plain, with L2 weight decay) and AdamW against the double-precision
// reference, out of place then in place; the state (m, v) too. Elements with a tiny
// second moment make d large, so the tolerance is relative to lr (one step's size).
TEST_F(Ops, AdamStepMatchesReferenceForFiveSteps) {
  ExecContext ctx;
  const float lr = 0.01f;
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (double wd : {0.0, 0.1}) {
    for (bool decoupled : {false, true}) {
      for (size_t n : kSizes) {
        SCOPED_TRACE("wd " + std::to_string(wd) + (decoupled ? " adamw" : " adam") + ", n = " + std::to_string(n));
        auto w = random_vec(n, 41), m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
        auto want_w = w, want_m = m, want_v = v;
        auto dw = to_device(w), dm = to_device(m), dv = to_device(v);
        DeviceArray<float> dout(n);
        for (int t = 1; t <= 5; ++t) {
          auto g = random_vec(n, 50 + uint32_t(t));
          ops_ref::adam_step(want_w, want_m, want_v, g, lr, b1, b2, eps, wd, decoupled, t);
          auto dg = to_device(g);
          const ops::AdamParams p = adam_params(lr, b1, b2, eps, wd, decoupled, t);
          if (t % 2) {  // out of place, then copy back
            ops::adam_step(ctx, dout.data(), dw.data(), dm.data(), dv.data(), dg.data(), p, n);
            ops::copy(ctx, dw.data(), dout.data(), n);
          } else {
            ops::adam_step(ctx, dw.data(), dw.data(), dm.data(), dv.data(), dg.data(), p, n);
          }
          ctx.synchronize();
          EXPECT_TRUE(all_close(dw.to_host(), want_w, 1e-6, 1e-5 * lr)) << "step " << t;
          EXPECT_TRUE(all_close(dm.to_host(), want_m, kOpRtol, kOpAtol)) << "step " << t;
          EXPECT_TRUE(all_close(dv.to_host(), want_v, kOpRtol, kOpAtol)) << "step " << t;
        }
      }
    }
  }
}

// The direction kernels give what the step kernels give: x - lr * d from them is the
// step's w, bit for bit (one per-element rule serves both), and the state the same.
TEST_F(Ops, DirectionsGiveTheStepsBits) {
  ExecContext ctx;
  const size_t n = 1000;
  const float lr = 0.05f, mu = 0.7f;
  auto w = random_vec(n, 61), g = random_vec(n, 62), v = random_vec(n, 63);
  auto m = random_vec(n, 64), s = random_vec(n, 65);
  for (auto& x : s) x = std::fabs(x);  // a second moment
  for (bool nesterov : {false, true}) {
    auto dw = to_device(w), dg = to_device(g), dv = to_device(v), dv2 = to_device(v);
    DeviceArray<float> want(n), got(n);
    if (nesterov)
      ops::nesterov_step(ctx, want.data(), dw.data(), dv.data(), dg.data(), lr, mu, n);
    else
      ops::momentum_step(ctx, want.data(), dw.data(), dv.data(), dg.data(), lr, mu, n);
    auto u = to_device(g);
    ops::momentum_direction(ctx, u.data(), dv2.data(), mu, nesterov, n);
    ops::sgd_step(ctx, got.data(), dw.data(), u.data(), lr, n);
    ctx.synchronize();
    EXPECT_EQ(got.to_host(), want.to_host()) << (nesterov ? "nesterov" : "heavy ball");
    EXPECT_EQ(dv2.to_host(), dv.to_host());
  }
  for (bool decoupled : {false, true}) {
    const ops::AdamParams p = adam_params(lr, 0.9, 0.99, 1e-6, 0.2, decoupled, 3);
    auto dw = to_device(w), dg = to_device(g), dm = to_device(m), ds = to_device(s), dm2 = to_device(m),
         ds2 = to_device(s);
    DeviceArray<float> want(n), got(n);
    ops::adam_step(ctx, want.data(), dw.data(), dm.data(), ds.data(), dg.data(), p, n);
    auto u = to_device(g);
    ops::adam_direction(ctx, u.data(), dw.data(), dm2.data(), ds2.data(), p, n);
    ops::sgd_step(ctx, got.data(), dw.data(), u.data(), lr, n);
    ctx.synchronize();
    EXPECT_EQ(got.to_host(), want.to_host()) << (decoupled ? "adamw" : "adam");
    EXPECT_EQ(dm2.to_host(), dm.to_host());
    EXPECT_EQ(ds2.to_host(), ds.to_host());
  }
}

// The row forms (ops::Rows) on a table of 37 rows x width 3 followed by a dense tail: the
// named rows get the scalar reference's values (and the whole-array call's bits), every
// other element keeps its bits, out of place and in place.
TEST_F(Ops, RowFormsTouchOnlyTheNamedRows) {
  ExecContext ctx;
  for (size_t width : {size_t(1), size_t(3)}) {
    SCOPED_TRACE("width " + std::to_string(width));
    const size_t table = 37, n = table * width + 5;
    const std::vector<int32_t> rows = {0, 4, 5, 6, 20, 36};
    const ops::Rows r{rows.data(), rows.size(), width};
    const std::vector<size_t> el = ops_ref::row_elements(rows, width);
    const float lr = 0.07f, mu = 0.8f, lambda = 0.6f;
    auto w = random_vec(n, 31), v = random_vec(n, 32), g = random_vec(n, 33), backup = random_vec(n, 34);
    const auto dw = to_device(w), dg = to_device(g), db = to_device(backup);
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(in_place ? "in place" : "out of place");
      // sgd
      auto want = w;
      ops_ref::sgd_step_rows(want, g, lr, el);
      auto dout = to_device(w), din = to_device(w);
      ops::sgd_step(ctx, r, dout.data(), in_place ? dout.data() : din.data(), dg.data(), lr);
      DeviceArray<float> whole(n);
      ops::sgd_step(ctx, whole.data(), dw.data(), dg.data(), lr, n);
      ctx.synchronize();
      std::vector<float> got = dout.to_host(), all = whole.to_host();
      EXPECT_EQ(got, want);
      for (size_t i : el) EXPECT_EQ(got[i], all[i]) << i;
      // momentum
      auto want_w = w, want_v = v;
      ops_ref::momentum_step_rows(want_w, want_v, g, lr, mu, el);
      auto mout = to_device(w), min = to_device(w), dv = to_device(v);
      ops::momentum_step(ctx, r, mout.data(), in_place ? mout.data() : min.data(), dv.data(), dg.data(), lr, mu);
      ctx.synchronize();
      EXPECT_EQ(mout.to_host(), want_w);
      EXPECT_EQ(dv.to_host(), want_v);
      // nesterov
      want_w = w, want_v = v;
      ops_ref::nesterov_step_rows(want_w, want_v, g, lr, mu, el);
      auto nout = to_device(w), nin = to_device(w), nv = to_device(v);
      ops::nesterov_step(ctx, r, nout.data(), in_place ? nout.data() : nin.data(), nv.data(), dg.data(), lr, mu);
      ctx.synchronize();
      EXPECT_EQ(nout.to_host(), want_w);
      EXPECT_EQ(nv.to_host(), want_v);
      // adam with L2, adamw: the reference on the rows, the whole-array call's bits there,
      // every other element (and its moments) untouched
      for (bool decoupled : {false, true}) {
        const ops::AdamParams p = adam_params(lr, 0.9, 0.999, 1e-8, 0.1, decoupled, 2);
        std::vector<float> am(n), as(n);
        for (size_t i = 0; i < n; ++i) am[i] = 0.1f * v[i], as[i] = 0.01f * std::fabs(v[i]);
        auto want_a = w, want_m = am, want_s = as;
        ops_ref::adam_step_rows(want_a, want_m, want_s, g, lr, 0.9, 0.999, 1e-8, 0.1, decoupled, 2, el);
        auto aout = to_device(w), ain = to_device(w), dam = to_device(am), das = to_device(as);
        ops::adam_step(ctx, r, aout.data(), in_place ? aout.data() : ain.data(), dam.data(), das.data(), dg.data(), p);
        auto wm = to_device(am), ws = to_device(as);
        DeviceArray<float> awhole(n);
        ops::adam_step(ctx, awhole.data(), dw.data(), wm.data(), ws.data(), dg.data(), p, n);
        ctx.synchronize();
        const std::vector<float> a_got = aout.to_host(), a_all = awhole.to_host(), m_got = dam.to_host();
        EXPECT_TRUE(all_close(a_got, want_a, 1e-6, 1e-5 * lr));
        EXPECT_TRUE(all_close(m_got, want_m, kOpRtol, kOpAtol));
        std::vector<bool> named(n, false);
        for (size_t i : el) {
          named[i] = true;
          EXPECT_EQ(a_got[i], a_all[i]) << i;
        }
        for (size_t i = 0; i < n; ++i) {
          if (!named[i]) {
            EXPECT_TRUE(a_got[i] == w[i] && m_got[i] == am[i]) << "element " << i << " changed";
          }
        }
      }
      // delay compensation
      want = w;
      ops_ref::dc_sgd_step_rows(want, g, backup, lr, lambda, el);
      auto cout_ = to_device(w), cin = to_device(w);
      ops::dc_sgd_step(ctx, r, cout_.data(), in_place ? cout_.data() : cin.data(), dg.data(), db.data(), lr, lambda);
      ctx.synchronize();
      EXPECT_EQ(cout_.to_host(), want);
    }
    // add_into, scale, copy
    auto acc = to_device(w);
    ops::add_into(ctx, r, acc.data(), dg.data());
    ops::scale(ctx, r, acc.data(), 0.25f);
    auto cp = to_device(v);
    ops::copy(ctx, r, cp.data(), dw.data());
    ctx.synchronize();
    auto want_acc = w, want_cp = v;
    for (size_t i : el) {
      want_acc[i] += g[i];
      want_acc[i] *= 0.25f;
      want_cp[i] = w[i];
    }
    EXPECT_EQ(acc.to_host(), want_acc);
    EXPECT_EQ(cp.to_host(), want_cp);
    // no rows: nothing happens
    auto none = to_device(w);
    ops::sgd_step(ctx, ops::Rows{nullptr, 0, width}, none.data(), none.data(), dg.data(), lr);
    ctx.synchronize();
    EXPECT_EQ(none.to_host(), w);
  }
}

TEST_F(Ops, DcSgdStepWithBackupEqualToParamsIsPlainSgd) {
  // The compensation term vanishes when the worker read the current parameters.
  ExecContext ctx;
  auto w = random_vec(1000, 9), g = random_vec(1000, 10);
  auto dw = to_device(w), dg = to_device(g), db = to_device(w);
  DeviceArray<float> a(1000), b(1000);
  ops::dc_sgd_step(ctx, a.data(), dw.data(), dg.data(), db.data(), 0.1f, 5.0f, 1000);
  ops::sgd_step(ctx, b.data(), dw.data(), dg.data(), 0.1f, 1000);
  ctx.synchronize();
  EXPECT_EQ(a.to_host(), b.to_host());
}

TEST_F(Ops, AddIntoScaleCopyMatchReference) {
  ExecContext ctx;
  for (size_t n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto acc = random_vec(n, 11), x = random_vec(n, 12);

    auto want = acc;
    ops_ref::add_into(want, x);
    auto dacc = to_device(acc), dx = to_device(x);
    ops::add_into(ctx, dacc.data(), dx.data(), n);
    ctx.synchronize();
    EXPECT_TRUE(all_close(dacc.to_host(), want, kOpRtol, kOpAtol));
    EXPECT_EQ(dx.to_host(), x);

    auto scaled = x;
    ops_ref::scale(scaled, -1.7f);
    ops::scale(ctx, dx.data(), -1.7f, n);
    ctx.synchronize();
    EXPECT_TRUE(all_close(dx.to_host(), scaled, kOpRtol, kOpAtol));

    DeviceArray<float> dout(n);
    dout.fill(123.0f);
    ops::copy(ctx, dout.data(), dacc.data(), n);
    ops::copy(ctx, dacc.data(), dacc.data(), n);  // out == in: a no-op
    ctx.synchronize();
    EXPECT_EQ(dout.to_host(), dacc.to_host());
    EXPECT_TRUE(all_close(dacc.to_host(), want, kOpRtol, kOpAtol));
  }
}

TEST_F(Ops, ElasticExchangeMatchesReferenceAndConservesTheSum) {
  ExecContext ctx;
  const float alpha = 0.25f;
  for (size_t n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto x = random_vec(n, 13), c = random_vec(n, 14);
    auto want_x = x, want_c = c;
    ops_ref::elastic_exchange(want_x, want_c, alpha);
    auto dx = to_device(x), dc = to_device(c);
    ops::elastic_exchange(ctx, dx.data(), dc.data(), alpha, n);
    ctx.synchronize();
    auto gx = dx.to_host(), gc = dc.to_host();
    EXPECT_TRUE(all_close(gx, want_x, kOpRtol, kOpAtol));
    EXPECT_TRUE(all_close(gc, want_c, kOpRtol, kOpAtol));
    // The exchange moves mass between x and c: x + c is unchanged up to the rounding of
    // the two float updates (|x|, |c| <= 2.5: half an ulp is 1.2e-7 each).
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(double(gx[i]) + gc[i], double(x[i]) + c[i], 5e-7) << "at " << i;
  }
}

TEST_F(Ops, MoveTowardsMatchesReference) {
  ExecContext ctx;
  for (size_t n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto c = random_vec(n, 15), mean = random_vec(n, 16);
    auto want = c;
    ops_ref::move_towards(want, mean, 0.4f);
    auto dc = to_device(c), dm = to_device(mean);
    ops::move_towards(ctx, dc.data(), dm.data(), 0.4f, n);
    ctx.synchronize();
    EXPECT_TRUE(all_close(dc.to_host(), want, kOpRtol, kOpAtol));
    // beta = 1 lands exactly on the mean.
    ops::move_towards(ctx, dc.data(), dm.data(), 1.0f, n);
    ctx.synchronize();
    EXPECT_TRUE(all_close(dc.to_host(), mean, 0, 1e-6));
  }
}

TEST_F(Ops, SumAndSqNormMatchReference) {
  ExecContext ctx;
  for (size_t n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto x = random_vec(n, 17, -3.0f, 5.0f);
    auto dx = to_device(x);
    double abs_sum = 0;
    for (float v : x) abs_sum += std::fabs(v);
    // Both accumulate in double; only the order may differ (CUDA's tree against the
    // reference's left-to-right loop), so they differ by at most the error bound of
    // recursive summation, n * eps * (sum of magnitudes). Seen on an H100: 1.25e-13
    // relative for n = 100,003, within the bound (2.2e-11) and beyond a few ulps.
    const double bound = double(n) * std::numeric_limits<double>::epsilon();
    EXPECT_NEAR(ops::sum(ctx, dx.data(), n), ops_ref::sum(x), bound * abs_sum + 1e-300);
    double want_sq = ops_ref::sq_norm(x);
    EXPECT_NEAR(ops::sq_norm(ctx, dx.data(), n), want_sq, bound * want_sq + 1e-300);
  }
  // Values whose float sum would lose the small terms: accumulation really is in double.
  std::vector<float> x(100001, 1e-4f);
  x[0] = 1e8f;
  auto dx = to_device(x);
  // (float accumulation would lose all 10; double rounding costs at most 1e5 half-ulps of
  // 1e8, i.e. 7.5e-4)
  EXPECT_NEAR(ops::sum(ctx, dx.data(), x.size()), 1e8 + 100000 * double(1e-4f), 1e-3);
  EXPECT_EQ(ops::sum(ctx, dx.data(), 0), 0.0);
  EXPECT_EQ(ops::sq_norm(ctx, dx.data(), 0), 0.0);
}

TEST_F(Ops, AllFiniteFindsInfAndNanAnywhere) {
  ExecContext ctx;
  for (size_t n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto x = random_vec(n, 18);
    auto dx = to_device(x);
    EXPECT_TRUE(ops::all_finite(ctx, dx.data(), n));
    if (n == 0) continue;
    const float bad[] = {INFINITY, -INFINITY, NAN, -NAN};
    for (float b : bad) {
      for (size_t pos : {size_t(0), n / 2, n - 1}) {
        auto y = x;
        y[pos] = b;
        dx.upload(y);
        EXPECT_FALSE(ops::all_finite(ctx, dx.data(), n)) << b << " at " << pos;
      }
    }
    // FLT_MAX and subnormals are finite.
    auto y = x;
    y[0] = FLT_MAX;
    y[n - 1] = -std::numeric_limits<float>::denorm_min();
    dx.upload(y);
    EXPECT_TRUE(ops::all_finite(ctx, dx.data(), n));
  }
}

// ---------------------------------------------------------------------------------------
// fp16 / bf16 rounding

// Values that stress rounding: ties, subnormals, the top of the fp16 range, signs,
// inf/nan, plus random bit patterns over every exponent.
std::vector<float> rounding_probe_values() {
  std::vector<float> v = {
      0.0f, -0.0f, 1.0f, -1.0f, 0.1f, -0.1f, 3.14159265f, 1e-3f, 1e3f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX,
      -FLT_MAX, FLT_MIN, -FLT_MIN, std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
      // top of the fp16 range: 65504 is the largest half; 65520 the tie
      65504.0f, 65505.0f, 65519.0f, std::nextafter(65520.0f, 0.0f), 65520.0f, std::nextafter(65520.0f, INFINITY),
      65536.0f, 1e5f, -65504.0f, -65520.0f, -std::nextafter(65520.0f, 0.0f), 3e38f};
  // fp16 subnormals: quantum 2^-24, smallest normal 2^-14; ties at (k + 1/2) quanta.
  const float q = std::ldexp(1.0f, -24);
  for (int k = 0; k <= 1025; ++k) {
    for (float f : {k * q, (k + 0.5f) * q, (k + 0.25f) * q, (k + 0.75f) * q}) {
      v.push_back(f);
      v.push_back(-f);
      v.push_back(std::nextafter(f, 0.0f));
      v.push_back(std::nextafter(f, 1.0f));
    }
  }
  v.push_back(std::ldexp(1.0f, -25));  // tie between 0 and the smallest subnormal
  v.push_back(std::ldexp(1.0f, -26));
  // fp16 and bf16 ties in the normal range: x + half an ulp for random representable x,
  // and one float ulp either side of the tie.
  std::mt19937 gen(42);
  for (int i = 0; i < 20000; ++i) {
    int e = int(gen() % 30) - 14;  // fp16 normal exponents
    uint32_t mant = gen() % 1024;
    float x = std::ldexp(1.0f + mant / 1024.0f, e);
    float tie = x + std::ldexp(1.0f, e - 11);
    for (float f : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, INFINITY)}) {
      v.push_back(f);
      v.push_back(-f);
    }
    int eb = int(gen() % 250) - 125;  // bf16 exponents
    uint32_t mb = gen() % 128;
    float xb = std::ldexp(1.0f + mb / 128.0f, eb);
    float tb = xb + std::ldexp(1.0f, eb - 8);
    for (float f : {tb, std::nextafter(tb, 0.0f), std::nextafter(tb, INFINITY)}) {
      v.push_back(f);
      v.push_back(-f);
    }
  }
  for (int i = 0; i < (1 << 17); ++i) v.push_back(from_bits(uint32_t(gen())));
  return v;
}

std::vector<float> device_round(const std::vector<float>& in, bool fp16) {
  ExecContext ctx;
  auto d = to_device(in);
  if (fp16)
    ops::round_fp16(ctx, d.data(), in.size());
  else
    ops::round_bf16(ctx, d.data(), in.size());
  ctx.synchronize();
  return d.to_host();
}

// Bit-exact, except that any NaN matches any NaN.
::testing::AssertionResult same_rounding(const std::vector<float>& in, const std::vector<float>& got,
                                         float (*ref)(float)) {
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < in.size(); ++i) {
    float want = ref(in[i]);
    bool ok = std::isnan(want) ? std::isnan(got[i]) : bits(got[i]) == bits(want);
    if (!ok && ++bad <= 5) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " [%a -> got %a want %a]", double(in[i]), double(got[i]), double(want));
      first += buf;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << in.size() << " differ:" << first;
}

TEST_F(Rounding, Fp16MatchesReferenceBitForBit) {
  auto in = rounding_probe_values();
  EXPECT_TRUE(same_rounding(in, device_round(in, true), ops_ref::round_fp16));
}

TEST_F(Rounding, Bf16MatchesReferenceBitForBit) {
  auto in = rounding_probe_values();
  EXPECT_TRUE(same_rounding(in, device_round(in, false), ops_ref::round_bf16));
}

#if defined(__FLT16_MANT_DIG__)
// The compiler's own float -> _Float16 conversion (IEEE, nearest-even) is an oracle
// independent of both the kernel and ops_ref.
TEST_F(Rounding, Fp16AgreesWithCompilerFloat16) {
  auto in = rounding_probe_values();
  auto got = device_round(in, true);
  size_t bad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    float want = float(static_cast<_Float16>(in[i]));
    bool ok = std::isnan(want) ? std::isnan(got[i]) : bits(got[i]) == bits(want);
    if (!ok && ++bad <= 5) ADD_FAILURE() << std::hexfloat << in[i] << " -> " << got[i] << " want " << want;
  }
  EXPECT_EQ(bad, 0u);
}
#endif

TEST_F(Rounding, KnownValues) {
  const float q = std::ldexp(1.0f, -24);
  struct Case {
    float in, fp16, bf16;
  };
  const Case cases[] = {
      {1.0f + std::ldexp(1.0f, -11), 1.0f, 1.0f},                             // fp16 tie -> even
      {1.0f + 3 * std::ldexp(1.0f, -11), 1.0f + std::ldexp(1.0f, -9), 1.0f},  // tie -> even (up)
      {1.00390625f, 1.00390625f, 1.0f},                                       // bf16 tie -> even
      {1.01171875f, 1.01171875f, 1.015625f},                                  // bf16 tie -> even (up)
      {2049.0f, 2048.0f, 2048.0f},                                            // fp16 ulp 2 at 2048
      {2051.0f, 2052.0f, 2048.0f},
      {65504.0f, 65504.0f, 65536.0f},
      {65519.0f, 65504.0f, 65536.0f},
      {65520.0f, INFINITY, 65536.0f},  // the fp16 overflow tie
      {-65520.0f, -INFINITY, -65536.0f},
      {1e6f, INFINITY, 999424.0f},
      {0.1f, 0.0999755859375f, 0.10009765625f},
      {std::ldexp(1.0f, -25), 0.0f, std::ldexp(1.0f, -25)},           // tie to the even 0
      {3 * std::ldexp(1.0f, -25), 2 * q, 3 * std::ldexp(1.0f, -25)},  // 1.5 quanta -> 2
      {1023.5f * q, 1024 * q, 1024 * q},                              // fp16: up to normal
      {-2.5f * q, -2 * q, -2.5f * q},
  };
  std::vector<float> in;
  for (const auto& c : cases) in.push_back(c.in);
  auto h = device_round(in, true), b = device_round(in, false);
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << std::hexfloat << "input " << in[i]);
    EXPECT_EQ(bits(h[i]), bits(cases[i].fp16)) << "fp16 gave " << h[i];
    EXPECT_EQ(bits(b[i]), bits(cases[i].bf16)) << "bf16 gave " << b[i];
    EXPECT_EQ(bits(ops_ref::round_fp16(in[i])), bits(cases[i].fp16)) << "ops_ref fp16";
    EXPECT_EQ(bits(ops_ref::round_bf16(in[i])), bits(cases[i].bf16)) << "ops_ref bf16";
  }
  // Signs of zero, infinities and NaN survive.
  std::vector<float> sp = {-0.0f, INFINITY, -INFINITY, NAN, -1e-30f};
  for (bool fp16 : {true, false}) {
    auto r = device_round(sp, fp16);
    EXPECT_EQ(bits(r[0]), bits(-0.0f));
    EXPECT_EQ(r[1], INFINITY);
    EXPECT_EQ(r[2], -INFINITY);
    EXPECT_TRUE(std::isnan(r[3]));
    EXPECT_TRUE(std::signbit(r[4]));
  }
  // Rounding is idempotent.
  auto once = device_round(rounding_probe_values(), true);
  auto twice = device_round(once, true);
  EXPECT_TRUE(same_rounding(once, twice, [](float f) { return f; }));
}

// ---------------------------------------------------------------------------------------
// models: a plain double-precision forward pass, gradient checks, evaluation

// Per-row loss of the dense model computed naively in double from float parameters.
// Layout as in kernels/models/dense.cu: per layer W (in, out) row-major, then b (out).
struct RefRow {
  double loss = 0;
  bool correct = false;
  double margin = 0;  // distance from a decision tie (classification)
};

RefRow ref_dense_row(const std::vector<int>& layers, DenseLoss loss, const std::vector<double>& w, const float* x,
                     float y) {
  std::vector<double> a(x, x + layers[0]);
  size_t off = 0;
  const size_t L = layers.size() - 1;
  for (size_t l = 1; l <= L; ++l) {
    int in = layers[l - 1], out = layers[l];
    std::vector<double> z(out, 0.0);
    for (int j = 0; j < out; ++j) {
      double s = w[off + size_t(in) * out + j];  // bias
      for (int i = 0; i < in; ++i) s += a[i] * w[off + size_t(i) * out + j];
      z[j] = (l < L && s < 0) ? 0.0 : s;
    }
    off += size_t(in) * out + out;
    a = z;
  }
  RefRow r;
  if (loss == DenseLoss::Squared) {
    double d = a[0] - y;
    r.loss = 0.5 * d * d;
  } else if (loss == DenseLoss::Logistic) {
    double v = a[0];
    r.loss = std::log1p(std::exp(-std::fabs(v))) + std::max(v, 0.0) - y * v;
    r.correct = (v > 0) == (y > 0.5f);
    r.margin = std::fabs(v);
  } else {
    int label = int(y), arg = 0;
    for (size_t j = 1; j < a.size(); ++j)
      if (a[j] > a[arg]) arg = int(j);
    double mx = a[arg], se = 0, second = -INFINITY;
    for (size_t j = 0; j < a.size(); ++j) {
      se += std::exp(a[j] - mx);
      if (int(j) != arg) second = std::max(second, a[j]);
    }
    r.loss = mx + std::log(se) - a[label];
    r.correct = arg == label;
    r.margin = mx - second;
  }
  return r;
}

double ref_mean_loss(const std::vector<int>& layers, DenseLoss loss, const std::vector<double>& w, const HostDataset& d,
                     const std::vector<int32_t>& ids) {
  double s = 0;
  for (int32_t id : ids) s += ref_dense_row(layers, loss, w, &d.x[size_t(id) * d.dim], d.y[id]).loss;
  return s / double(ids.size());
}

// Central differences (step h) of loss at every coordinate of w; scale: their largest
// magnitude.
std::vector<double> central_differences(const std::function<double(const std::vector<double>&)>& loss,
                                        const std::vector<double>& w, double h, double& scale) {
  std::vector<double> fd(w.size());
  scale = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    auto wp = w, wm = w;
    wp[i] += h;
    wm[i] -= h;
    fd[i] = (loss(wp) - loss(wm)) / (2 * h);
    scale = std::max(scale, std::fabs(fd[i]));
  }
  return fd;
}

struct DenseCase {
  const char* label;
  std::vector<int> layers;
  DenseLoss loss;
  const char* name;
  bool classification;
  int classes;
};

const DenseCase kDenseCases[] = {
    {"linear", {6, 1}, DenseLoss::Squared, "linear", false, 0},
    {"logistic", {6, 1}, DenseLoss::Logistic, "logistic", true, 2},
    {"softmax", {6, 4}, DenseLoss::SoftmaxCrossEntropy, "softmax", true, 4},
    {"mlp", {6, 8, 5, 4}, DenseLoss::SoftmaxCrossEntropy, "mlp", true, 4},
};

HostDataset small_data(const DenseCase& c, size_t n, uint64_t seed) {
  SyntheticSpec s;
  s.classification = c.classification;
  s.classes = c.classification ? c.classes : 10;
  s.features = size_t(c.layers[0]);
  s.train_samples = n;
  s.test_samples = 1;
  s.noise = 0.3;
  return make_synthetic(s, seed).train;
}

// Initial parameters with non-zero biases (so bias gradients and dead/alive ReLUs are
// both exercised).
std::vector<float> test_params(const Model& m, uint64_t seed) {
  std::vector<float> w;
  m.init_params(seed, w);
  auto jitter = random_vec(w.size(), uint32_t(seed) + 100, -0.3f, 0.3f);
  for (size_t i = 0; i < w.size(); ++i) w[i] += jitter[i];
  return w;
}

std::vector<int32_t> random_ids(size_t m, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> ids(m);
  for (auto& id : ids) id = int32_t(gen() % n);
  return ids;
}

// Model loss at host parameters w (float), via loss_grad's returned mean loss.
double model_loss(const Model& model, ExecContext& ctx, const std::vector<float>& w, const DeviceDataset* data,
                  const std::vector<int32_t>& ids, const NoiseKey& key = {}) {
  auto dw = to_device(w);
  DeviceArray<float> g(w.size());
  double l = model.loss_grad(ctx, dw.data(), data, ids.data(), ids.size(), key, g.data());
  ctx.synchronize();
  return l;
}

std::vector<float> model_grad(const Model& model, ExecContext& ctx, const std::vector<float>& w,
                              const DeviceDataset* data, const std::vector<int32_t>& ids, const NoiseKey& key = {},
                              double* loss = nullptr) {
  auto dw = to_device(w);
  DeviceArray<float> g(w.size());
  g.fill(NAN);  // every coordinate must be written
  double l = model.loss_grad(ctx, dw.data(), data, ids.data(), ids.size(), key, g.data());
  ctx.synchronize();
  if (loss) *loss = l;
  return g.to_host();
}

TEST_F(DenseModel, DescribesItself) {
  for (const auto& c : kDenseCases) {
    auto m = make_dense(c.layers, c.loss);
    EXPECT_EQ(m->name(), c.name);
    size_t want = 0;
    for (size_t l = 1; l < c.layers.size(); ++l) want += size_t(c.layers[l - 1]) * c.layers[l] + c.layers[l];
    EXPECT_EQ(m->num_params(), want) << c.label;
    EXPECT_EQ(m->is_classifier(), c.loss != DenseLoss::Squared) << c.label;
    EXPECT_TRUE(m->uses_data());
  }
  EXPECT_THROW(make_dense({5}, DenseLoss::Squared), std::invalid_argument);
  EXPECT_THROW(make_dense({5, 0, 1}, DenseLoss::Squared), std::invalid_argument);
  EXPECT_THROW(make_dense({5, 3}, DenseLoss::Squared), std::invalid_argument);
  EXPECT_THROW(make_dense({5, 2}, DenseLoss::Logistic), std::invalid_argument);
}

TEST_F(DenseModel, RejectsAMismatchedDataset) {
  auto m = make_dense({7, 3}, DenseLoss::SoftmaxCrossEntropy);
  auto host = small_data(kDenseCases[2], 10, 1);  // 6 features
  auto data = upload(host);
  ExecContext ctx;
  std::vector<float> w(m->num_params(), 0.0f);
  std::vector<int32_t> ids = {0, 1};
  EXPECT_THROW(model_loss(*m, ctx, w, &data, ids), std::invalid_argument);
  EXPECT_THROW(model_loss(*m, ctx, w, nullptr, ids), std::invalid_argument);
  auto dw = to_device(w);
  EXPECT_THROW(m->evaluate(ctx, dw.data(), &data, 0, 2), std::invalid_argument);
}

// The analytic gradient (float) against central differences of a double-precision
// re-implementation of the loss (h = 1e-6: truncation ~1e-12, rounding ~1e-10, and
// practically no chance of stepping across a ReLU kink). Tight: catches small systematic
// errors that the float differences below cannot see.
TEST_F(DenseModel, GradientMatchesDoubleFiniteDifferencesOfReferenceLoss) {
  ExecContext ctx;
  for (const auto& c : kDenseCases) {
    SCOPED_TRACE(c.label);
    auto model = make_dense(c.layers, c.loss);
    HostDataset host = small_data(c, 50, 7);
    DeviceDataset data = upload(host);
    auto ids = random_ids(16, host.n, 3);
    const int32_t repeated = ids[0];
    ids.push_back(repeated);  // a repeated id counts twice
    auto w = test_params(*model, 11);
    double loss = 0;
    auto g = model_grad(*model, ctx, w, &data, ids, {}, &loss);

    std::vector<double> wd(w.begin(), w.end());
    EXPECT_NEAR(loss, ref_mean_loss(c.layers, c.loss, wd, host, ids), 1e-5 * (1 + loss));

    double scale = 0;
    auto fd = central_differences(
        [&](const std::vector<double>& v) { return ref_mean_loss(c.layers, c.loss, v, host, ids); }, wd, 1e-6, scale);
    ASSERT_GT(scale, 1e-3) << "degenerate test: gradient is ~0";
    size_t nonzero = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      // float gradient: relative 3e-5 of the coordinate, plus 3e-6 of the gradient's scale
      // (observed: ~100x below this on the OMP backend)
      EXPECT_NEAR(g[i], fd[i], 3e-5 * std::fabs(fd[i]) + 3e-6 * scale) << "param " << i;
      nonzero += std::fabs(fd[i]) > 1e-6;
    }
    EXPECT_GT(nonzero, w.size() / 2) << "most parameters should get a gradient";
  }
}

// The gradient against central differences of the model's own loss (float forward pass,
// differences taken in double over the step actually representable in float). Checks
// that loss and gradient are consistent inside the implementation.
TEST_F(DenseModel, GradientMatchesFiniteDifferencesOfItsOwnLoss) {
  on_worker_thread([] {
    ExecContext ctx;
    for (const auto& c : kDenseCases) {
      SCOPED_TRACE(c.label);
      auto model = make_dense(c.layers, c.loss);
      HostDataset host = small_data(c, 50, 8);
      DeviceDataset data = upload(host);
      auto ids = random_ids(16, host.n, 4);
      auto w = test_params(*model, 12);
      auto g = model_grad(*model, ctx, w, &data, ids);
      double scale = 0;
      for (float v : g) scale = std::max(scale, double(std::fabs(v)));
      const float h = 1e-3f;
      for (size_t i = 0; i < w.size(); ++i) {
        auto wp = w, wm = w;
        wp[i] = w[i] + h;
        wm[i] = w[i] - h;
        double step = double(wp[i]) - double(wm[i]);
        double fd = (model_loss(*model, ctx, wp, &data, ids) - model_loss(*model, ctx, wm, &data, ids)) / step;
        EXPECT_NEAR(g[i], fd, 1e-2 * std::fabs(fd) + 1e-3 * scale) << "param " << i;
      }
    }
  });
}

TEST_F(DenseModel, LossGradIsDeterministicAndIndependentOfThreadCount) {
  const auto& c = kDenseCases[3];
  auto model = make_dense(c.layers, c.loss);
  HostDataset host = small_data(c, 300, 9);
  DeviceDataset data = upload(host);
  auto ids = random_ids(200, host.n, 5);
  auto w = test_params(*model, 13);
  ExecContext ctx;
  double l1 = 0, l2 = 0, l3 = 0, l4 = 0;
  auto g1 = model_grad(*model, ctx, w, &data, ids, {}, &l1);
  auto g2 = model_grad(*model, ctx, w, &data, ids, {}, &l2);
  ExecContext other;
  auto g3 = model_grad(*model, other, w, &data, ids, {}, &l3);
  std::vector<float> g4;
  std::thread t([&] {  // a worker thread: kernels single-threaded, as in the pool
    kernels_use_one_thread_here();
    ExecContext own;
    g4 = model_grad(*model, own, w, &data, ids, {}, &l4);
  });
  t.join();
  ASSERT_EQ(g1.size(), model->num_params());
  EXPECT_EQ(0, std::memcmp(g1.data(), g2.data(), g1.size() * 4));
  EXPECT_EQ(0, std::memcmp(g1.data(), g3.data(), g1.size() * 4));
  EXPECT_EQ(0, std::memcmp(g1.data(), g4.data(), g1.size() * 4));
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(l1, l3);
  EXPECT_EQ(l1, l4);
}

// loss_grad_batch: k requests on different parameters and minibatches, computed together,
// give every request exactly the bits loss_grad gives it alone (CPU backends; on CUDA
// the batched GEMM may round differently, see model.h). Covers the batched path (equal
// minibatch sizes), the fall-back (mixed sizes), a batch of one, every loss, and the
// kernels run single-threaded (a pool thread) and by OpenMP (a plain thread).
std::vector<std::vector<float>> batch_grads(const Model& model, ExecContext& ctx, const DeviceDataset* data,
                                            const std::vector<std::vector<float>>& ws,
                                            const std::vector<std::vector<int32_t>>& ids, std::vector<double>& losses) {
  const size_t k = ws.size();
  std::vector<DeviceArray<float>> dw, dg;
  std::vector<GradRequest> reqs(k);
  for (size_t i = 0; i < k; ++i) {
    dw.push_back(to_device(ws[i]));
    dg.emplace_back(ws[i].size());
    dg.back().fill(NAN);  // every coordinate must be written
  }
  for (size_t i = 0; i < k; ++i) {
    reqs[i].w = dw[i].data();
    reqs[i].ids = ids[i].data();
    reqs[i].m = ids[i].size();
    reqs[i].noise = NoiseKey{7, uint32_t(i), uint32_t(3 * i)};
    reqs[i].grad = dg[i].data();
    reqs[i].loss = NAN;
  }
  model.loss_grad_batch(ctx, data, reqs.data(), k);
  ctx.synchronize();
  std::vector<std::vector<float>> out;
  losses.clear();
  for (size_t i = 0; i < k; ++i) {
    out.push_back(dg[i].to_host());
    losses.push_back(reqs[i].loss);
  }
  return out;
}

// bit_exact: on CPU backends every request's arithmetic is loss_grad's own. On CUDA a
// model with GEMMs runs them as one cublasSgemmBatched per layer, which may pick other
// kernels than the single call and round differently; there the batch must still repeat
// its own bits, and match one-at-a-time to float rounding.
void expect_batch_matches_single(const Model& model, const DeviceDataset* data, size_t n,
                                 const std::vector<size_t>& sizes, const std::string& label, bool bit_exact = true) {
  std::vector<std::vector<float>> ws;
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ws.push_back(test_params(model, 40 + i));
    ids.push_back(random_ids(sizes[i], n ? n : 1, uint32_t(60 + i)));
  }
  for (bool pool_thread : {true, false}) {
    std::vector<std::vector<float>> got;
    std::vector<double> losses;
    std::thread t([&] {
      if (pool_thread) kernels_use_one_thread_here();
      ExecContext ctx;
      got = batch_grads(model, ctx, data, ws, ids, losses);
      // and again on the same context: a warm workspace and tables give the same bits
      std::vector<double> again_losses;
      auto again = batch_grads(model, ctx, data, ws, ids, again_losses);
      EXPECT_EQ(again, got) << label;
      EXPECT_EQ(again_losses, losses) << label;
    });
    t.join();
    ExecContext ctx;
    for (size_t i = 0; i < sizes.size(); ++i) {
      double loss = 0;
      auto want = model_grad(model, ctx, ws[i], data, ids[i], NoiseKey{7, uint32_t(i), uint32_t(3 * i)}, &loss);
      ASSERT_EQ(got[i].size(), want.size());
      if (bit_exact) {
        EXPECT_EQ(0, std::memcmp(got[i].data(), want.data(), want.size() * 4))
            << label << ": request " << i << " of " << sizes.size() << (pool_thread ? " (pool thread)" : "");
        EXPECT_EQ(losses[i], loss) << label << ": request " << i;
      } else {
        EXPECT_TRUE(all_close(got[i], want, 1e-5, 1e-6))
            << label << ": request " << i << " of " << sizes.size() << (pool_thread ? " (pool thread)" : "");
        EXPECT_NEAR(losses[i], loss, 1e-6 * std::fabs(loss) + 1e-7) << label << ": request " << i;
      }
    }
  }
}

TEST_F(DenseModel, BatchedGradientsAreBitIdenticalToOneAtATime) {
  const bool exact = std::string(kernels_backend()) != "CUDA";  // see expect_batch_matches_single
  for (const auto& c : kDenseCases) {
    auto model = make_dense(c.layers, c.loss);
    HostDataset host = small_data(c, 300, 9);
    DeviceDataset data = upload(host);
    expect_batch_matches_single(*model, &data, host.n, {16}, std::string(c.label) + " k=1", exact);
    expect_batch_matches_single(*model, &data, host.n, {7, 7, 7}, std::string(c.label) + " k=3", exact);
    expect_batch_matches_single(*model, &data, host.n, {32, 32, 32, 32, 32, 32, 32, 32, 32},
                                std::string(c.label) + " k=9", exact);
    expect_batch_matches_single(*model, &data, host.n, {5, 9, 5}, std::string(c.label) + " mixed sizes", exact);
  }
}

TEST_F(QuadraticModel, BatchedGradientsAreBitIdenticalToOneAtATime) {
  auto model = make_quadratic({1.0f, 2.0f, 0.5f, 10.0f}, 0.3f, 1.0f);  // noise keyed per request
  expect_batch_matches_single(*model, nullptr, 0, {4, 4, 4, 4}, "quadratic");
}

// evaluate() against the scalar reference, over more rows than one evaluation chunk.
TEST_F(DenseModel, EvaluateMatchesScalarForwardPass) {
  ExecContext ctx;
  for (const auto& c : kDenseCases) {
    SCOPED_TRACE(c.label);
    auto model = make_dense(c.layers, c.loss);
    HostDataset host = small_data(c, 2500, 10);
    DeviceDataset data = upload(host);
    auto w = test_params(*model, 14);
    auto dw = to_device(w);
    std::vector<double> wd(w.begin(), w.end());

    double ref_loss = 0;
    size_t ref_correct = 0, ambiguous = 0;
    for (size_t r = 0; r < host.n; ++r) {
      RefRow row = ref_dense_row(c.layers, c.loss, wd, &host.x[r * host.dim], host.y[r]);
      ref_loss += row.loss;
      ref_correct += row.correct;
      ambiguous += model->is_classifier() && row.margin < 1e-4;  // float may break the tie
    }
    EvalSums s = model->evaluate(ctx, dw.data(), &data, 0, host.n);
    EXPECT_EQ(s.count, host.n);
    EXPECT_NEAR(s.loss_sum, ref_loss, 1e-5 * ref_loss + 1e-6);
    EXPECT_LE(std::fabs(s.correct - double(ref_correct)), double(ambiguous));
    if (!model->is_classifier())
      EXPECT_EQ(s.correct, 0.0);
    else
      EXPECT_GT(s.correct, 0.0);

    // loss_grad's mean over all rows, times n, is evaluate's sum.
    std::vector<int32_t> all(host.n);
    std::iota(all.begin(), all.end(), 0);
    double mean = model_loss(*model, ctx, w, &data, all);
    EXPECT_NEAR(mean * double(host.n), s.loss_sum, 1e-5 * s.loss_sum);

    // A range split in two sums to the whole (float per row; sums in double).
    for (size_t split : {size_t(1), size_t(1024), size_t(1777)}) {
      EvalSums a = model->evaluate(ctx, dw.data(), &data, 0, split);
      EvalSums b = model->evaluate(ctx, dw.data(), &data, split, host.n);
      EXPECT_EQ(a.count + b.count, host.n);
      EXPECT_NEAR(a.loss_sum + b.loss_sum, s.loss_sum, 1e-6 * s.loss_sum);
      EXPECT_EQ(a.correct + b.correct, s.correct);
    }
    // A sub-range matches the reference over the same rows.
    EvalSums mid = model->evaluate(ctx, dw.data(), &data, 100, 110);
    double mid_ref = 0;
    for (size_t r = 100; r < 110; ++r)
      mid_ref += ref_dense_row(c.layers, c.loss, wd, &host.x[r * host.dim], host.y[r]).loss;
    EXPECT_EQ(mid.count, 10u);
    EXPECT_NEAR(mid.loss_sum, mid_ref, 1e-5 * mid_ref + 1e-6);
    EvalSums none = model->evaluate(ctx, dw.data(), &data, 5, 5);
    EXPECT_EQ(none.count, 0u);
    EXPECT_EQ(none.loss_sum, 0.0);
  }
}

// A hand-computed tiny network: 2 inputs -> 2 ReLU units -> 2 logits.
TEST_F(DenseModel, TinyNetworkByHand) {
  auto model = make_dense({2, 2, 2}, DenseLoss::SoftmaxCrossEntropy);
  ASSERT_EQ(model->num_params(), 12u);
  // W1 = [[1, -1], [2, 1]] (in x out), b1 = [0, 0.5]; W2 = [[1, 0], [0, 1]], b2 = [0, 1]
  std::vector<float> w = {1, -1, 2, 1, 0, 0.5f, 1, 0, 0, 1, 0, 1};
  HostDataset host;
  host.n = 2;
  host.dim = 2;
  host.classes = 2;
  host.x = {1, 1, -1, 0};  // row0: h = relu([3, 0.5]) = [3, 0.5]; row1: relu([-1, 1.5]) = [0, 1.5]
  host.y = {0, 0};         // logits row0 [3, 1.5] -> class 0 right; row1 [0, 2.5] -> wrong
  DeviceDataset data = upload(host);
  ExecContext ctx;
  auto dw = to_device(w);
  EvalSums s = model->evaluate(ctx, dw.data(), &data, 0, 2);
  double l0 = std::log(std::exp(3.0) + std::exp(1.5)) - 3.0;
  double l1 = std::log(1.0 + std::exp(2.5)) - 0.0;
  EXPECT_NEAR(s.loss_sum, l0 + l1, 1e-5);
  EXPECT_EQ(s.correct, 1.0);
  EXPECT_EQ(s.count, 2u);
}

TEST_F(DenseModel, InitParamsAreSeededHeNormalWithZeroBiases) {
  auto model = make_dense({200, 100, 10}, DenseLoss::SoftmaxCrossEntropy);
  std::vector<float> a, b, c;
  model->init_params(5, a);
  model->init_params(5, b);
  model->init_params(6, c);
  ASSERT_EQ(a.size(), model->num_params());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // layer 1: W (200 x 100) std sqrt(2/200), then 100 zero biases; layer 2 std sqrt(1/100)
  auto check = [&](size_t off, size_t count, double want_std) {
    double s = 0, s2 = 0;
    for (size_t i = off; i < off + count; ++i) {
      s += a[i];
      s2 += double(a[i]) * a[i];
    }
    double mean = s / count, var = s2 / count - mean * mean;
    EXPECT_NEAR(mean, 0.0, 5 * want_std / std::sqrt(double(count)));
    EXPECT_NEAR(var, want_std * want_std, 5 * std::sqrt(2.0 / count) * want_std * want_std);
  };
  check(0, 20000, std::sqrt(2.0 / 200));
  for (size_t i = 20000; i < 20100; ++i) ASSERT_EQ(a[i], 0.0f);
  check(20100, 1000, std::sqrt(1.0 / 100));
  for (size_t i = 21100; i < 21110; ++i) ASSERT_EQ(a[i], 0.0f);
}

// ---- CNN: the layers composed, against a double-precision composition of the layers'
// scalar references (kernels/layers/layers_ref.h)

// 6x6x2 images: conv 3 filters 3x3 padding 1, pool 2 -> 3x3x3; conv 4 filters 2x2 ->
// 2x2x4; flatten; dense 5; dense 3 classes.
CnnSpec tiny_cnn(Activation a) {
  CnnSpec s;
  s.conv = {ConvSpec{3, 3, 1, 1, 2}, ConvSpec{4, 2, 1, 0, 1}};
  s.hidden = {5};
  s.activation = a;
  return s;
}
const Shape kTinyImage{6, 6, 2};

HostDataset image_data(Shape shape, int classes, size_t n, uint64_t seed) {
  SyntheticSpec s;
  s.classes = classes;
  s.features = shape.size();
  s.image = shape;
  s.train_samples = n;
  s.test_samples = 1;
  return make_synthetic(s, seed).train;
}

// The logits of `rows` samples x, by the layers' references in double.
layers_ref::Batch ref_cnn_logits(const CnnSpec& spec, Shape in, int classes, const std::vector<double>& w,
                                 layers_ref::Batch a, size_t rows) {
  auto act = [&](layers_ref::Batch v) {
    return spec.activation == Activation::ReLU ? layers_ref::relu(std::move(v)) : layers_ref::tanh(std::move(v));
  };
  size_t off = 0;
  Shape s = in;
  for (const ConvSpec& c : spec.conv) {
    a = act(layers_ref::conv2d(a, rows, s, c.channels, c.kernel, c.stride, c.padding, w.data() + off));
    off += size_t(c.kernel) * c.kernel * s.channels * c.channels + c.channels;
    s = conv2d_out_shape(s, c.channels, c.kernel, c.stride, c.padding);
    if (c.pool != 1) {
      a = layers_ref::maxpool(a, rows, s, c.pool);
      s = maxpool_out_shape(s, c.pool);
    }
  }
  size_t size = s.size();
  for (int h : spec.hidden) {
    a = act(layers_ref::dense(a, rows, size, size_t(h), w.data() + off));
    off += size * h + h;
    size = size_t(h);
  }
  a = layers_ref::dense(a, rows, size, size_t(classes), w.data() + off);
  EXPECT_EQ(off + size * classes + classes, w.size()) << "the reference reads every parameter";
  return a;
}

double ref_cnn_mean_loss(const CnnSpec& spec, Shape in, int classes, const std::vector<double>& w, const HostDataset& d,
                         const std::vector<int32_t>& ids) {
  layers_ref::Batch x;
  for (int32_t id : ids)
    x.insert(x.end(), d.x.begin() + long(size_t(id) * d.dim), d.x.begin() + long(size_t(id + 1) * d.dim));
  auto z = ref_cnn_logits(spec, in, classes, w, x, ids.size());
  double s = 0;
  for (size_t r = 0; r < ids.size(); ++r)
    s += layers_ref::row_loss(DenseLoss::SoftmaxCrossEntropy, &z[r * classes], classes, d.y[ids[r]]);
  return s / double(ids.size());
}

TEST_F(CnnModel, DescribesItselfAndCountsItsFlops) {
  auto lenet = make_cnn(Shape{28, 28, 1}, lenet5(), 10);
  EXPECT_EQ(lenet->name(), "cnn");
  EXPECT_TRUE(lenet->is_classifier());
  EXPECT_TRUE(lenet->uses_data());
  // conv 5x5x1x6 + 6, conv 5x5x6x16 + 16, dense 400x120 + 120, 120x84 + 84, 84x10 + 10
  EXPECT_EQ(lenet->num_params(), 156u + 2416u + 48120u + 10164u + 850u);
  // 2 x multiply-adds: conv1 forward and weights (no input gradient) at 28x28 positions,
  // conv2 all three products at 10x10, the dense layers all three
  const double conv1 = 2.0 * 25 * 6 * 2 * 784, conv2 = 2.0 * 150 * 16 * 3 * 100;
  const double dense = 2.0 * 3 * (400 * 120 + 120 * 84 + 84 * 10);
  EXPECT_EQ(lenet->flops_per_sample(), conv1 + conv2 + dense);
  auto mlp = make_dense({784, 128, 10}, DenseLoss::SoftmaxCrossEntropy);
  EXPECT_EQ(mlp->flops_per_sample(), 2.0 * 784 * 128 * 2 + 2.0 * 128 * 10 * 3);
  EXPECT_EQ(make_quadratic({1.0f}, 0.0f, 1.0f)->flops_per_sample(), 0.0);

  std::vector<float> w, again;
  lenet->init_params(3, w);
  lenet->init_params(3, again);
  ASSERT_EQ(w.size(), lenet->num_params());
  EXPECT_EQ(w, again);
  for (size_t i = 150; i < 156; ++i) EXPECT_EQ(w[i], 0.0f) << "conv1's biases start at 0";
  double s2 = 0;  // conv1's weights: N(0, 2 / 25) (a ReLU follows)
  for (size_t i = 0; i < 150; ++i) s2 += double(w[i]) * w[i];
  EXPECT_NEAR(s2 / 150, 2.0 / 25, 5 * std::sqrt(2.0 / 150) * 2.0 / 25);
}

TEST_F(CnnModel, ShapesAndBadInput) {
  auto shapes = cnn_block_shapes(Shape{28, 28, 1}, lenet5().conv);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0], (Shape{14, 14, 6}));
  EXPECT_EQ(shapes[1], (Shape{5, 5, 16}));
  try {
    cnn_block_shapes(Shape{12, 12, 1}, {ConvSpec{4, 5, 1, 0, 2}, ConvSpec{8, 5, 1, 0, 1}});  // 8x8 -> 4x4, then 5x5
    ADD_FAILURE() << "a kernel larger than its input must be refused";
  } catch (const CnnShapeError& e) {
    EXPECT_EQ(e.block, 1u);
    EXPECT_EQ(e.key, "kernel");
    EXPECT_NE(std::string(e.what()).find("4x4x4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_cnn(Shape{12, 12, 1}, CnnSpec{{ConvSpec{4, 13, 1, 0, 1}}, {}, Activation::ReLU}, 3), CnnShapeError);
  EXPECT_THROW(make_cnn(kTinyImage, tiny_cnn(Activation::ReLU), 1), std::invalid_argument);
  // The data's samples must be images of the model's shape, not only of its size.
  auto model = make_cnn(kTinyImage, tiny_cnn(Activation::ReLU), 3);
  DeviceDataset other = upload(image_data(Shape{12, 3, 2}, 3, 10, 1));
  ExecContext ctx;
  std::vector<float> w;
  model->init_params(1, w);
  auto dw = to_device(w);
  EXPECT_THROW(model->evaluate(ctx, dw.data(), &other, 0, 2), std::invalid_argument);
}

// As for the dense models: the float gradient against central differences (h = 1e-6) of
// the double reference loss, with ReLU and with tanh.
TEST_F(CnnModel, GradientMatchesDoubleFiniteDifferencesOfReferenceLoss) {
  ExecContext ctx;
  for (Activation a : {Activation::ReLU, Activation::Tanh}) {
    SCOPED_TRACE(a == Activation::ReLU ? "relu" : "tanh");
    const CnnSpec spec = tiny_cnn(a);
    auto model = make_cnn(kTinyImage, spec, 3);
    HostDataset host = image_data(kTinyImage, 3, 60, 7);
    DeviceDataset data = upload(host);
    auto ids = random_ids(12, host.n, 3);
    ids.push_back(ids[0]);
    auto w = test_params(*model, 11);
    double loss = 0;
    auto g = model_grad(*model, ctx, w, &data, ids, {}, &loss);
    std::vector<double> wd(w.begin(), w.end());
    EXPECT_NEAR(loss, ref_cnn_mean_loss(spec, kTinyImage, 3, wd, host, ids), 1e-5 * (1 + loss));
    double scale = 0;
    auto fd = central_differences(
        [&](const std::vector<double>& v) { return ref_cnn_mean_loss(spec, kTinyImage, 3, v, host, ids); }, wd, 1e-6,
        scale);
    ASSERT_GT(scale, 1e-3);
    size_t nonzero = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(g[i], fd[i], 3e-5 * std::fabs(fd[i]) + 3e-6 * scale) << "param " << i;
      nonzero += std::fabs(fd[i]) > 1e-6;
    }
    EXPECT_GT(nonzero, w.size() / 2);
  }
}

TEST_F(CnnModel, EvaluateMatchesTheReferenceAndSplitsExactly) {
  ExecContext ctx;
  const CnnSpec spec = tiny_cnn(Activation::ReLU);
  auto model = make_cnn(kTinyImage, spec, 3);
  HostDataset host = image_data(kTinyImage, 3, 1500, 10);  // more than one evaluation chunk
  DeviceDataset data = upload(host);
  auto w = test_params(*model, 14);
  auto dw = to_device(w);
  std::vector<double> wd(w.begin(), w.end());
  auto z = ref_cnn_logits(spec, kTinyImage, 3, wd, layers_ref::Batch(host.x.begin(), host.x.end()), host.n);
  double ref_loss = 0;
  size_t ref_correct = 0, ambiguous = 0;
  for (size_t r = 0; r < host.n; ++r) {
    const double* zr = &z[r * 3];
    ref_loss += layers_ref::row_loss(DenseLoss::SoftmaxCrossEntropy, zr, 3, host.y[r]);
    std::vector<double> v(zr, zr + 3);
    std::sort(v.begin(), v.end());
    ref_correct += int(std::max_element(zr, zr + 3) - zr) == int(host.y[r]);
    ambiguous += v[2] - v[1] < 1e-4;
  }
  EvalSums s = model->evaluate(ctx, dw.data(), &data, 0, host.n);
  EXPECT_EQ(s.count, host.n);
  EXPECT_NEAR(s.loss_sum, ref_loss, 1e-5 * ref_loss);
  EXPECT_LE(std::fabs(s.correct - double(ref_correct)), double(ambiguous));
  EvalSums a = model->evaluate(ctx, dw.data(), &data, 0, 777), b = model->evaluate(ctx, dw.data(), &data, 777, host.n);
  EXPECT_EQ(a.count + b.count, host.n);
  EXPECT_NEAR(a.loss_sum + b.loss_sum, s.loss_sum, 1e-6 * s.loss_sum);
  EXPECT_EQ(a.correct + b.correct, s.correct);
}

// Batched gradients bit for bit (CPU) as one at a time, and the same bits whichever
// thread and context computes them (kernels on one thread, or OpenMP's).
TEST_F(CnnModel, BatchedAndThreadCountIndependentGradients) {
  const bool exact = std::string(kernels_backend()) != "CUDA";
  for (Activation a : {Activation::ReLU, Activation::Tanh}) {
    auto model = make_cnn(kTinyImage, tiny_cnn(a), 3);
    HostDataset host = image_data(kTinyImage, 3, 200, 9);
    DeviceDataset data = upload(host);
    expect_batch_matches_single(*model, &data, host.n, {16}, "cnn k=1", exact);
    expect_batch_matches_single(*model, &data, host.n, {7, 7, 7}, "cnn k=3", exact);
    expect_batch_matches_single(*model, &data, host.n, {5, 9, 5}, "cnn mixed sizes", exact);

    auto ids = random_ids(64, host.n, 5);
    auto w = test_params(*model, 13);
    ExecContext ctx;
    double l1 = 0, l2 = 0;
    auto g1 = model_grad(*model, ctx, w, &data, ids, {}, &l1);
    std::vector<float> g2;
    on_worker_thread([&] {
      ExecContext own;
      g2 = model_grad(*model, own, w, &data, ids, {}, &l2);
    });
    EXPECT_EQ(0, std::memcmp(g1.data(), g2.data(), g1.size() * 4));
    EXPECT_EQ(l1, l2);
  }
}

// ---- golden outputs: the dense models as they were before they became compositions of
// layers (kernels/models/dense.cu at 2d26861), saved by this test with ASGD_WRITE_GOLDEN=1
// set. Every bit must stay: the initial parameters, loss_grad's loss and gradient,
// loss_grad_batch's, and evaluate's sums, for every loss and a deeper MLP. OpenBLAS picks
// its GEMM kernels by CPU, and other kernels round differently, so the comparison runs
// only on CPU backends with the OpenBLAS core the file was written with.

const std::string kGoldenDir = std::string(asgd::testing::source_dir()) + "/tests/data/golden";

// One line per record: a key, then the values' bits in hex (floats 8 digits, doubles 16).
struct GoldenRecords {
  std::vector<std::pair<std::string, std::vector<std::string>>> lines;
  void add(const std::string& key, const std::vector<float>& v) {
    std::vector<std::string> hex;
    char buf[24];
    for (float f : v) {
      std::snprintf(buf, sizeof buf, "%08x", bits(f));
      hex.push_back(buf);
    }
    lines.push_back({key, hex});
  }
  void add(const std::string& key, double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(u));
    lines.push_back({key, {buf}});
  }
  std::string text() const {
    std::string out;
    for (const auto& [k, vals] : lines) {
      out += k;
      for (const auto& v : vals) out += " " + v;
      out += "\n";
    }
    return out;
  }
};

// The dense models' outputs, as GoldenRecords.
GoldenRecords dense_golden_records() {
  GoldenRecords r;
  std::vector<DenseCase> cases(std::begin(kDenseCases), std::end(kDenseCases));
  cases.push_back({"deep", {9, 16, 12, 8, 5}, DenseLoss::SoftmaxCrossEntropy, "mlp", true, 5});
  on_worker_thread([&] {
    ExecContext ctx;
    for (const auto& c : cases) {
      const std::string tag = c.label;
      auto model = make_dense(c.layers, c.loss);
      std::vector<float> init;
      model->init_params(5, init);
      r.add(tag + ".init", init);

      HostDataset host = small_data(c, 50, 7);
      DeviceDataset data = upload(host);
      auto ids = random_ids(16, host.n, 3);
      ids.push_back(ids[0]);
      auto w = test_params(*model, 11);
      double loss = 0;
      auto g = model_grad(*model, ctx, w, &data, ids, {}, &loss);
      r.add(tag + ".loss", loss);
      r.add(tag + ".grad", g);

      std::vector<std::vector<float>> ws;
      std::vector<std::vector<int32_t>> bids;
      for (size_t i = 0; i < 3; ++i) {
        ws.push_back(test_params(*model, 40 + i));
        bids.push_back(random_ids(7, host.n, uint32_t(60 + i)));
      }
      std::vector<double> losses;
      auto grads = batch_grads(*model, ctx, &data, ws, bids, losses);
      for (size_t i = 0; i < 3; ++i) {
        r.add(tag + ".batch" + std::to_string(i) + ".loss", losses[i]);
        r.add(tag + ".batch" + std::to_string(i) + ".grad", grads[i]);
      }

      HostDataset big = small_data(c, 2500, 10);
      DeviceDataset bdata = upload(big);
      auto dw = to_device(test_params(*model, 14));
      EvalSums s = model->evaluate(ctx, dw.data(), &bdata, 0, big.n);
      r.add(tag + ".eval.loss_sum", s.loss_sum);
      r.add(tag + ".eval.correct", s.correct);
    }
  });
  return r;
}

TEST_F(DenseModel, OutputsAreBitIdenticalToTheSavedOnes) {
  GoldenRecords now = dense_golden_records();
  const std::string path = kGoldenDir + "/dense_kernels.txt";
  if (std::getenv("ASGD_WRITE_GOLDEN")) {
    std::ofstream(path) << "gemm " << std::string(kernels_gemm_core()) << "\n" << now.text();
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::string first;
  std::getline(in, first);
  if (std::string(kernels_backend()) == "CUDA" || first != "gemm " + std::string(kernels_gemm_core()))
    GTEST_SKIP() << path << " holds outputs of " << first << "; this build uses " << std::string(kernels_gemm_core());
  std::stringstream rest;
  rest << in.rdbuf();
  const std::string want = rest.str(), got = now.text();
  if (want == got) return;
  std::stringstream a(want), b(got);
  size_t line = 2;
  for (std::string x, y; std::getline(a, x) && std::getline(b, y); ++line)
    if (x != y) {
      ADD_FAILURE() << path << ":" << line << " differs: want '" << x.substr(0, 120) << "...', got '"
                    << y.substr(0, 120) << "...'";
      return;
    }
  ADD_FAILURE() << path << ": a different number of records";
}

// ---- quadratic

TEST_F(QuadraticModel, LossAndGradientWithoutNoise) {
  std::vector<float> h = {1.0f, 2.0f, 0.5f, 10.0f, 1e-3f};
  auto model = make_quadratic(h, 0.0f, 1.0f);
  EXPECT_EQ(model->name(), "quadratic");
  EXPECT_EQ(model->num_params(), 5u);
  EXPECT_FALSE(model->uses_data());
  EXPECT_FALSE(model->is_classifier());
  std::vector<float> w0;
  model->init_params(1, w0);
  EXPECT_EQ(w0, std::vector<float>(5, 1.0f));

  std::vector<float> w = {0.3f, -1.5f, 2.0f, 0.1f, -7.0f};
  ExecContext ctx;
  double loss = 0;
  auto g = model_grad(*model, ctx, w, nullptr, {}, {}, &loss);
  double want = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    want += 0.5 * h[i] * double(w[i]) * w[i];
    EXPECT_FLOAT_EQ(g[i], h[i] * w[i]);
  }
  EXPECT_NEAR(loss, want, 1e-6 * want);
  // Central differences in double of the model's own loss.
  for (size_t i = 0; i < w.size(); ++i) {
    auto wp = w, wm = w;
    wp[i] += 1e-2f;
    wm[i] -= 1e-2f;
    double fd = (model_loss(*model, ctx, wp, nullptr, {}) - model_loss(*model, ctx, wm, nullptr, {})) /
                (double(wp[i]) - double(wm[i]));
    EXPECT_NEAR(g[i], fd, 1e-3 * std::fabs(fd) + 1e-5) << "param " << i;
  }
  // evaluate: the loss itself, counted once (it reads no data).
  auto dw = to_device(w);
  EvalSums s = model->evaluate(ctx, dw.data(), nullptr, 0, 0);
  EXPECT_NEAR(s.loss_sum, want, 1e-6 * want);
  EXPECT_EQ(s.count, 1u);
}

TEST_F(QuadraticModel, GradientNoiseHasTheRightMomentsAndIsKeyed) {
  const size_t dim = 200000;
  const float sigma = 0.5f;
  std::vector<float> h(dim, 2.0f);
  auto model = make_quadratic(h, sigma, 0.0f);
  std::vector<float> w(dim, 0.25f);  // exact gradient 0.5 everywhere
  ExecContext ctx;
  NoiseKey key{77, 3, 10};
  auto g = model_grad(*model, ctx, w, nullptr, {}, key);
  double s = 0, s2 = 0, s4 = 0, lag1 = 0, lag1_sq = 0;
  for (size_t i = 0; i < dim; ++i) {
    double e = g[i] - 0.5;
    s += e;
    s2 += e * e;
    s4 += e * e * e * e;
    if (i > 0) {
      double prev = g[i - 1] - 0.5;
      lag1 += e * prev;
      lag1_sq += (e * e - sigma * sigma) * (prev * prev - sigma * sigma);
    }
  }
  const double N = dim, var = double(sigma) * sigma;
  EXPECT_NEAR(s / N, 0.0, 5 * sigma / std::sqrt(N));
  EXPECT_NEAR(s2 / N, var, 5 * std::sqrt(2.0 / N) * var);                   // Var(e^2) = 2 sigma^4
  EXPECT_NEAR(s4 / N, 3 * var * var, 5 * std::sqrt(96.0 / N) * var * var);  // Gaussian kurtosis
  EXPECT_NEAR(lag1 / N, 0.0, 5 * var / std::sqrt(N)) << "neighbouring coordinates correlated";
  // Independence, not just zero correlation: coordinates sharing random numbers (e.g. an
  // overlapping Philox offset) are uncorrelated but their squares are not.
  EXPECT_NEAR(lag1_sq / N, 0.0, 5 * 2 * var * var / std::sqrt(N)) << "neighbouring coordinates dependent";

  auto again = model_grad(*model, ctx, w, nullptr, {}, key);
  EXPECT_EQ(0, std::memcmp(g.data(), again.data(), dim * 4)) << "same key, different noise";

  // The documented stream, against cuRAND's public API: coordinate i's noise is component
  // i % 4 of the four normals curand_normal4 gives right after curand_init(seed,
  // subsequence(GradientNoise, worker, step), 4 * (i / 4)): one Philox block per four
  // coordinates. Also for a dimension that is not a multiple of 4 (the last block is cut).
  auto reference_noise = [](const NoiseKey& k, size_t i) {
    curandStatePhilox4_32_10_t st;
    curand_init(k.seed, Rng::subsequence(RngPurpose::GradientNoise, k.worker, k.step), 4 * (i / 4), &st);
    float4 z = curand_normal4(&st);
    const float c[4] = {z.x, z.y, z.z, z.w};
    return c[i % 4];
  };
  // The same Philox counters give the same uniforms everywhere; the Box-Muller step
  // runs on the host here and, on CUDA, in the GPU's own logf/sincosf, which differ in
  // the last bits (seen on an H100: 32 float ulps, 4e-6 relative). So: 4 ulps on CPU
  // backends, 1e-5 relative on CUDA.
  const bool cuda = std::string(kernels_backend()) == "CUDA";
  auto expect_noise = [&](float got, float want, const std::string& where) {
    if (cuda)
      EXPECT_NEAR(got, want, 1e-5f * std::fabs(want) + 1e-7f) << where;
    else
      EXPECT_FLOAT_EQ(got, want) << where;
  };
  for (size_t i : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(4), size_t(7), size_t(4097), dim - 1})
    expect_noise(g[i], 0.5f + sigma * reference_noise(key, i), "coordinate " + std::to_string(i));
  {
    auto small = make_quadratic(std::vector<float>(7, 2.0f), sigma, 0.0f);
    auto gs = model_grad(*small, ctx, std::vector<float>(7, 0.25f), nullptr, {}, key);
    for (size_t i = 0; i < 7; ++i)
      expect_noise(gs[i], 0.5f + sigma * reference_noise(key, i), "dim 7, coordinate " + std::to_string(i));
  }

  auto differs = [&](NoiseKey k) {
    auto o = model_grad(*model, ctx, w, nullptr, {}, k);
    size_t same = 0;
    double cross = 0;
    for (size_t i = 0; i < dim; ++i) {
      same += o[i] == g[i];
      cross += (o[i] - 0.5) * (g[i] - 0.5);
    }
    EXPECT_LT(same, dim / 1000) << "seed " << k.seed << " worker " << k.worker << " step " << k.step;
    EXPECT_NEAR(cross / N, 0.0, 5 * var / std::sqrt(N)) << "streams correlated";
  };
  differs({77, 3, 11});
  differs({77, 4, 10});
  differs({78, 3, 10});

  // The noiseless model with the same curvature gives exactly h * w.
  auto clean = make_quadratic(h, 0.0f, 0.0f);
  auto gc = model_grad(*clean, ctx, w, nullptr, {}, key);
  for (size_t i = 0; i < dim; i += 997) ASSERT_EQ(gc[i], 0.5f);
}

// ---------------------------------------------------------------------------------------
// Rng

std::vector<uint32_t> draws(Rng r, int n) {
  std::vector<uint32_t> v(n);
  for (auto& x : v) x = r.next_u32();
  return v;
}

TEST(RngTest, SameKeySameSequenceDifferentKeyDifferent) {
  auto base = draws(Rng(1, RngPurpose::Shuffle, 2, 3), 1000);
  EXPECT_EQ(base, draws(Rng(1, RngPurpose::Shuffle, 2, 3), 1000));
  EXPECT_NE(base, draws(Rng(2, RngPurpose::Shuffle, 2, 3), 1000));
  EXPECT_NE(base, draws(Rng(1, RngPurpose::ComputeTime, 2, 3), 1000));
  EXPECT_NE(base, draws(Rng(1, RngPurpose::Shuffle, 3, 3), 1000));
  EXPECT_NE(base, draws(Rng(1, RngPurpose::Shuffle, 2, 4), 1000));
  // No shared numbers between neighbouring keys (not merely shifted copies).
  auto other = draws(Rng(1, RngPurpose::Shuffle, 2, 4), 1000);
  std::sort(other.begin(), other.end());
  size_t shared = 0;
  for (uint32_t x : base) shared += std::binary_search(other.begin(), other.end(), x);
  EXPECT_LT(shared, 3u);
  // The uniform/normal draws are reproducible too.
  Rng a(9, RngPurpose::Data, 0, 0), b(9, RngPurpose::Data, 0, 0);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(a.uniform(), b.uniform());
    ASSERT_EQ(a.normal(), b.normal());
    ASSERT_EQ(a.below(1000), b.below(1000));
  }
}

TEST(RngTest, SubsequenceEncodesTheKey) {
  EXPECT_EQ(Rng::subsequence(RngPurpose::Staleness, 0x123456, 0xdeadbeef),
            (uint64_t(6) << 56) | (uint64_t(0x123456) << 32) | 0xdeadbeefull);
  EXPECT_EQ(Rng::subsequence(RngPurpose::Shuffle, 0, 0), uint64_t(1) << 56);
  EXPECT_NO_THROW(Rng::subsequence(RngPurpose::Shuffle, (1u << 24) - 1, 0));
  EXPECT_THROW(Rng::subsequence(RngPurpose::Shuffle, 1u << 24, 0), std::out_of_range);
  EXPECT_THROW(Rng(1, RngPurpose::Shuffle, 1u << 24, 0), std::out_of_range);
}

TEST(RngTest, UniformIsInHalfOpenUnitIntervalWithRightMoments) {
  const int N = 400000;
  double s = 0, s2 = 0;
  Rng r(123, RngPurpose::Data, 1, 2);
  for (int i = 0; i < N; ++i) {
    double u = r.uniform();
    ASSERT_GT(u, 0.0);
    ASSERT_LE(u, 1.0);
    s += u;
    s2 += u * u;
  }
  double mean = s / N, var = s2 / N - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / N));
  // Var of the sample variance ~ (mu4 - sigma^4) / N with mu4 = 1/80 for U(0,1).
  EXPECT_NEAR(var, 1.0 / 12, 5 * std::sqrt((1.0 / 80 - 1.0 / 144) / N));
}

TEST(RngTest, NormalHasZeroMeanUnitVariance) {
  const int N = 400000;
  double s = 0, s2 = 0, s3 = 0;
  Rng r(321, RngPurpose::GradientNoise, 4, 5);
  for (int i = 0; i < N; ++i) {
    double z = r.normal();
    ASSERT_TRUE(std::isfinite(z));
    s += z;
    s2 += z * z;
    s3 += z * z * z;
  }
  EXPECT_NEAR(s / N, 0.0, 5 / std::sqrt(double(N)));
  EXPECT_NEAR(s2 / N, 1.0, 5 * std::sqrt(2.0 / N));
  EXPECT_NEAR(s3 / N, 0.0, 5 * std::sqrt(15.0 / N));  // symmetric: E z^3 = 0, Var z^3 = 15
}

TEST(RngTest, BelowIsInRangeAndUniform) {
  const int N = 200000, K = 10;
  std::vector<int> counts(K, 0);
  Rng r(5, RngPurpose::Staleness, 0, 0);
  for (int i = 0; i < N; ++i) {
    uint64_t x = r.below(K);
    ASSERT_LT(x, uint64_t(K));
    counts[x]++;
  }
  double chi2 = 0, e = double(N) / K;
  for (int c : counts) chi2 += (c - e) * (c - e) / e;
  // chi-square with 9 degrees of freedom: mean 9, sd 4.24; P(chi2 > 40) ~ 5e-6.
  EXPECT_LT(chi2, 40.0);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(r.below(1), 0u);
  // Large ranges: uses 64 bits, so the upper half of a 2^40 range is reached.
  const uint64_t big = uint64_t(1) << 40;
  double s = 0;
  for (int i = 0; i < 10000; ++i) {
    uint64_t x = r.below(big);
    ASSERT_LT(x, big);
    s += double(x) / double(big);
  }
  EXPECT_NEAR(s / 10000, 0.5, 5 * std::sqrt(1.0 / 12 / 10000));
  EXPECT_THROW(r.below(0), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------
// DeviceArray and ExecContext

TEST_F(DeviceArrayTest, UploadDownloadCopyFillResize) {
  DeviceArray<float> a;
  EXPECT_TRUE(a.empty());
  EXPECT_TRUE(a.to_host().empty());
  auto v = random_vec(1001, 31);
  a.upload(v);
  EXPECT_EQ(a.size(), 1001u);
  EXPECT_EQ(a.to_host(), v);

  DeviceArray<float> b(3);
  b.copy_from(a);  // grows
  EXPECT_EQ(b.size(), 1001u);
  EXPECT_EQ(b.to_host(), v);
  b.copy_from(b);  // self-copy is a no-op
  EXPECT_EQ(b.to_host(), v);

  b.fill(-2.5f);
  EXPECT_EQ(b.to_host(), std::vector<float>(1001, -2.5f));
  EXPECT_EQ(a.to_host(), v) << "copy_from must copy, not share";

  // Shrinking keeps the allocation (no reallocation while capacity suffices).
  const float* p = a.data();
  a.resize_discard(10);
  EXPECT_EQ(a.size(), 10u);
  EXPECT_EQ(a.data(), p);
  EXPECT_EQ(a.to_host(), std::vector<float>(v.begin(), v.begin() + 10));
  a.resize_discard(1001);
  EXPECT_EQ(a.data(), p);
  a.resize_discard(5000);
  EXPECT_EQ(a.size(), 5000u);
  a.fill(1.0f);
  EXPECT_EQ(a.to_host(), std::vector<float>(5000, 1.0f));

  a.upload(std::vector<float>{});
  EXPECT_EQ(a.size(), 0u);
  a.fill(3.0f);  // nothing to fill
  std::vector<float> out = {1, 2, 3};
  a.download(out);
  EXPECT_TRUE(out.empty());

  // Moves transfer the buffer and leave the source empty.
  DeviceArray<float> c(std::move(b));
  EXPECT_EQ(c.size(), 1001u);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.data(), nullptr);
  DeviceArray<float> d;
  d = std::move(c);
  EXPECT_EQ(d.to_host(), std::vector<float>(1001, -2.5f));
  EXPECT_EQ(c.size(), 0u);

  DeviceArray<int32_t> ids;
  std::vector<int32_t> iv = {0, -1, INT32_MAX, INT32_MIN, 42};
  ids.upload(iv);
  EXPECT_EQ(ids.to_host(), iv);
  ids.fill(7);
  EXPECT_EQ(ids.to_host(), std::vector<int32_t>(5, 7));
}

// Every live buffer of a workspace is its own memory, whatever was taken before or after
// (a block added for a large buffer leaves earlier buffers where they are); a frame gives
// back what was taken in it; and once warm, the same sequence of takes reuses the same
// memory without allocating.
TEST_F(ExecContextTest, WorkspaceBuffersAreDisjointAndGoBackWithTheirFrame) {
  ExecContext ctx;
  Workspace& ws = ctx.workspace();
  EXPECT_THROW(ws.take<float>("outside", 10), std::logic_error);
  auto v = random_vec(1000, 41);
  auto dv = to_device(v);
  auto job = [&](std::vector<const void*>& where) {
    Workspace::Frame outer(ws);
    float* a = ws.take<float>("a", 1000);
    ops::copy(ctx, a, dv.data(), 1000);
    int32_t* b = ws.take<int32_t>("b", 7, 3);
    double* h = ws.take_host<double>("h", 5);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(h[i], 0.0) << "host buffers start zeroed";
    where = {a, b, h};
    {
      Workspace::Frame inner(ws);
      float* big = ws.take<float>("big", size_t(3) << 20, 0);  // 12 MiB: past the first block
      ops::scale(ctx, big, 0.0f, size_t(3) << 20);
      float* small = ws.take<float>("small", 3, 1);
      where.push_back(big);
      where.push_back(small);
      auto live = ws.live();
      ASSERT_EQ(live.size(), 5u);
      EXPECT_STREQ(live[0].name, "a");
      EXPECT_EQ(live[1].index, 3);
      EXPECT_TRUE(live[2].host);
      for (size_t x = 0; x < live.size(); ++x)
        for (size_t y = x + 1; y < live.size(); ++y) {
          if (live[x].host != live[y].host) continue;
          auto lo = [](const Workspace::Buffer& z) { return static_cast<const char*>(z.data); };
          EXPECT_TRUE(lo(live[x]) + live[x].bytes <= lo(live[y]) || lo(live[y]) + live[y].bytes <= lo(live[x]))
              << live[x].name << " and " << live[y].name << " overlap";
        }
      EXPECT_EQ(ws.depth(), 2u);
    }
    EXPECT_EQ(ws.live().size(), 3u) << "the inner frame's buffers went back";
    DeviceArray<float> back(1000);
    ops::copy(ctx, back.data(), a, 1000);
    ctx.synchronize();
    EXPECT_EQ(back.to_host(), v) << "a buffer kept its contents while others were taken";
  };
  std::vector<const void*> first, second, third;
  job(first);
  EXPECT_EQ(ws.depth(), 0u);
  EXPECT_TRUE(ws.live().empty());
  const size_t reserved = ws.reserved_bytes();
  EXPECT_GE(reserved, (size_t(3) << 22) + 4000);
  job(second);
  job(third);
  EXPECT_EQ(ws.reserved_bytes(), reserved) << "a warm job allocates nothing";
  EXPECT_EQ(second, third) << "a warm job reuses the same memory";

  std::vector<int32_t> ids = {3, 1, 2};
  const int32_t* staged = ctx.stage_ids(ids.data(), ids.size());
  ASSERT_NE(staged, nullptr);
  std::string backend = kernels_backend();
  EXPECT_TRUE(backend == "CUDA" || backend == "OMP" || backend == "CPP") << backend;
}

// ---------------------------------------------------------------------------------------
// low-rank compression (PowerSGD) and 4-bit floats vs their scalar references

class LowRank : public DeviceTest {};

std::vector<float> normals(size_t n, uint32_t stream) {
  Rng rng(11, RngPurpose::Data, stream, 0);
  std::vector<float> v(n);
  for (float& x : v) x = float(rng.normal());
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rtol * std::max(1.0, std::fabs(double(want[i])))) << what << " [" << i << "]";
}

// The products with a matrix stored row-major or transposed, against loops in double.
TEST_F(LowRank, ProductsMatchTheReferenceForBothLayouts) {
  ExecContext ctx;
  const size_t rows = 37, cols = 23, r = 3;
  for (bool transposed : {false, true}) {
    const ParamBlock b{5, rows, cols, transposed};
    std::vector<float> m = normals(5 + rows * cols, 1), q = normals(cols * r, 2), p = normals(rows * r, 3);
    DeviceArray<float> dm, dq, dp, out_p(rows * r), out_q(cols * r), out_m(5 + rows * cols);
    dm.upload(m);
    dq.upload(q);
    dp.upload(p);
    out_m.upload(m);
    lowrank::project(ctx, b, dm.data() + 5, dq.data(), out_p.data(), r);
    lowrank::back_project(ctx, b, dm.data() + 5, dp.data(), out_q.data(), r);
    lowrank::expand(ctx, b, dp.data(), dq.data(), out_m.data() + 5, r);
    ctx.synchronize();
    std::vector<float> want_p(rows * r), want_q(cols * r), want_m = m;
    lowrank_ref::project(b, m.data() + 5, q.data(), want_p.data(), r);
    lowrank_ref::back_project(b, m.data() + 5, p.data(), want_q.data(), r);
    lowrank_ref::expand(b, p.data(), q.data(), want_m.data() + 5, r);
    const std::string layout = transposed ? "transposed" : "row-major";
    expect_close(out_p.to_host(), want_p, 1e-5, "M Q " + layout);
    expect_close(out_q.to_host(), want_q, 1e-5, "M^T P " + layout);
    expect_close(out_m.to_host(), want_m, 1e-5, "P Q^T " + layout);
  }
}

// Gram-Schmidt as the hook does it: the reference's bits (the same operations in the same
// order on the CPU), orthonormal columns, and a zero column left at zero.
TEST_F(LowRank, OrthogonalizeGivesOrthonormalColumnsAsTheReference) {
  ExecContext ctx;
  const size_t rows = 50, r = 4;
  std::vector<float> a = normals(rows * r, 4);
  DeviceArray<float> da;
  da.upload(a);
  lowrank::orthogonalize(ctx, da.data(), rows, r, 0.0f);
  ctx.synchronize();
  std::vector<float> got = da.to_host(), want = a;
  lowrank_ref::orthogonalize(want.data(), rows, r, 0.0f);
  expect_close(got, want, 1e-6, "orthogonalize");
  for (size_t i = 0; i < r; ++i)
    for (size_t j = 0; j < r; ++j) {
      double dot = 0;
      for (size_t k = 0; k < rows; ++k) dot += double(got[k * r + i]) * got[k * r + j];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5) << i << "," << j;
    }
  std::vector<float> zero(rows * 2, 0.0f);
  da.upload(zero);
  lowrank::orthogonalize(ctx, da.data(), rows, 2, 0.0f);
  ctx.synchronize();
  for (float x : da.to_host()) EXPECT_EQ(x, 0.0f) << "a zero column stays 0, not NaN";
}

// E3M0: each value is the reference's, a magnitude of {0, 2^-6, ..., 1} times the scale.
TEST_F(LowRank, Fp4RoundsAsTheReference) {
  ExecContext ctx;
  std::vector<float> x = normals(1001, 5);
  x[3] = 0.0f;
  DeviceArray<float> dx;
  dx.upload(x);
  const float s = fp4::max_abs(ctx, dx.data(), x.size());
  float want_s = 0;
  for (float v : x) want_s = std::max(want_s, std::fabs(v));
  EXPECT_EQ(s, want_s);
  fp4::round_e3m0(ctx, dx.data(), x.size(), s);
  ctx.synchronize();
  std::vector<float> got = dx.to_host();
  std::set<float> magnitudes;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(got[i], fp4_ref::round_e3m0(x[i], s)) << i;
    magnitudes.insert(std::fabs(got[i]) / s);
  }
  EXPECT_LE(magnitudes.size(), 8u) << "3 exponent bits: 8 magnitudes";
  EXPECT_EQ(got[3], 0.0f);
  EXPECT_EQ(fp4_ref::round_e3m0(0.75f, 1.0f), 1.0f);  // a tie goes to the larger
  EXPECT_EQ(fp4_ref::round_e3m0(-0.3f, 1.0f), -0.25f);
  EXPECT_EQ(fp4_ref::round_e3m0(0.007f, 1.0f), 0.0f);  // below 2^-7: 0
  EXPECT_DOUBLE_EQ(fp4::encoded_bytes(1001), 501 + 4.0);
}

// The layers' tensors as PowerSGD sees them: each dense layer's W as outputs x inputs,
// stored transposed, then its bias; covering every parameter in order.
TEST(ParamBlocks, DenseLayersAreOutputsByInputsThenTheBias) {
  auto model = make_dense({10, 16, 4}, DenseLoss::SoftmaxCrossEntropy);
  std::vector<ParamBlock> b = model->param_blocks();
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].offset, 0u);
  EXPECT_EQ(b[0].rows, 16u);
  EXPECT_EQ(b[0].cols, 10u);
  EXPECT_TRUE(b[0].transposed);
  EXPECT_EQ(b[1].offset, 160u);
  EXPECT_EQ(b[1].rows, 16u);
  EXPECT_EQ(b[1].cols, 1u);
  EXPECT_EQ(b[2].offset, 176u);
  EXPECT_EQ(b[2].rows, 4u);
  EXPECT_EQ(b[2].cols, 16u);
  EXPECT_EQ(b[3].offset, 240u);
  EXPECT_EQ(b[3].offset + b[3].rows, model->num_params());
}

}  // namespace
}  // namespace asgd
