// sim/worker_pool.h — a fixed pool of threads that run gradient and evaluation jobs. Each
// thread owns an ExecContext (scratch memory, CUDA stream) and runs kernels
// single-threaded; parallelism comes from running several jobs at once. The scheduler
// submits jobs and later waits for the one it needs; a job's exception is rethrown by
// wait(). Job results never depend on which thread ran them.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include "kernels/exec.h"

namespace asgd {

class WorkerPool {
 public:
  using Task = std::function<void(ExecContext&)>;

  struct Job {
    Task task;
    bool done = false;
    std::exception_ptr error;
  };
  using Ticket = std::shared_ptr<Job>;

  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return int(threads_.size()); }
  Ticket submit(Task task);
  // Blocks until the job is done; rethrows its exception.
  void wait(const Ticket& ticket);
  // Runs every task (in parallel), waits for all, rethrows the first error by index.
  void run_all(std::vector<Task> tasks);

 private:
  void thread_main();

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable job_done_;
  std::deque<Ticket> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace asgd
