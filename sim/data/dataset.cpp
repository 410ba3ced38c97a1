// sim/data/dataset.cpp — the dense sources, the upload, and the sizes of sparse sets.
#include "sim/data/dataset.h"
#include <boost/iterator/transform_iterator.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdio>
#include "kernels/exec.h"
#include "kernels/rng.h"
#include "sim/base/interrupt.h"

namespace asgd {
namespace {

void fill_normal(std::vector<float>& v, uint64_t seed, uint32_t stream) {
  Rng rng(seed, RngPurpose::Data, stream, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    if (i % (size_t(1) << 20) == 0) throw_if_interrupted("making synthetic data");
    v[i] = float(rng.normal());
  }
}

HostDataset synthetic_part(const SyntheticSpec& s, const std::vector<float>& teacher, size_t n, uint64_t seed,
                           uint32_t stream) {
  HostDataset d;
  d.n = n;
  d.dim = s.features;
  d.classes = s.classification ? s.classes : 0;
  d.shape = s.image ? *s.image : Shape{1, 1, int(s.features)};
  d.x.resize(n * s.features);
  fill_normal(d.x, seed, stream);
  d.y.resize(n);
  Rng noise(seed, RngPurpose::Data, stream + 1, 0);
  int outputs = s.classification ? s.classes : 1;
  std::vector<double> logits(outputs);
  for (size_t i = 0; i < n; ++i) {
    if (i % 4096 == 0) throw_if_interrupted("making synthetic data");
    for (int k = 0; k < outputs; ++k) {
      double z = 0;
      for (size_t j = 0; j < s.features; ++j) z += double(d.x[i * s.features + j]) * teacher[j * outputs + k];
      logits[k] = z + s.noise * noise.normal();
    }
    if (s.classification) {
      int best = 0;
      for (int k = 1; k < outputs; ++k)
        if (logits[k] > logits[best]) best = k;
      d.y[i] = float(best);
    } else {
      d.y[i] = float(logits[0]);
    }
  }
  return d;
}

std::string first_existing(const std::string& dir, const std::string& stem) {
  struct stat st;
  for (const char* ext : {".gz", ""}) {
    std::string p = dir + "/" + stem + ext;
    if (::stat(p.c_str(), &st) == 0) return p;
  }
  throw DataError("Fashion-MNIST file " + dir + "/" + stem +
                  ".gz not found (install Debian's "
                  "dataset-fashion-mnist, or set data.path)");
}

HostDataset from_idx(const std::string& images_path, const std::string& labels_path, size_t limit) {
  IdxImages img = read_idx_images(images_path);
  if (img.count == 0)
    throw DataError(images_path + ": holds no images (its header says 0): nothing to train or test on");
  std::vector<uint8_t> labels = read_idx_labels(labels_path);
  if (labels.size() != img.count)
    throw DataError(images_path + " holds " + std::to_string(img.count) + " images but " + labels_path + " holds " +
                    std::to_string(labels.size()) + " labels");
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] > 9)
      throw DataError(labels_path + ": label " + std::to_string(labels[i]) + " at index " + std::to_string(i) +
                      " is outside 0..9");
  HostDataset d;
  d.n = (limit > 0 && limit < img.count) ? limit : img.count;
  d.dim = size_t(img.rows) * img.cols;
  d.classes = 10;
  d.shape = Shape{int(img.rows), int(img.cols), 1};
  // decoded straight into x: no zero-filled vector written twice
  const auto pixel = [](uint8_t p) { return float(p) / 255.0f; };
  d.x.assign(boost::make_transform_iterator(img.pixels.cbegin(), pixel),
             boost::make_transform_iterator(img.pixels.cbegin() + long(d.n * d.dim), pixel));
  d.y.assign(labels.begin(), labels.begin() + d.n);
  return d;
}

}  // namespace

DataSplit make_synthetic(const SyntheticSpec& s, uint64_t seed) {
  if (s.image && s.image->size() != s.features)
    throw std::invalid_argument("synthetic data: image " + s.image->text() + " holds " +
                                std::to_string(s.image->size()) + " values, features is " + std::to_string(s.features));
  int outputs = s.classification ? s.classes : 1;
  std::vector<float> teacher(s.features * outputs);
  fill_normal(teacher, seed, 0);
  if (!s.classification)
    for (auto& t : teacher) t /= float(std::sqrt(double(s.features)));
  DataSplit split;
  split.train = synthetic_part(s, teacher, s.train_samples, seed, 10);
  split.test = synthetic_part(s, teacher, s.test_samples, seed, 20);
  split.description = std::string("synthetic ") + (s.classification ? "classification" : "regression");
  return split;
}

std::string fashion_mnist_missing(const std::string& dir) {
  struct stat st;
  for (const char* stem :
       {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    bool found = false;
    for (const char* ext : {".gz", ""}) found = found || ::stat((dir + "/" + stem + ext).c_str(), &st) == 0;
    if (!found)
      return "Fashion-MNIST file " + dir + "/" + stem +
             ".gz not found (install Debian's dataset-fashion-mnist, or "
             "set data.path)";
  }
  return "";
}

DataSplit load_fashion_mnist(const std::string& dir, size_t train_limit, size_t test_limit) {
  DataSplit split;
  split.train = from_idx(first_existing(dir, "train-images-idx3-ubyte"), first_existing(dir, "train-labels-idx1-ubyte"),
                         train_limit);
  split.test = from_idx(first_existing(dir, "t10k-images-idx3-ubyte"), first_existing(dir, "t10k-labels-idx1-ubyte"),
                        test_limit);
  if (split.train.dim != split.test.dim)
    throw DataError(dir + ": train images are " + std::to_string(split.train.dim) + " pixels but test images " +
                    std::to_string(split.test.dim));
  split.description = "Fashion-MNIST from " + dir;
  return split;
}

DeviceDataset upload(const HostDataset& host) {
  DeviceDataset d;
  d.x.upload(host.x);
  d.y.upload(host.y);
  d.n = host.n;
  d.dim = host.dim;
  d.classes = host.classes;
  d.external = host.external;
  if (host.sparse()) {
    d.row_ptr.upload(host.row_ptr);
    d.col.upload(host.col);
    d.val.upload(host.val);
    if (std::string(kernels_backend()) == "CUDA") {  // device memory: keep a host copy of the index
      d.host_index_row_ptr = host.row_ptr;
      d.host_index_col = host.col;
      d.host_row_ptr = d.host_index_row_ptr.data();
      d.host_col = d.host_index_col.data();
    } else {  // backend memory is host memory
      d.host_row_ptr = d.row_ptr.data();
      d.host_col = d.col.data();
    }
  }
  d.shape = host.shape.size() == host.dim ? host.shape : Shape{1, 1, int(host.dim)};  // unset: flat
  return d;
}

uint64_t sparse_bytes(uint64_t rows, uint64_t nnz) {
  return (rows + 1) * sizeof(int64_t) + rows * sizeof(float) + nnz * (sizeof(int32_t) + sizeof(float));
}

namespace {
// A "Vm...:  N kB" line of /proc/self/status, in bytes (0 when there is none).
double proc_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, field.size() + 1, field + ":") == 0) return std::atof(line.c_str() + field.size() + 1) * 1024;
  return 0;
}
}  // namespace

double memory_limit_bytes() {
  double limit = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  if (!(limit > 0)) limit = std::numeric_limits<double>::infinity();
  // An address-space or data-segment limit (ulimit -v, ulimit -d) counts what the process
  // already maps (libraries, the BLAS's buffers) and what its threads will reserve: a
  // stack each (RLIMIT_STACK, 8 MiB by default) and, under RLIMIT_AS, a malloc arena each
  // (64 MiB of address space on 64-bit glibc). Left out, a model that fits the limit on
  // paper died of std::bad_alloc instead of being refused.
  // Threads: the pool's default (one per core), counted up to 8 (beyond, not every thread
  // gets an arena of its own, and a many-core machine under ulimit -v would refuse all).
  const double threads = std::clamp<double>(double(::sysconf(_SC_NPROCESSORS_ONLN)), 1, 8);
  rlimit stack_limit{};
  double stack = 8 << 20;
  if (::getrlimit(RLIMIT_STACK, &stack_limit) == 0 && stack_limit.rlim_cur != RLIM_INFINITY)
    stack = std::min(double(stack_limit.rlim_cur), double(1 << 30));
  constexpr double kArena = 64 << 20;
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit r{};
    if (::getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
      const bool as = resource == RLIMIT_AS;
      const double used = proc_status_bytes(as ? "VmSize" : "VmData");
      const double reserved = threads * (stack + (as ? kArena : 0));
      limit = std::min(limit, std::max(0.0, double(r.rlim_cur) - used - reserved));
    }
  }
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");  // cgroup v2: "max" or bytes
  double cg = 0;
  if (cgroup >> cg && cg > 0) limit = std::min(limit, cg);
  return limit;
}

std::string format_bytes(double bytes) {
  if (!std::isfinite(bytes)) return "unbounded";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char s[48];
  std::snprintf(s, sizeof(s), bytes < 10 ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return s;
}

}  // namespace asgd
