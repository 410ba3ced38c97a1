// sim/core/worker_pool.cpp — FIFO of intrusive jobs from a slab, threads that spin briefly
// before sleeping, wake-ups only when they pay off, and waiters that help (see the header).
#include "sim/core/worker_pool.h"
#include <chrono>
#include <stdexcept>
#include <string>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace asgd {
namespace {

// Jobs measured (a moving average) below this run inline in submit(): a hand-off to
// another core (queue lock, a few cache lines moving, maybe a wake-up) costs about this.
constexpr int64_t kInlineBelowNs = 1500;
// Jobs below this are not worth a futex wake-up each: a sleeping thread is woken only
// once kWakeBatch of them are queued (a waiter runs a queued job itself meanwhile).
constexpr int64_t kShortJobNs = 20000;
constexpr size_t kWakeBatch = 16;
// How long an idle pool thread polls the queue before it sleeps, and a waiter its job.
constexpr auto kIdleSpin = std::chrono::microseconds(5);
constexpr int kWaitSpins = 64;
constexpr size_t kSlabJobs = 256;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Kernels a thread runs as a caller of wait()/submit() are single-threaded like the pool's.
void use_one_thread_once() {
  thread_local bool done = false;
  if (!done) {
    kernels_use_one_thread_here();
    done = true;
  }
}

}  // namespace

struct WorkerPool::State {
  // queue and sleeping threads
  std::mutex mutex;
  std::condition_variable work;
  Job* head = nullptr;
  Job* tail = nullptr;
  std::atomic<size_t> queued{0};
  int sleeping = 0;
  bool stopping = false;
  // job slab
  std::mutex free_mutex;
  Job* free_list = nullptr;
  std::vector<std::unique_ptr<Job[]>> slabs;
  size_t live = 0;        // jobs not on the free list
  bool orphaned = false;  // the pool is gone; the last released job deletes this
  // waiters
  std::mutex done_mutex;
  std::condition_variable done_cv;
  // job cost, and the context of threads that run jobs themselves
  std::atomic<int64_t> avg_ns{-1};
  std::mutex caller_mutex;
  std::unique_ptr<ExecContext> caller_ctx;
  uint32_t inline_jobs = 0;  // under caller_mutex
  // start-up: each pool thread reports once whether its ExecContext (a CUDA stream, a
  // workspace) could be made; the constructor waits for all of them
  std::mutex start_mutex;
  std::condition_variable start_cv;
  int reported = 0;
  std::string start_error;  // the first thread's failure, if any
};

namespace {
WorkerPool::Job& done_job() {  // the ticket of every job that ran inline without error
  static WorkerPool::Job* j = [] {
    auto* job = new WorkerPool::Job;
    job->status.store(WorkerPool::Job::kDone);
    return job;
  }();
  return *j;
}
}  // namespace

WorkerPool::WorkerPool(int threads, bool caller_computes)
    : state_(new State),
      caller_computes_(caller_computes),
      spare_core_(unsigned(threads) < std::thread::hardware_concurrency()) {
  if (threads < 1) {
    delete state_;
    throw std::invalid_argument("WorkerPool needs at least one thread");
  }
  const int own = caller_computes ? threads - 1 : threads;
  // A thread that cannot start, or that starts but cannot make its ExecContext (on CUDA a
  // stream: it fails when the device or the address space is exhausted), fails the pool
  // here with one error, instead of an exception escaping a thread (std::terminate).
  std::string failure;
  try {
    threads_.reserve(own);
    for (int i = 0; i < own; ++i) threads_.emplace_back([this] { thread_main(); });
  } catch (const std::exception& e) {
    failure = e.what();
  }
  const size_t started = threads_.size();
  {
    std::unique_lock<std::mutex> lock(state_->start_mutex);
    state_->start_cv.wait(lock, [&] { return state_->reported == int(started); });
    if (failure.empty() && !state_->start_error.empty()) failure = state_->start_error;
  }
  if (!failure.empty()) {
    // No destructor runs for a constructor that throws: the threads already started must
    // be stopped and joined here (a joinable std::thread destroyed would terminate).
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stopping = true;
    }
    state_->work.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    delete state_;
    throw std::runtime_error("cannot start " + std::to_string(own) + " worker threads (started " +
                             std::to_string(started) + "): " + failure + "; use fewer --threads");
  }
}

WorkerPool::~WorkerPool() {
  if (caller_computes_) help(nullptr);  // its share of what is queued (all, with no threads)
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->work.notify_all();
  for (auto& t : threads_) t.join();  // threads drain the queue first
  bool last;
  {
    std::lock_guard<std::mutex> lock(state_->free_mutex);
    state_->orphaned = true;
    last = state_->live == 0;
  }
  if (last) delete state_;
}

int64_t WorkerPool::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void WorkerPool::record_ns(int64_t ns) {
  int64_t a = state_->avg_ns.load(std::memory_order_relaxed);
  state_->avg_ns.store(a < 0 ? ns : a + (ns - a) / 8, std::memory_order_relaxed);
}

int64_t WorkerPool::recent_job_ns() const { return state_->avg_ns.load(std::memory_order_relaxed); }

bool WorkerPool::inline_now() const {
  int64_t a = state_->avg_ns.load(std::memory_order_relaxed);
  return a >= 0 && a < kInlineBelowNs;
}

bool WorkerPool::callers_help() const {
  if (caller_computes_ || spare_core_) return true;
  int64_t a = state_->avg_ns.load(std::memory_order_relaxed);
  return a >= 0 && a < kShortJobNs;
}

bool WorkerPool::take_inline_sample() { return (state_->inline_jobs++ & 63u) == 0; }

ExecContext* WorkerPool::lock_caller_context() {
  if (!state_->caller_mutex.try_lock()) return nullptr;  // another thread is running one
  use_one_thread_once();
  if (!state_->caller_ctx) state_->caller_ctx = std::make_unique<ExecContext>();
  return state_->caller_ctx.get();
}

void WorkerPool::unlock_caller_context() { state_->caller_mutex.unlock(); }

void WorkerPool::retain(Job* j) {
  if (j && j->home) j->refs.fetch_add(1, std::memory_order_relaxed);
}

void WorkerPool::release(Job* j) {
  if (!j || !j->home) return;
  if (j->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  State* s = j->home;
  if (j->destroy) {  // never ran (cannot happen while a thread drains the queue)
    j->destroy(*j);
    j->destroy = nullptr;
  }
  j->error = nullptr;
  j->status.store(Job::kFree, std::memory_order_relaxed);
  bool last;
  {
    std::lock_guard<std::mutex> lock(s->free_mutex);
    j->next = s->free_list;
    s->free_list = j;
    --s->live;
    last = s->orphaned && s->live == 0;
  }
  if (last) delete s;
}

WorkerPool::Job* WorkerPool::allocate() {
  std::lock_guard<std::mutex> lock(state_->free_mutex);
  if (!state_->free_list) {
    state_->slabs.emplace_back(new Job[kSlabJobs]);
    Job* slab = state_->slabs.back().get();
    for (size_t i = 0; i < kSlabJobs; ++i) {
      slab[i].home = state_;
      slab[i].next = i + 1 < kSlabJobs ? &slab[i + 1] : nullptr;
    }
    state_->free_list = slab;
  }
  Job* j = state_->free_list;
  state_->free_list = j->next;
  j->next = nullptr;
  ++state_->live;
  return j;
}

WorkerPool::Ticket WorkerPool::finished(std::exception_ptr error) {
  if (!error) return Ticket(&done_job());
  Job* j = allocate();  // the error stays with the ticket
  j->error = error;
  j->refs.store(1, std::memory_order_relaxed);
  j->status.store(Job::kDone, std::memory_order_release);
  return Ticket(j);
}

WorkerPool::Ticket WorkerPool::enqueue(Job* j, bool wake_all) {
  j->refs.store(2, std::memory_order_relaxed);  // the ticket and the queue
  j->status.store(Job::kQueued, std::memory_order_relaxed);
  State& s = *state_;
  size_t queued;
  int sleeping;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.tail)
      s.tail->next = j;
    else
      s.head = j;
    s.tail = j;
    queued = s.queued.fetch_add(1, std::memory_order_relaxed) + 1;
    sleeping = s.sleeping;
  }
  if (sleeping > 0) {
    int64_t a = s.avg_ns.load(std::memory_order_relaxed);
    if (wake_all)
      s.work.notify_all();
    else if (a < 0 || a >= kShortJobNs || queued >= kWakeBatch)
      s.work.notify_one();
  }
  return Ticket(j);
}

void WorkerPool::execute(Job& j, ExecContext& ctx, bool sample) {
  int expected = Job::kQueued;
  if (!j.status.compare_exchange_strong(expected, Job::kRunning, std::memory_order_acquire)) return;
  int64_t t0 = sample ? now_ns() : 0;
  try {
    j.run(j, ctx);
    ctx.synchronize();
  } catch (...) {
    j.error = std::current_exception();
  }
  j.destroy(j);  // release captured snapshots before signalling
  j.destroy = nullptr;
  if (sample) record_ns(now_ns() - t0);
  j.status.store(Job::kDone, std::memory_order_seq_cst);
  if (j.sleepers.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(state_->done_mutex); }
    state_->done_cv.notify_all();
  }
}

void WorkerPool::wait(const Ticket& ticket) {
  Job* j = ticket.job_;
  if (!j) throw std::logic_error("WorkerPool::wait on an empty ticket");
  if (j->status.load(std::memory_order_acquire) != Job::kDone) {
    // Not started: run it here rather than sleep while it waits in the queue.
    if (j->status.load(std::memory_order_relaxed) == Job::kQueued) {
      if (!callers_help()) {
        // A pool thread will run it. enqueue may have skipped the wake-up when the jobs
        // were short and the caller was to run it, so wake one now (no syscall unless
        // one sleeps).
        state_->work.notify_one();
      } else if (ExecContext* ctx = lock_caller_context()) {
        execute(*j, *ctx, true);
        unlock_caller_context();
      }
    }
    // Running elsewhere: run queued jobs meanwhile (they are needed next) rather than
    // sleep; a job taken so may finish after the awaited one, which only delays the
    // caller, never the pool.
    if (callers_help() && j->status.load(std::memory_order_acquire) != Job::kDone) help(j);
    for (int i = 0; i < kWaitSpins && j->status.load(std::memory_order_acquire) != Job::kDone; ++i) cpu_relax();
    if (j->status.load(std::memory_order_acquire) != Job::kDone) {
      auto done = [&] { return j->status.load(std::memory_order_seq_cst) == Job::kDone; };
      j->sleepers.fetch_add(1, std::memory_order_seq_cst);
      {
        std::unique_lock<std::mutex> lock(state_->done_mutex);
        if (!threads_.empty()) {
          state_->done_cv.wait(lock, done);
        } else {
          // No thread of its own: another waiter holds the caller's context; once it
          // has its job it stops helping, so take the queue over then.
          while (!done()) {
            lock.unlock();
            help(j);
            lock.lock();
            state_->done_cv.wait_for(lock, std::chrono::microseconds(200), done);
          }
        }
      }
      j->sleepers.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (j->error) std::rethrow_exception(j->error);
}

void WorkerPool::run_all(std::vector<Task> tasks) {
  std::vector<Ticket> tickets;
  tickets.reserve(tasks.size());
  for (auto& t : tasks) {  // always queued: run_all's tasks are meant to run side by side
    Job* j = allocate();
    construct(*j, std::move(t));
    tickets.push_back(enqueue(j, /*wake_all=*/true));
  }
  std::exception_ptr first;
  for (auto& t : tickets) {
    try {
      wait(t);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

WorkerPool::Job* WorkerPool::pop_head() {
  State& s = *state_;
  Job* j = s.head;
  if (!j) return nullptr;
  s.head = j->next;
  if (!s.head) s.tail = nullptr;
  s.queued.fetch_sub(1, std::memory_order_relaxed);
  j->next = nullptr;
  return j;
}

bool WorkerPool::help(const Job* until) {
  ExecContext* ctx = lock_caller_context();
  if (!ctx) return false;
  while (!until || until->status.load(std::memory_order_acquire) != Job::kDone) {
    Job* j;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      j = pop_head();
    }
    if (!j) break;
    execute(*j, *ctx, true);  // a no-op if another waiter ran it already
    release(j);               // the queue's reference
  }
  unlock_caller_context();
  return true;
}

void WorkerPool::thread_main() {
  kernels_use_one_thread_here();
  State& s = *state_;
  std::unique_ptr<ExecContext> made;
  std::string error;
  try {
    made = std::make_unique<ExecContext>();
  } catch (const std::exception& e) {
    error = e.what();
  }
  {
    std::lock_guard<std::mutex> lock(s.start_mutex);
    if (!error.empty() && s.start_error.empty()) s.start_error = error;
    ++s.reported;
  }
  s.start_cv.notify_all();
  if (!made) return;  // the constructor throws, after joining every thread
  ExecContext& ctx = *made;
  uint32_t count = 0;
  for (;;) {
    Job* j = nullptr;
    {
      std::unique_lock<std::mutex> lock(s.mutex);
      if (!s.head) {
        if (s.stopping) return;  // stopping and drained
        lock.unlock();
        // Poll a little before sleeping: the next job is often only microseconds away.
        auto until = std::chrono::steady_clock::now() + kIdleSpin;
        int spins = 0;
        while (s.queued.load(std::memory_order_relaxed) == 0) {
          cpu_relax();
          if ((++spins & 63) == 0 && std::chrono::steady_clock::now() > until) break;
        }
        lock.lock();
        if (!s.head) {
          if (s.stopping) return;
          ++s.sleeping;
          s.work.wait(lock, [&] { return s.head != nullptr || s.stopping; });
          --s.sleeping;
          if (!s.head) return;  // stopping and drained
        }
      }
      j = pop_head();
    }
    execute(*j, ctx, (count++ & 3u) == 0);  // a no-op if a waiter ran it already
    release(j);                             // the queue's reference
  }
}

}  // namespace asgd
