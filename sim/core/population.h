// sim/core/population.h — a population of clients apart from the worker slots (section
// clients; Simulation owns one when clients.count > 0). A client is data (its part of the
// training set under data.partition, or an equal share of the run's one stream under iid),
// a speed (ComputeTimeModel's per-client factor) and, while it trains, the slot it trains
// on. A slot is a concurrent trainer: it holds the model copy and what is in flight. So the
// memory of a population is a few bytes per client (its size, factor and whether it is
// training), never a model per client.
//
// Sampling: when a slot needs a client (Runtime::next_step after the slot's last client job
// ended), the population draws one among the clients not training now: "uniform" each with
// the same chance, "size" with chance proportional to its samples. Draw k of the run uses
// Rng(seed, ClientSampling, k >> 32, k) (k counts every try, also one that found no client):
// candidates from it until one is not training and is available (clients.devices' traces)
// (so the draw is exactly uniform, or size-weighted, over the eligible clients); after 64
// rejected candidates, the first eligible client at or after the last candidate, cyclically,
// or none (the fallback is taken with probability (rejected share)^64). The draws
// follow the slots' requests in virtual-time order, so a run is byte-identical for any
// thread count.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>
#include "sim/base/state_archive.h"
#include "sim/data/client_devices.h"

namespace asgd {

class Population {
 public:
  // samples[c]: client c's training samples (> 0 each); by_size: sampling "size".
  Population(uint64_t seed, std::vector<uint32_t> samples, bool by_size);
  int64_t count() const { return int64_t(samples_.size()); }
  uint32_t samples(int64_t client) const { return samples_[size_t(client)]; }
  // Draws an idle client and marks it training; with `devices` whose availability is
  // traced, only among the clients available at `t` seconds, and -1 when none is. Throws
  // std::logic_error when every client is training (the config check keeps count >= slots).
  int64_t draw(double t = 0, const ClientDevices* devices = nullptr);
  // The first time >= t at which an idle client is available (+infinity: never): O(clients).
  double next_available(double t, const ClientDevices& devices) const;
  // Its job ended (arrived, dropped, lost or cancelled): it may be drawn again.
  void release(int64_t client);
  bool training(int64_t client) const { return busy_[size_t(client)] != 0; }
  uint64_t draws() const { return draws_; }
  // Distinct clients drawn so far.
  uint64_t distinct() const { return distinct_; }
  // A checkpoint of who is training, who was seen, and the draws so far.
  void checkpoint(StateArchive& a);

 private:
  uint64_t seed_;
  std::vector<uint32_t> samples_;
  std::vector<uint64_t> cumulative_;  // by_size: samples summed up to and including client c
  std::vector<uint8_t> busy_;         // 1: training now
  std::vector<uint8_t> seen_;         // 1: drawn at least once
  uint64_t draws_ = 0, tries_ = 0, distinct_ = 0, training_ = 0;
};

}  // namespace asgd
