// sim/parameter_store.cpp
#include "sim/parameter_store.h"
#include <atomic>
#include <stdexcept>

namespace asgd {

std::shared_ptr<BufferPool> make_buffer_pool(size_t n) {
  auto pool = std::shared_ptr<BufferPool>(new BufferPool(n));
  pool->self_ = pool;
  return pool;
}

std::shared_ptr<Params> BufferPool::acquire() {
  std::unique_ptr<Params> buf;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      buf = std::move(free_.back());
      free_.pop_back();
    } else {
      ++allocated_;
    }
  }
  if (!buf) buf = std::make_unique<Params>(n_);
  std::weak_ptr<BufferPool> home = self_;
  return std::shared_ptr<Params>(buf.release(), [home](Params* p) {
    if (auto pool = home.lock()) pool->release(p);
    else delete p;
  });
}

void BufferPool::release(Params* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.emplace_back(p);
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
