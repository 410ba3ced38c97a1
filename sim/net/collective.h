// sim/net/collective.h — the synchronous family's collectives as algorithms over the
// topology, in the alpha-beta model (docs/time-model.md, "Collectives"): each is a series
// of steps, and every transfer of a step is requested when the step before has ended
// everywhere. A runtime asks for one (Runtime::collective) and charges its members the time
// it returns; the messages it sends are counted here.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>
#include "sim/base/time.h"
#include "sim/net/topology.h"

namespace asgd {

enum class Collective {
  RingAllReduce,            // a ring of the members in worker order: 2(n-1) steps of bytes/n each
  Hierarchical,             // members -> their box's host, a ring of those hosts, hosts -> members
  HostReduceToServers,      // members -> their box's host, each such host -> the servers
  ServersToHostsToMembers,  // the servers -> each members' box's host -> the members
};

// What crossed the network to the server and to the workers (a run's counters: RunOutcome
// holds them). A message to a box's host counts in neither.
struct MessageCounts {
  uint64_t messages_to_server = 0, messages_to_workers = 0;
  double bytes_to_server = 0, bytes_to_workers = 0;
};

// Runs collective `kind` among `members` (worker indices, ascending; not empty), each
// contributing `bytes`, from `start` on `topology` (whose links it occupies), and returns
// when it ends; its messages are added to `counts`. A ring whose later steps cannot be
// replayed (a link was busy at its second step) goes step by step while `go_on()` holds,
// and returns the time reached when it stops holding (an interrupted run). Throws
// std::logic_error for a kind other than the ring on a topology without box hosts, and
// TimeOverflow past the clock.
SimTime run_collective(Topology& topology, Collective kind, const std::vector<int>& members, double bytes,
                       SimTime start, MessageCounts& counts, const std::function<bool()>& go_on);

}  // namespace asgd
