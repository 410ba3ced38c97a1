// sim/base/interrupt.h — the process-wide "stop soon" flag set by the SIGINT/SIGTERM/SIGHUP
// handlers and polled by the event loop between events, and by the long loops before it
// (loading and generating data), which throw Interrupted so that Ctrl-C is never ignored.
#pragma once
#include <atomic>
#include <stdexcept>
#include <string>

namespace asgd {

inline std::atomic<int>& interrupt_count() {
  static std::atomic<int> count{0};
  return count;
}
inline bool interrupt_requested() { return interrupt_count().load(std::memory_order_relaxed) > 0; }

// A run interrupted before its simulation started (while its data was read or made).
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
inline void throw_if_interrupted(const std::string& during) {
  if (interrupt_requested()) throw Interrupted("interrupted by a signal while " + during);
}

}  // namespace asgd
