// sim/worker_pool.cpp — FIFO job queue, one condition variable for work, one for results.
#include "sim/worker_pool.h"
#include <stdexcept>

namespace asgd {

WorkerPool::WorkerPool(int threads) {
  if (threads < 1) throw std::invalid_argument("WorkerPool needs at least one thread");
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { thread_main(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : threads_) t.join();
}

WorkerPool::Ticket WorkerPool::submit(Task task) {
  auto job = std::make_shared<Job>();
  job->task = std::move(task);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(job);
  }
  work_ready_.notify_one();
  return job;
}

void WorkerPool::wait(const Ticket& ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  job_done_.wait(lock, [&] { return ticket->done; });
  if (ticket->error) std::rethrow_exception(ticket->error);
}

void WorkerPool::run_all(std::vector<Task> tasks) {
  std::vector<Ticket> tickets;
  tickets.reserve(tasks.size());
  for (auto& t : tasks) tickets.push_back(submit(std::move(t)));
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

void WorkerPool::thread_main() {
  kernels_use_one_thread_here();
  ExecContext ctx;
  for (;;) {
    Ticket job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      job->task(ctx);
      ctx.synchronize();
    } catch (...) {
      error = std::current_exception();
    }
    job->task = nullptr;  // release captured snapshots before signalling
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job->error = error;
      job->done = true;
    }
    job_done_.notify_all();
  }
}

}  // namespace asgd
