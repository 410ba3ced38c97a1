// sim/data/idx_reader.cpp — gzip via zlib (gzread also reads plain files unchanged).
#include "sim/data/idx_reader.h"
#include <zlib.h>
#include "sim/base/interrupt.h"
#include <algorithm>
#include <cerrno>
#include <cstring>

namespace asgd {
namespace {

// The most bytes an IDX file may hold: 1 GiB, about 22 times Fashion-MNIST's training
// images. A header asking for more is refused before anything is inflated.
constexpr uint64_t kMaxIdxBytes = uint64_t(1) << 30;

uint32_t be32(const uint8_t* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

// The data bytes an IDX header announces, or kBadHeader for a header that parse_idx_*
// refuses by itself (wrong magic, implausible size).
constexpr uint64_t kBadHeader = ~uint64_t(0);

// Reads (inflating gzip) the header of `header_bytes`, then exactly as many more bytes as
// `payload(header)` says follow it, and one more to tell whether anything does: a file
// that inflates to far more than its header says (a gzip bomb) is never read past that.
std::vector<uint8_t> read_idx(const std::string& path, size_t header_bytes,
                              uint64_t (*payload)(const uint8_t* header, const std::string& path)) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw DataError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<uint8_t> out;
  auto read_up_to = [&](uint64_t want) {  // appends up to `want` bytes; fewer at the end
    uint8_t buf[1 << 16];
    while (want > 0) {
      throw_if_interrupted("reading " + path);
      int n = gzread(f, buf, unsigned(std::min<uint64_t>(want, sizeof(buf))));
      // A gzip stream that stops before its end (a file cut short) reads as a shorter
      // file unless gzerror is asked: zlib says "unexpected end of file" only there.
      int err = Z_OK;
      const char* msg = gzerror(f, &err);
      if (n < 0 || (n == 0 && err != Z_OK))
        throw DataError(path + ": corrupt or truncated gzip data (" + gz_reason(msg, path) +
                        "): the file was cut short or is damaged");
      if (n == 0) break;
      out.insert(out.end(), buf, buf + n);
      want -= uint64_t(n);
    }
  };
  try {
    read_up_to(header_bytes);
    uint64_t body = out.size() == header_bytes ? payload(out.data(), path) : kBadHeader;  // throws if too large
    if (body != kBadHeader) {
      out.reserve(size_t(header_bytes + body + 1));
      read_up_to(body + 1);
      if (out.size() > header_bytes + body)
        throw DataError(path + ": unexpected bytes after the last item: the header announces " + std::to_string(body) +
                        " bytes of data, and more follow");
    }
  } catch (...) {
    gzclose(f);
    throw;
  }
  gzclose(f);
  return out;
}

uint64_t image_payload(const uint8_t* h, const std::string& path) {
  if (be32(h) != 0x00000803 || be32(h + 8) == 0 || be32(h + 12) == 0 || be32(h + 8) > 4096 || be32(h + 12) > 4096)
    return kBadHeader;
  uint64_t bytes = uint64_t(be32(h + 4)) * be32(h + 8) * be32(h + 12);
  if (bytes > kMaxIdxBytes)
    throw DataError(path + ": header says " + std::to_string(be32(h + 4)) + " images of " +
                    std::to_string(be32(h + 8)) + "x" + std::to_string(be32(h + 12)) + " (" + std::to_string(bytes) +
                    " bytes), more than the " + std::to_string(kMaxIdxBytes >> 20) + " MiB an IDX file may hold");
  return bytes;
}

uint64_t label_payload(const uint8_t* h, const std::string& path) {
  if (be32(h) != 0x00000801) return kBadHeader;
  uint64_t bytes = be32(h + 4);
  if (bytes > kMaxIdxBytes)
    throw DataError(path + ": header says " + std::to_string(bytes) + " labels, more than an IDX file may hold");
  return bytes;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t off) { return be32(b.data() + off); }

std::string hex(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof(s), "0x%08x", v);
  return s;
}

}  // namespace

// zlib's gzerror text without the path it starts with ("PATH: unexpected end of file").
std::string gz_reason(const char* msg, const std::string& path) {
  std::string m = msg ? msg : "";
  if (m.compare(0, path.size() + 2, path + ": ") == 0) m = m.substr(path.size() + 2);
  return m;
}

namespace {
// The header of an IDX image file whose bytes are `b`, checked against its size; pixels
// left empty.
IdxImages image_header(const std::vector<uint8_t>& b, const std::string& name) {
  if (b.size() < 16)
    throw DataError(name + ": too short for an IDX image header (" + std::to_string(b.size()) + " bytes)");
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
  return img;
}
}  // namespace

IdxImages parse_idx_images(const std::vector<uint8_t>& b, const std::string& name) {
  IdxImages img = image_header(b, name);
  img.pixels.assign(b.begin() + 16, b.end());
  return img;
}

std::vector<uint8_t> parse_idx_labels(const std::vector<uint8_t>& b, const std::string& name) {
  if (b.size() < 8)
    throw DataError(name + ": too short for an IDX label header (" + std::to_string(b.size()) + " bytes)");
  uint32_t magic = be32(b, 0);
  if (magic != 0x00000801)
    throw DataError(name + ": wrong magic number " + hex(magic) + " (IDX unsigned-byte labels need 0x00000801)");
  uint32_t count = be32(b, 4);
  if (b.size() - 8 != count)
    throw DataError(name + ": header says " + std::to_string(count) + " labels but the file holds " +
                    std::to_string(b.size() - 8));
  return std::vector<uint8_t>(b.begin() + 8, b.end());
}

IdxImages read_idx_images(const std::string& path) {
  std::vector<uint8_t> bytes = read_idx(path, 16, image_payload);
  IdxImages img = image_header(bytes, path);
  bytes.erase(bytes.begin(), bytes.begin() + 16);  // the pixels stay where they were read: no second copy
  img.pixels = std::move(bytes);
  return img;
}
std::vector<uint8_t> read_idx_labels(const std::string& path) {
  return parse_idx_labels(read_idx(path, 8, label_payload), path);
}

}  // namespace asgd
