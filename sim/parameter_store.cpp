// sim/parameter_store.cpp
#include "sim/parameter_store.h"
#include <atomic>
#include <stdexcept>

namespace asgd {
namespace {
std::atomic<uint64_t> g_total_allocated{0};
}  // namespace

// Lives while the pool or any buffer it handed out does. The buffers' deleter holds a
// plain pointer to it (no weak_ptr: returning a buffer costs one uncontended lock).
struct BufferPool::Home {
  std::mutex mutex;
  std::vector<Params*> free;
  size_t allocated = 0;
  size_t out = 0;          // handed out, not yet returned
  bool orphaned = false;   // the pool is gone
};

namespace {
struct ReturnBuffer {
  BufferPool::Home* home;
  void operator()(Params* p) const {
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(home->mutex);
      --home->out;
      if (home->orphaned) {
        last = home->out == 0;
      } else {
        home->free.push_back(p);
        p = nullptr;
      }
    }
    delete p;
    if (last) delete home;
  }
};
}  // namespace

BufferPool::BufferPool(size_t n) : n_(n), home_(new Home) {}

BufferPool::~BufferPool() {
  std::vector<Params*> free;
  bool last;
  {
    std::lock_guard<std::mutex> lock(home_->mutex);
    home_->orphaned = true;
    free.swap(home_->free);
    last = home_->out == 0;
  }
  for (Params* p : free) delete p;
  if (last) delete home_;
}

uint64_t BufferPool::total_allocated() { return g_total_allocated.load(std::memory_order_relaxed); }

size_t BufferPool::allocated() const {
  std::lock_guard<std::mutex> lock(home_->mutex);
  return home_->allocated;
}

std::shared_ptr<BufferPool> make_buffer_pool(size_t n) { return std::make_shared<BufferPool>(n); }

std::shared_ptr<Params> BufferPool::acquire() {
  Params* buf = nullptr;
  {
    std::lock_guard<std::mutex> lock(home_->mutex);
    ++home_->out;
    if (!home_->free.empty()) {
      buf = home_->free.back();
      home_->free.pop_back();
    } else {
      ++home_->allocated;
    }
  }
  if (!buf) {
    g_total_allocated.fetch_add(1, std::memory_order_relaxed);
    try {
      buf = new Params(n_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(home_->mutex);
      --home_->out;
      --home_->allocated;
      throw;
    }
  }
  return std::shared_ptr<Params>(buf, ReturnBuffer{home_});
}

ParameterStore::ParameterStore(const std::vector<float>& init, size_t keep_history)
    : pool_(make_buffer_pool(init.size())), keep_(keep_history) {
  current_ = pool_->acquire();
  current_->upload(init);
}

Snapshot ParameterStore::lagged(uint64_t lag) const {
  if (lag == 0 || version_ == 0) return current();
  if (lag > keep_) throw std::logic_error("ParameterStore: lag beyond the kept history");
  uint64_t back = std::min<uint64_t>(lag, version_);
  if (back > history_.size()) back = history_.size();
  return Snapshot{history_[back - 1], version_ - back};
}

std::shared_ptr<Params> ParameterStore::writable_target() {
  // In place only when the store is the sole holder and history does not keep it.
  if (keep_ == 0 && current_.use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);  // pairs with the reader's release
    return current_;
  }
  return pool_->acquire();
}

void ParameterStore::commit(std::shared_ptr<Params> next) {
  if (next != current_ && keep_ > 0) {
    history_.push_front(current_);
    while (history_.size() > keep_) history_.pop_back();
  }
  current_ = std::move(next);
  ++version_;
}

}  // namespace asgd
