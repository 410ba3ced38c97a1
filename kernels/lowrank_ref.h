// kernels/lowrank_ref.h — scalar references for kernels/lowrank.h: plain loops in double,
// the definitions the kernels are tested against (tests/test_kernels.cpp).
#pragma once
#include <cmath>
#include <vector>
#include "kernels/shape.h"

namespace asgd::lowrank_ref {

// M(i, j) of a block: its storage row-major, or transposed.
inline double at(const ParamBlock& b, const float* m, size_t i, size_t j) {
  return b.transposed ? m[j * b.rows + i] : m[i * b.cols + j];
}

inline void project(const ParamBlock& b, const float* m, const float* q, float* p, size_t r) {
  for (size_t i = 0; i < b.rows; ++i)
    for (size_t c = 0; c < r; ++c) {
      double s = 0;
      for (size_t j = 0; j < b.cols; ++j) s += at(b, m, i, j) * q[j * r + c];
      p[i * r + c] = float(s);
    }
}

inline void back_project(const ParamBlock& b, const float* m, const float* p, float* q, size_t r) {
  for (size_t j = 0; j < b.cols; ++j)
    for (size_t c = 0; c < r; ++c) {
      double s = 0;
      for (size_t i = 0; i < b.rows; ++i) s += at(b, m, i, j) * p[i * r + c];
      q[j * r + c] = float(s);
    }
}

inline void expand(const ParamBlock& b, const float* p, const float* q, float* m, size_t r) {
  for (size_t i = 0; i < b.rows; ++i)
    for (size_t j = 0; j < b.cols; ++j) {
      double s = 0;
      for (size_t c = 0; c < r; ++c) s += double(p[i * r + c]) * q[j * r + c];
      (b.transposed ? m[j * b.rows + i] : m[i * b.cols + j]) = float(s);
    }
}

inline void orthogonalize(float* a, size_t rows, size_t r, float eps) {
  for (size_t i = 0; i < r; ++i) {
    double s = 0;
    for (size_t k = 0; k < rows; ++k) s += double(a[k * r + i]) * a[k * r + i];
    const float d = float(std::sqrt(s)) + eps;
    for (size_t k = 0; k < rows; ++k) a[k * r + i] = d > 0.0f ? a[k * r + i] / d : 0.0f;
    for (size_t j = i + 1; j < r; ++j) {
      double dot = 0;
      for (size_t k = 0; k < rows; ++k) dot += double(a[k * r + i]) * a[k * r + j];
      for (size_t k = 0; k < rows; ++k) a[k * r + j] -= float(dot) * a[k * r + i];
    }
  }
}

}  // namespace asgd::lowrank_ref
