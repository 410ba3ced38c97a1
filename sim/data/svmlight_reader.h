// sim/data/svmlight_reader.h — reads LIBSVM / svmlight text files (RCV1, news20, Criteo in
// LIBSVM form, ...) into sparse sets: one sample per line, `label index:value ...` with
// strictly increasing indices; blank lines and '#' comments are skipped; gzip-compressed
// or plain. Strict: a malformed line is a DataError naming the file and the line. The
// size is counted before anything is stored, and a file that would not fit is refused.
//
// Labels must be integers. If every label of both files is -1 or +1 the task is binary
// (-1 is class 0, +1 class 1). Otherwise labels are class numbers >= 0: 0-based when some
// label is 0, else 1-based (label 1 is class 0, as in LIBSVM's multi-class files).
// Not here: generated data (sim/data/sparse_synthetic.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "sim/data/dataset.h"

namespace asgd {

struct SvmlightSpec {
  std::string path;
  std::string test_path;      // "": the last `holdout` share of path's samples is the test set
  double holdout = 0.1;       // in (0, 1)
  size_t features = 0;        // 0: one past the largest feature found in either file
  int index_base = 1;         // the first feature's index: 1 (LIBSVM) or 0
  int classes = 0;            // 0: from the labels
  uint64_t memory_limit = 0;  // bytes a load may take; 0: memory_limit_bytes()
};

DataSplit load_svmlight(const SvmlightSpec& spec);

// One file's samples as written, before labels become classes.
struct SvmlightFile {
  std::vector<int64_t> row_ptr{0};  // (n + 1)
  std::vector<int32_t> col;         // (nnz) index - index_base
  std::vector<float> val;           // (nnz)
  std::vector<int64_t> label;       // (n)
  std::vector<uint32_t> line;       // (n) each sample's line number, for messages
  int64_t max_col = -1;
  size_t samples() const { return label.size(); }
};

// Parses the text of a whole file; `name` labels messages. features 0: no upper bound.
SvmlightFile parse_svmlight(const std::string& text, const std::string& name, size_t features, int index_base);

}  // namespace asgd
