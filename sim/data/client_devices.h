// sim/data/client_devices.h — a population's devices: per client its compute speed, its
// bandwidth and when it is available, read from asgdsim's population folder (what
// asgdsim.population writes from FedScale's published traces or its own generator;
// docs/population-devices.md has the format and FedScale's rule). Not here: which client a
// slot takes (the sampler), what a job costs in virtual time (the engines charge
// compute_ms x samples and bytes / bandwidth), nor what happens to a job whose client
// leaves (the engine decides, with available_until).
//
// The folder holds
//   devices.csv       client,compute_ms_per_sample,bandwidth_kbps      one row per client, 0..count-1
//   availability.csv  client,active_from,active_to,period              optional: one row per active
//                     interval, clients 0..count-1 in order, each with at least one interval, its
//                     intervals ascending and apart; seconds; the same period on all of a client's rows
// Availability is FedScale's rule (ClientMetadata.is_active) without its cursor: client c is
// available at virtual time t (seconds from the run's start) iff x = t mod period[c] lies in
// one of its closed intervals [active_from, active_to]. No availability.csv: always available.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace asgd {

struct ClientDevices {
  std::vector<float> compute_ms;      // (clients,) ms per sample (FedScale's "computation")
  std::vector<float> bandwidth_kbps;  // (clients,) kbit/s (FedScale's "communication")
  // Availability as CSR, all empty when always available: client c's intervals are
  // k in [interval_begin[c], interval_begin[c+1]), each [active_from[k], active_to[k]] in
  // seconds within [0, period[c]], ascending and apart (active_to[k] < active_from[k+1]).
  std::vector<uint32_t> interval_begin;  // (clients + 1,)
  std::vector<double> active_from;       // (intervals,) seconds
  std::vector<double> active_to;         // (intervals,) seconds
  std::vector<double> period;            // (clients,) seconds (FedScale's "finish_time")

  size_t count() const { return compute_ms.size(); }
  bool always_available() const { return interval_begin.empty(); }
  size_t intervals() const { return active_from.size(); }
  size_t memory_bytes() const;  // the arrays' capacity, for a run's memory account

  // Client c at virtual time t (seconds, finite): whether it is available; if so, until
  // when (the end of its run of availability, which continues across the period's wrap when
  // an interval ends at the period and the first starts at 0; +infinity if it never ends);
  // if not, when it next becomes available. The client is available throughout
  // [t, available_until) and at available_until itself, except where that is a period's end
  // (t mod period is never the period: FedScale's rule). For a client not available at t,
  // available_until is t; for one available at t, next_available is t. Exact for whole
  // seconds (FedScale's and the generator's traces); O(log intervals of c) per call, no
  // allocation; c < count().
  bool available(size_t c, double t) const;
  double available_until(size_t c, double t) const;
  double next_available(size_t c, double t) const;

 private:
  struct Position;  // where t falls in client c's period
  Position locate(size_t c, double t) const;
};

// Reads the folder; `count` clients expected (devices.csv's rows must be exactly
// 0..count-1, availability.csv's clients too). A missing or unreadable devices.csv, a bad
// header, a missing, duplicate or out-of-order client, a field that is not a finite number,
// a compute or bandwidth that is not positive, an interval outside [0, period] or not
// ascending and apart from the previous, a period that is not positive or changes within a
// client throws ConfigError naming the file, the line, the value and what is allowed.
ClientDevices read_client_devices(const std::string& folder, size_t count);

}  // namespace asgd
