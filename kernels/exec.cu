// kernels/exec.cu — ExecContext: per-thread stream/handle (CUDA), staging of ids and
// pointer tables, queue marks.
#include <cstdlib>
#include <cstring>
#include <string>
#include "kernels/detail/backend.h"
#if defined(ASGD_BACKEND_OMP)
#include <omp.h>
#endif

namespace asgd {

ExecContext::ExecContext() : impl_(std::make_unique<Impl>()) {
#if defined(ASGD_BACKEND_CUDA)
  const char* graphs = std::getenv("ASGD_CUDA_GRAPHS");
  impl_->graphs = graphs && std::string(graphs) == "1";
  ASGD_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  if (cublasCreate(&impl_->blas) != CUBLAS_STATUS_SUCCESS) detail::fail("cublasCreate failed", __FILE__, __LINE__);
  cublasSetStream(impl_->blas, impl_->stream);
#endif
}

ExecContext::~ExecContext() {
#if defined(ASGD_BACKEND_CUDA)
  for (auto& job : impl_->captured)
    if (job.exec) cudaGraphExecDestroy(job.exec);
  if (impl_->pointers) cudaFree(impl_->pointers);
  for (auto& b : impl_->temp) cudaFree(b.ptr);
  if (impl_->mark) cudaEventDestroy(impl_->mark);
  if (impl_->blas) cublasDestroy(impl_->blas);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
#endif
}

const int32_t* ExecContext::stage_ids(const int32_t* host_ids, size_t n) {
  if (n == 0) return host_ids;  // nothing to read
  detail::count_copy(*this);
#if defined(ASGD_BACKEND_CUDA)
  // On this context's stream: a plain cudaMemcpy runs on the legacy stream, which a
  // non-blocking stream's kernels do not wait for. Pageable host memory is staged
  // before the call returns, so the caller may reuse host_ids at once.
  impl_->ids.resize_discard(n);
  ASGD_CUDA_CHECK(
      cudaMemcpyAsync(impl_->ids.data(), host_ids, n * sizeof(int32_t), cudaMemcpyHostToDevice, impl_->stream));
  return impl_->ids.data();
#else
  (void)n;
  return host_ids;  // host memory is backend memory
#endif
}

float* const* ExecContext::stage_pointers(float* const* host, size_t n) {
  if (n == 0) return host;  // nothing to read
  detail::count_copy(*this);
#if defined(ASGD_BACKEND_CUDA)
  if (n > impl_->pointers_capacity) {
    if (impl_->pointers) ASGD_CUDA_CHECK(cudaFree(impl_->pointers));  // waits for the kernels using it
    impl_->pointers = nullptr;
    ASGD_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&impl_->pointers), n * sizeof(float*)));
    impl_->pointers_capacity = n;
  }
  ASGD_CUDA_CHECK(cudaMemcpyAsync(impl_->pointers, host, n * sizeof(float*), cudaMemcpyHostToDevice, impl_->stream));
  return impl_->pointers;
#else
  (void)n;
  return host;
#endif
}

namespace detail {

#if defined(ASGD_BACKEND_CUDA)
namespace {
constexpr size_t kCapturedJobs = 8;  // graphs kept per context (the oldest goes first)

// work() captured on the context's stream into a graph, instantiated. The launches it
// makes are recorded, not made: the counts are put back as they were.
cudaGraphExec_t capture(ExecContext& ctx, const std::function<void()>& work) {
  ExecContext::Impl& impl = ctx.impl();
  const LaunchCounts before = impl.counts;
  ASGD_CUDA_CHECK(cudaStreamBeginCapture(impl.stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    cudaStreamEndCapture(impl.stream, &graph);  // leaves capture mode, whatever went wrong
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    impl.counts = before;
    throw;
  }
  impl.counts = before;
  ASGD_CUDA_CHECK(cudaStreamEndCapture(impl.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  ASGD_CUDA_CHECK(err);
  return exec;
}
}  // namespace
#endif

void run_captured(ExecContext& ctx, const GraphKey& key, const std::function<void()>& work) {
#if defined(ASGD_BACKEND_CUDA)
  ExecContext::Impl& impl = ctx.impl();
  if (!impl.graphs) return work();
  auto it = impl.captured.begin();
  while (it != impl.captured.end() && it->key != key.values) ++it;
  if (it == impl.captured.end()) {  // first seen: run as it is, remember the key
    if (impl.captured.size() == kCapturedJobs) {
      if (impl.captured.front().exec) ASGD_CUDA_CHECK(cudaGraphExecDestroy(impl.captured.front().exec));
      impl.captured.erase(impl.captured.begin());
    }
    impl.captured.push_back({key.values, nullptr});
    return work();
  }
  if (!it->exec) it->exec = capture(ctx, work);
  ASGD_CUDA_CHECK(cudaGraphLaunch(it->exec, impl.stream));
  ++impl.counts.graphs;
#else
  (void)ctx;
  (void)key;
  work();
#endif
}

void copy_to_host(ExecContext& ctx, void* host, const void* src, size_t bytes) {
  count_copy(ctx);
#if defined(ASGD_BACKEND_CUDA)
  ASGD_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, ctx.impl().stream));
#else
  if (host != src) std::memcpy(host, src, bytes);
#endif
  ctx.synchronize();
}
}  // namespace detail

void ExecContext::synchronize() {
  ++impl_->counts.syncs;
#if defined(ASGD_BACKEND_CUDA)
  ASGD_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
#endif
}

QueueMark ExecContext::mark() {
  ++impl_->counts.events;
#if defined(ASGD_BACKEND_CUDA)
  if (!impl_->mark) ASGD_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->mark, cudaEventDisableTiming));
  ASGD_CUDA_CHECK(cudaEventRecord(impl_->mark, impl_->stream));
  return QueueMark{impl_->mark};
#else
  return QueueMark{};
#endif
}

void ExecContext::wait_for(const QueueMark& m) {
  ++impl_->counts.events;  // (on CUDA a mark from mark() always holds an event)
#if defined(ASGD_BACKEND_CUDA)
  if (m.event) ASGD_CUDA_CHECK(cudaStreamWaitEvent(impl_->stream, static_cast<cudaEvent_t>(m.event), 0));
#else
  (void)m;
#endif
}

LaunchCounts ExecContext::counts() const { return impl_->counts; }
void ExecContext::set_graph_capture(bool on) { impl_->graphs = on; }
bool ExecContext::graph_capture() const { return impl_->graphs; }

void kernels_use_one_thread_here() {
#if defined(ASGD_BACKEND_OMP)
  omp_set_num_threads(1);
#endif
}

const char* kernels_backend() { return ASGD_BACKEND_NAME; }

bool kernels_device_available() {
#if defined(ASGD_BACKEND_CUDA)
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return true;
#endif
}

}  // namespace asgd
