// sim/net/message_size.cpp — row-message and compressed-message sizes (see the header).
#include "sim/net/message_size.h"
#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace asgd {

namespace {
// The compression types as the config writes them.
struct CompressionWord {
  const char* word;
  CompressionSpec::Type type;
};
constexpr CompressionWord kCompressionWords[] = {{"none", CompressionSpec::Type::None},
                                                 {"topk", CompressionSpec::Type::TopK},
                                                 {"int8", CompressionSpec::Type::Int8},
                                                 {"powersgd", CompressionSpec::Type::PowerSgd}};
}  // namespace

CompressionSpec::Type compression_type(const std::string& name) {
  for (const auto& w : kCompressionWords)
    if (name == w.word) return w.type;
  throw std::invalid_argument("compression type '" + name + "' (allowed: none, topk, int8, powersgd)");
}

const char* compression_type_name(CompressionSpec::Type type) {
  for (const auto& w : kCompressionWords)
    if (type == w.type) return w.word;
  return "?";  // unreachable: every Type has its word above
}

size_t topk_count(double ratio, size_t n) {
  if (!(ratio > 0 && ratio <= 1)) throw std::invalid_argument("top-k ratio must be in (0, 1]");
  const double k = std::ceil(ratio * double(n));
  return std::max<size_t>(1, std::min<size_t>(n, size_t(k)));
}

double scaled_message_bytes(const NetworkSpec& spec, size_t values, double exact) {
  const double full = double(values) * spec.bytes_per_value;
  if (spec.message_bytes > 0 && full > 0) return spec.message_bytes * (exact / full);
  return exact;
}

double row_message_bytes(const NetworkSpec& spec, size_t values, size_t rows, size_t width, size_t dense) {
  const double exact = double(rows) * (kIndexBytes + double(spec.bytes_per_value) * double(width)) +
                       double(dense) * spec.bytes_per_value;
  return scaled_message_bytes(spec, values, exact);
}

double compressed_message_bytes(const NetworkSpec& spec, size_t values, const CompressionSpec& c) {
  switch (c.type) {
    case CompressionSpec::Type::None:
      return message_bytes(spec, values);
    case CompressionSpec::Type::TopK:
      return scaled_message_bytes(spec, values,
                                  double(topk_count(c.ratio, values)) * (kIndexBytes + spec.bytes_per_value));
    case CompressionSpec::Type::Int8:
      return scaled_message_bytes(spec, values, double(values) + 4.0);
    case CompressionSpec::Type::PowerSgd:
      return message_bytes(spec, values);  // (its all-reduces: engines/powersgd.h)
  }
  return message_bytes(spec, values);
}

StepMessageBytes step_message_bytes(const NetworkSpec& spec, size_t values, size_t table_rows, size_t width,
                                    size_t touched, bool gradient_pull, bool sparse_pull, const CompressionSpec& c) {
  StepMessageBytes b;
  b.pull = b.push = message_bytes(spec, values);
  if (!gradient_pull) return b;
  if (table_rows > 0) {
    b.push = row_message_bytes(spec, values, touched, width, values - table_rows * width);
    if (sparse_pull) b.pull = b.push;
  } else if (c.compresses_pushes()) {
    b.push = compressed_message_bytes(spec, values, c);
    b.compressed = true;
  }
  return b;
}

}  // namespace asgd
