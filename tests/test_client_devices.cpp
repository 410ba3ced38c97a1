// tests/test_client_devices.cpp — the population folder's reader (sim/data/client_devices.h):
// a small folder read back, the availability queries against hand-computed answers
// (FedScale's own test vectors for its modulo rule among them), every refusal with its
// message, the shipped synthetic population against its generator's law, and the memory of
// 100,000 clients x 10 intervals.
#include "sim/data/client_devices.h"
#include <cmath>
#include <fstream>
#include <limits>
#include <gtest/gtest.h>
#include "sim/base/errors.h"
#include "tests/test_helpers.h"

namespace {

using asgd::ClientDevices;
using asgd::ConfigError;
using asgd::read_client_devices;
using asgd::testing::temp_dir;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr const char* kDevices = "client,compute_ms_per_sample,bandwidth_kbps\n";
constexpr const char* kAvailability = "client,active_from,active_to,period\n";

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A folder with devices.csv (and availability.csv when `availability` is not null).
std::string folder(const std::string& tag, const std::string& devices, const char* availability = nullptr) {
  const std::string dir = temp_dir(tag);
  write(dir + "/devices.csv", devices);
  if (availability) write(dir + "/availability.csv", availability);
  return dir;
}

// The ConfigError's text from reading `dir`, or "" when it reads.
std::string refusal(const std::string& dir, size_t count) {
  try {
    read_client_devices(dir, count);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ClientDevices, ReadsAFolderBack) {
  const std::string dir =
      folder("cd_round_trip", std::string(kDevices) + "0,162,5648.109619499134\n1,2.5e1,300\n2,+7,1e5\n",
             "client,active_from,active_to,period\n0,0,3600,86400\n0,7200,7200.5,86400\n"
             "1,10,20,30\n2,0,5,5\n");
  const ClientDevices d = read_client_devices(dir, 3);
  ASSERT_EQ(d.count(), 3u);
  EXPECT_FALSE(d.always_available());
  EXPECT_EQ(d.compute_ms, (std::vector<float>{162.0f, 25.0f, 7.0f}));
  EXPECT_EQ(d.bandwidth_kbps, (std::vector<float>{float(5648.109619499134), 300.0f, 1e5f}));
  EXPECT_EQ(d.interval_begin, (std::vector<uint32_t>{0, 2, 3, 4}));
  EXPECT_EQ(d.active_from, (std::vector<double>{0, 7200, 10, 0}));
  EXPECT_EQ(d.active_to, (std::vector<double>{3600, 7200.5, 20, 5}));
  EXPECT_EQ(d.period, (std::vector<double>{86400, 30, 5}));
  EXPECT_EQ(d.intervals(), 4u);
  // CRLF line ends read the same
  const std::string crlf = folder("cd_crlf", "client,compute_ms_per_sample,bandwidth_kbps\r\n0,1,2\r\n");
  EXPECT_EQ(read_client_devices(crlf, 1).bandwidth_kbps, std::vector<float>{2.0f});
}

TEST(ClientDevices, NoAvailabilityFileIsAlwaysAvailable) {
  const ClientDevices d = read_client_devices(folder("cd_always", std::string(kDevices) + "0,1,2\n1,3,4\n"), 2);
  EXPECT_TRUE(d.always_available());
  for (double t : {0.0, 1.5, 1e9}) {
    EXPECT_TRUE(d.available(1, t));
    EXPECT_EQ(d.available_until(1, t), kInf);
    EXPECT_EQ(d.next_available(1, t), t);
  }
}

// FedScale's fedscale/tests/cloud/internal/test_client_metadata.py: active [1, 3, 6, 9],
// inactive [1, 4, 7, 10], finish_time 10, asked at 2, 6, 8, 9, 10, 15 (in that order, which
// its cursor needs; the rule here has none, so any order gives the same answers).
TEST(ClientDevices, FedScalesOwnTestVectors) {
  const std::string dir = folder("cd_fedscale", std::string(kDevices) + "0,1,1\n",
                                 "client,active_from,active_to,period\n0,1,1,10\n0,3,4,10\n0,6,7,10\n0,9,10,10\n");
  const ClientDevices d = read_client_devices(dir, 1);
  const std::vector<std::pair<double, bool>> fedscale = {{2, false}, {6, true},   {8, false},
                                                         {9, true},  {10, false}, {15, false}};
  for (auto it = fedscale.rbegin(); it != fedscale.rend(); ++it)
    EXPECT_EQ(d.available(0, it->first), it->second) << it->first;
  for (const auto& [t, want] : fedscale) EXPECT_EQ(d.available(0, t), want) << t;
  // the interval ends are in (closed intervals, FedScale's <= ... <=), modulo the period
  for (double t : {1.0, 3.0, 4.0, 13.0, 14.0, 16.0, 17.0, 19.0, 1e6 + 3.5, 1e6 + 9.25})
    EXPECT_TRUE(d.available(0, t)) << t;
  for (double t : {0.0, 0.5, 1.25, 4.5, 5.0, 7.5, 11.5, 20.0, 1e6 + 5}) EXPECT_FALSE(d.available(0, t)) << t;
}

TEST(ClientDevices, UntilAndNextByHand) {
  const std::string dir = folder("cd_queries", std::string(kDevices) + "0,1,1\n1,1,1\n2,1,1\n3,1,1\n",
                                 "client,active_from,active_to,period\n"
                                 "0,2,5,10\n0,8,10,10\n"  // ends at the period, but the first does not start at 0
                                 "1,0,3,10\n1,7,10,10\n"  // [7, 10] then [0, 3]: one run across the wrap
                                 "2,0,10,10\n"            // the whole period: always
                                 "3,4,6,10\n");           // one interval a period
  const ClientDevices d = read_client_devices(dir, 4);
  // client 0
  EXPECT_EQ(d.available_until(0, 3), 5);
  EXPECT_EQ(d.available_until(0, 9), 10);
  EXPECT_EQ(d.available_until(0, 19.5), 20);
  EXPECT_EQ(d.next_available(0, 6), 8);
  EXPECT_EQ(d.next_available(0, 26), 28);
  EXPECT_EQ(d.next_available(0, 10.5), 12);
  EXPECT_EQ(d.next_available(0, 1e6 + 1), 1e6 + 2);
  // client 1: a run across the wrap ends at the next period's first interval's end
  EXPECT_EQ(d.available_until(1, 8), 13);
  EXPECT_EQ(d.available_until(1, 10), 13);
  EXPECT_EQ(d.available_until(1, 21), 23);
  EXPECT_EQ(d.available_until(1, 1e6 + 7), 1e6 + 13);
  EXPECT_EQ(d.next_available(1, 5), 7);
  EXPECT_EQ(d.next_available(1, 25), 27);
  // client 2: always
  EXPECT_EQ(d.available_until(2, 1234.5), kInf);
  EXPECT_TRUE(d.available(2, 1e7 + 0.1));
  // client 3: after its interval, the next is a period later
  EXPECT_EQ(d.next_available(3, 7), 14);
  EXPECT_EQ(d.next_available(3, 0), 4);
  EXPECT_EQ(d.available_until(3, 35), 36);
  // the conventions: not available -> until is t; available -> next is t
  EXPECT_EQ(d.available_until(3, 7), 7);
  EXPECT_EQ(d.next_available(3, 5), 5);
}

TEST(ClientDevices, RefusesBadDevices) {
  struct Case {
    std::string text;
    size_t count;
    const char* message;
  };
  const std::string h = kDevices;  // the header
  const std::vector<Case> cases = {
      {"client,compute,bandwidth\n0,1,1\n", 1,
       "devices.csv: line 1: header 'client,compute,bandwidth': expected "
       "'client,compute_ms_per_sample,bandwidth_kbps'"},
      {"\xef\xbb\xbf" + h + "0,1,1\n", 1, "byte-order mark"},
      {"", 1, "line 1: empty: the first line must be"},
      {h + "0,1,1", 1, "line 2: the last line has no newline"},
      {h + "0,1,1\n\n", 1, "line 3: empty line"},
      {h + "0,1\n", 1, "line 2: '0,1': expected 3 comma-separated fields, got 2"},
      {h + "0,1,1,1\n", 1, "expected 3 comma-separated fields, got 4"},
      {h + "0,1,1\n2,1,1\n", 3, "line 3: client 2: client 1 is missing"},
      {h + "0,1,1\n0,1,1\n", 2, "line 3: client 0: duplicate or out of order (client 1 is due"},
      {h + "0,1,1\n1,1,1\n", 1, "line 3: client 1: the population has 1 clients (0..0)"},
      {h + "0,1,1\n", 2, "line 3: the file ends after 1 clients; the population has 2"},
      {h + "x,1,1\n", 1, "client 'x': not a client number"},
      {h + "-1,1,1\n", 1, "client '-1': not a client number"},
      {h + "0,fast,1\n", 1,
       "line 2: compute_ms_per_sample 'fast': not a finite number (a positive number of ms per sample)"},
      {h + "0,1,nan\n", 1, "bandwidth_kbps 'nan': not a finite number"},
      {h + "0,inf,1\n", 1, "compute_ms_per_sample 'inf': not a finite number"},
      {h + "0, 1,1\n", 1, "compute_ms_per_sample ' 1': not a finite number"},
      {h + "0,1,\n", 1, "bandwidth_kbps '': not a finite number"},
      {h + "0,-3,1\n", 1, "compute_ms_per_sample '-3': must be a positive number of ms per sample"},
      {h + "0,1,0\n", 1, "bandwidth_kbps '0': must be a positive number of kbit/s"},
      {h + "0,1e39,1\n", 1, "'1e39': must be a positive number of ms per sample that a float"},
      {h + "0,1e-50,1\n", 1, "'1e-50': must be a positive number"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string msg = refusal(folder("cd_bad_devices" + std::to_string(i), cases[i].text), cases[i].count);
    EXPECT_NE(msg.find(cases[i].message), std::string::npos) << "case " << i << ": " << msg;
    EXPECT_NE(msg.find("devices.csv"), std::string::npos) << msg;
  }
  const std::string empty = temp_dir("cd_missing");
  EXPECT_NE(refusal(empty, 1).find("devices.csv: cannot read (No such file or directory)"), std::string::npos);
  EXPECT_NE(refusal(empty + "/nowhere", 1).find("nowhere/devices.csv: cannot read"), std::string::npos);
}

TEST(ClientDevices, RefusesBadAvailability) {
  struct Case {
    const char* rows;  // after the header
    const char* message;
  };
  const std::vector<Case> cases = {
      {"0,0,1,10\n1,2,1,10\n2,0,1,10\n", "line 3: interval [2, 1] of client 1: must lie in the period"},
      {"0,0,11,10\n1,0,1,10\n2,0,1,10\n",
       "line 2: interval [0, 11] of client 0: must lie in the period: 0 <= active_from < period (10)"},
      {"0,-1,1,10\n1,0,1,10\n2,0,1,10\n", "interval [-1, 1] of client 0"},
      {"0,10,10,10\n1,0,1,10\n2,0,1,10\n", "interval [10, 10] of client 0"},
      {"0,0,5,10\n0,4,6,10\n1,0,1,10\n2,0,1,10\n",
       "line 3: interval [4, 6] of client 0: must start after the previous one ends (5): a client's intervals are "
       "ascending and apart"},
      {"0,0,5,10\n0,5,6,10\n1,0,1,10\n2,0,1,10\n",
       "interval [5, 6] of client 0: must start after the previous one ends"},
      {"0,6,7,10\n0,1,2,10\n1,0,1,10\n2,0,1,10\n", "interval [1, 2] of client 0: must start after"},
      {"0,0,1,0\n1,0,1,10\n2,0,1,10\n", "line 2: period 0 of client 0: must be above 0 s"},
      {"0,0,1,-5\n1,0,1,10\n2,0,1,10\n", "period -5 of client 0: must be above 0 s"},
      {"0,0,1,10\n0,2,3,20\n1,0,1,10\n2,0,1,10\n", "line 3: period 20 of client 0: its earlier rows say 10"},
      {"0,0,1,10\n2,0,1,10\n", "line 3: client 2: client 1 is missing (at least one interval per client"},
      {"1,0,1,10\n2,0,1,10\n", "line 2: client 1: client 0 is missing"},
      {"0,0,1,10\n1,0,1,10\n0,2,3,10\n", "line 4: client 0: duplicate or out of order (client 2 is due"},
      {"0,0,1,10\n1,0,1,10\n", "line 4: the file ends after client 1; every client 0..2 needs at least one interval"},
      {"0,0,1,10\n1,0,1,10\n2,0,1,10\n3,0,1,10\n", "line 5: client 3: the population has 3 clients (0..2)"},
      {"0,0,1,ten\n1,0,1,10\n2,0,1,10\n", "period 'ten': not a finite number (seconds, above 0)"},
      {"0,a,1,10\n1,0,1,10\n2,0,1,10\n", "active_from 'a': not a finite number (seconds within the period)"},
      {"0,0,1\n", "expected 4 comma-separated fields, got 3"},
      {"", "line 2: the file ends after client none"},
  };
  const std::string devices = std::string(kDevices) + "0,1,1\n1,1,1\n2,1,1\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = std::string(kAvailability) + cases[i].rows;
    const std::string msg = refusal(folder("cd_bad_avail" + std::to_string(i), devices, text.c_str()), 3);
    EXPECT_NE(msg.find(cases[i].message), std::string::npos) << "case " << i << ": " << msg;
    EXPECT_NE(msg.find("availability.csv"), std::string::npos) << msg;
  }
  EXPECT_NE(
      refusal(folder("cd_avail_header", devices, "client,from,to\n0,0,1\n"), 3)
          .find("availability.csv: line 1: header 'client,from,to': expected 'client,active_from,active_to,period'"),
      std::string::npos);
  const std::string dir = folder("cd_avail_dir", devices);
  std::filesystem::create_directories(dir + "/availability.csv");
  EXPECT_NE(refusal(dir, 3).find("availability.csv: not a regular file"), std::string::npos);
}

// experiments/populations/synthetic_1000 (asgdsim.population synthetic --clients 1000
// --seed 1): the queries agree with each other on every client, and the fraction available
// at 24 times of day is its law's: always_on + (1 - always_on) x on / (on + off) = 0.2 +
// 0.8 x 1/4 = 0.4 (mean on 1 h, mean off 3 h; docs/population-devices.md), within 0.05
// (1,000 clients' windows: a standard error of about 0.01 at each hour, correlated).
TEST(ClientDevices, ShippedSyntheticPopulation) {
  const ClientDevices d =
      read_client_devices(std::string(asgd::testing::source_dir()) + "/experiments/populations/synthetic_1000", 1000);
  ASSERT_EQ(d.count(), 1000u);
  ASSERT_FALSE(d.always_available());
  double available = 0, samples = 0;
  for (size_t c = 0; c < d.count(); ++c) {
    EXPECT_GT(d.compute_ms[c], 0);
    EXPECT_GT(d.bandwidth_kbps[c], 0);
    EXPECT_EQ(d.period[c], 86400);
    for (int h = 0; h < 24; ++h) {
      const double t = 3600.0 * h + 1800.0 + 86400.0 * double(c % 7);
      const bool on = d.available(c, t);
      available += on;
      samples += 1;
      if (on) {
        const double until = d.available_until(c, t);
        EXPECT_GE(until, t);
        if (std::isfinite(until)) {  // available on [t, until]; at until itself unless it is a period's end
          EXPECT_TRUE(d.available(c, until) || std::fmod(until, d.period[c]) == 0) << c << " " << t;
          if (until - t >= 0.5) {
            EXPECT_TRUE(d.available(c, until - 0.5)) << c << " " << t;
          }
          EXPECT_FALSE(d.available(c, until + 0.5)) << c << " " << t;
        }
      } else {
        const double next = d.next_available(c, t);
        EXPECT_GT(next, t);
        EXPECT_TRUE(d.available(c, next)) << c << " " << t;
        EXPECT_FALSE(d.available(c, next - 0.5)) << c << " " << t;
      }
    }
  }
  EXPECT_NEAR(available / samples, 0.4, 0.05);
}

// 100,000 clients x 10 intervals: read in well under a second (Release), held in the CSR
// arrays' 20 bytes a client and 16 an interval.
TEST(ClientDevices, HundredThousandClientsAreCompact) {
  const size_t clients = asgd::testing::reduced_size() ? 10000 : 100000, per = 10;
  std::string devices = kDevices, availability = kAvailability;
  for (size_t c = 0; c < clients; ++c) {
    const std::string id = std::to_string(c);
    devices += id + "," + std::to_string(10 + c % 90) + ".5," + std::to_string(100 + c) + "\n";
    for (size_t k = 0; k < per; ++k)
      availability += id + "," + std::to_string(k * 100 + c % 50) + "," + std::to_string(k * 100 + 60) + ",1000\n";
  }
  const std::string dir = folder("cd_large", devices, availability.c_str());
  const ClientDevices d = read_client_devices(dir, clients);
  std::filesystem::remove_all(dir);  // 20 MB
  EXPECT_EQ(d.intervals(), clients * per);
  EXPECT_LE(d.memory_bytes(), clients * 20 + 4 + clients * per * 16);
  EXPECT_TRUE(d.available(clients - 1, 960.0 + 1000 * 7));
  EXPECT_EQ(d.available_until(clients - 1, 960.0 + 1000 * 7), 960.0 + 1000 * 7);
  EXPECT_EQ(d.next_available(clients - 1, 961.0), 1000.0 + 49);
}

}  // namespace
