// sim/core/parameter_store.h — versions of a parameter vector as shared, immutable snapshots.
// Readers (gradient jobs) hold a Snapshot; a reader of an unchanged version copies
// nothing. update() writes version v+1 in place when nobody else holds version v (and
// the history does not need it), else into a fresh buffer from a free list, so memory
// grows with the distinct versions in flight, not with workers x model size.
// A history of the last `keep` versions is kept only for forced staleness.
// A store of a sparse model's parameters (a RowLayout with rows) also takes updates that
// change only some table rows (update_rows): it remembers which rows each recent version
// changed, and when such an update needs a fresh buffer it takes the free one holding the
// newest version and copies in only the rows changed since, so a version costs the rows
// that differ, not the whole vector. Versions stay whole, immutable arrays for readers.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>
#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/model.h"
#include "sim/base/state_archive.h"

namespace asgd {

using Params = DeviceArray<float>;

struct Snapshot {
  std::shared_ptr<const Params> params;
  uint64_t version = 0;
  const float* data() const { return params->data(); }
};
// A checkpoint of a snapshot: its version and values (none: empty). Read back, it is a
// copy of its own, shared with no store (the values are what matter, not who holds them).
void checkpoint(StateArchive& a, Snapshot& s);

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
  // The free buffer that `rank` ranks highest (the most recently returned among equals),
  // or a new one when none is free.
  std::shared_ptr<Params> acquire(const std::function<uint64_t(const Params*)>& rank);
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
  // layout: the model's parameter table (Model::row_layout; rows 0: none, update_rows is
  // then refused).
  ParameterStore(const std::vector<float>& init, size_t keep_history, RowLayout layout = {});

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
    commit(std::move(target), nullptr);
  }
  // Makes version v+1 that differs from v only in table rows `rows` (ascending, unique)
  // and in the dense part after the table: write(out, in) must write those rows and the
  // whole dense part of `out` from `in`; every other element of `out` already equals
  // in's when it is called (out == in, or a buffer brought up to date with ctx's kernels).
  template <class Write>
  void update_rows(ExecContext& ctx, const std::vector<int32_t>& rows, Write&& write) {
    if (layout_.rows == 0) throw std::logic_error("ParameterStore: update_rows on a store without a row table");
    std::shared_ptr<Params> target = writable_target();
    if (target != current_) bring_up_to_date(ctx, *target);
    write(target->data(), current_->data());
    commit(std::move(target), &rows);
  }
  const RowLayout& layout() const { return layout_; }
  // Buffers update_rows brought up to date by copying the whole table, not only the rows
  // changed since their version (a fresh buffer, or one too many versions back).
  uint64_t whole_copies() const { return whole_copies_; }
  // A checkpoint: the version number, the current values and the history kept (read back,
  // a row table's tracking of changed rows starts again).
  void checkpoint(StateArchive& a);

 private:
  std::shared_ptr<Params> writable_target();
  // rows: the table rows version v+1 changed (null: every element may have changed).
  void commit(std::shared_ptr<Params> next, const std::vector<int32_t>* rows);
  // Makes buf (free, holding an older version or nothing yet) equal to the current
  // version outside the dense part: copies the rows changed since its version, or the
  // whole vector when that is not known or not cheaper.
  void bring_up_to_date(ExecContext& ctx, Params& buf);

  std::shared_ptr<BufferPool> pool_;
  std::shared_ptr<Params> current_;
  uint64_t version_ = 0;
  size_t keep_;
  std::deque<std::shared_ptr<const Params>> history_;  // versions v-1, v-2, ... (front newest)
  // Row tracking (layout_.rows > 0 only).
  RowLayout layout_;
  std::unordered_map<const Params*, uint64_t> held_;  // the version each buffer last received
  // The table rows that versions v, v-1, ... changed (front newest), back to the last
  // dense update at most (which clears it), and no more rows in all than the table has.
  std::deque<std::vector<int32_t>> changes_;
  size_t change_rows_ = 0;                        // rows listed in changes_, in all
  std::vector<std::vector<int32_t>> spare_rows_;  // storage of dropped changes, reused
  std::vector<uint64_t> last_change_;             // (by row) the newest version in changes_ that changed it
  std::vector<int32_t> patch_;                    // scratch: rows to bring a buffer up to date
  uint64_t whole_copies_ = 0;
};

}  // namespace asgd
