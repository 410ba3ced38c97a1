// sim/interrupt.h — the process-wide "stop soon" flag set by SIGINT/SIGTERM handlers and
// polled by the event loop between events.
#pragma once
#include <atomic>

namespace asgd {

inline std::atomic<int>& interrupt_count() {
  static std::atomic<int> count{0};
  return count;
}
inline bool interrupt_requested() { return interrupt_count().load(std::memory_order_relaxed) > 0; }

}  // namespace asgd
