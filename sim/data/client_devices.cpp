// sim/data/client_devices.cpp — the population folder's reader and the availability
// queries (see client_devices.h). Each file is read whole (100,000 clients x 10 intervals is
// about 35 MB of text) and parsed in one pass; a problem throws at its line.
#include "sim/data/client_devices.h"
#include <sys/stat.h>
#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include "sim/base/errors.h"
#include "sim/base/interrupt.h"

namespace asgd {

namespace {

constexpr const char* kDevicesHeader = "client,compute_ms_per_sample,bandwidth_kbps";
constexpr const char* kAvailabilityHeader = "client,active_from,active_to,period";
constexpr double kInf = std::numeric_limits<double>::infinity();
// Far beyond 100,000 clients x 10 intervals (about 35 MB); what keeps a wrong path (a
// disk image, a data set) from being read into memory whole.
constexpr std::streamoff kMaxFileBytes = std::streamoff(1) << 30;

using Fields = std::vector<std::pair<const char*, const char*>>;  // a row's fields, [begin, end) each

// One text file of the folder, read whole, handed out line by line (without '\n' or a
// trailing '\r'); every error names the file and the line.
class CsvFile {
 public:
  CsvFile(std::string path, const char* header) : path_(std::move(path)) {
    struct stat st;
    if (::stat(path_.c_str(), &st) != 0)
      throw ConfigError(path_, {{"", std::string("cannot read (") + std::strerror(errno) + ")"}});
    if (!S_ISREG(st.st_mode)) throw ConfigError(path_, {{"", "not a regular file"}});
    if (st.st_size > kMaxFileBytes) throw ConfigError(path_, {{"", "larger than 1 GiB: not a population file"}});
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw ConfigError(path_, {{"", std::string("cannot open (") + std::strerror(errno) + ")"}});
    text_.resize(size_t(st.st_size));
    in.read(&text_[0], std::streamsize(text_.size()));
    if (in.bad() || size_t(in.gcount()) != text_.size() || in.peek() != std::char_traits<char>::eof())
      throw ConfigError(path_, {{"", "read error (did the file change while it was read?)"}});
    if (text_.empty()) fail(1, std::string("empty: the first line must be '") + header + "'");
    if (text_.back() != '\n')
      fail(size_t(std::count(text_.begin(), text_.end(), '\n')) + 1,
           "the last line has no newline (was the file cut short?)");
    const char* b = nullptr;
    const char* e = nullptr;
    next(b, e);
    if (std::string(b, e) != header) {
      const bool bom = e - b >= 3 && std::memcmp(b, "\xef\xbb\xbf", 3) == 0;
      fail(1, "header '" + field_text(b, e) + "': expected '" + header + "'" +
                  (bom ? " (the file starts with a UTF-8 byte-order mark: save it without one)" : ""));
    }
  }

  // The next line into [b, e); false at the end. An empty line is an error.
  bool next(const char*& b, const char*& e) {
    if (pos_ >= text_.size()) return false;
    if ((++line_ & 0xffff) == 0) throw_if_interrupted("reading " + path_);
    b = text_.data() + pos_;
    const size_t nl = text_.find('\n', pos_);
    e = text_.data() + nl;
    pos_ = nl + 1;
    if (e > b && e[-1] == '\r') --e;
    if (b == e) fail(line_, "empty line");
    return true;
  }

  // The next line split at commas into exactly fields.size() fields; false at the end.
  bool row(Fields& fields) {
    const char* b = nullptr;
    const char* e = nullptr;
    if (!next(b, e)) return false;
    split(b, e, fields);
    return true;
  }

  // Splits [b, e) at commas into exactly fields.size() fields.
  void split(const char* b, const char* e, Fields& fields) const {
    const size_t n = fields.size();
    size_t i = 0;
    for (const char* p = b;; ++i) {
      const char* comma = static_cast<const char*>(std::memchr(p, ',', size_t(e - p)));
      if (i < n) fields[i] = {p, comma ? comma : e};
      if (!comma) break;
      p = comma + 1;
    }
    if (i + 1 != n)
      fail(line_, "'" + field_text(b, e) + "': expected " + std::to_string(n) + " comma-separated fields, got " +
                      std::to_string(i + 1));
  }

  // A field that is a finite number, or an error naming the column and what is allowed.
  double number(std::pair<const char*, const char*> f, const char* column, const char* allowed) const {
    const char* b = f.first;
    if (b < f.second && *b == '+') ++b;
    double v = 0;
    const auto r = std::from_chars(b, f.second, v);
    if (b == f.second || r.ec != std::errc() || r.ptr != f.second || !std::isfinite(v))
      fail(line_,
           std::string(column) + " '" + field_text(f.first, f.second) + "': not a finite number (" + allowed + ")");
    return v;
  }

  // A client number (a non-negative integer).
  size_t client(std::pair<const char*, const char*> f) const {
    uint64_t v = 0;
    const auto r = std::from_chars(f.first, f.second, v);
    if (f.first == f.second || r.ec != std::errc() || r.ptr != f.second)
      fail(line_, "client '" + field_text(f.first, f.second) + "': not a client number (0, 1, 2, ...)");
    return size_t(v);
  }

  [[noreturn]] void fail(size_t line, const std::string& message) const {
    throw ConfigError(path_, {{"line " + std::to_string(line), message}});
  }
  [[noreturn]] void fail(const std::string& message) const { fail(line_, message); }
  size_t line() const { return line_; }
  size_t rows() const { return size_t(std::count(text_.begin(), text_.end(), '\n')) - 1; }  // lines after the header

  // A field as a message shows it: at most 40 bytes (printable() shows control bytes).
  static std::string field_text(const char* b, const char* e) {
    const size_t n = size_t(e - b);
    return n > 40 ? std::string(b, 37) + "..." : std::string(b, n);
  }

 private:
  std::string path_;
  std::string text_;
  size_t pos_ = 0;
  size_t line_ = 0;
};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// The positive float a compute or bandwidth column holds, or an error.
float positive_float(const CsvFile& file, std::pair<const char*, const char*> f, const char* column, const char* unit) {
  const double v = file.number(f, column, unit);
  if (!(v > 0) || v > double(FLT_MAX) || float(v) == 0.0f)
    file.fail(std::string(column) + " '" + CsvFile::field_text(f.first, f.second) + "': must be " + unit +
              " that a float holds (above 0, at most 3.4e38)");
  return float(v);
}

// Client `got` where `want` was due (rows are 0..count-1 in order, `rule` says how many).
[[noreturn]] void wrong_client(const CsvFile& file, size_t got, size_t want, size_t count, const char* rule) {
  const std::string clients = count == 0 ? "none" : "0.." + std::to_string(count - 1);
  const std::string g = "client " + std::to_string(got);
  if (got >= count) file.fail(g + ": the population has " + std::to_string(count) + " clients (" + clients + ")");
  if (got < want)
    file.fail(g + ": duplicate or out of order (client " + std::to_string(want) + " is due; " + rule + ", clients " +
              clients + " in order)");
  file.fail(g + ": client " + std::to_string(want) + " is missing (" + rule + ", clients " + clients + " in order)");
}

void read_devices(const std::string& path, size_t count, ClientDevices& d) {
  CsvFile file(path, kDevicesHeader);
  d.compute_ms.reserve(count);
  d.bandwidth_kbps.reserve(count);
  Fields f(3);
  while (file.row(f)) {
    const size_t c = file.client(f[0]);
    if (c != d.compute_ms.size() || c >= count) wrong_client(file, c, d.compute_ms.size(), count, "one row per client");
    d.compute_ms.push_back(positive_float(file, f[1], "compute_ms_per_sample", "a positive number of ms per sample"));
    d.bandwidth_kbps.push_back(positive_float(file, f[2], "bandwidth_kbps", "a positive number of kbit/s"));
  }
  if (d.compute_ms.size() != count)
    file.fail(file.line() + 1, "the file ends after " + std::to_string(d.compute_ms.size()) +
                                   " clients; the population has " + std::to_string(count) + " (one row per client)");
}

void read_availability(const std::string& path, size_t count, ClientDevices& d) {
  CsvFile file(path, kAvailabilityHeader);
  d.interval_begin.assign(1, 0);
  d.interval_begin.reserve(count + 1);
  d.period.reserve(count);
  d.active_from.reserve(file.rows());  // the intervals' arrays at their size, not a doubling's
  d.active_to.reserve(file.rows());
  Fields f(4);
  while (file.row(f)) {
    const size_t c = file.client(f[0]);
    const size_t current = d.period.size();  // clients begun so far; the current one is current-1
    const double period = file.number(f[3], "period", "seconds, above 0");
    const double from = file.number(f[1], "active_from", "seconds within the period");
    const double to = file.number(f[2], "active_to", "seconds within the period");
    if (current > 0 && c == current - 1) {  // another interval of the current client
      if (period != d.period.back())
        file.fail("period " + num(period) + " of client " + std::to_string(c) + ": its earlier rows say " +
                  num(d.period.back()) + " (one period per client)");
      if (!(from > d.active_to.back()))
        file.fail("interval [" + num(from) + ", " + num(to) + "] of client " + std::to_string(c) +
                  ": must start after the previous one ends (" + num(d.active_to.back()) +
                  "): a client's intervals are ascending and apart (merge touching ones)");
    } else {
      if (c != current || c >= count) wrong_client(file, c, current, count, "at least one interval per client");
      if (!(period > 0)) file.fail("period " + num(period) + " of client " + std::to_string(c) + ": must be above 0 s");
      if (current > 0) d.interval_begin.push_back(uint32_t(d.active_from.size()));
      d.period.push_back(period);
    }
    if (!(from >= 0 && from < period && to >= from && to <= period))
      file.fail("interval [" + num(from) + ", " + num(to) + "] of client " + std::to_string(c) +
                ": must lie in the period: 0 <= active_from < period (" + num(period) +
                ") and active_from <= active_to <= period");
    if (d.active_from.size() >= size_t(UINT32_MAX)) file.fail("more than 4,294,967,294 intervals");
    d.active_from.push_back(from);
    d.active_to.push_back(to);
  }
  if (d.period.size() != count)
    file.fail(file.line() + 1, "the file ends after client " +
                                   (d.period.empty() ? std::string("none") : std::to_string(d.period.size() - 1)) +
                                   "; every client 0.." + std::to_string(count == 0 ? 0 : count - 1) +
                                   " needs at least one interval");
  if (count > 0) d.interval_begin.push_back(uint32_t(d.active_from.size()));
}

}  // namespace

// Where t falls in client c's period: x = t mod period (Python's %, as FedScale computes
// it: fmod, then moved into [0, period)), base = t - x (the period's start in virtual
// time), and k the first interval of c that starts after x.
struct ClientDevices::Position {
  double base, x, p;
  size_t first, last, k;
  bool inside(const ClientDevices& d) const { return k > first && x <= d.active_to[k - 1]; }
};

ClientDevices::Position ClientDevices::locate(size_t c, double t) const {
  Position at;
  at.p = period[c];
  at.x = std::fmod(t, at.p);
  if (at.x < 0) at.x += at.p;
  if (at.x >= at.p) at.x = 0;  // -tiny + p rounded to p
  at.base = t - at.x;
  at.first = interval_begin[c];
  at.last = interval_begin[c + 1];
  at.k = size_t(std::upper_bound(active_from.begin() + std::ptrdiff_t(at.first),
                                 active_from.begin() + std::ptrdiff_t(at.last), at.x) -
                active_from.begin());
  return at;
}

bool ClientDevices::available(size_t c, double t) const { return always_available() || locate(c, t).inside(*this); }

double ClientDevices::available_until(size_t c, double t) const {
  if (always_available()) return kInf;
  const Position at = locate(c, t);
  if (!at.inside(*this)) return t;
  const size_t i = at.k - 1;
  if (active_to[i] < at.p || active_from[at.first] > 0) return at.base + active_to[i];
  // The interval runs to the period's end and the first starts at 0: one run across the wrap.
  if (i == at.first) return kInf;  // [0, period]: always
  return at.base + at.p + active_to[at.first];
}

double ClientDevices::next_available(size_t c, double t) const {
  if (always_available()) return t;
  const Position at = locate(c, t);
  if (at.inside(*this)) return t;
  if (at.k < at.last) return at.base + active_from[at.k];
  if (at.last > at.first) return at.base + at.p + active_from[at.first];
  return kInf;
}

size_t ClientDevices::memory_bytes() const {
  return compute_ms.capacity() * sizeof(float) + bandwidth_kbps.capacity() * sizeof(float) +
         interval_begin.capacity() * sizeof(uint32_t) +
         (active_from.capacity() + active_to.capacity() + period.capacity()) * sizeof(double);
}

ClientDevices read_client_devices(const std::string& folder, size_t count) {
  ClientDevices d;
  read_devices(folder + "/devices.csv", count, d);
  const std::string availability = folder + "/availability.csv";
  struct stat st;
  if (::stat(availability.c_str(), &st) == 0 || errno != ENOENT) read_availability(availability, count, d);
  return d;
}

}  // namespace asgd
