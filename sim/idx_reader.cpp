// sim/idx_reader.cpp — gzip via zlib (gzread also reads plain files unchanged).
#include "sim/idx_reader.h"
#include <zlib.h>
#include <cerrno>
#include <cstring>

namespace asgd {
namespace {

std::vector<uint8_t> read_all(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw DataError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      throw DataError(path + ": corrupt or truncated gzip data (" + msg + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  gzclose(f);
  return out;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t off) {
  return (uint32_t(b[off]) << 24) | (uint32_t(b[off + 1]) << 16) | (uint32_t(b[off + 2]) << 8) |
         uint32_t(b[off + 3]);
}

std::string hex(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof(s), "0x%08x", v);
  return s;
}

}  // namespace

IdxImages parse_idx_images(const std::vector<uint8_t>& b, const std::string& name) {
  if (b.size() < 16) throw DataError(name + ": too short for an IDX image header (" + std::to_string(b.size()) + " bytes)");
  uint32_t magic = be32(b, 0);
  if (magic != 0x00000803)
    throw DataError(name + ": wrong magic number " + hex(magic) + " (IDX unsigned-byte images need 0x00000803)");
  IdxImages img;
  img.count = be32(b, 4);
  img.rows = be32(b, 8);
  img.cols = be32(b, 12);
  if (img.rows == 0 || img.cols == 0 || img.rows > 4096 || img.cols > 4096)
    throw DataError(name + ": implausible image size " + std::to_string(img.rows) + "x" + std::to_string(img.cols));
  uint64_t need = uint64_t(img.count) * img.rows * img.cols;
  if (b.size() - 16 < need)
    throw DataError(name + ": truncated: header says " + std::to_string(img.count) + " images of " +
                    std::to_string(img.rows) + "x" + std::to_string(img.cols) + " (" + std::to_string(need) +
                    " bytes) but only " + std::to_string(b.size() - 16) + " follow");
  if (b.size() - 16 > need)
    throw DataError(name + ": " + std::to_string(b.size() - 16 - need) + " unexpected bytes after the last image");
  img.pixels.assign(b.begin() + 16, b.end());
  return img;
}

std::vector<uint8_t> parse_idx_labels(const std::vector<uint8_t>& b, const std::string& name) {
  if (b.size() < 8) throw DataError(name + ": too short for an IDX label header (" + std::to_string(b.size()) + " bytes)");
  uint32_t magic = be32(b, 0);
  if (magic != 0x00000801)
    throw DataError(name + ": wrong magic number " + hex(magic) + " (IDX unsigned-byte labels need 0x00000801)");
  uint32_t count = be32(b, 4);
  if (b.size() - 8 != count)
    throw DataError(name + ": header says " + std::to_string(count) + " labels but the file holds " +
                    std::to_string(b.size() - 8));
  return std::vector<uint8_t>(b.begin() + 8, b.end());
}

IdxImages read_idx_images(const std::string& path) { return parse_idx_images(read_all(path), path); }
std::vector<uint8_t> read_idx_labels(const std::string& path) { return parse_idx_labels(read_all(path), path); }

}  // namespace asgd
