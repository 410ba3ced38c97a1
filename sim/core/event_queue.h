// sim/core/event_queue.h — the scheduler's pending events, a binary min-heap ordered by
// (time, sequence number): O(log n) push and pop, ties run in the order they were
// scheduled. Time never runs backwards: pushing an event before the last popped time
// is a logic error and throws.
#pragma once
#include <cstdint>
#include <queue>
#include <stdexcept>
#include <vector>
#include "sim/base/state_archive.h"
#include "sim/base/time.h"

namespace asgd {

enum class EventKind : uint8_t {
  GradientArrival,  // payload: job slot; at the server (pushed) or computed (kept on the worker)
  ComputeDone,      // payload: job slot; the push is requested now (contended network)
  PullServed,       // payload: job slot; the server serves the pull now (it reads the parameters)
  ServerDone,       // the server has finished its oldest update (Simulation::server_update)
  Evaluate,         // periodic evaluation (time unit)
  StopTime,         // the stop.time budget is reached
  EngineTimer,      // engine-defined; payload is the engine's
  WorkerDown,       // failure model: worker goes down; payload: time down (kNever: for good)
  WorkerUp,         // failure model: worker comes back
};

struct Event {
  SimTime time = 0;
  uint64_t seq = 0;
  EventKind kind = EventKind::GradientArrival;
  int32_t worker = -1;
  uint64_t payload = 0;
};

class EventQueue {
 public:
  void push(SimTime time, EventKind kind, int32_t worker = -1, uint64_t payload = 0) {
    if (time < last_popped_) throw std::logic_error("EventQueue: event scheduled in the past (time runs forward only)");
    heap_.push(Event{time, next_seq_++, kind, worker, payload});
  }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.top(); }
  Event pop() {
    Event e = heap_.top();
    heap_.pop();
    last_popped_ = e.time;
    return e;
  }
  SimTime now() const { return last_popped_; }
  // A checkpoint of the queue: its events (in the order they run, which (time, seq)
  // fixes whatever the heap's layout), the next sequence number and the time.
  void checkpoint(StateArchive& a) {
    a.tag("events");
    std::vector<Event> events;
    if (a.saving())
      for (auto copy = heap_; !copy.empty(); copy.pop()) events.push_back(copy.top());
    a.io(events);
    a.io(next_seq_);
    a.io(last_popped_);
    if (a.saving()) return;
    heap_ = {};
    for (const Event& e : events) heap_.push(e);
  }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  uint64_t next_seq_ = 0;
  SimTime last_popped_ = 0;
};

}  // namespace asgd
