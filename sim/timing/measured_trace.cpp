// sim/timing/measured_trace.cpp — the measured compute trace's file (see measured_trace.h).
#include "sim/timing/measured_trace.h"
#include <sys/stat.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include "sim/base/errors.h"
#include "sim/timing/distribution.h"

namespace asgd {

namespace {
constexpr const char* kFirstLine = "# asgdsim measured compute trace";
}

std::string measured_trace_name(const nlohmann::json& model, const nlohmann::json& data, size_t batch,
                                const nlohmann::json& sources) {
  nlohmann::json fields = {{"model", model}, {"data", data}, {"batch", batch}};
  if (!sources.empty()) fields["sources"] = sources;
  const std::string key = fields.dump();
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", unsigned(h ^ (h >> 32)));
  std::string type = model.at("type").get<std::string>();
  for (char& c : type)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  return "calibration/" + type + "-b" + std::to_string(batch) + "-" + hex + ".trace";
}

std::string format_measured_trace(const MeasuredTrace& trace) {
  std::string out = std::string(kFirstLine) + "\n";
  for (const auto& [key, value] : trace.header.items()) out += "# " + key + ": " + value.dump() + "\n";
  char buf[32];
  for (double s : trace.step_seconds) {
    std::snprintf(buf, sizeof(buf), "%.9f\n", s);  // the virtual clock's resolution
    out += buf;
  }
  return out;
}

namespace {
// What asgdsim wrote is whole: its first line says what it is, every line ends with a
// newline, and no byte is NUL. A file cut mid-line (a copy or a disk that stopped), one
// without its header, or one with a NUL (a torn write) is refused, naming the line,
// rather than replayed as whatever its numbers still parse to.
void check_written_whole(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return;  // read_trace_file names a missing file
  if (!S_ISREG(st.st_mode)) throw DataError("trace file " + path + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  std::string chunk(1 << 16, '\0');
  size_t line = 1, column = 0, total = 0;
  std::string first;
  char last = '\n';
  while (in.read(&chunk[0], std::streamsize(chunk.size())) || in.gcount() > 0) {
    const size_t n = size_t(in.gcount());
    for (size_t i = 0; i < n; ++i) {
      const char c = chunk[i];
      if (c == '\0')
        throw DataError("trace file " + path + " line " + std::to_string(line) +
                        ": holds a NUL byte (a write torn "
                        "or cut short?)");
      if (line == 1 && c != '\n' && first.size() < 64) first += c;
      if (c == '\n') {
        if (line == 1 && first != kFirstLine)
          throw DataError("trace file " + path + " line 1: not a measured compute trace (its first line must be '" +
                          std::string(kFirstLine) + "')");
        ++line;
        column = 0;
      } else {
        ++column;
      }
    }
    last = chunk[n - 1];
    if ((total += n) > (size_t(512) << 20)) return;  // far past 10 million durations: read_trace_file refuses it
  }
  if (last != '\n' || line == 1)
    throw DataError("trace file " + path + " line " + std::to_string(line) +
                    (line == 1 && column == 0 ? ": empty" : ": cut short (the last line has no newline)"));
}
}  // namespace

MeasuredTrace read_measured_trace(const std::string& path) {
  check_written_whole(path);
  MeasuredTrace t;
  try {
    TraceFile file = read_trace_file(path);
    if (file.per_worker)
      throw std::invalid_argument("trace file " + path +
                                  ": a measured trace is one sequence of step times, not a "
                                  "per-worker trace");
    t.step_seconds = std::move(file.sequences[0]);
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
  std::ifstream in(path);
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (line.rfind("# ", 0) != 0 || line == kFirstLine) continue;
    const size_t colon = line.find(": ");
    nlohmann::json value;
    if (colon != std::string::npos) value = nlohmann::json::parse(line.substr(colon + 2), nullptr, false);
    if (colon == std::string::npos || value.is_discarded())
      throw DataError("trace file " + path + " line " + std::to_string(lineno) +
                      ": a header line is '# KEY: JSON VALUE', got '" + line.substr(0, 80) + "'");
    t.header[line.substr(2, colon - 2)] = value;
  }
  return t;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

nlohmann::json measured_compute_model(const MeasuredTrace& trace, const std::string& name) {
  double sum = 0;
  for (double s : trace.step_seconds) sum += s;
  nlohmann::json m = {{"dist", "measured"},
                      {"trace", name},
                      {"replay", "draw"},
                      {"steps", trace.step_seconds.size()},
                      {"median_step_seconds", median_of(trace.step_seconds)},
                      {"mean_step_seconds", sum / double(trace.step_seconds.size())}};
  for (const char* key : {"machine", "backend", "commit", "date", "batch", "from_cache"})
    if (trace.header.contains(key)) m[key] = trace.header[key];
  return m;
}

}  // namespace asgd
