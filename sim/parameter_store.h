// sim/parameter_store.h — versions of a parameter vector as shared, immutable snapshots.
// Readers (gradient jobs) hold a Snapshot; a reader of an unchanged version copies
// nothing. update() writes version v+1 in place when nobody else holds version v (and
// the history does not need it), else into a fresh buffer from a free list, so memory
// grows with the distinct versions in flight, not with workers x model size.
// A history of the last `keep` versions is kept only for forced staleness.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>
#include "kernels/buffer.h"

namespace asgd {

using Params = DeviceArray<float>;

struct Snapshot {
  std::shared_ptr<const Params> params;
  uint64_t version = 0;
  const float* data() const { return params->data(); }
};

// Recycles parameter buffers; buffers come back from any thread (a finished job drops
// its snapshot on a pool thread), hence the mutex. A buffer handed out may outlive the
// pool: it is then freed when its last holder lets it go.
class BufferPool {
 public:
  explicit BufferPool(size_t n);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  std::shared_ptr<Params> acquire();
  size_t allocated() const;
  size_t n() const { return n_; }
  // Buffers allocated by every pool of the process so far (benchmarks read it).
  static uint64_t total_allocated();

  struct Home;  // the free list and counters, shared with the buffers handed out

 private:
  size_t n_;
  Home* home_;
};
std::shared_ptr<BufferPool> make_buffer_pool(size_t n);

class ParameterStore {
 public:
  ParameterStore(const std::vector<float>& init, size_t keep_history);

  Snapshot current() const { return Snapshot{current_, version_}; }
  // The version `lag` updates older than the current one (version 0 if fewer exist).
  Snapshot lagged(uint64_t lag) const;
  uint64_t version() const { return version_; }
  size_t size() const { return pool_->n(); }
  // Buffers ever allocated (peak distinct versions alive at once).
  size_t buffers_allocated() const { return pool_->allocated(); }

  // Makes version v+1: write(out, in) must write the new parameters to `out` from the
  // current ones `in` (out == in when updating in place is safe).
  template <class Write>
  void update(Write&& write) {
    std::shared_ptr<Params> target = writable_target();
    write(target->data(), current_->data());
    commit(std::move(target));
  }

 private:
  std::shared_ptr<Params> writable_target();
  void commit(std::shared_ptr<Params> next);

  std::shared_ptr<BufferPool> pool_;
  std::shared_ptr<Params> current_;
  uint64_t version_ = 0;
  size_t keep_;
  std::deque<std::shared_ptr<const Params>> history_;  // versions v-1, v-2, ... (front newest)
};

}  // namespace asgd
