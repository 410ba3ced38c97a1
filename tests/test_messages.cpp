// tests/test_messages.cpp — what gradient messages weigh (issue #16, parts 3 and 4): a
// sparse model's pulls and pushes carry only the rows a minibatch reads and touches
// (bytes per message = the formula), and so it processes far more gradients per virtual
// second than a dense model of the same size on a bandwidth-bound link (closed form);
// compression of dense gradients (top-k with and without error feedback, int8) against
// scalar references and hand-computed values, applied for real by the server; the proxy
// size's scaling; byte-identical output across thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/ops.h"
#include "kernels/ops_ref.h"
#include "kernels/rng.h"
#include "sim/net/message_size.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;

namespace {

// sparse_softmax over `features` one-hot features in `nnz` fields, `classes` classes; one
// async worker, batch `batch`, an almost free step, one shard link of 1e7 B/s.
json sparse_run(size_t features, int nnz, int classes, int batch) {
  return {{"name", "sparsemsg"},
          {"seed", 3},
          {"model", {{"type", classes == 2 ? "sparse_logistic" : "sparse_softmax"}}},
          {"data",
           {{"type", "sparse_synthetic"},
            {"features", features},
            {"nnz", nnz},
            {"zipf", 1.0},
            {"classes", classes},
            {"train_samples", 2000},
            {"test_samples", 200}}},
          {"train", {{"batch_size", batch}, {"lr", 0.5}}},
          {"stop", {{"gradients", 200}}},
          {"eval", {{"every", 100}, {"unit", "updates"}}},
          {"cluster",
           {{"workers", 1},
            {"compute", {{"dist", "constant"}, {"value", 1e-6}, {"per", "step"}}},
            {"network", {{"bandwidth", 1e7}}}}},
          {"engines", json::array({json{{"type", "async"}}})}};
}

}  // namespace

// ------------------------------------------------------------------ the formulas

TEST(MessageSize, RowsCompressionAndTheProxyScale) {
  NetworkSpec spec;  // fp32
  // 10 rows of width 3 and 3 dense values: 10 x (4 + 12) + 12
  EXPECT_EQ(row_message_bytes(spec, 3003, 10, 3, 3), 172.0);
  spec.bytes_per_value = 2;  // fp16: 10 x (4 + 6) + 6
  EXPECT_EQ(row_message_bytes(spec, 3003, 10, 3, 3), 106.0);
  spec.bytes_per_value = 4;
  spec.message_bytes = 1e6;  // proxy: the same fraction of it as 172 is of 3003 x 4
  EXPECT_DOUBLE_EQ(row_message_bytes(spec, 3003, 10, 3, 3), 1e6 * 172.0 / 12012.0);
  spec.message_bytes = 0;

  CompressionSpec topk{CompressionSpec::Type::TopK, 0.01, false};
  EXPECT_EQ(topk_count(0.01, 1000), 10u);
  EXPECT_EQ(topk_count(0.01, 1001), 11u);  // ceil
  EXPECT_EQ(topk_count(1e-9, 1000), 1u);   // at least one
  EXPECT_EQ(compressed_message_bytes(spec, 1000, topk), 10.0 * 8);
  EXPECT_EQ(compressed_message_bytes(spec, 1000, CompressionSpec{CompressionSpec::Type::Int8}), 1004.0);
  EXPECT_EQ(compressed_message_bytes(spec, 1000, CompressionSpec{}), 4000.0);
  spec.message_bytes = 4e6;  // a proxy of 1000x the size scales every kind by 1000
  EXPECT_DOUBLE_EQ(compressed_message_bytes(spec, 1000, topk), 80e3);
  EXPECT_DOUBLE_EQ(compressed_message_bytes(spec, 1000, CompressionSpec{CompressionSpec::Type::Int8}), 1004e3);
  EXPECT_THROW(topk_count(0.0, 10), std::invalid_argument);
}

// A step's two sizes, which both runtimes count with (Simulation::launch, MpiRuntime::launch):
// only a gradient step on pulled parameters sends less than the full vector.
TEST(MessageSize, AStepsPullAndPush) {
  NetworkSpec spec;  // fp32
  const CompressionSpec none, topk{CompressionSpec::Type::TopK, 0.01, false};
  auto sizes = [&](size_t table_rows, bool gradient_pull, bool sparse_pull, const CompressionSpec& c) {
    const StepMessageBytes b = step_message_bytes(spec, 3003, table_rows, 3, 10, gradient_pull, sparse_pull, c);
    return std::make_tuple(b.pull, b.push, b.compressed);
  };
  EXPECT_EQ(sizes(0, true, false, none), std::make_tuple(12012.0, 12012.0, false));
  EXPECT_EQ(sizes(0, false, false, topk), std::make_tuple(12012.0, 12012.0, false));  // an exchange: full
  EXPECT_EQ(sizes(0, true, false, topk), std::make_tuple(12012.0, 31.0 * 8, true));   // ceil(30.03) values
  EXPECT_EQ(sizes(1000, true, false, none), std::make_tuple(12012.0, 172.0, false));  // 10 rows + 3 dense
  EXPECT_EQ(sizes(1000, true, true, none), std::make_tuple(172.0, 172.0, false));     // sparse_pull
  EXPECT_EQ(sizes(1000, false, true, none), std::make_tuple(12012.0, 12012.0, false));
}

// ------------------------------------------------------------------ compression kernels

namespace {
std::vector<float> run_topk(std::vector<float> g, std::vector<float>* r, size_t k) {
  ExecContext ctx;
  DeviceArray<float> dg, dr;
  dg.upload(g);
  if (r) dr.upload(*r);
  ops::compress_topk(ctx, dg.data(), r ? dr.data() : nullptr, g.size(), k);
  ctx.synchronize();
  if (r) dr.download(*r);
  dg.download(g);
  return g;
}
std::vector<float> run_int8(std::vector<float> g, std::vector<float>* r) {
  ExecContext ctx;
  DeviceArray<float> dg, dr;
  dg.upload(g);
  if (r) dr.upload(*r);
  ops::compress_int8(ctx, dg.data(), r ? dr.data() : nullptr, g.size());
  ctx.synchronize();
  if (r) dr.download(*r);
  dg.download(g);
  return g;
}
}  // namespace

TEST(Compression, TopkKeepsTheLargestMagnitudesLowerIndexFirstOnTies) {
  if (!kernels_device_available()) GTEST_SKIP();
  // |-3| = |3|: both kept at k = 2; at k = 1 the lower index wins
  EXPECT_EQ(run_topk({0.5f, -3.f, 1.f, 3.f, -0.25f}, nullptr, 2), (std::vector<float>{0, -3.f, 0, 3.f, 0}));
  EXPECT_EQ(run_topk({0.5f, -3.f, 1.f, 3.f, -0.25f}, nullptr, 1), (std::vector<float>{0, -3.f, 0, 0, 0}));
  // error feedback: what is not sent waits in the residual and is added next time
  std::vector<float> r(5, 0.0f);
  EXPECT_EQ(run_topk({0.5f, -3.f, 1.f, 3.f, -0.25f}, &r, 2), (std::vector<float>{0, -3.f, 0, 3.f, 0}));
  EXPECT_EQ(r, (std::vector<float>{0.5f, 0, 1.f, 0, -0.25f}));
  EXPECT_EQ(run_topk({1.f, 0, 0.5f, 0, 0}, &r, 1), (std::vector<float>{1.5f, 0, 0, 0, 0}));  // 1.5 at 0 and 2: 0 wins
  EXPECT_EQ(r, (std::vector<float>{0, 0, 1.5f, 0, -0.25f}));
}

TEST(Compression, Int8QuantisesToTheMaxOver127Grid) {
  if (!kernels_device_available()) GTEST_SKIP();
  // max |g| = 2.54: s = 0.02; 0.9 / 0.02 = 45 -> 0.9; 0.004 / 0.02 = 0.2 -> 0
  std::vector<float> r(4, 0.0f);
  std::vector<float> q = run_int8({2.54f, -0.9f, 0.004f, 0.0f}, &r);
  const float s = 2.54f / 127.0f;
  EXPECT_EQ(q, (std::vector<float>{127 * s, -45 * s, 0, 0}));
  EXPECT_FLOAT_EQ(q[1], -0.9f);
  EXPECT_EQ(r[2], 0.004f);
  EXPECT_EQ(r[0], 2.54f - 127 * s);
  EXPECT_EQ(run_int8({0, 0, 0}, nullptr), (std::vector<float>{0, 0, 0}));
}

// Random vectors with many ties (values on a coarse grid): the kernels give the scalar
// references' bits, with and without a residual, over several rounds.
TEST(Compression, KernelsMatchTheScalarReferences) {
  if (!kernels_device_available()) GTEST_SKIP();
  for (size_t n : {1, 7, 1000, 20000}) {
    Rng rng(11, RngPurpose::Init, uint32_t(n), 0);
    std::vector<float> r_ref(n, 0.0f), r_k(n, 0.0f), r8_ref(n, 0.0f), r8_k(n, 0.0f);
    for (int round = 0; round < 3; ++round) {
      std::vector<float> g(n);
      for (auto& v : g) v = float(int(rng.below(41)) - 20) * 0.25f;
      const size_t k = std::max<size_t>(1, n / 10);
      std::vector<float> ref = g, empty;
      ops_ref::compress_topk(ref, empty, k);
      EXPECT_EQ(run_topk(g, nullptr, k), ref) << n;
      ref = g;
      ops_ref::compress_topk(ref, r_ref, k);
      EXPECT_EQ(run_topk(g, &r_k, k), ref) << n;
      EXPECT_EQ(r_k, r_ref) << n;
      ref = g;
      ops_ref::compress_int8(ref, r8_ref);
      EXPECT_EQ(run_int8(g, &r8_k), ref) << n;
      EXPECT_EQ(r8_k, r8_ref) << n;
    }
  }
}

// ------------------------------------------------------------------ sparse messages

// Batch 1 on one-hot fields: every gradient touches exactly nnz rows (one per field), so
// every pull and push weighs nnz x (4 + 4 x classes) + 4 x classes bytes; with
// sparse_pull false the pulls are full vectors (features x classes + classes) x 4.
TEST(SparseMessages, BytesPerMessageEqualTheFormula) {
  const size_t F = 5000;
  const int nnz = 10, K = 3;
  const double rows_bytes = nnz * (4.0 + 4.0 * K) + 4.0 * K, full = (F * K + K) * 4.0;
  json c = sparse_run(F, nnz, K, 1);
  json s = summary_at(run_one(c, "spmsg"));
  const json& m = s["messages"];
  ASSERT_GT(m["to_server"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(m["bytes_to_server"].get<double>() / m["to_server"].get<double>(), rows_bytes);
  EXPECT_DOUBLE_EQ(m["bytes_to_workers"].get<double>() / m["to_workers"].get<double>(), rows_bytes);

  c["cluster"]["network"]["sparse_pull"] = false;
  s = summary_at(run_one(c, "spmsg_fullpull"));
  EXPECT_DOUBLE_EQ(s["messages"]["bytes_to_server"].get<double>() / s["messages"]["to_server"].get<double>(),
                   rows_bytes);
  EXPECT_DOUBLE_EQ(s["messages"]["bytes_to_workers"].get<double>() / s["messages"]["to_workers"].get<double>(), full);

  // a proxy size scales the rows messages by the same factor as the full ones
  c["cluster"]["network"] = {{"bandwidth", 1e7}, {"message_bytes", full * 10}};
  s = summary_at(run_one(c, "spmsg_proxy"));
  EXPECT_NEAR(s["messages"]["bytes_to_server"].get<double>() / s["messages"]["to_server"].get<double>(),
              rows_bytes * 10, 1e-6);

  // batch 32: at most 32 x nnz rows, at least nnz; the mean lies between
  c = sparse_run(F, nnz, K, 32);
  s = summary_at(run_one(c, "spmsg32"));
  const double per = s["messages"]["bytes_to_server"].get<double>() / s["messages"]["to_server"].get<double>();
  EXPECT_GT(per, rows_bytes);
  EXPECT_LT(per, 32 * nnz * (4.0 + 4.0 * K) + 4.0 * K);
}

// One async worker, a step of 1 us, a 1e7 B/s link: a gradient takes pull + compute +
// push. Dense, a quadratic of the same parameter count (F + 1): 2 x 4 (F + 1) / 1e7 s;
// sparse_logistic at batch 1: 2 x (nnz x 8 + 4) / 1e7 s. Both rates match the closed form,
// and the sparse one is far above 10x.
TEST(SparseMessages, ASparseModelProcessesTenTimesTheGradientsOfADenseOneOnABandwidthBoundLink) {
  const size_t F = 100000;
  const int nnz = 10;
  json sp = sparse_run(F, nnz, 2, 1);
  sp["stop"] = {{"time", 0.5}};
  json sps = summary_at(run_one(sp, "sprate"));
  json dn = sp;
  dn["model"] = {{"type", "quadratic"}, {"dim", F + 1}};
  dn["data"] = {{"type", "none"}, {"samples", 2000}};
  json dns = summary_at(run_one(dn, "dnrate"));
  auto rate = [](const json& s) { return s["gradients"].get<double>() / s["time"].get<double>(); };
  const double sparse_closed = 1.0 / (2 * (nnz * 8.0 + 4) / 1e7 + 1e-6);
  const double dense_closed = 1.0 / (2 * 4.0 * (F + 1) / 1e7 + 1e-6);
  EXPECT_NEAR(rate(sps), sparse_closed, 0.01 * sparse_closed);
  EXPECT_NEAR(rate(dns), dense_closed, 0.05 * dense_closed);
  EXPECT_GE(rate(sps), 10 * rate(dns));
}

namespace {
// trace.json's spans named `name`: their args.bytes, in the file's order.
std::vector<double> span_bytes(const std::string& run_dir, const std::string& name) {
  std::vector<double> out;
  json t = json::parse(read_file(run_dir + "/trace.json"));
  for (const json& e : t["traceEvents"])
    if (e.value("name", "") == name && e.contains("args") && e["args"].contains("bytes"))
      out.push_back(e["args"]["bytes"].get<double>());
  return out;
}
}  // namespace

// trace.json's pull and push spans carry the bytes each message was charged: a sparse
// model's rows (nnz x (4 + 4 K) + 4 K at batch 1), not the full parameter vector.
TEST(SparseMessages, TraceSpansShowTheBytesCharged) {
  const size_t F = 5000;
  const int nnz = 10, K = 3;
  const double rows_bytes = nnz * (4.0 + 4.0 * K) + 4.0 * K, full = (F * K + K) * 4.0;
  json c = sparse_run(F, nnz, K, 1);
  c["trace"] = true;
  const std::string dir = run_one(c, "sptrace");
  for (const char* name : {"pull", "push"}) {
    std::vector<double> b = span_bytes(dir, name);
    ASSERT_GT(b.size(), 10u) << name;
    for (double v : b) ASSERT_EQ(v, rows_bytes) << name;
  }
  c["cluster"]["network"]["sparse_pull"] = false;  // full pulls, rows pushes
  const std::string full_dir = run_one(c, "sptrace_full");
  for (double v : span_bytes(full_dir, "pull")) ASSERT_EQ(v, full);
  for (double v : span_bytes(full_dir, "push")) ASSERT_EQ(v, rows_bytes);
}

// ------------------------------------------------------------------ compression, end to end

namespace {
// The quadratic f = 1/2 sum h_i w_i^2, h = 1..10, w starting at 1, no noise: one async
// worker, lr 0.1, evaluated after every update.
json quad_topk(int updates, bool error_feedback) {
  json h = json::array();
  for (int i = 1; i <= 10; ++i) h.push_back(double(i));
  return {{"name", "topk"},
          {"seed", 1},
          {"model", {{"type", "quadratic"}, {"dim", 10}, {"curvature", h}, {"init", 1.0}}},
          {"data", {{"type", "none"}, {"samples", 100}}},
          {"train", {{"batch_size", 1}, {"lr", 0.1}}},
          {"stop", {{"updates", updates}}},
          {"eval", {{"every", 1}, {"unit", "updates"}}},
          {"cluster",
           {{"workers", 1},
            {"compute", {{"dist", "constant"}, {"value", 0.001}, {"per", "step"}}},
            {"network", {{"compression", {{"type", "topk"}, {"ratio", 0.1}, {"error_feedback", error_feedback}}}}}}},
          {"engines", json::array({json{{"type", "async"}}})}};
}
}  // namespace

// Top-1 of the gradient h_i w_i = h_i: only w_10 moves, to 1 - 0.1 x 10 = 0, so the loss
// goes from 27.5 to 22.5. Step 2 without error feedback: top-1 of (h_1..h_9, 0) is
// h_9 = 9, w_9 = 1 - 0.9 = 0.1: loss 18 + 4.5 x 0.01 = 18.045. With it, the residual
// (h_1..h_9, 0) doubles the gradient: 18 at i = 9, w_9 = -0.8: loss 18 + 4.5 x 0.64 = 20.88.
// Bytes: each push 1 x (4 + 4), each pull 40.
TEST(Compression, TheServerAppliesTheCompressedGradient) {
  for (bool ef : {false, true}) {
    SCOPED_TRACE(ef);
    const std::string dir = run_one(quad_topk(2, ef), ef ? "topk_ef" : "topk");
    Metrics m = read_metrics(dir + "/metrics.csv");
    auto loss = m.column("train_loss");
    ASSERT_EQ(loss.size(), 3u);
    EXPECT_NEAR(loss[0], 27.5, 1e-5);
    EXPECT_NEAR(loss[1], 22.5, 1e-5);
    EXPECT_NEAR(loss[2], ef ? 20.88 : 18.045, 1e-5);
    json s = summary_at(dir);
    EXPECT_DOUBLE_EQ(s["messages"]["bytes_to_server"].get<double>(), 8.0 * s["messages"]["to_server"].get<double>());
    EXPECT_DOUBLE_EQ(s["messages"]["bytes_to_workers"].get<double>(), 40.0 * s["messages"]["to_workers"].get<double>());
  }
  // int8: h_i / (10 / 127) rounded, times 10 / 127; pushes of 10 + 4 bytes
  json c = quad_topk(1, false);
  c["cluster"]["network"]["compression"] = {{"type", "int8"}};
  const std::string dir = run_one(c, "int8");
  double expect = 0;
  const float s8 = 10.0f / 127.0f;
  for (int i = 1; i <= 10; ++i) {
    const float g = std::nearbyint(float(i) / s8) * s8;
    const float w = 1.0f - 0.1f * g;
    expect += 0.5 * i * double(w) * w;
  }
  EXPECT_NEAR(read_metrics(dir + "/metrics.csv").column("train_loss").back(), expect, 1e-5);
  json s = summary_at(dir);
  EXPECT_DOUBLE_EQ(s["messages"]["bytes_to_server"].get<double>(), 14.0 * s["messages"]["to_server"].get<double>());
}

// trace.json's push spans of a compressed gradient show the bytes charged (top-1 of 10:
// 4 + 4), its pulls the full 40.
TEST(Compression, TraceSpansShowTheCompressedBytes) {
  json c = quad_topk(20, false);
  c["trace"] = true;
  c["cluster"]["network"]["latency"] = 1e-4;  // spans of a positive length
  const std::string dir = run_one(c, "topk_trace");
  std::vector<double> push = span_bytes(dir, "push"), pull = span_bytes(dir, "pull");
  ASSERT_GE(push.size(), 20u);
  ASSERT_GE(pull.size(), 20u);
  for (double v : push) ASSERT_EQ(v, 8.0);
  for (double v : pull) ASSERT_EQ(v, 40.0);
}

TEST(Compression, ConfigRefusesItForSparseModelsAndListsTheKeys) {
  const std::string dir = temp_dir("compcfg");
  json c = sparse_run(1000, 5, 3, 8);
  c["cluster"]["network"]["compression"] = {{"type", "topk"}};
  write_text(dir + "/c.json", c.dump());
  CommandResult r = run_cli("validate " + dir + "/c.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cluster.network.compression.type: compression is for dense models"), std::string::npos)
      << r.output;
  c["cluster"]["network"]["compression"] = {{"type", "topk"}, {"ratio", 0}};
  c["model"] = {{"type", "quadratic"}};
  c["data"] = {{"type", "none"}};
  write_text(dir + "/c.json", c.dump());
  r = run_cli("validate " + dir + "/c.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cluster.network.compression.ratio"), std::string::npos) << r.output;
  r = run_cli("list");
  for (const char* key : {"sparse_pull", "compression", "error_feedback", "topk", "int8"})
    EXPECT_NE(r.output.find(key), std::string::npos) << key;
}

// Sparse messages on a contended star, and compression with error feedback on every engine
// that pushes gradients: the same bytes for 1, 2 and 3 threads.
TEST(Determinism, SparseMessagesAndCompressionAreByteIdenticalAcrossThreadCounts) {
  json sp = sparse_run(3000, 6, 3, 16);
  sp["stop"] = {{"epochs", 1}};
  sp["eval"] = {{"every", 0.25}};
  sp["cluster"]["workers"] = 4;
  sp["cluster"]["compute"] = {{"dist", "lognormal"}, {"mean", 1e-4}, {"sigma", 0.8}, {"per", "sample"}};
  sp["cluster"]["network"] = {{"bandwidth", 2e5}, {"worker_bandwidth", 3e5}, {"latency", 1e-4}};
  json dn = sp;
  dn["model"] = {{"type", "mlp"}, {"hidden", {12}}};
  dn["data"] = {{"type", "synthetic"}, {"classes", 3}, {"features", 8}, {"train_samples", 400}, {"test_samples", 100}};
  dn["cluster"]["network"]["compression"] = {{"type", "topk"}, {"ratio", 0.05}, {"error_feedback", true}};
  json dn8 = dn;
  dn8["name"] = "int8";
  dn8["cluster"]["network"]["compression"] = {{"type", "int8"}, {"error_feedback", true}};
  for (json c : {sp, dn, dn8}) {
    c["engines"] = json::array({json{{"type", "async"}}, json{{"type", "sync"}}, json{{"type", "ssp"}, {"bound", 1}}});
    const std::string tag = c["name"].get<std::string>() + c["model"]["type"].get<std::string>();
    std::string d1 = run_config(c, temp_dir(tag + "1"), 1), d2 = run_config(c, temp_dir(tag + "2"), 2),
                d3 = run_config(c, temp_dir(tag + "3"), 3);
    for (const char* run : {"async-seed3", "sync-seed3", "ssp-seed3"}) {
      SCOPED_TRACE(tag + "/" + run);
      for (const char* file : {"metrics.csv", "workers.csv"}) {
        std::string a = read_file(d1 + "/" + run + "/" + file);
        EXPECT_FALSE(a.empty()) << file;
        EXPECT_EQ(a, read_file(d2 + "/" + run + "/" + file)) << file;
        EXPECT_EQ(a, read_file(d3 + "/" + run + "/" + file)) << file;
      }
      json s1 = json::parse(read_file(d1 + "/" + run + "/summary.json"));
      for (const std::string& d : {d2, d3}) {
        json s = json::parse(read_file(d + "/" + run + "/summary.json"));
        s1["wall_seconds"] = s["wall_seconds"] = 0;
        EXPECT_EQ(s1, s);
      }
    }
  }
}
