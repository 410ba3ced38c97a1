// tests/fuzz/fuzz_idx.cpp — libFuzzer target for the IDX parsers: any bytes either parse
// into consistent images/labels or raise DataError; nothing else may happen.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include "sim/data/idx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  try {
    asgd::IdxImages img = asgd::parse_idx_images(bytes, "fuzz");
    if (img.pixels.size() != size_t(img.count) * img.rows * img.cols) std::abort();
  } catch (const asgd::DataError&) {
  }
  try {
    std::vector<uint8_t> labels = asgd::parse_idx_labels(bytes, "fuzz");
    if (labels.size() + 8 != size) std::abort();
  } catch (const asgd::DataError&) {
  }
  return 0;
}
