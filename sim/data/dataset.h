// sim/data/dataset.h — training and test sets on the host, then uploaded once to the backend.
// Sources: synthetic regression/classification generated from the seed, and
// Fashion-MNIST from IDX files; sparse data (CSR) from sim/data/sparse_synthetic.h and
// sim/svmlight_reader.h. Not here: minibatch order (sim/data/sample_stream.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include "kernels/model.h"
#include "sim/data/idx_reader.h"

namespace asgd {

struct HostDataset {
  std::vector<float> x;  // (n, dim) row-major; empty for sparse data
  std::vector<float> y;  // (n) target, or class index as float
  size_t n = 0;
  size_t dim = 0;   // features
  int classes = 0;  // 0: regression
  // Sparse data (CSR, as DeviceDataset): sample i's features are col[row_ptr[i] ..
  // row_ptr[i+1]), strictly increasing and < dim, with values val[same range].
  std::vector<int64_t> row_ptr;  // (n + 1); empty for dense data
  std::vector<int32_t> col;      // (nnz)
  std::vector<float> val;        // (nnz)
  bool sparse() const { return !row_ptr.empty(); }
  Shape shape;  // one sample as an image, channels last (dim floats); 1 x 1 x dim if flat
  // >= 0: the samples live outside this program (data.type "torch", sim/models/external.h)
  // and this is the provider's id of the set; x is empty and dim 0.
  int external = -1;
};

// Bytes of a sparse set of `rows` samples holding `nnz` features in all, as stored: CSR
// (row offsets, feature ids, values) and the labels.
uint64_t sparse_bytes(uint64_t rows, uint64_t nnz);
// What this process may use (bytes): physical memory, lowered by RLIMIT_AS/RLIMIT_DATA
// (less the address space or data the process already uses and what its threads will
// reserve: a stack each, and a malloc arena each under RLIMIT_AS; up to 8 threads) and a cgroup
// memory.max where set. Data loads and the config's memory estimate both compare
// against it.
double memory_limit_bytes();
// "12 GiB", "3.4 MiB": bytes for messages ("unbounded" when not finite).
std::string format_bytes(double bytes);

struct DataSplit {
  HostDataset train, test;
  std::string description;
};

struct SyntheticSpec {
  bool classification = true;
  int classes = 10;  // >= 2 for classification
  size_t features = 20;
  size_t train_samples = 4096;
  size_t test_samples = 1024;
  double noise = 0.1;          // label noise (logit std) or target noise std
  std::optional<Shape> image;  // the samples' shape (its size must be `features`); none: flat
};

// Regression: x ~ N(0,1), y = x.w* + noise*N(0,1), w* ~ N(0, 1/d).
// Classification: x ~ N(0,1), label = argmax_k (x.W*_k + noise*N(0,1)), W* ~ N(0,1).
DataSplit make_synthetic(const SyntheticSpec& spec, uint64_t seed);

// Where Debian's dataset-fashion-mnist puts the files: data.path's default (and bench's).
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from dir; pixels scaled to
// [0,1]; shape rows x cols x 1. train_limit / test_limit > 0 keep only the first so many samples.
// "" when DIR holds the four Fashion-MNIST IDX files (gzip or plain), else the message
// naming the first one missing (validation says it before any run starts).
std::string fashion_mnist_missing(const std::string& dir);
DataSplit load_fashion_mnist(const std::string& dir, size_t train_limit = 0, size_t test_limit = 0);

// Copies a set to backend memory. For sparse data the device set also gets its host
// index (DeviceDataset::host_row_ptr, host_col).
DeviceDataset upload(const HostDataset& host);

}  // namespace asgd
