// kernels/sparse_batch.h — a minibatch of sparse samples seen from its features: the
// sorted unique features its samples name (the parameter-table rows its gradient
// touches) and, for each of them, the minibatch entries that hold it, in minibatch order.
// Built on the host from a dataset's host index (DeviceDataset::host_row_ptr, host_col),
// so no kernel runs and nothing waits for the device. Plain C++. Not here: the arithmetic
// over it (kernels/models/sparse_linear.cu).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace asgd {

struct SparseBatch {
  std::vector<int32_t> rows;    // (u) features the minibatch names, ascending, unique
  std::vector<int32_t> seg;     // (u + 1) row p's entries are [seg[p], seg[p + 1])
  std::vector<int32_t> sample;  // (E) an entry's position r in the minibatch, ascending within a row
  std::vector<int32_t> offset;  // (E) its place in sample ids[r]'s CSR row: the value is
                                //     val[row_ptr[ids[r]] + offset]
  // Scratch, kept so that a warm build allocates nothing.
  std::vector<uint64_t> keys, sorted;
  std::vector<int32_t> start, sample_of;
};

// Builds b from the m samples `ids` of the CSR index (row_ptr, col; host memory). A
// sample repeated in the minibatch contributes its entries once per occurrence. Throws
// std::length_error when the minibatch holds INT32_MAX entries or more.
void build_sparse_batch(const int64_t* row_ptr, const int32_t* col, const int32_t* ids, size_t m, SparseBatch& b);

// Only the sorted unique features (b.rows of build_sparse_batch) into rows; `keys` and
// `sorted` are scratch.
void sparse_batch_rows(const int64_t* row_ptr, const int32_t* col, const int32_t* ids, size_t m,
                       std::vector<int32_t>& rows, std::vector<uint64_t>& keys, std::vector<uint64_t>& sorted);

}  // namespace asgd
