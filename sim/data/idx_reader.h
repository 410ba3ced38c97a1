// sim/data/idx_reader.h — reads IDX files (the MNIST / Fashion-MNIST format), gzip-compressed
// or plain. Rejects a wrong magic number, wrong dimensions or a truncated file with a
// DataError that names the file and the problem. Not a general IDX library: unsigned-byte
// images (magic 0x803) and labels (magic 0x801) only.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>
#include "sim/base/errors.h"  // DataError

namespace asgd {

struct IdxImages {
  uint32_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // (count, rows * cols)
};

IdxImages read_idx_images(const std::string& path);
// zlib's gzerror text for `path` without the path it starts with: the reason a gzip
// stream could not be read ("unexpected end of file"), for DataError messages.
std::string gz_reason(const char* msg, const std::string& path);
std::vector<uint8_t> read_idx_labels(const std::string& path);

// Parses an in-memory IDX image from bytes already decompressed (used by the readers
// and by the fuzz target); `name` labels errors.
IdxImages parse_idx_images(const std::vector<uint8_t>& bytes, const std::string& name);
std::vector<uint8_t> parse_idx_labels(const std::vector<uint8_t>& bytes, const std::string& name);

}  // namespace asgd
