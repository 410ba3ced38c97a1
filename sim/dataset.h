// sim/dataset.h — training and test sets on the host, then uploaded once to the backend.
// Sources: synthetic regression/classification generated from the seed, and
// Fashion-MNIST from IDX files. Not here: minibatch order (sim/sample_stream.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include "kernels/model.h"
#include "sim/idx_reader.h"

namespace asgd {

struct HostDataset {
  std::vector<float> x;  // (n, dim) row-major
  std::vector<float> y;  // (n) target, or class index as float
  size_t n = 0;
  size_t dim = 0;
  int classes = 0;       // 0: regression
  Shape shape;           // one sample as an image, channels last (dim floats); 1 x 1 x dim if flat
};

struct DataSplit {
  HostDataset train, test;
  std::string description;
};

struct SyntheticSpec {
  bool classification = true;
  int classes = 10;       // >= 2 for classification
  size_t features = 20;
  size_t train_samples = 4096;
  size_t test_samples = 1024;
  double noise = 0.1;     // label noise (logit std) or target noise std
  std::optional<Shape> image;  // the samples' shape (its size must be `features`); none: flat
};

// Regression: x ~ N(0,1), y = x.w* + noise*N(0,1), w* ~ N(0, 1/d).
// Classification: x ~ N(0,1), label = argmax_k (x.W*_k + noise*N(0,1)), W* ~ N(0,1).
DataSplit make_synthetic(const SyntheticSpec& spec, uint64_t seed);

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from dir; pixels scaled to
// [0,1]; shape rows x cols x 1. train_limit / test_limit > 0 keep only the first so many samples.
DataSplit load_fashion_mnist(const std::string& dir, size_t train_limit = 0, size_t test_limit = 0);

DeviceDataset upload(const HostDataset& host);

}  // namespace asgd
