// sim/core/parameter_store.cpp
#include "sim/core/parameter_store.h"
#include <algorithm>
#include <atomic>
#include <stdexcept>
#include "kernels/ops.h"

namespace asgd {
namespace {
std::atomic<uint64_t> g_total_allocated{0};
constexpr size_t kPatchCost = 16;  // a patched row's cost in copied elements (bring_up_to_date)
}  // namespace

// Lives while the pool or any buffer it handed out does. The buffers' deleter holds a
// plain pointer to it (no weak_ptr: returning a buffer costs one uncontended lock).
struct BufferPool::Home {
  std::mutex mutex;
  std::vector<Params*> free;
  size_t allocated = 0;
  size_t out = 0;         // handed out, not yet returned
  bool orphaned = false;  // the pool is gone
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

std::shared_ptr<Params> BufferPool::acquire() { return acquire(nullptr); }

std::shared_ptr<Params> BufferPool::acquire(const std::function<uint64_t(const Params*)>& rank) {
  Params* buf = nullptr;
  {
    std::lock_guard<std::mutex> lock(home_->mutex);
    ++home_->out;
    std::vector<Params*>& free = home_->free;
    if (!free.empty()) {
      size_t best = free.size() - 1;
      if (rank) {
        uint64_t best_rank = rank(free[best]);
        for (size_t i = best; i-- > 0;) {
          const uint64_t r = rank(free[i]);
          if (r > best_rank) best = i, best_rank = r;
        }
      }
      buf = free[best];
      free[best] = free.back();
      free.pop_back();
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

ParameterStore::ParameterStore(const std::vector<float>& init, size_t keep_history, RowLayout layout)
    : pool_(make_buffer_pool(init.size())), keep_(keep_history), layout_(layout) {
  if (layout_.rows > 0 && (layout_.width == 0 || layout_.rows * layout_.width > init.size()))
    throw std::logic_error("ParameterStore: the row table does not fit the parameters");
  current_ = pool_->acquire();
  current_->upload(init);
  if (layout_.rows > 0) {
    held_[current_.get()] = 0;
    last_change_.assign(layout_.rows, 0);
  }
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
  if (layout_.rows == 0) return pool_->acquire();
  // The newest version among the free buffers: the fewest rows to bring up to date.
  return pool_->acquire([this](const Params* p) {
    auto it = held_.find(p);
    return it == held_.end() ? uint64_t(0) : it->second + 1;
  });
}

void ParameterStore::commit(std::shared_ptr<Params> next, const std::vector<int32_t>* rows) {
  if (next != current_ && keep_ > 0) {
    history_.push_front(current_);
    while (history_.size() > keep_) history_.pop_back();
  }
  current_ = std::move(next);
  ++version_;
  if (layout_.rows == 0) return;
  held_[current_.get()] = version_;
  if (!rows) {  // every element may have changed: no older buffer can be patched
    for (auto& c : changes_) spare_rows_.push_back(std::move(c));
    changes_.clear();
    change_rows_ = 0;
    return;
  }
  std::vector<int32_t> c;
  if (!spare_rows_.empty()) {
    c = std::move(spare_rows_.back());
    spare_rows_.pop_back();
  }
  c.assign(rows->begin(), rows->end());
  for (int32_t r : c) last_change_[size_t(r)] = version_;
  change_rows_ += c.size();
  changes_.push_front(std::move(c));
  // Beyond the table's size a patch would cost more than a whole copy: forget the oldest.
  while (!changes_.empty() && change_rows_ > layout_.rows) {
    change_rows_ -= changes_.back().size();
    spare_rows_.push_back(std::move(changes_.back()));
    changes_.pop_back();
  }
}

void ParameterStore::bring_up_to_date(ExecContext& ctx, Params& buf) {
  const size_t table = layout_.rows * layout_.width;
  auto it = held_.find(&buf);
  if (it != held_.end() && it->second < version_ && version_ - it->second <= changes_.size()) {
    const size_t lag = size_t(version_ - it->second);
    size_t total = 0;
    for (size_t i = 0; i < lag; ++i) total += changes_[i].size();
    // A patched row costs a scattered read and write, a copied element a streamed one:
    // patch only while the rows listed are a small share of the table's elements.
    if (kPatchCost * total <= layout_.rows * layout_.width) {
      // Each row once, from the change that last wrote it (in the window, as it is newer
      // than the one listing it): unique, though not in ascending order.
      patch_.clear();
      for (size_t i = 0; i < lag; ++i)
        for (int32_t r : changes_[i])
          if (last_change_[size_t(r)] == version_ - i) patch_.push_back(r);
      ops::copy(ctx, ops::Rows{patch_.data(), patch_.size(), layout_.width}, buf.data(), current_->data());
      return;
    }
  }
  ++whole_copies_;
  ops::copy(ctx, buf.data(), current_->data(), table);
}

void checkpoint(StateArchive& a, Snapshot& s) {
  bool present = bool(s.params);
  a.io(present);
  a.io(s.version);
  if (!present) {
    s.params.reset();
    return;
  }
  std::vector<float> values;
  if (a.saving()) s.params->download(values);
  a.io(values);
  if (a.saving()) return;
  auto copy = std::make_shared<Params>();
  copy->upload(values);
  s.params = std::move(copy);
}

void ParameterStore::checkpoint(StateArchive& a) {
  a.tag("parameter store");
  a.io(version_);
  auto values = [&](std::shared_ptr<Params>& p) {
    std::vector<float> h;
    if (a.saving()) p->download(h);
    a.io(h);
    if (a.saving()) return;
    if (h.size() != pool_->n())
      a.fail("a parameter version of " + std::to_string(h.size()) + " values, not " + std::to_string(pool_->n()));
    p = pool_->acquire();
    p->upload(h);
  };
  values(current_);
  uint64_t kept = history_.size();
  a.io(kept);
  if (!a.saving()) {
    if (kept > keep_)
      a.fail("a history of " + std::to_string(kept) + " versions where " + std::to_string(keep_) + " are kept");
    history_.assign(size_t(kept), nullptr);
  }
  for (auto& h : history_) {
    std::shared_ptr<Params> p = std::const_pointer_cast<Params>(h);
    values(p);
    h = std::move(p);
  }
  if (a.saving() || layout_.rows == 0) return;
  // Row tracking starts again from the current version: a buffer it no longer knows is
  // brought up to date by a whole copy (the same values; only whole_copies() counts it).
  held_.clear();
  held_[current_.get()] = version_;
  for (auto& c : changes_) spare_rows_.push_back(std::move(c));
  changes_.clear();
  change_rows_ = 0;
  last_change_.assign(layout_.rows, 0);
}

}  // namespace asgd
