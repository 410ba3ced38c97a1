// sim/run/run_outcome.h — how a run ended and what it counted: the status (completed,
// stalled, diverged, interrupted) and why, the counters summary.json reports, the staleness
// histogram, per-worker stats, the population's draws. The RunMonitor fills it; both
// runtimes (the simulator and asgdsim cluster) return it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include "sim/base/state_archive.h"
#include "sim/base/time.h"
#include "sim/net/collective.h"  // MessageCounts
#include "sim/run/recorder.h"    // WorkerStats

namespace asgd {

// (MessageCounts: messages_to_server, bytes_to_server, messages_to_workers, bytes_to_workers)
struct RunOutcome : MessageCounts {
  std::string status = "completed";  // completed | stalled | diverged | interrupted (RunMonitor)
  std::string note;                  // why it ended, in words
  SimTime time = 0;
  uint64_t updates = 0, gradients = 0, dropped = 0, lost = 0, failures = 0;
  uint64_t samples = 0;           // of applied gradients: what epochs count
  uint64_t samples_computed = 0;  // of every gradient that arrived (applied, dropped or held)
  std::map<uint64_t, uint64_t> staleness_hist;
  double staleness_mean = 0;
  uint64_t staleness_max = 0;
  std::string staleness_unit = "updates";  // what staleness counts (Engine::staleness_unit)
  double iteration_time_mean = 0;          // sync family; 0 if none
  uint64_t iterations = 0;
  uint64_t server_updates = 0;  // updates the server finished (Simulation::server_update)
  SimTime server_busy = 0;      // virtual time it spent on updates, up to the run's end
  double peak_sync_bytes =
      0;  // the largest payload a worker sent or received at once: a message, or its share of a collective
  std::vector<WorkerStats> workers;
  std::vector<std::vector<uint64_t>> partition_labels;  // (data owners, classes) under data.partition; empty: iid
  // A population (section clients): clients drawn for slots, and how many distinct ones.
  int64_t clients = 0;
  uint64_t client_draws = 0, clients_distinct = 0;
  uint64_t clients_departed = 0;  // client jobs cut because the client left (clients.devices)
};

// A checkpoint of the outcome's counters so far.
void checkpoint(StateArchive& a, RunOutcome& out);

}  // namespace asgd
