// sim/data/svmlight_reader.cpp — two passes over each file, streamed in 1 MiB chunks through
// zlib (gzread reads plain files unchanged): the first counts lines and ':' (an upper
// bound of the samples and features stored) so that the memory needed is known before
// anything is stored; the second parses.
#include "sim/data/svmlight_reader.h"
#include "sim/base/interrupt.h"
#include <zlib.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include "sim/data/idx_reader.h"  // gz_reason
#include "sim/base/interrupt.h"

namespace asgd {
namespace {

constexpr size_t kChunk = 1 << 20;
// The longest line a file may hold: far beyond any real data set's sample (news20's
// longest is ~60 KB), and what keeps a file without newlines (/dev/zero, a gzip of
// zeros) from growing the line buffer without bound.
constexpr size_t kMaxLineBytes = size_t(64) << 20;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// Reads a file through zlib, chunk by chunk.
class GzStream {
 public:
  explicit GzStream(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) throw DataError(path + ": cannot open (" + std::strerror(errno) + ")");
    gzbuffer(file_, 1 << 18);
  }
  ~GzStream() { gzclose(file_); }
  GzStream(const GzStream&) = delete;
  GzStream& operator=(const GzStream&) = delete;
  // Up to n bytes into buf; 0 at the end. A gzip stream that ends before its end (a file
  // cut short) is an error, not a shorter file: zlib reports it only through gzerror.
  size_t read(char* buf, size_t n) {
    int got = gzread(file_, buf, unsigned(n));
    int err = Z_OK;
    const char* msg = gzerror(file_, &err);
    if (got < 0 || (got == 0 && err != Z_OK))
      throw DataError(path_ + ": corrupt or truncated gzip data (" + gz_reason(msg, path_) +
                      "): the file was cut short or is damaged");
    return size_t(got);
  }

 private:
  std::string path_;
  gzFile file_;
};

// Calls f(begin, end, line) for every line (without its '\n') of what read(buf, n)
// delivers, `chunk` bytes at a time; a last line without '\n' counts too. A line longer
// than max_line is a DataError naming `name` and the line; an interrupt (Ctrl-C) stops
// the read between chunks.
template <class Read, class F>
void for_each_line(Read&& read, F&& f, const std::string& name, size_t chunk = kChunk,
                   size_t max_line = kMaxLineBytes) {
  std::vector<char> buf(chunk);
  size_t held = 0;  // bytes of an unfinished line at the start of buf
  uint32_t line = 0;
  for (;;) {
    throw_if_interrupted("reading " + name);
    if (held > max_line)
      throw DataError(name + ":" + std::to_string(line + 1) + ": line too long: more than " +
                      std::to_string(max_line >> 20) +
                      " MiB without a newline (is it a text file in svmlight format?)");
    if (held == buf.size()) buf.resize(std::min(buf.size() * 2, max_line + 1));  // a line longer than the buffer
    size_t got = read(buf.data() + held, buf.size() - held);
    if (got == 0) break;
    const char* p = buf.data();
    const char* end = buf.data() + held + got;
    for (const char* nl; (nl = static_cast<const char*>(std::memchr(p, '\n', size_t(end - p)))) != nullptr; p = nl + 1)
      f(p, nl, ++line);
    held = size_t(end - p);
    std::memmove(buf.data(), p, held);
  }
  if (held > 0) f(buf.data(), buf.data() + held, ++line);
}

// A token for a message: at most 40 bytes, control bytes (a NUL would end the message
// where what() is read as a C string) and bytes past ASCII (an invisible byte-order mark)
// as \xNN.
std::string token_text(const char* b, const char* e) {
  std::string t;
  for (const char* p = b; p < e && t.size() < 40; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c < 0x20 || c >= 0x7f) {  // (a number's token holds only ASCII: other bytes are shown, never hidden)
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", unsigned(c));
      t += hex;
    } else {
      t += char(c);
    }
  }
  if (t.size() >= 40 && size_t(e - b) > 37) t = t.substr(0, 37) + "...";
  return t;
}

// A number filling [b, e) exactly (a leading '+' allowed); false if there is anything else.
template <class T>
bool parse_number(const char* b, const char* e, T& out) {
  if (b < e && *b == '+') ++b;
  if (b == e) return false;
  auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e;
}

class Parser {
 public:
  Parser(const std::string& name, size_t features, int index_base, SvmlightFile& out)
      : name_(name), features_(features), base_(index_base), out_(out) {}

  void line(const char* p, const char* end, uint32_t line) {
    line_ = line;
    while (p < end && is_space(*p)) ++p;
    if (p == end || *p == '#') return;  // blank or comment
    const char* tok = p;
    while (p < end && !is_space(*p) && *p != '#') ++p;
    double label = 0;
    if (!parse_number(tok, p, label) || !std::isfinite(label) || label != std::floor(label) || std::fabs(label) > 1e9)
      fail("bad label '" + token_text(tok, p) + "': labels must be integers (class numbers, or -1/+1)" +
           (p - tok >= 3 && std::memcmp(tok, "\xef\xbb\xbf", 3) == 0
                ? std::string("; the line starts with a UTF-8 byte-order mark (U+FEFF): save the file without one")
                : std::string()));
    int64_t prev = -1;
    for (;;) {
      while (p < end && is_space(*p)) ++p;
      if (p == end || *p == '#') break;
      tok = p;
      while (p < end && !is_space(*p) && *p != '#') ++p;
      const char* colon = static_cast<const char*>(std::memchr(tok, ':', size_t(p - tok)));
      if (!colon) fail("expected index:value, got '" + token_text(tok, p) + "'");
      if (colon - tok == 3 && std::memcmp(tok, "qid", 3) == 0) fail("qid (ranking data) is not supported");
      int64_t index = 0;
      if (!parse_number(tok, colon, index))
        fail("bad index '" + token_text(tok, colon) + "' in '" + token_text(tok, p) + "'");
      if (index < base_)
        fail("index " + std::to_string(index) + " is below the first index " + std::to_string(base_) +
             (base_ == 1 ? " (LIBSVM indices start at 1; set data.index_base to 0 for 0-based files)" : ""));
      const int64_t c = index - base_;
      if (features_ > 0 && uint64_t(c) >= features_)
        fail("index " + std::to_string(index) + " is beyond data.features " + std::to_string(features_) + " (indices " +
             std::to_string(base_) + ".." + std::to_string(int64_t(features_) - 1 + base_) + ")");
      if (c >= int64_t(INT32_MAX)) fail("bad index " + std::to_string(index) + ": at most 2^31 - 1 features");
      if (c == prev) fail("index " + std::to_string(index) + " appears twice");
      if (c < prev)
        fail("index " + std::to_string(index) + " after " + std::to_string(prev + base_) +
             ": indices must be increasing");
      float value = 0;
      if (!parse_number(colon + 1, p, value)) {
        double wide = 0;  // a number, but not a float's (1e39, 1e-50)
        if (parse_number(colon + 1, p, wide) && std::isfinite(wide))
          fail("value " + token_text(colon + 1, p) + " of index " + std::to_string(index) +
               " is outside what a float holds (features are fp32: about 1.2e-38 to 3.4e38 in size, or 0)");
        fail("value '" + token_text(colon + 1, p) + "' of index " + std::to_string(index) + " is not a number");
      }
      if (!std::isfinite(value)) fail("value of index " + std::to_string(index) + " is not finite");
      out_.col.push_back(int32_t(c));
      out_.val.push_back(value);
      prev = c;
    }
    out_.max_col = std::max(out_.max_col, prev);
    out_.row_ptr.push_back(int64_t(out_.col.size()));
    out_.label.push_back(int64_t(label));
    out_.line.push_back(line_);
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(name_ + ":" + std::to_string(line_) + ": " + what);
  }

 private:
  const std::string& name_;
  size_t features_;
  int64_t base_;
  SvmlightFile& out_;
  uint32_t line_ = 0;
};

// Lines and ':' of a file: upper bounds of its samples and stored features.
struct FileCount {
  uint64_t lines = 0, colons = 0;
};

FileCount count_file(const std::string& path) {
  GzStream in(path);
  char head[8] = {0};
  FileCount c;
  bool first = true;
  for_each_line(
      [&](char* buf, size_t n) {
        size_t got = in.read(buf, n);
        if (first && got >= 3) {
          first = false;
          std::memcpy(head, buf, std::min<size_t>(got, sizeof(head)));
          if (std::memcmp(head, "BZh", 3) == 0 || std::memcmp(head,
                                                              "\xFD"
                                                              "7zXZ",
                                                              5) == 0)
            throw DataError(path +
                            ": looks bzip2- or xz-compressed: decompress it first (gzip and plain text are read)");
        }
        return got;
      },
      [&](const char* b, const char* e, uint32_t) {
        c.lines++;
        c.colons += uint64_t(std::count(b, e, ':'));
      },
      path);
  return c;
}

SvmlightFile read_file(const std::string& path, size_t features, int index_base, const FileCount& count) {
  SvmlightFile out;
  out.row_ptr.reserve(count.lines + 1);
  out.label.reserve(count.lines);
  out.line.reserve(count.lines);
  out.col.reserve(count.colons);
  out.val.reserve(count.colons);
  Parser parser(path, features, index_base, out);
  GzStream in(path);
  for_each_line([&](char* buf, size_t n) { return in.read(buf, n); },
                [&](const char* b, const char* e, uint32_t line) { parser.line(b, e, line); }, path);
  if (out.samples() == 0)
    throw DataError(path + ": no samples (the file is empty, or holds only comments and blank lines)");
  return out;
}

// Samples [begin, end) of f, labels already classes.
HostDataset take(const SvmlightFile& f, size_t begin, size_t end, const std::vector<int32_t>& classes_of,
                 size_t features, int classes) {
  HostDataset d;
  d.n = end - begin;
  d.dim = features;
  d.classes = classes;
  const int64_t first = f.row_ptr[begin], last = f.row_ptr[end];
  d.row_ptr.resize(d.n + 1);
  for (size_t i = 0; i <= d.n; ++i) d.row_ptr[i] = f.row_ptr[begin + i] - first;
  d.col.assign(f.col.begin() + first, f.col.begin() + last);
  d.val.assign(f.val.begin() + first, f.val.begin() + last);
  d.y.resize(d.n);
  for (size_t i = 0; i < d.n; ++i) d.y[i] = float(classes_of[begin + i]);
  return d;
}

}  // namespace

SvmlightFile parse_svmlight(const std::string& text, const std::string& name, size_t features, int index_base) {
  SvmlightFile out;
  Parser parser(name, features, index_base, out);
  size_t at = 0;
  for_each_line(
      [&](char* buf, size_t n) {
        size_t k = std::min(n, text.size() - at);
        std::memcpy(buf, text.data() + at, k);
        at += k;
        return k;
      },
      [&](const char* b, const char* e, uint32_t line) { parser.line(b, e, line); }, name,
      std::min(kChunk, text.size() + 1));
  if (out.samples() == 0)
    throw DataError(name + ": no samples (the file is empty, or holds only comments and blank lines)");
  return out;
}

namespace {

// The files' labels as classes (see the header): binary -1/+1, else 0- or 1-based class
// numbers; a label that is neither, or beyond data.classes, is an error naming its line.
struct Classes {
  std::vector<std::vector<int32_t>> of;  // by file, by sample
  int count = 0;
  bool plus_minus = true;  // the labels are -1/+1
  int64_t base = 0;        // 1: 1-based class numbers
};

Classes classes_of_labels(const SvmlightSpec& spec, const std::vector<const SvmlightFile*>& files,
                          const std::vector<std::string>& names) {
  bool plus_minus = true, has_zero = false;
  for (const auto* f : files)
    for (int64_t l : f->label) {
      plus_minus = plus_minus && (l == -1 || l == 1);
      has_zero = has_zero || l == 0;
    }
  const int64_t base = plus_minus ? 0 : has_zero ? 0 : 1;
  std::vector<std::vector<int32_t>> classes_of(2);
  int64_t max_class = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    for (size_t i = 0; i < files[k]->samples(); ++i) {
      const int64_t l = files[k]->label[i];
      const std::string at = names[k] + ":" + std::to_string(files[k]->line[i]) + ": ";
      if (!plus_minus && l < 0)
        throw DataError(at + "bad label " + std::to_string(l) + ": labels are -1/+1 (binary) only if all are; " +
                        "otherwise class numbers >= 0");
      const int64_t c = plus_minus ? (l + 1) / 2 : l - base;
      if (spec.classes > 0 && c >= spec.classes)
        throw DataError(at + "bad label " + std::to_string(l) + ": beyond data.classes " +
                        std::to_string(spec.classes) + (base == 1 ? " (1-based labels 1.." : " (labels 0..") +
                        std::to_string(spec.classes - 1 + base) + ")");
      max_class = std::max(max_class, c);
      classes_of[k].push_back(int32_t(c));
    }
  }
  return {std::move(classes_of),
          spec.classes > 0 ? spec.classes
          : plus_minus     ? 2
                           : int(max_class + 1),
          plus_minus, base};
}

}  // namespace

DataSplit load_svmlight(const SvmlightSpec& spec) {
  if (spec.index_base != 0 && spec.index_base != 1) throw DataError("data.index_base must be 0 or 1");
  // What loading takes at its peak, known before anything is stored: the files as parsed
  // (reserved from the counts, so no vector grows past them) and the sets cut from them;
  // then the sets and the backend's copy.
  std::vector<std::string> paths = {spec.path};
  if (!spec.test_path.empty()) paths.push_back(spec.test_path);
  std::vector<FileCount> counts;
  FileCount total;
  for (const auto& p : paths) {
    counts.push_back(count_file(p));
    total.lines += counts.back().lines;
    total.colons += counts.back().colons;
  }
  const uint64_t need =
      2 * (sparse_bytes(total.lines, total.colons) + total.lines * (sizeof(int64_t) + sizeof(uint32_t)));
  const double limit = spec.memory_limit ? double(spec.memory_limit) : memory_limit_bytes();
  if (double(need) > limit)
    throw DataError("data.path: " + spec.path + (spec.test_path.empty() ? "" : " and " + spec.test_path) +
                    " hold up to " + std::to_string(total.lines) + " samples and " + std::to_string(total.colons) +
                    " stored features: loading them needs about " + format_bytes(double(need)) + ", more than the " +
                    format_bytes(limit) + " of memory here");

  SvmlightFile train = read_file(spec.path, spec.features, spec.index_base, counts[0]);
  SvmlightFile test;
  if (!spec.test_path.empty()) test = read_file(spec.test_path, spec.features, spec.index_base, counts[1]);
  const std::vector<const SvmlightFile*> files = {&train, &test};
  const std::vector<std::string> names = {spec.path, spec.test_path};

  size_t features = spec.features;
  if (features == 0) features = size_t(std::max(train.max_col, test.max_col) + 1);
  if (features == 0) throw DataError(spec.path + ": no sample has a feature");

  const Classes labels = classes_of_labels(spec, files, names);
  const int classes = labels.count;
  if (classes < 2) throw DataError(spec.path + ": every label is the same class: nothing to classify");

  DataSplit split;
  if (spec.test_path.empty()) {
    const size_t n = train.samples();
    const size_t n_test = size_t(std::ceil(spec.holdout * double(n)));
    if (n_test < 1 || n_test >= n)
      throw DataError(spec.path + ": " + std::to_string(n) + " samples are too few to hold out data.holdout " +
                      std::to_string(spec.holdout) + " of them as the test set (or give data.test_path)");
    split.train = take(train, 0, n - n_test, labels.of[0], features, classes);
    split.test = take(train, n - n_test, n, labels.of[0], features, classes);
  } else {
    split.train = take(train, 0, train.samples(), labels.of[0], features, classes);
    split.test = take(test, 0, test.samples(), labels.of[1], features, classes);
  }
  split.description = "svmlight " + spec.path + (spec.test_path.empty() ? "" : " + " + spec.test_path) + ": " +
                      std::to_string(features) + " features, " + std::to_string(classes) + " classes" +
                      (labels.plus_minus  ? " (labels -1/+1)"
                       : labels.base == 1 ? " (1-based labels)"
                                          : "");
  return split;
}

}  // namespace asgd
