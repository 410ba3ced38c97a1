// sim/core/worker_pool.h — a fixed pool of threads that run gradient and evaluation jobs. Each
// thread owns an ExecContext (workspace, CUDA stream) and runs kernels
// single-threaded; parallelism comes from running several jobs at once. The scheduler
// submits jobs and later waits for the one it needs; a job's exception is rethrown by
// wait(). Job results never depend on which thread ran them, and that freedom is used:
//   - with caller_computes (what runs and the benchmark use), the thread that drives the
//     pool is one of its `threads`: the pool starts threads - 1 of its own, and a wait()
//     computes instead of sleeping, the awaited job if still queued, else queued jobs
//     from the head (needed next anyway) while the awaited one runs elsewhere. The
//     scheduler's own work then takes a core's time only while it has some; a pool of
//     `threads` threads beside a scheduler thread kept one more thread than cores busy,
//     with preemptions, wake-ups and caches cooled by the switches (what this gained:
//     docs/benchmarks.md, "Measurements behind code choices");
//   - without it, wait() runs a job that no pool thread has started yet on the calling
//     thread (which then runs kernels single-threaded, see kernels_use_one_thread_here)
//     when that is cheaper (callers_help()): not for long jobs when the pool's threads
//     already occupy every core, where one more thread computing only takes turns with
//     them;
//   - jobs that take well under a microsecond (a tiny model) run at once inside
//     submit(): handing them to another core would cost more than running them.
// Hot-path cost: no heap allocation per job (jobs live in a slab and are recycled; the
// callable is stored inside the job when it fits in kInlineBytes), one short lock to
// queue, and a futex wake only when a thread sleeps and the work is worth waking it
// for (see submit). Jobs must not wait for one another. Not here: priorities or
// cancellation.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#include "kernels/exec.h"

namespace asgd {

class WorkerPool {
 public:
  using Task = std::function<void(ExecContext&)>;

  struct State;  // shared between the pool, its threads and outstanding tickets

  // One job: its callable (stored in place), its state and its error.
  struct Job {
    static constexpr size_t kInlineBytes = 96;
    alignas(std::max_align_t) unsigned char storage[kInlineBytes];
    void (*run)(Job&, ExecContext&) = nullptr;  // calls the stored callable
    void (*destroy)(Job&) = nullptr;            // destroys it (null: already destroyed)
    std::atomic<int> status{kFree};
    std::atomic<int> refs{0};      // tickets + 1 while queued or running
    std::atomic<int> sleepers{0};  // threads blocked in wait() on this job
    std::exception_ptr error;
    Job* next = nullptr;    // queue or free-list link
    State* home = nullptr;  // null: the shared "done" job (never recycled)
    enum : int { kFree, kQueued, kRunning, kDone };
  };

  // A handle to a submitted job; copyable; reset() lets the job go (it still runs). A
  // ticket may outlive its pool: the pool's shared state lives until the last one goes.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(const Ticket& o) : job_(o.job_) { retain(job_); }
    Ticket(Ticket&& o) noexcept : job_(o.job_) { o.job_ = nullptr; }
    Ticket& operator=(Ticket o) noexcept {
      std::swap(job_, o.job_);
      return *this;
    }
    ~Ticket() { reset(); }
    void reset() {
      release(job_);
      job_ = nullptr;
    }
    explicit operator bool() const { return job_ != nullptr; }

   private:
    friend class WorkerPool;
    explicit Ticket(Job* j) : job_(j) {}
    Job* job_ = nullptr;
  };

  // `threads` threads compute; with caller_computes the calling thread is one of them
  // (threads - 1 are started; threads = 1 starts none, and jobs run in wait()).
  explicit WorkerPool(int threads, bool caller_computes = false);
  ~WorkerPool();  // runs (caller_computes) or lets its threads run what is still queued
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Threads that compute: the pool's own, plus the caller with caller_computes.
  int threads() const { return int(threads_.size()) + (caller_computes_ ? 1 : 0); }
  bool caller_computes() const { return caller_computes_; }
  // How many jobs run at once while the caller waits for them (run_all, for_each_block):
  // threads(), plus the caller when it helps without counting as one of them.
  int parallelism() const { return threads() + (!caller_computes_ && callers_help() ? 1 : 0); }

  // Queues f(ExecContext&) (or, for tiny jobs, runs it now on the calling thread).
  template <class F>
  Ticket submit(F&& f) {
    using Fn = std::decay_t<F>;
    if (inline_now()) {
      if (Ticket done = run_inline(f)) return done;
    }
    Job* j = allocate();
    construct<Fn>(*j, std::forward<F>(f));
    return enqueue(j, /*wake_all=*/false);
  }
  // Blocks until the job is done; rethrows its exception (every time it is waited on).
  void wait(const Ticket& ticket);
  // Runs every task (in parallel), waits for all, rethrows the first error by index.
  void run_all(std::vector<Task> tasks);

  // Whether wait() runs queued jobs on the calling thread: always with caller_computes;
  // else when the jobs are short (a sleep and a wake-up cost more) or the pool leaves a
  // core free.
  bool callers_help() const;

  // Mean duration of recent jobs in nanoseconds (-1: none measured yet); for tests.
  int64_t recent_job_ns() const;

 private:
  static void retain(Job* j);
  static void release(Job* j);

  template <class Fn>
  static void construct(Job& j, Fn&& f) {
    using T = std::decay_t<Fn>;
    if constexpr (sizeof(T) <= Job::kInlineBytes && alignof(T) <= alignof(std::max_align_t)) {
      new (j.storage) T(std::forward<Fn>(f));
      j.run = [](Job& job, ExecContext& ctx) { (*std::launder(reinterpret_cast<T*>(job.storage)))(ctx); };
      j.destroy = [](Job& job) { std::launder(reinterpret_cast<T*>(job.storage))->~T(); };
    } else {  // too big to store in place: box it
      T* boxed = new T(std::forward<Fn>(f));
      new (j.storage) T*(boxed);
      j.run = [](Job& job, ExecContext& ctx) { (**std::launder(reinterpret_cast<T**>(job.storage)))(ctx); };
      j.destroy = [](Job& job) { delete *std::launder(reinterpret_cast<T**>(job.storage)); };
    }
  }

  template <class F>
  Ticket run_inline(F& f) {
    ExecContext* ctx = lock_caller_context();
    if (!ctx) return Ticket();
    bool sample = take_inline_sample();
    int64_t t0 = sample ? now_ns() : 0;
    std::exception_ptr error;
    try {
      f(*ctx);
      ctx->synchronize();
    } catch (...) {
      error = std::current_exception();
    }
    if (sample) record_ns(now_ns() - t0);
    unlock_caller_context();
    return finished(error);
  }

  bool inline_now() const;
  bool take_inline_sample();
  static int64_t now_ns();
  void record_ns(int64_t ns);
  ExecContext* lock_caller_context();
  void unlock_caller_context();
  Ticket finished(std::exception_ptr error);  // a ticket for a job already run
  Job* allocate();
  Ticket enqueue(Job* j, bool wake_all);
  Job* pop_head();  // under the queue lock; null if empty
  // Runs queued jobs from the head on the calling thread until `until` is done or the
  // queue is empty (until == nullptr: until empty); false if another thread holds the
  // caller's context.
  bool help(const Job* until);
  void execute(Job& j, ExecContext& ctx, bool sample);
  void thread_main();

  State* state_;
  std::vector<std::thread> threads_;
  bool caller_computes_;
  bool spare_core_;  // fewer threads than the machine has cores
};

}  // namespace asgd
