// kernels/exec.h — ExecContext: where a kernel call runs. One per thread that launches
// kernels (each worker-pool thread, the scheduler thread). On CUDA it owns a stream and a
// cuBLAS handle; on every backend it owns the Workspace that jobs take their buffers
// from, so that a warm gradient job allocates nothing. Not thread-safe: one thread uses
// one context.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include "kernels/workspace.h"

namespace asgd {

// A point in a context's queue of work: on CUDA an event recorded on its stream, which
// another context's later kernels can be made to wait for without the host waiting. On
// CPU backends kernels finish before their call returns, so a mark holds nothing.
struct QueueMark {
  void* event = nullptr;
};

// What a context has asked of its backend: what CUDA calls cost the host (a launch, a
// copy or a wait each takes the driver's locks), counted on every backend at the one
// place in kernels/ where each call is made, so a CPU build counts what the CUDA build
// issues for the same work (the CPU runs it as loops). Per context, never reset: callers
// take differences (counts after - counts before).
struct LaunchCounts {
  uint64_t kernels = 0;  // kernel launches: one per functor pass over an index space, per kernel of
                         // a Thrust/CUB algorithm (a reduction: 1 or 2, by size), per memset
  uint64_t gemms = 0;    // cuBLAS calls: one per GEMM and one per batched GEMM of any count
  uint64_t copies = 0;   // copies between host and device memory on the context's stream
  uint64_t syncs = 0;    // waits of the host for the context's stream
  uint64_t events = 0;   // events recorded (mark) or waited for (wait_for) on the stream
  uint64_t graphs = 0;   // CUDA graphs launched (CUDA builds with graph capture on; else 0)
  // Launches: kernels, GEMM calls and graphs, each one trip through the driver's launch path.
  uint64_t launches() const { return kernels + gemms + graphs; }
  LaunchCounts operator-(const LaunchCounts& o) const {
    return {kernels - o.kernels, gemms - o.gemms,   copies - o.copies,
            syncs - o.syncs,     events - o.events, graphs - o.graphs};
  }
  bool operator==(const LaunchCounts& o) const {
    return kernels == o.kernels && gemms == o.gemms && copies == o.copies && syncs == o.syncs && events == o.events &&
           graphs == o.graphs;
  }
  bool operator!=(const LaunchCounts& o) const { return !(*this == o); }
};

class ExecContext {
 public:
  ExecContext();
  ~ExecContext();
  ExecContext(const ExecContext&) = delete;
  ExecContext& operator=(const ExecContext&) = delete;

  // The buffers of the jobs run on this context (see workspace.h).
  Workspace& workspace() { return workspace_; }
  // Copies n sample ids to backend memory (a no-op copy target on CPU backends).
  const int32_t* stage_ids(const int32_t* host_ids, size_t n);
  // Copies a table of n pointers into backend memory, for batched kernels that index
  // their inputs by request (the arrays pointed to are backend memory already). On CPU
  // backends it returns `host` itself: it must stay alive while the kernels run.
  float* const* stage_pointers(float* const* host, size_t n);
  // Waits until all work queued on this context is done.
  void synchronize();
  // The work queued on this context so far. The mark stays usable while the context
  // lives; marking again moves it later (a waiter then waits for more, never less).
  QueueMark mark();
  // Work queued on this context from now on starts after the marked work is done. Safe
  // from another thread than the marking context's (the CUDA calls are thread-safe).
  void wait_for(const QueueMark& m);
  // Everything asked of the backend on this context so far (LaunchCounts).
  LaunchCounts counts() const;
  // Whether a layered model's gradient jobs on this context run as CUDA graphs: a job
  // whose shapes and buffers were seen before is captured once and then replayed, one
  // launch for all its kernels and GEMMs (Model::loss_grad and loss_grad_batch of
  // kernels/models/sequential.cu). CUDA: off unless the environment sets
  // ASGD_CUDA_GRAPHS=1 when the context is made; it has never run on a GPU (docs/gpu.md).
  // CPU backends: nothing to capture, but on sets the same path otherwise (each request's
  // pointers read from a table, as a replay needs), so tests can hold it to the plain bits.
  void set_graph_capture(bool on);
  bool graph_capture() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
  Workspace workspace_;
};

// Call once on each thread that runs gradient jobs: on the OMP backend, Thrust's
// parallel regions opened from this thread then use one thread (parallelism comes from
// concurrent workers, not from inside a job).
void kernels_use_one_thread_here();
// The build's backend: "CUDA", "OMP" or "CPP".
const char* kernels_backend();
// The GEMM library and, for OpenBLAS, the CPU core whose kernels it picked ("Haswell",
// "SkylakeX", ...): GEMMs round differently from one to another, so results saved on one
// machine are bit-comparable only where this is the same.
const char* kernels_gemm_core();
// CUDA: whether a GPU is usable now. CPU backends: always true.
bool kernels_device_available();

}  // namespace asgd
