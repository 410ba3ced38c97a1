// tests/fuzz/fuzz_svmlight.cpp — libFuzzer target for the svmlight parser: any text either
// parses into a consistent sparse set (row offsets rising to the entry count, indices
// strictly increasing within a row and below the bound, finite values, integral labels,
// one line number per sample) or raises DataError; nothing else may happen.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include "sim/data/idx_reader.h"
#include "sim/data/svmlight_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (int base : {0, 1}) {
    const size_t features = base ? 1000 : 0;  // with and without an upper bound
    try {
      asgd::SvmlightFile f = asgd::parse_svmlight(text, "fuzz", features, base);
      const size_t n = f.samples();
      if (n == 0 || f.row_ptr.size() != n + 1 || f.line.size() != n || f.row_ptr[0] != 0 ||
          size_t(f.row_ptr[n]) != f.col.size() || f.val.size() != f.col.size())
        std::abort();
      for (size_t i = 0; i < n; ++i) {
        if (f.row_ptr[i + 1] < f.row_ptr[i] || (i > 0 && f.line[i] <= f.line[i - 1])) std::abort();
        for (int64_t e = f.row_ptr[i]; e < f.row_ptr[i + 1]; ++e) {
          if (f.col[e] < 0 || (features > 0 && size_t(f.col[e]) >= features) || f.col[e] > f.max_col) std::abort();
          if (e > f.row_ptr[i] && f.col[e] <= f.col[e - 1]) std::abort();
          if (!std::isfinite(f.val[e])) std::abort();
        }
      }
    } catch (const asgd::DataError&) {
    }
  }
  return 0;
}
