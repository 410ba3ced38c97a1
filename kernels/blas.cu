// kernels/blas.cu — row-major GEMM: cuBLAS on CUDA, single-threaded OpenBLAS otherwise
// (parallelism comes from concurrent workers, not from inside one GEMM).
#include "kernels/detail/backend.h"
#if !defined(ASGD_BACKEND_CUDA)
#include <cblas.h>
#include <mutex>
#endif

namespace asgd {

const char* kernels_gemm_core() {
#if defined(ASGD_BACKEND_CUDA)
  return "cuBLAS";
#else
  return openblas_get_corename();
#endif
}

namespace detail {
namespace {

// One GEMM, not counted (its callers count the cuBLAS call they stand for).
void gemm_call(ExecContext& ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
#if defined(ASGD_BACKEND_CUDA)
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (cublasSgemm(ctx.impl().blas, ob, oa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc) != CUBLAS_STATUS_SUCCESS)
    fail("cublasSgemm failed", __FILE__, __LINE__);
#else
  (void)ctx;
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, C, ldc);
#endif
}

}  // namespace

void gemm(ExecContext& ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  ++counts_of(ctx).gemms;
  gemm_call(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_batched(ExecContext& ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* const* A,
                  int lda, const float* const* B, int ldb, float beta, float* const* C, int ldc, int count) {
  if (count <= 0) return;
  ++counts_of(ctx).gemms;  // one cuBLAS call for all `count`
#if defined(ASGD_BACKEND_CUDA)
  // Row-major as in gemm(): the column-major product C^T = op(B)^T op(A)^T, batch-wise.
  cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (cublasSgemmBatched(ctx.impl().blas, ob, oa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc, count) !=
      CUBLAS_STATUS_SUCCESS)
    fail("cublasSgemmBatched failed", __FILE__, __LINE__);
#else
  for (int i = 0; i < count; ++i)
    gemm_call(ctx, trans_a, trans_b, M, N, K, alpha, A[i], lda, B[i], ldb, beta, C[i], ldc);
#endif
}

}  // namespace detail
}  // namespace asgd
