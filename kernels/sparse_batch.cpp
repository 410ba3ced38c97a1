// kernels/sparse_batch.cpp — the minibatch transpose (see sparse_batch.h): one stable
// radix sort of (feature, entry) keys by feature. Entries are numbered in minibatch order
// (sample by sample, each sample's features in order), and a stable sort keeps that order
// among a feature's entries: the sums over them run in a fixed order, whatever thread or
// backend computes them. A radix sort: the keys are short integers, so a few linear
// passes replace a comparison sort's log E passes.
#include "kernels/sparse_batch.h"
#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace asgd {
namespace {

size_t count_entries(const int64_t* row_ptr, const int32_t* ids, size_t m) {
  size_t entries = 0;
  for (size_t r = 0; r < m; ++r) entries += size_t(row_ptr[ids[r] + 1] - row_ptr[ids[r]]);
  if (entries >= size_t(INT32_MAX))
    throw std::length_error("sparse minibatch of " + std::to_string(m) + " samples holds " + std::to_string(entries) +
                            " features, more than a 32-bit index can number");
  return entries;
}

// Sorts keys stably by their high 32 bits (the feature), 8 bits per pass, as many
// passes as the largest feature needs; `tmp` is scratch. The result is in keys.
void sort_by_feature(std::vector<uint64_t>& keys, std::vector<uint64_t>& tmp) {
  uint64_t top = 0;
  for (uint64_t k : keys) top |= k;
  top >>= 32;
  tmp.resize(keys.size());
  for (int shift = 32; (top >> (shift - 32)) != 0; shift += 8) {
    size_t count[257] = {0};
    for (uint64_t k : keys) count[((k >> shift) & 0xff) + 1]++;
    for (int d = 0; d < 256; ++d) count[d + 1] += count[d];
    for (uint64_t k : keys) tmp[count[(k >> shift) & 0xff]++] = k;
    keys.swap(tmp);
  }
}

}  // namespace

void build_sparse_batch(const int64_t* row_ptr, const int32_t* col, const int32_t* ids, size_t m, SparseBatch& b) {
  const size_t entries = count_entries(row_ptr, ids, m);
  b.keys.resize(entries);
  b.start.resize(m);
  b.sample_of.resize(entries);
  size_t q = 0;
  for (size_t r = 0; r < m; ++r) {
    b.start[r] = int32_t(q);
    for (int64_t e = row_ptr[ids[r]]; e < row_ptr[ids[r] + 1]; ++e, ++q) {
      b.keys[q] = (uint64_t(uint32_t(col[e])) << 32) | uint64_t(q);
      b.sample_of[q] = int32_t(r);
    }
  }
  sort_by_feature(b.keys, b.sorted);

  b.rows.clear();
  b.seg.clear();
  b.sample.resize(entries);
  b.offset.resize(entries);
  for (size_t i = 0; i < entries; ++i) {
    const int32_t feature = int32_t(b.keys[i] >> 32);
    const int32_t number = int32_t(b.keys[i] & 0xffffffffu);
    if (b.rows.empty() || b.rows.back() != feature) {
      b.rows.push_back(feature);
      b.seg.push_back(int32_t(i));
    }
    const int32_t r = b.sample_of[number];
    b.sample[i] = r;
    b.offset[i] = number - b.start[r];
  }
  b.seg.push_back(int32_t(entries));
}

void sparse_batch_rows(const int64_t* row_ptr, const int32_t* col, const int32_t* ids, size_t m,
                       std::vector<int32_t>& rows, std::vector<uint64_t>& keys, std::vector<uint64_t>& sorted) {
  const size_t entries = count_entries(row_ptr, ids, m);
  keys.resize(entries);
  size_t q = 0;
  for (size_t r = 0; r < m; ++r)
    for (int64_t e = row_ptr[ids[r]]; e < row_ptr[ids[r] + 1]; ++e) keys[q++] = uint64_t(uint32_t(col[e])) << 32;
  sort_by_feature(keys, sorted);
  rows.clear();
  for (size_t i = 0; i < entries; ++i) {
    const int32_t feature = int32_t(keys[i] >> 32);
    if (rows.empty() || rows.back() != feature) rows.push_back(feature);
  }
}

}  // namespace asgd
