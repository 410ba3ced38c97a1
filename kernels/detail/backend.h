// kernels/detail/backend.h — included only by kernel sources (.cu): the Thrust execution
// policy of a context, an index-space for_each, error checks. The rest of the program
// never sees this header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>
#if defined(ASGD_BACKEND_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#if defined(ASGD_BACKEND_CUDA)
#include <thrust/system/cuda/execution_policy.h>
#endif
#if defined(ASGD_BACKEND_OMP)
#include <omp.h>
#endif
#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/hd.h"

// Device-only qualifier: functors that call cuRAND's device API.
#if defined(__CUDACC__)
#define ASGD_D __device__
#else
#define ASGD_D
#endif

namespace asgd {

struct ExecContext::Impl {
#if defined(ASGD_BACKEND_CUDA)
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  float** pointers = nullptr;  // stage_pointers' table in GPU memory
  size_t pointers_capacity = 0;
  cudaEvent_t mark = nullptr;  // mark()'s event, made on first use
  // Thrust's temporary storage (a reduction's partial sums), kept for the next call:
  // Thrust's own allocator calls cudaMalloc and cudaFree on every reduction, and
  // cudaFree waits for the whole device, so every loss sum of every worker thread
  // waited for all the others' kernels. Blocks are never shared between contexts.
  struct TempBlock {
    char* ptr;
    size_t bytes;
    bool used;
  };
  std::vector<TempBlock> temp;
#endif
  LaunchCounts counts;  // ExecContext::counts(), written by the counting points below
  bool graphs = false;  // ExecContext::graph_capture()
#if defined(ASGD_BACKEND_CUDA)
  // Gradient jobs seen, by key (run_captured): a graph once a key has been seen twice.
  struct CapturedJob {
    std::vector<uintptr_t> key;
    cudaGraphExec_t exec = nullptr;  // null: seen once, run as it is
  };
  std::vector<CapturedJob> captured;  // the latest last; at most kCapturedJobs
#endif
  DeviceArray<int32_t> ids;
  // Host staging for batched kernels (kept here: a warm batch reuses their storage).
  std::vector<int32_t> host_ids;
  std::vector<float*> host_pointers;
};

namespace detail {

[[noreturn]] inline void fail(const char* what, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what);
}

// The counting points of LaunchCounts (kernels/exec.h). Each site that issues a CUDA call
// counts it here, before its backend branch, so every backend counts the same.
inline LaunchCounts& counts_of(ExecContext& ctx) { return ctx.impl().counts; }
inline void count_kernel(ExecContext& ctx) { ++counts_of(ctx).kernels; }
inline void count_copy(ExecContext& ctx) { ++counts_of(ctx).copies; }
// A Thrust reduction of n items to one value on the host (thrust::transform_reduce with
// the context's policy): cub::DeviceReduce launches one kernel when the items fit one
// tile and two otherwise (CCCL 3's policy for sm_60 to sm_90: 256 threads of 16 items of a
// 4-byte accumulator, 8 of an 8-byte one); then Thrust waits for the stream and copies the
// value back, waiting again.
inline void count_reduction(ExecContext& ctx, size_t n, size_t accum_bytes) {
  if (n == 0) return;
  const size_t tile = 256 * (accum_bytes >= 8 ? 8 : 16);
  LaunchCounts& c = counts_of(ctx);
  c.kernels += n <= tile ? 1 : 2;
  c.copies += 1;
  c.syncs += 2;
}
// thrust::sort of n keys with a comparator of its own (so a merge sort: cub::DeviceMergeSort,
// CCCL 3's policy of 256 threads x 17 4-byte keys a tile): one block-sort kernel, then a
// partition and a merge kernel per pass, ceil(log2(tiles)) passes.
inline void count_merge_sort(ExecContext& ctx, size_t n) {
  if (n == 0) return;
  const size_t tiles = (n + 256 * 17 - 1) / (256 * 17);
  uint64_t passes = 0;
  while ((size_t(1) << passes) < tiles) ++passes;
  counts_of(ctx).kernels += 1 + 2 * passes;
}
#if defined(ASGD_BACKEND_CUDA)
#define ASGD_CUDA_CHECK(expr)                                                                              \
  do {                                                                                                     \
    cudaError_t asgd_err_ = (expr);                                                                        \
    if (asgd_err_ != cudaSuccess) ::asgd::detail::fail(cudaGetErrorString(asgd_err_), __FILE__, __LINE__); \
  } while (0)
// Hands out the context's cached temporary blocks to Thrust (first fit; a new block,
// rounded up to a power of two, only when none is free and large enough).
struct TempAllocator {
  using value_type = char;
  ExecContext::Impl* impl;
  char* allocate(std::ptrdiff_t n) {
    for (auto& b : impl->temp)
      if (!b.used && b.bytes >= size_t(n)) {
        b.used = true;
        return b.ptr;
      }
    size_t bytes = 4096;
    while (bytes < size_t(n)) bytes *= 2;
    void* p = nullptr;
    ASGD_CUDA_CHECK(cudaMalloc(&p, bytes));
    impl->temp.push_back({static_cast<char*>(p), bytes, true});
    return static_cast<char*>(p);
  }
  void deallocate(char* p, size_t) {
    for (auto& b : impl->temp)
      if (b.ptr == p) b.used = false;
  }
};
// The context's stream, its temporary blocks, and no synchronisation after each
// algorithm (thrust::cuda::par waits for the stream after every for_each). Work on a
// context is complete when ExecContext::synchronize returns, or when an algorithm that
// returns a value to the host (a reduction) does.
inline auto policy(ExecContext& ctx) {
  return thrust::cuda::par_nosync(TempAllocator{&ctx.impl()}).on(ctx.impl().stream);
}
#else
inline auto policy(ExecContext&) { return thrust::device; }
#endif

// Whether kernels called from this thread run on one CPU thread: always on CPP, and on
// OMP after kernels_use_one_thread_here() (every pool thread and the scheduler).
inline bool one_cpu_thread_here() {
#if defined(ASGD_BACKEND_OMP)
  return omp_get_max_threads() == 1;
#else
  return true;
#endif
}

#if defined(ASGD_BACKEND_CUDA)
// One kernel over [0, n) on the context's stream, not counted: for the counted wrappers
// below, and for a site whose CPU code walks its data differently and so counts its
// launches itself (run_sums, kernels/layers/sums.h).
template <class F>
void launch_n(ExecContext& ctx, size_t n, const F& f) {
  thrust::for_each_n(policy(ctx), thrust::counting_iterator<size_t>(0), n, f);
}
#endif

// Calls f(i) for i in [0, n) on the context's backend. On the CPU with one thread this
// is a plain loop (which the compiler vectorises): an OpenMP parallel region per call
// costs about a microsecond, more than a whole update of a small model.
template <class F>
void for_each_index(ExecContext& ctx, size_t n, const F& f) {
  if (n == 0) return;
  count_kernel(ctx);
#if defined(ASGD_BACKEND_CUDA)
  launch_n(ctx, n, f);
#else
  if (one_cpu_thread_here()) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  thrust::for_each_n(policy(ctx), thrust::counting_iterator<size_t>(0), n, f);
#endif
}

// Calls f(r, c) for every r in [0, rows), c in [0, cols). On CUDA one thread per element;
// on the CPU row by row, the inner loop over c, so that what depends on r alone is worked
// out once per row and the inner loop vectorises where f allows. f must not depend on
// the order of the calls (elements are independent).
template <class F>
struct Rows2d {  // CPU: one row per call
  F f;
  size_t cols;
  void operator()(size_t r) const {
    for (size_t c = 0; c < cols; ++c) f(r, c);
  }
};
template <class F>
struct Elements2d {  // CUDA: one element per call
  F f;
  size_t cols;
  ASGD_HD void operator()(size_t e) const { f(e / cols, e % cols); }
};
template <class F>
void for_each_2d(ExecContext& ctx, size_t rows, size_t cols, const F& f) {
  if (rows == 0 || cols == 0) return;
  count_kernel(ctx);
#if defined(ASGD_BACKEND_CUDA)
  launch_n(ctx, rows * cols, Elements2d<F>{f, cols});
#else
  if (one_cpu_thread_here()) {
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) f(r, c);
    return;
  }
  thrust::for_each_n(policy(ctx), thrust::counting_iterator<size_t>(0), rows, Rows2d<F>{f, cols});
#endif
}

// Calls f.row(r)(c) for every r < rows, c < cols: f.row(r) works out once what depends on
// r alone (say a request's bias pointer) and returns a functor of c, so on the CPU the
// inner loop sees plain pointers and vectorises (for_each_2d's f(r, c) may load them on
// every element); on CUDA one thread per (r, c), as for_each_2d.
template <class F>
struct RowsOf {  // CPU: one row per call
  F f;
  size_t cols;
  void operator()(size_t r) const {
    const auto g = f.row(r);
    for (size_t c = 0; c < cols; ++c) g(c);
  }
};
template <class F>
struct ElementsOfRows {  // CUDA: one element per call
  F f;
  size_t cols;
  ASGD_HD void operator()(size_t e) const { f.row(e / cols)(e % cols); }
};
template <class F>
void for_each_row_element(ExecContext& ctx, size_t rows, size_t cols, const F& f) {
  if (rows == 0 || cols == 0) return;
  count_kernel(ctx);
#if defined(ASGD_BACKEND_CUDA)
  launch_n(ctx, rows * cols, ElementsOfRows<F>{f, cols});
#else
  if (one_cpu_thread_here()) {
    const RowsOf<F> each{f, cols};
    for (size_t r = 0; r < rows; ++r) each(r);
    return;
  }
  thrust::for_each_n(policy(ctx), thrust::counting_iterator<size_t>(0), rows, RowsOf<F>{f, cols});
#endif
}

// Calls f(i, j, l) for every i < n0, j < n1, l < n2: on CUDA one thread per (i, j, l);
// on the CPU three nested loops, so that what depends on i (or i, j) alone is worked out
// once per i (or i, j): index arithmetic with divisions goes in the outer indices.
template <class F>
struct Rows3d {  // CPU: one i per call
  F f;
  size_t n1, n2;
  void operator()(size_t i) const {
    for (size_t j = 0; j < n1; ++j)
      for (size_t l = 0; l < n2; ++l) f(i, j, l);
  }
};
template <class F>
struct Elements3d {  // CUDA: one (i, j, l) per call
  F f;
  size_t n1, n2;
  ASGD_HD void operator()(size_t e) const { f(e / (n1 * n2), (e / n2) % n1, e % n2); }
};
template <class F>
void for_each_3d(ExecContext& ctx, size_t n0, size_t n1, size_t n2, const F& f) {
  if (n0 == 0 || n1 == 0 || n2 == 0) return;
  count_kernel(ctx);
#if defined(ASGD_BACKEND_CUDA)
  launch_n(ctx, n0 * n1 * n2, Elements3d<F>{f, n1, n2});
#else
  if (one_cpu_thread_here()) {
    for (size_t i = 0; i < n0; ++i)
      for (size_t j = 0; j < n1; ++j)
        for (size_t l = 0; l < n2; ++l) f(i, j, l);
    return;
  }
  thrust::for_each_n(policy(ctx), thrust::counting_iterator<size_t>(0), n0, Rows3d<F>{f, n1, n2});
#endif
}

// What a captured job's launches bake in: every pointer and size they read (run_captured).
struct GraphKey {
  std::vector<uintptr_t> values;
  template <class T>
  GraphKey& operator<<(T* p) {
    values.push_back(reinterpret_cast<uintptr_t>(p));
    return *this;
  }
  GraphKey& operator<<(size_t v) {
    values.push_back(uintptr_t(v));
    return *this;
  }
};
// Runs `work`: on a CUDA context with graph capture on (ExecContext::set_graph_capture),
// as a CUDA graph. The first job with a key runs as it is (it may still size the
// workspace); the second is captured (its launches counted as one graph, not as theirs)
// and launched; later ones replay the graph. `work` may only queue kernels and GEMMs on
// the context's stream: no copy, no wait, no allocation; and its key must name everything
// its launches read other than the contents of backend memory. Elsewhere: work() itself.
void run_captured(ExecContext& ctx, const GraphKey& key, const std::function<void()>& work);

// Copies `bytes` of backend memory at src to host memory (on CUDA on the context's stream,
// after the work queued there) and waits for it: one copy and one wait of LaunchCounts.
void copy_to_host(ExecContext& ctx, void* host, const void* src, size_t bytes);

// Request i's array in a batch of k (Model::loss_grad_batch): table[i] + offset, or, for a
// single request, single + offset (no table to stage). table is backend memory.
struct PerRequest {
  float* const* table;
  float* single;
  size_t offset;
  ASGD_HD float* at(size_t i) const { return (table ? table[i] : single) + offset; }
};

// C (M x N) = alpha * op(A) (M x K) * op(B) (K x N) + beta * C, all row-major.
void gemm(ExecContext& ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
// `count` GEMMs of one shape: C[i] = alpha * op(A[i]) op(B[i]) + beta * C[i]. The three
// pointer tables are backend memory (ExecContext::stage_pointers). CUDA: one
// cublasSgemmBatched call; CPU: gemm() for each i in order (the same bits as k calls).
void gemm_batched(ExecContext& ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* const* A,
                  int lda, const float* const* B, int ldb, float beta, float* const* C, int ldc, int count);

}  // namespace detail
}  // namespace asgd
