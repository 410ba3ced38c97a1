// tests/test_topology.cpp — boxes of GPUs and racks of boxes (cluster.topology), where the
// parameters live (cluster.placement) and the synchronous family's collectives (engine
// comm), each pinned by a closed form in the alpha-beta model (docs/architecture.md,
// "Boxes", "Racks" and "Collectives"), by equivalence with the star (and racks with boxes),
// and by determinism across thread counts.
// Small models, constant compute: the clock, not the learning, is tested.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <chrono>
#include <cstring>
#include "experiments/config/config.h"
#include "kernels/model.h"
#include "sim/timing/compute_time.h"
#include "sim/timing/distribution.h"
#include "sim/run/recorder.h"
#include "sim/core/simulation.h"
#include "sim/net/catalog.h"
#include "sim/net/collective.h"
#include "sim/net/topology.h"
#include "sim/core/worker_pool.h"
#include "test_helpers.h"

using nlohmann::json;
using namespace asgd;
using namespace asgd::testing;

namespace {

// A 10-parameter quadratic, batch 8, constant compute `step` seconds a step, messages of
// 1 MB whatever the model (message_bytes), `updates` updates.
json box_config(const std::string& name, int workers, double step, const json& engine, int updates = 6) {
  return json{{"name", name},
              {"seed", 3},
              {"model", {{"type", "quadratic"}, {"dim", 10}, {"curvature", 1.0}, {"noise", 0.1}}},
              {"data", {{"type", "none"}, {"samples", 512}}},
              {"train", {{"batch_size", 8}, {"lr", 0.01}}},
              {"stop", {{"updates", updates}}},
              {"eval", {{"every", 2}, {"unit", "updates"}}},
              {"cluster",
               {{"workers", workers},
                {"compute", {{"dist", "constant"}, {"value", step}, {"per", "step"}}},
                {"network", {{"message_bytes", 1e6}}}}},
              {"engines", json::array({engine})}};
}

json topology(int boxes, int per_box, double intra_bw, double intra_lat, double inter_bw, double inter_lat) {
  return {{"type", "boxes"},
          {"boxes", boxes},
          {"per_box", per_box},
          {"intra", {{"bandwidth", intra_bw}, {"latency", intra_lat}}},
          {"inter", {{"bandwidth", inter_bw}, {"latency", inter_lat}}}};
}

// Racks (leaf-spine): `boxes` boxes of `per_box` GPUs, `per_rack` boxes a rack; each level
// {bandwidth, latency}.
json racks_topology(int boxes, int per_box, int per_rack, std::pair<double, double> intra,
                    std::pair<double, double> inter, std::pair<double, double> rack) {
  auto level = [](std::pair<double, double> l) { return json{{"bandwidth", l.first}, {"latency", l.second}}; };
  return {{"type", "racks"},       {"boxes", boxes},        {"per_box", per_box}, {"per_rack", per_rack},
          {"intra", level(intra)}, {"inter", level(inter)}, {"rack", level(rack)}};
}

// A config edited into something invalid: what it is, the edit, what the message names.
struct Bad {
  const char* what;
  std::function<void(json&)> edit;
  std::vector<std::string> mention;
};
// Each case, applied to `base` and run: exit 2, naming what it should.
void expect_refusals(const json& base, const std::vector<Bad>& cases, const std::string& dir) {
  for (size_t i = 0; i < cases.size(); ++i) {
    json c = base;
    cases[i].edit(c);
    const std::string path = dir + "/bad" + std::to_string(i) + ".json";
    write_text(path, c.dump());
    CommandResult r = run_cli("run " + path + " --quiet --out " + dir + "/out" + std::to_string(i));
    EXPECT_EQ(r.exit_code, 2) << cases[i].what << ":\n" << r.output;
    for (const auto& m : cases[i].mention)
      EXPECT_NE(r.output.find(m), std::string::npos) << cases[i].what << ": lacks '" << m << "':\n" << r.output;
  }
}

double run_time(const std::string& run_dir) { return summary_at(run_dir)["time"].get<double>(); }

// What two runs must share to be the same run: every output but the config and wall time.
std::string files_of(const std::string& dir) {
  std::string all;
  for (const char* f : {"metrics.csv", "staleness.csv", "workers.csv"}) all += read_file(dir + "/" + f);
  json s = summary_at(dir);
  return all + s["iteration_time"].dump() + s["server"].dump() + s["messages"].dump() + s["time"].dump();
}

void expect_relative(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-9 * std::abs(want)) << what;
}

const double kMB = 1e6;

}  // namespace

// ------------------------------------------------------------------ routes

// Uncontended routes: latency per level crossed plus bytes over the slowest link.
TEST(Boxes, RoutesCrossTheLinksOfTheirLevels) {
  NetworkSpec net;
  net.bandwidth = 5e8;  // two shards: 1 GB/s together
  net.shards = 2;
  ClusterSpec c;
  c.boxes = 2;
  c.per_box = 2;
  c.intra = {4e9, 1e-5};
  c.inter = {2e9, 1e-3};
  auto seconds = [](SimTime t) { return sim_to_seconds(t); };
  {  // each on links of its own (a fresh topology: links are FIFO)
    auto fresh = [&] { return make_cluster_topology(c, net); };
    EXPECT_EQ(fresh()->boxes(), 2);
    EXPECT_EQ(fresh()->box_of(3), 1);
    // GPU -> servers: its intra link, its box's NIC, the shards (the bottleneck, 1 GB/s)
    expect_relative(seconds(fresh()->transfer(1, kServer, kMB, 0).arrival), 1e-5 + 1e-3 + kMB / 1e9, "GPU to servers");
    // same box: intra up and down only
    expect_relative(seconds(fresh()->transfer(2, 3, kMB, 0).arrival), 1e-5 + kMB / 4e9, "within a box");
    // across boxes: both intra links and both NICs (2 GB/s)
    expect_relative(seconds(fresh()->transfer(0, 3, kMB, 0).arrival), 1e-5 + 1e-3 + kMB / 2e9, "across boxes");
    // box host to box host: the NICs only
    expect_relative(seconds(fresh()->transfer(box_host(0), box_host(1), kMB, 0).arrival), 1e-3 + kMB / 2e9,
                    "host to host");
  }
  {  // a box's NIC is shared by its GPUs: FIFO
    auto t = make_cluster_topology(c, NetworkSpec{});
    TransferTimes a = t->transfer(0, kServer, kMB, 0), b = t->transfer(1, kServer, kMB, 0);
    TransferTimes other_box = t->transfer(2, kServer, kMB, 0);
    expect_relative(seconds(a.arrival), 1e-5 + 1e-3 + kMB / 2e9, "first");
    EXPECT_EQ(b.start, seconds_to_sim(kMB / 2e9));
    expect_relative(seconds(b.arrival), 1e-5 + 1e-3 + 2 * kMB / 2e9, "second waits for the box's NIC");
    EXPECT_EQ(other_box.start, 0);
  }
  {  // host placement: a GPU's server is its own box's host; a host's is the servers
    c.host_placement = true;
    auto t = make_cluster_topology(c, net);
    expect_relative(seconds(t->transfer(kServer, 3, kMB, 0).arrival), 1e-5 + kMB / 4e9, "GPU to its host");
    expect_relative(seconds(t->transfer(box_host(1), kServer, kMB, 0).arrival), 1e-3 + kMB / 1e9, "host to servers");
  }
}

// Racks: a message that leaves a rack (to another, or to the servers on the spine) also
// crosses the racks' uplink/downlink and pays rack.latency; one between two boxes of a rack
// does not, however slow the rack's links are.
TEST(Racks, RoutesCrossTheRackLinksOnlyWhenTheyLeaveARack) {
  NetworkSpec net;
  net.bandwidth = 1e9;  // two shards: 2 GB/s together
  net.shards = 2;
  ClusterSpec c;
  c.type = "racks";
  c.boxes = 4;
  c.per_box = 2;
  c.per_rack = 2;  // racks {box 0, box 1}, {box 2, box 3}; GPUs 0-3 in rack 0, 4-7 in rack 1
  c.intra = {4e9, 1e-5};
  c.inter = {2e9, 1e-4};
  c.rack = {1.6e9, 2e-3};  // the bottleneck of every route that leaves a rack
  const double ai = 1e-5, ae = 1e-4, ar = 2e-3;
  auto seconds = [](SimTime t) { return sim_to_seconds(t); };
  auto fresh = [&] { return make_cluster_topology(c, net); };
  EXPECT_EQ(fresh()->boxes(), 4);
  EXPECT_TRUE(fresh()->has_hosts());
  // GPU -> servers: intra, inter, rack uplink, shards: ai + ae + ar + B / min(4, 2, 1.6, 2) GB/s
  expect_relative(seconds(fresh()->transfer(3, kServer, kMB, 0).arrival), ai + ae + ar + kMB / 1.6e9, "GPU to servers");
  expect_relative(seconds(fresh()->transfer(kServer, 6, kMB, 0).arrival), ai + ae + ar + kMB / 1.6e9, "servers to GPU");
  // two boxes of one rack: their NICs only (the rack's slow links are not crossed)
  expect_relative(seconds(fresh()->transfer(1, 3, kMB, 0).arrival), ai + ae + kMB / 2e9, "within a rack");
  // across racks: both racks' links
  expect_relative(seconds(fresh()->transfer(3, 4, kMB, 0).arrival), ai + ae + ar + kMB / 1.6e9, "across racks");
  expect_relative(seconds(fresh()->transfer(box_host(0), box_host(3), kMB, 0).arrival), ae + ar + kMB / 1.6e9,
                  "host to host across racks");
  expect_relative(seconds(fresh()->transfer(box_host(2), box_host(3), kMB, 0).arrival), ae + kMB / 2e9,
                  "host to host within a rack");
  {  // the shards the bottleneck: S x shard bw below the rack's
    NetworkSpec slow = net;
    slow.bandwidth = 4e8;  // 0.8 GB/s together
    expect_relative(seconds(make_cluster_topology(c, slow)->transfer(0, kServer, kMB, 0).arrival),
                    ai + ae + ar + kMB / 8e8, "the shards slowest");
  }
  {  // a rack's uplink is shared by its boxes (FIFO); the other rack's is not (shards unlimited)
    auto t = make_cluster_topology(c, NetworkSpec{});
    const TransferTimes a = t->transfer(0, kServer, kMB, 0), b = t->transfer(2, kServer, kMB, 0);
    const TransferTimes other_rack = t->transfer(4, kServer, kMB, 0);
    EXPECT_EQ(b.start, a.start + seconds_to_sim(kMB / 1.6e9)) << "second box of rack 0 waits for its uplink";
    EXPECT_EQ(other_rack.start, 0);
  }
  {  // host placement: a GPU's server is its box's host; a host's, the servers across the rack uplink
    c.host_placement = true;
    auto t = fresh();
    expect_relative(seconds(t->transfer(kServer, 5, kMB, 0).arrival), ai + kMB / 4e9, "GPU to its host");
    expect_relative(seconds(t->transfer(box_host(1), kServer, kMB, 0).arrival), ae + ar + kMB / 1.6e9,
                    "host to servers");
  }
  c.host_placement = false;
  c.per_rack = 3;  // as a spec built in code may be
  EXPECT_THROW(fresh(), std::invalid_argument);
}

// ------------------------------------------------------------------ the star, unchanged

// A topology that is the star in disguise runs exactly as the star: byte-identical files,
// for an async and a sync engine with every cost on.
//  (a) one box, unlimited intra and inter links, placement servers: the shard links alone;
//  (b) boxes of one GPU, unlimited intra: each box's NIC is that worker's NIC;
//  (c) one box, placement host: the host is the server and each GPU's intra link its NIC.
TEST(Boxes, ATopologyThatIsTheStarRunsAsTheStar) {
  auto costs = [](json c, const json& network, const json& topo, const char* placement) {
    c["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", 0.002}};
    c["cluster"]["server"] = {{"update_seconds", 0.0005}};
    c["cluster"]["network"] = network;
    c["cluster"]["network"]["message_bytes"] = 1e5;
    if (!topo.is_null()) {
      c["cluster"]["topology"] = topo;
      c["cluster"]["placement"] = placement;
      c["cluster"].erase("workers");  // derived
    }
    c["stop"] = {{"updates", 30}};
    return c;
  };
  struct Case {
    const char* what;
    json star_network, network, topo;
    const char* placement;
  };
  const std::vector<Case> cases = {
      {"one box, unlimited intra",
       {{"bandwidth", 3e7}, {"shards", 2}, {"latency", 0.002}},
       {{"bandwidth", 3e7}, {"shards", 2}},
       topology(1, 4, 0, 0, 0, 0.002),
       "servers"},
      {"boxes of one",
       {{"bandwidth", 3e7}, {"shards", 2}, {"latency", 0.002}, {"worker_bandwidth", 2e7}},
       {{"bandwidth", 3e7}, {"shards", 2}},
       topology(4, 1, 0, 0, 2e7, 0.002),
       "servers"},
      {"one box, host placement",
       {{"latency", 0.002}, {"worker_bandwidth", 2e7}},
       json::object(),
       topology(1, 4, 2e7, 0.002, 1e3, 0.5),
       "host"},
  };
  for (const json& engine : {json{{"type", "async"}}, json{{"type", "sync"}}}) {
    for (const Case& k : cases) {
      const std::string star =
          files_of(run_one(costs(box_config("star", 4, 0, engine), k.star_network, nullptr, ""), "star"));
      const std::string boxes =
          files_of(run_one(costs(box_config("box", 4, 0, engine), k.network, k.topo, k.placement), "box"));
      EXPECT_EQ(star, boxes) << k.what << ", " << engine.dump();
    }
  }
}

// Racks that add nothing run exactly as boxes with the same keys (byte-identical files, an
// async and two sync engines, every cost on, both placements):
//  (a) one rack (per_rack = boxes) with unlimited rack links and no rack latency: no link
//      and no latency is added to any route;
//  (b) racks of one box whose rack links are no slower than its NIC (equal, or 3x), no
//      rack latency: every message that crosses a rack link crosses its box's NIC in the
//      same direction with the same bytes from the same start, and is held there at least
//      as long, so the rack link is free whenever the NIC is and never sets an arrival.
TEST(Racks, RacksThatAddNothingRunAsBoxes) {
  auto costs = [](const json& topo, const char* placement, const json& engine) {
    json c = box_config("eq", 4, 0, engine);
    c["cluster"]["compute"] = {{"dist", "exponential"}, {"mean", 0.002}};
    c["cluster"]["server"] = {{"update_seconds", 0.0005}};
    c["cluster"]["network"] = {{"bandwidth", 3e7}, {"shards", 2}, {"message_bytes", 1e5}};
    c["cluster"]["topology"] = topo;
    c["cluster"]["placement"] = placement;
    c["cluster"].erase("workers");  // derived
    c["stop"] = {{"updates", 30}};
    return c;
  };
  const std::pair<double, double> intra{6e7, 1e-4}, inter{2e7, 0.002};
  struct Case {
    const char* what;
    int boxes, per_box, per_rack;
    std::pair<double, double> rack;
  };
  const std::vector<Case> cases = {{"one rack, unlimited", 2, 2, 2, {0, 0}},
                                   {"racks of one box, rack bw = NIC bw", 4, 1, 1, {2e7, 0}},
                                   {"racks of one box, rack bw = 3 NIC bw", 2, 2, 1, {6e7, 0}}};
  for (const json& engine :
       {json{{"type", "async"}}, json{{"type", "sync"}}, json{{"type", "sync"}, {"comm", "hierarchical"}}})
    for (const char* placement : {"servers", "host"}) {
      if (engine["type"] == "async" && std::string(placement) == "host") continue;  // refused over boxes
      for (const Case& k : cases) {
        const json boxes = topology(k.boxes, k.per_box, intra.first, intra.second, inter.first, inter.second);
        const json racks = racks_topology(k.boxes, k.per_box, k.per_rack, intra, inter, k.rack);
        const std::string b = files_of(run_one(costs(boxes, placement, engine), "eq_boxes"));
        const std::string r = files_of(run_one(costs(racks, placement, engine), "eq_racks"));
        EXPECT_EQ(b, r) << k.what << ", " << placement << ", " << engine.dump();
      }
    }
}

// ------------------------------------------------------------------ placement, sync over ps

// Placement servers, one box of G GPUs behind a NIC of bandwidth b (intra and the shards
// unlimited): the G pulls of an iteration queue on the box's downlink, the last arriving at
// G S/b + a; the pushes leave S/b apart, so none waits, and the last arrives S/b + a after
// its compute. An iteration: c + (G + 1) S/b + 2a (+ the update).
TEST(Placement, ServersPlacementSharesTheBoxNicAmongItsGpus) {
  const double c = 0.01, a = 1e-4, b = 1e9, u = 0.002;
  const int G = 4, K = 5;
  json cfg = box_config("nic", G, c, {{"type", "sync"}}, K);
  cfg["cluster"]["topology"] = topology(1, G, 0, 0, b, a);
  cfg["cluster"]["server"] = {{"update_seconds", u}};
  expect_relative(run_time(run_one(cfg, "nic")), K * (c + (G + 1) * kMB / b + 2 * a + u), "sync, servers placement");
}

// Oversubscription (sync over ps, placement servers, racks of k boxes of one GPU, NICs of
// bandwidth b_e, rack links of b_r, intra and the shards unlimited, a = a_e + a_r). The k
// pulls of a rack queue on its downlink, S/b_r apart: the j-th arrives j S/b_r +
// S/min(b_r, b_e) + a, the last (k - 1) S/b_r + S/min(b_r, b_e) + a. The pushes leave S/b_r
// apart, so none waits on the uplink, and the last arrives S/min(b_r, b_e) + a after its
// compute. An iteration: c + (k - 1) S/b_r + 2 S/min(b_r, b_e) + 2a + u; with k:1
// oversubscription (b_r = b_e) that is c + (k + 1) S/b_e + 2a + u, the box NIC's case above
// with the rack's uplink as the shared link. Two racks: each queues on its own links.
TEST(Racks, OversubscribedUplinksQueueTheirRacksBoxes) {
  const double c = 0.01, ae = 1e-4, ar = 5e-4, be = 1e9, u = 0.002;
  const int k = 4, R = 2, K = 3;
  for (double ratio : {1.0, 2.0, 4.0}) {  // rack bandwidth k b_e / ratio: 1:1, 2:1, 4:1
    const double br = k * be / ratio;
    json cfg = box_config("oversub", R * k, c, {{"type", "sync"}}, K);
    cfg["cluster"].erase("workers");
    cfg["cluster"]["topology"] = racks_topology(R * k, 1, k, {0, 0}, {be, ae}, {br, ar});
    cfg["cluster"]["server"] = {{"update_seconds", u}};
    const double iteration = c + (k - 1) * kMB / br + 2 * kMB / std::min(br, be) + 2 * (ae + ar) + u;
    expect_relative(run_time(run_one(cfg, "oversub")), K * iteration, std::to_string(ratio) + ":1");
  }
}

// Placement host, one box: the host is the server and only the GPUs' intra links carry
// messages, each its own: an iteration is a pull, the compute and a push,
// c + 2 (a_intra + S / b_intra) (+ the update), whatever G.
TEST(Placement, HostPlacementInOneBoxUsesEachGpusOwnLink) {
  const double c = 0.01, a = 1e-5, b = 4e9, u = 0.001;
  const int K = 5;
  for (int G : {2, 8}) {
    json cfg = box_config("host1", G, c, {{"type", "sync"}}, K);
    cfg["cluster"]["topology"] = topology(1, G, b, a, 1e6, 0.1);  // inter would be slow: it is not crossed
    cfg["cluster"]["placement"] = "host";
    cfg["cluster"]["server"] = {{"update_seconds", u}};
    expect_relative(run_time(run_one(cfg, "host1")), K * (c + 2 * (a + kMB / b) + u), "G = " + std::to_string(G));
  }
}

// Placement host over B boxes (sync, comm ps): each box's GPUs send their gradients to
// their host (a_i + S/b_i, side by side), the B hosts push the sums to the servers (S_s
// shards of bandwidth b_s, faster together than a box's NIC b_e: the pushes queue on the
// shard links, the last leaving (B - 1) S/(S_s b_s) after the first and arriving S/b_e +
// a_e after it leaves), the server applies the update, and the way back mirrors it:
//   phase = a_i + S/b_i + (B - 1) S/(S_s b_s) + S/b_e + a_e, an iteration c + 2 phase + u.
// The replicas start from the seeded initial parameters (no first broadcast) and the run
// stops at the K-th update, before its way back: K (c + u) + (2K - 1) phase.
TEST(Placement, HostPlacementOverBoxesExchangesOneSumPerBoxWithTheServers) {
  const double c = 0.01, ai = 1e-5, bi = 4e9, ae = 1e-4, be = 1e9, bs = 1e9, u = 0.002;
  const int Ss = 2, K = 4;
  for (int B : {2, 3}) {
    json cfg = box_config("hostB", 2 * B, c, {{"type", "sync"}}, K);
    cfg["cluster"]["topology"] = topology(B, 2, bi, ai, be, ae);
    cfg["cluster"]["placement"] = "host";
    cfg["cluster"]["network"]["bandwidth"] = bs;
    cfg["cluster"]["network"]["shards"] = Ss;
    cfg["cluster"]["server"] = {{"update_seconds", u}};
    const std::string dir = run_one(cfg, "hostB");
    const double phase = ai + kMB / bi + (B - 1) * kMB / (Ss * bs) + kMB / be + ae;
    expect_relative(run_time(dir), K * (c + u) + (2 * K - 1) * phase, "B = " + std::to_string(B));
    json s = summary_at(dir);
    EXPECT_EQ(s["messages"]["to_server"].get<double>(), K * B) << "one push per box and iteration";
  }
}

// ------------------------------------------------------------------ collectives

// A flat ring of N over links of bandwidth b and latency a: 2(N - 1) steps of S/N bytes,
// 2(N - 1)(a + S/(N b)). On the star (worker NICs), with the update after it:
// K iterations take K (c + ring + u).
TEST(Collectives, RingAllReduceOnTheStarTakesTwoNMinusOneSteps) {
  const double c = 0.01, a = 1e-4, b = 1e9, u = 0.001;
  const int K = 5;
  for (int N : {2, 4, 8}) {
    json cfg = box_config("ring", N, c, {{"type", "sync"}, {"comm", "allreduce"}}, K);
    cfg["cluster"]["network"]["worker_bandwidth"] = b;
    cfg["cluster"]["network"]["latency"] = a;
    cfg["cluster"]["network"]["bandwidth"] = 1e3;  // the servers' links: not crossed by a ring
    cfg["cluster"]["server"] = {{"update_seconds", u}};
    const std::string dir = run_one(cfg, "ring");
    const double ring = 2 * (N - 1) * (a + kMB / (N * b));
    expect_relative(run_time(dir), K * (c + ring + u), "N = " + std::to_string(N));
    EXPECT_EQ(summary_at(dir)["messages"]["to_server"].get<double>(), 0) << "no server in an all-reduce";
  }
}

// The flat ring over boxes (worker order, B > 1): every step waits for the edges that
// leave a box, a_i + a_e + S/(N min(b_i, b_e)): 2(N - 1) of them.
TEST(Collectives, RingAllReduceOverBoxesIsPacedByTheEdgesBetweenBoxes) {
  const double c = 0.01, ai = 1e-5, bi = 4e9, ae = 1e-4, be = 1e9;
  const int K = 4, B = 2, G = 4, N = B * G;
  json cfg = box_config("ringB", N, c, {{"type", "sync"}, {"comm", "allreduce"}}, K);
  cfg["cluster"]["topology"] = topology(B, G, bi, ai, be, ae);
  const double ring = 2 * (N - 1) * (ai + ae + kMB / (N * std::min(bi, be)));
  expect_relative(run_time(run_one(cfg, "ringB")), K * (c + ring), "flat ring over 2 boxes of 4");
}

// A ring over racks (worker order): each step, every edge sends S/N, and the step lasts
// as long as its slowest edge: within a box a_i + S/(N b_i), between boxes of a rack
// a_i + a_e + S/(N min(b_i, b_e)), between racks (R > 1) a_i + a_e + a_r +
// S/(N min(b_i, b_e, b_r)), the slowest. Each rack's uplink and downlink carry one edge a
// step, so nothing queues: 2(N - 1)(a_i + a_e + a_r + S/(N min(b_i, b_e, b_r))). With one
// rack (per_rack = boxes) no edge leaves it: the boxes' ring, however slow the rack links.
// Hierarchical: the hosts' ring (in box order) has edges between racks too:
// 2(a_i + S/b_i) + 2(B - 1)(a_e + a_r + S/(B min(b_e, b_r))).
TEST(Racks, RingsArePacedByTheEdgesBetweenRacks) {
  const double c = 0.01, ai = 1e-5, bi = 4e9, ae = 1e-4, be = 1e9, ar = 3e-4, u = 0.0005;
  const int K = 3, B = 4, G = 2, N = B * G;
  auto run = [&](const char* comm, int per_rack, double br) {
    json cfg = box_config("ringR", N, c, {{"type", "sync"}, {"comm", comm}}, K);
    cfg["cluster"]["topology"] = racks_topology(B, G, per_rack, {bi, ai}, {be, ae}, {br, ar});
    cfg["cluster"]["server"] = {{"update_seconds", u}};
    return run_time(run_one(cfg, "ringR"));
  };
  for (double br : {4e8, 2.5e9}) {  // the rack links slower than the NICs, then faster
    const double ring = 2 * (N - 1) * (ai + ae + ar + kMB / (N * std::min({bi, be, br})));
    expect_relative(run("allreduce", 2, br), K * (c + ring + u), "2 racks of 2 boxes, rack bw " + std::to_string(br));
    expect_relative(run("allreduce", 1, br), K * (c + ring + u), "4 racks of 1 box, rack bw " + std::to_string(br));
    const double hier = 2 * (ai + kMB / bi) + 2 * (B - 1) * (ae + ar + kMB / (B * std::min(be, br)));
    expect_relative(run("hierarchical", 2, br), K * (c + hier + u), "hierarchical, rack bw " + std::to_string(br));
  }
  const double one_rack = 2 * (N - 1) * (ai + ae + kMB / (N * std::min(bi, be)));
  expect_relative(run("allreduce", B, 1e8), K * (c + one_rack + u), "one rack: its slow links are not crossed");
}

// Hierarchical: reduce to each box's host (a_i + S/b_i), a ring of the B hosts over their
// NICs (2(B - 1)(a_e + S/(B b_e))), broadcast (a_i + S/b_i).
TEST(Collectives, HierarchicalReducesRingsAndBroadcasts) {
  const double c = 0.01, ai = 1e-5, bi = 4e9, ae = 1e-4, be = 1e9, u = 0.0005;
  const int K = 4;
  for (int B : {1, 2, 4}) {
    const int G = 4;
    json cfg = box_config("hier", B * G, c, {{"type", "sync"}, {"comm", "hierarchical"}}, K);
    cfg["cluster"]["topology"] = topology(B, G, bi, ai, be, ae);
    cfg["cluster"]["server"] = {{"update_seconds", u}};
    const double coll = 2 * (ai + kMB / bi) + 2 * (B - 1) * (ae + kMB / (B * be));
    expect_relative(run_time(run_one(cfg, "hier")), K * (c + coll + u), "B = " + std::to_string(B));
  }
}

// The ring all-reduce as an algorithm over the topology alone (sim/net/collective.h), no
// run around it: on the star, n workers, each NIC of bandwidth b, latency a, B bytes each:
// 2(n-1) steps of a + B/(n b) (to the nanosecond); every step sends n messages of B/n between workers. Kinds
// through box hosts are refused on the star.
TEST(Collectives, RingOverTheTopologyAloneIsTheClosedForm) {
  const double a = 3e-4, bw = 2e9, B = 8e6;
  for (int n : {2, 3, 8}) {
    NetworkSpec spec;
    spec.latency = a;
    spec.worker_bandwidth = bw;
    const std::unique_ptr<Topology> star = make_star_topology(spec, n);
    std::vector<int> members(static_cast<size_t>(n), 0);
    for (int w = 0; w < n; ++w) members[size_t(w)] = w;
    MessageCounts counts;
    const SimTime start = seconds_to_sim(1.0);
    const SimTime end =
        run_collective(*star, Collective::RingAllReduce, members, B, start, counts, [] { return true; });
    // (each step's transfer rounds to the clock's nanosecond)
    EXPECT_NEAR(sim_to_seconds(end - start), 2 * (n - 1) * (a + B / (n * bw)), 2 * (n - 1) * 1e-9) << "n = " << n;
    EXPECT_EQ(counts.messages_to_workers, uint64_t(2 * (n - 1) * n));
    EXPECT_NEAR(counts.bytes_to_workers, 2 * (n - 1) * B, 1e-6 * B);
    EXPECT_EQ(counts.messages_to_server, 0u);
    EXPECT_THROW(run_collective(*star, Collective::Hierarchical, members, B, end, counts, [] { return true; }),
                 std::logic_error);
  }
}

// sync_backup with a ring: the ring is among the first N - b finishers. A late worker's
// gradient is dropped and its replica is behind: it receives the parameters from the
// nearest member before it (one message) and starts late again. With constant compute
// the same N - b workers aggregate every iteration: K (c + ring(N - b)), b drops each.
TEST(Collectives, SyncBackupRingsAmongTheFirstFinishers) {
  const double c = 0.02, a = 2e-4, bw = 1e9;  // the catch-ups end before the ring does
  const int N = 6, backups = 2, K = 5, n = N - backups;
  json cfg = box_config("ringb", N, c, {{"type", "sync_backup"}, {"backups", backups}, {"comm", "allreduce"}}, K);
  cfg["cluster"]["network"]["worker_bandwidth"] = bw;
  cfg["cluster"]["network"]["latency"] = a;
  const std::string dir = run_one(cfg, "ringb");
  const double ring = 2 * (n - 1) * (a + kMB / (n * bw));
  expect_relative(run_time(dir), K * (c + ring), "ring of the first N - b");
  json s = summary_at(dir);
  EXPECT_EQ(s["dropped_gradients"].get<int>(), backups * K);
  Metrics w = read_metrics(dir + "/workers.csv");
  for (int k = 0; k < N; ++k) EXPECT_EQ(w.column("dropped")[size_t(k)], k < n ? 0 : K) << "worker " << k;
}

// The collectives change the clock, not the learning: sync over ps, a ring and the
// hierarchical all-reduce apply the same aggregates, so metrics.csv agrees row by row
// except for the time column.
TEST(Collectives, ChangeTheClockNotTheLearning) {
  auto rows_without_time = [](const std::string& dir) {  // as text: NaN cells compare equal
    const size_t t = [&] {
      Metrics m = read_metrics(dir + "/metrics.csv");
      return size_t(std::find(m.header.begin(), m.header.end(), "time") - m.header.begin());
    }();
    std::vector<std::vector<std::string>> rows;
    std::stringstream in(read_file(dir + "/metrics.csv"));
    for (std::string line; std::getline(in, line);) {
      std::vector<std::string> cells;
      std::stringstream ls(line);
      for (std::string cell; std::getline(ls, cell, ',');) cells.push_back(cell);
      cells.erase(cells.begin() + long(t));
      rows.push_back(cells);
    }
    return rows;
  };
  std::vector<std::vector<std::vector<std::string>>> results;
  std::vector<double> times;
  for (const char* comm : {"ps", "allreduce", "hierarchical"}) {
    json cfg = box_config(std::string("learn_") + comm, 4, 0.01, {{"type", "sync"}, {"comm", comm}}, 12);
    cfg["model"] = {{"type", "softmax"}};
    cfg["data"] = {
        {"type", "synthetic"}, {"classes", 3}, {"features", 6}, {"train_samples", 256}, {"test_samples", 64}};
    cfg["cluster"].erase("workers");
    cfg["cluster"]["topology"] = topology(2, 2, 4e9, 1e-5, 1e9, 1e-4);
    const std::string dir = run_one(cfg, "learn");
    results.push_back(rows_without_time(dir));
    times.push_back(run_time(dir));
  }
  ASSERT_EQ(results[0].size(), 8u);  // the header, the start and every 2 updates
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  EXPECT_NE(times[0], times[1]);
  EXPECT_NE(times[1], times[2]);
}

// ------------------------------------------------------------------ large N

namespace {
// A Simulation of `workers` workers (a 10-parameter quadratic, 1 MB messages) over
// `settings`' network, to call collective() on directly.
struct BareSimulation {
  explicit BareSimulation(RunSettings s)
      : settings(std::move(s)),
        model(make_quadratic(std::vector<float>(10, 1.0f), 0.0f, 1.0f)),
        pool(1),
        compute(3, make_distribution(json{{"dist", "constant"}, {"value", 0.01}}), {}, {}, StepCost{false, 0.0}),
        recorder(false),
        sim(settings, *model, nullptr, nullptr, pool, compute, recorder) {}
  RunSettings settings;
  std::unique_ptr<Model> model;
  WorkerPool pool;
  ComputeTimeModel compute;
  Recorder recorder;
  Simulation sim;
};

RunSettings large_settings(int workers) {
  RunSettings s;
  s.seed = 3;
  s.workers = workers;
  s.batch_size = 1;
  s.nominal_train_size = 512;
  s.network.message_bytes = 1e6;
  return s;
}

// One collective among every worker: its end (ns), and the wall seconds it took.
std::pair<SimTime, double> timed_collective(Simulation& sim, Collective kind, int workers) {
  std::vector<int> members(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w) members[size_t(w)] = w;
  const auto t0 = std::chrono::steady_clock::now();
  const SimTime end = sim.collective(kind, members);
  return {end, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}
}  // namespace

// A collective costs O(N) host work, not O(N^2) (2(N-1) steps of N transfers each took 12
// s at 10,000 workers): 100,000 workers' ring and hierarchical all-reduce take well under
// a second (bounded loosely for sanitizers and shared machines), and their times are still
// the closed forms, to the nanosecond: every step's duration is rounded to ns on its own.
TEST(Collectives, LargeRingsAreLinearAndKeepTheirClosedForms) {
  const int N = 100000;
  {
    RunSettings s = large_settings(N);
    s.network.worker_bandwidth = 1e9;
    s.network.latency = 1e-4;
    BareSimulation b(s);
    const auto [end, wall] = timed_collective(b.sim, Collective::RingAllReduce, N);
    // 2(N - 1)(a + S/(N b)): S/(N b) = 10 ns, a = 100,000 ns
    EXPECT_EQ(end, SimTime(2) * (N - 1) * (100000 + 10));
    EXPECT_LT(wall, 2.0 * shared_device_slack()) << "ring of " << N;
  }
  {
    const int B = 1000, G = N / B;
    RunSettings s = large_settings(N);
    s.topology.type = "boxes";
    s.topology.boxes = B;
    s.topology.per_box = G;
    s.topology.intra = {4e9, 1e-5};
    s.topology.inter = {1e9, 1e-4};
    BareSimulation b(s);
    const auto [end, wall] = timed_collective(b.sim, Collective::Hierarchical, N);
    // 2(a_i + S/b_i) + 2(B - 1)(a_e + S/(B b_e)): S/b_i = 250,000 ns, S/(B b_e) = 1,000 ns
    EXPECT_EQ(end, 2 * (10000 + SimTime(250000)) + SimTime(2) * (B - 1) * (100000 + 1000));
    EXPECT_LT(wall, 2.0 * shared_device_slack()) << "hierarchical over " << B << " boxes";
  }
}

// The byte totals a collective adds are those of adding each transfer's bytes one by one
// (summary.json's messages.bytes_*): repeated_sum gives that loop's double, bit for bit.
TEST(Collectives, RepeatedSumRoundsAsTheLoopDoes) {
  std::vector<std::pair<double, double>> cases = {{0.0, 40007.0 / 13}, {1e6, 1.0 / 3}, {5.0, 0.1},  {0.0, 1e6 / 7},
                                                  {3e15, 0.5},         {3e15, 1.5},    {1e16, 1.0}, {1e16, 3.0},
                                                  {2e16, 1.0},         {7.0, 1e-20},   {0.0, 0.0},  {1e300, 1e290}};
  uint64_t x = 12345;
  for (int k = 0; k < 40; ++k) {  // random magnitudes and pieces
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const double s = std::ldexp(double(x >> 40), int(x % 40)),
                 p = std::ldexp(double((x >> 20) & 0xfffff) + 0.5, -int(x % 9));
    cases.push_back({s, p});
  }
  for (auto [s, p] : cases)
    for (uint64_t times : {0ull, 1ull, 3ull, 4ull, 5ull, 17ull, 1000ull, 123457ull}) {
      double loop = s;
      for (uint64_t i = 0; i < times; ++i) loop += p;
      const double got = repeated_sum(s, p, times);
      EXPECT_EQ(std::memcmp(&got, &loop, sizeof got), 0)
          << std::hexfloat << "s " << s << " p " << p << " times " << times << ": " << got << " vs " << loop;
    }
}

// ------------------------------------------------------------------ determinism

// Every collective and placement, with random compute, stragglers, failures and backups,
// over boxes and over racks: byte-identical files for 1, 2 and 3 threads.
TEST(Determinism, TopologiesAndCollectivesAreByteIdenticalAcrossThreadCounts) {
  json c = {
      {"name", "topo"},
      {"seed", 4},
      {"model", {{"type", "mlp"}, {"hidden", {10}}}},
      {"data", {{"type", "synthetic"}, {"classes", 3}, {"features", 6}, {"train_samples", 300}, {"test_samples", 60}}},
      {"train", {{"batch_size", 6}, {"lr", 0.1}}},
      {"stop", {{"epochs", 1.5}}},
      {"eval", {{"every", 0.25}}},
      {"trace", true},
      {"cluster",
       {{"compute", {{"dist", "lognormal"}, {"mean", 0.001}, {"sigma", 0.8}}},
        {"topology", topology(3, 2, 2e8, 1e-5, 5e7, 2e-4)},
        {"placement", "host"},
        {"network", {{"bandwidth", 4e7}, {"shards", 2}, {"message_bytes", 40000}}},
        {"server", {{"update_seconds", 0.0005}}},
        {"stragglers", {{"probability", 0.1}, {"factor", 4.0}}},
        {"failures", {{"rate", 0.5}, {"down_time", 0.05}}}}},
      {"engines",
       json::array({json{{"type", "sync"}, {"name", "host_ps"}},
                    json{{"type", "sync_backup"}, {"backups", 2}, {"name", "host_ps_b"}},
                    json{{"type", "sync_backup"}, {"backups", 1}, {"comm", "allreduce"}, {"name", "ring_b"}},
                    json{{"type", "sync"}, {"comm", "hierarchical"}, {"name", "hier"}},
                    json{{"type", "sync_backup"}, {"backups", 2}, {"comm", "hierarchical"}, {"name", "hier_b"}}})}};
  // boxes, then racks (2 racks of 2 boxes, oversubscribed 2:1, with rack latency)
  for (const json& topo :
       {topology(3, 2, 2e8, 1e-5, 5e7, 2e-4), racks_topology(4, 2, 2, {2e8, 1e-5}, {5e7, 2e-4}, {5e7, 3e-4})}) {
    c["cluster"]["topology"] = topo;
    const std::string tag = topo["type"].get<std::string>();
    std::string d1 = run_config(c, temp_dir("topo1" + tag), 1), d2 = run_config(c, temp_dir("topo2" + tag), 2),
                d3 = run_config(c, temp_dir("topo3" + tag), 3);
    for (const char* run : {"host_ps-seed4", "host_ps_b-seed4", "ring_b-seed4", "hier-seed4", "hier_b-seed4"}) {
      for (const char* file : {"metrics.csv", "staleness.csv", "workers.csv", "trace.json"}) {
        std::string a = read_file(d1 + "/" + run + "/" + file);
        EXPECT_FALSE(a.empty()) << run << "/" << file;
        EXPECT_EQ(a, read_file(d2 + "/" + run + "/" + file)) << run << "/" << file;
        EXPECT_EQ(a, read_file(d3 + "/" + run + "/" + file)) << run << "/" << file;
      }
      json s1 = summary_at(d1 + "/" + run);
      for (const std::string& d : {d2, d3}) {
        json s = summary_at(d + "/" + run);
        s1["wall_seconds"] = s["wall_seconds"] = 0;
        EXPECT_EQ(s1, s) << run;
      }
      EXPECT_GT(s1["updates"].get<double>(), 5) << run << ", " << tag;
    }
  }
}

// ------------------------------------------------------------------ configuration

TEST(BoxesConfig, WorkersAreDerivedAndBadCombinationsExitTwoNamingThePath) {
  std::string dir = temp_dir("boxcfg");
  json base = box_config("cfg", 4, 0.01, {{"type", "sync"}}, 2);
  base["cluster"].erase("workers");
  base["cluster"]["topology"] = topology(2, 3, 1e9, 0, 1e8, 0);
  {  // derived: 2 x 3 workers
    const std::string run = run_one(base, "boxcfg_ok");
    EXPECT_EQ(read_metrics(run + "/workers.csv").rows.size(), 6u);
    json config = json::parse(read_file(run + "/config.json"));
    EXPECT_EQ(config["cluster"]["workers"], 6);
    EXPECT_EQ(config["cluster"]["placement"], "servers");
  }
  const std::vector<Bad> cases = {
      {"workers != boxes x per_box",
       [](json& c) { c["cluster"]["workers"] = 4; },
       {"cluster.workers", "boxes x per_box (6)", "got 4"}},
      {"host placement without a topology",
       [](json& c) {
         c["cluster"].erase("topology");
         c["cluster"]["placement"] = "host";
       },
       {"cluster.placement", "needs a topology with boxes", "got \"star\""}},
      {"network latency with a topology",
       [](json& c) { c["cluster"]["network"]["latency"] = 0.001; },
       {"cluster.network.latency", "cluster.topology.intra"}},
      {"hierarchical without a topology",
       [](json& c) {
         c["cluster"].erase("topology");
         c["engines"][0]["comm"] = "hierarchical";
       },
       {"comm", "needs a topology with boxes"}},
      {"host placement over boxes for async",
       [](json& c) {
         c["cluster"]["placement"] = "host";
         c["engines"][0] = {{"type", "async"}};
       },
       {"cluster.placement", "sync and sync_backup"}},
      {"unknown comm", [](json& c) { c["engines"][0]["comm"] = "ring"; }, {"comm", "allreduce"}},
      {"missing per_box", [](json& c) { c["cluster"]["topology"].erase("per_box"); }, {"cluster.topology.per_box"}},
      {"negative intra bandwidth",
       [](json& c) { c["cluster"]["topology"]["intra"]["bandwidth"] = -1; },
       {"cluster.topology.intra.bandwidth"}},
      {"a star with boxes' keys",
       [](json& c) { c["cluster"]["topology"]["type"] = "star"; },
       {"cluster.topology", "boxes"}},
      {"an unknown topology",
       [](json& c) {
         c["cluster"]["topology"] = {{"type", "boxs"}};
       },
       {"cluster.topology.type", "did you mean 'boxes'"}},
      {"host placement on an explicit star",
       [](json& c) {
         c["cluster"]["topology"] = {{"type", "star"}};
         c["cluster"]["placement"] = "host";
       },
       {"cluster.placement", "needs a topology with boxes"}},
  };
  expect_refusals(base, cases, dir);
}

// Racks' refusals: exit 2, naming the path.
TEST(RacksConfig, WorkersAreDerivedAndBadCombinationsExitTwoNamingThePath) {
  std::string dir = temp_dir("rackcfg");
  json base = box_config("cfg", 4, 0.01, {{"type", "sync"}}, 2);
  base["cluster"].erase("workers");
  base["cluster"]["topology"] = racks_topology(6, 2, 3, {1e9, 0}, {1e8, 0}, {1e8, 1e-4});
  {  // derived: 6 x 2 workers
    const std::string run = run_one(base, "rackcfg_ok");
    EXPECT_EQ(read_metrics(run + "/workers.csv").rows.size(), 12u);
    json config = json::parse(read_file(run + "/config.json"));
    EXPECT_EQ(config["cluster"]["workers"], 12);
    EXPECT_EQ(config["cluster"]["topology"]["rack"], json({{"bandwidth", 1e8}, {"latency", 1e-4}}));
  }
  const std::vector<Bad> cases = {
      {"per_rack not dividing boxes",
       [](json& c) { c["cluster"]["topology"]["per_rack"] = 4; },
       {"cluster.topology.per_rack", "must divide", "(6)", "got 4"}},
      {"per_rack above boxes",
       [](json& c) { c["cluster"]["topology"]["per_rack"] = 12; },
       {"cluster.topology.per_rack", "got 12"}},
      {"missing per_rack", [](json& c) { c["cluster"]["topology"].erase("per_rack"); }, {"cluster.topology.per_rack"}},
      {"network latency with racks",
       [](json& c) { c["cluster"]["network"]["latency"] = 0.001; },
       {"cluster.network.latency", "cluster.topology.intra"}},
      {"worker bandwidth with racks",
       [](json& c) { c["cluster"]["network"]["worker_bandwidth"] = 1e9; },
       {"cluster.network.worker_bandwidth"}},
      {"negative rack bandwidth",
       [](json& c) { c["cluster"]["topology"]["rack"]["bandwidth"] = -1; },
       {"cluster.topology.rack.bandwidth"}},
      {"a typo in the rack level",
       [](json& c) {
         c["cluster"]["topology"]["rack"] = {{"bandwith", 1e9}};
       },
       {"cluster.topology.rack.bandwith", "bandwidth"}},
      {"a rack level on boxes", [](json& c) { c["cluster"]["topology"]["type"] = "boxes"; }, {"cluster.topology"}},
      {"workers != boxes x per_box", [](json& c) { c["cluster"]["workers"] = 4; }, {"cluster.workers", "got 4"}},
  };
  expect_refusals(base, cases, dir);
  EXPECT_FALSE(find_topology_type("racks")->real) << "asgdsim cluster refuses it";
  EXPECT_TRUE(find_topology_type("racks")->hosts);
}

// The family (sim/net/catalog.h): left out, the topology is the star and config.json says
// so; the form before cluster.topology.type (boxes' keys, no type) is "boxes", resolved
// and run as the typed form is; each member's Topology comes from its own entry.
TEST(TopologyFamily, LeftOutIsTheStarAndTheUntypedFormIsBoxes) {
  auto resolved = [](const json& c) { return resolve_experiment(c, "topology family", ".").runs.front(); };
  json star = box_config("fam", 4, 0.01, {{"type", "sync"}});
  const RunSpec left_out = resolved(star);
  EXPECT_EQ(left_out.config["cluster"]["topology"], json({{"type", "star"}}));
  EXPECT_EQ(left_out.settings.topology.type, "star");
  star["cluster"]["topology"] = {{"type", "star"}};
  EXPECT_EQ(resolved(star).config, left_out.config);

  json typed = box_config("fam", 4, 0.01, {{"type", "sync"}});
  typed["cluster"].erase("workers");
  typed["cluster"]["topology"] = topology(2, 2, 1e9, 1e-5, 1e8, 1e-4);
  json untyped = typed;
  untyped["cluster"]["topology"].erase("type");
  const RunSpec t = resolved(typed), u = resolved(untyped);
  EXPECT_EQ(t.config, u.config);
  EXPECT_EQ(u.config["cluster"]["topology"]["type"], "boxes");
  EXPECT_EQ(u.config["cluster"]["workers"], 4);
  EXPECT_EQ(u.settings.topology.type, "boxes");
  EXPECT_EQ(u.settings.topology.boxes, 2);
  EXPECT_EQ(u.settings.topology.inter.bandwidth, 1e8);
  EXPECT_EQ(files_of(run_one(typed, "typed")), files_of(run_one(untyped, "untyped")));

  // each member's Topology, as the Simulation asks for it
  NetworkSpec net;
  EXPECT_EQ(make_topology(left_out.settings.topology, net, 4)->boxes(), 1);
  EXPECT_FALSE(make_topology(left_out.settings.topology, net, 4)->has_hosts());
  EXPECT_EQ(make_topology(t.settings.topology, net, 4)->boxes(), 2);
  EXPECT_TRUE(make_topology(t.settings.topology, net, 4)->has_hosts());
  EXPECT_THROW(make_topology(t.settings.topology, net, 5), std::invalid_argument);
  ClusterSpec unknown;
  unknown.type = "torus";
  EXPECT_THROW(make_topology(unknown, net, 4), std::logic_error);
  for (const auto& type : topology_types()) EXPECT_TRUE(type.make) << type.name;
  EXPECT_EQ(topology_catalog().front().name, kDefaultTopologyType);
}
