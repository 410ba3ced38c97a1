// sim/timing/measured_trace.h — the trace file of cluster.compute "measured": one model's
// real loss+gradient step times at one batch size on one machine. The file is text:
//     # asgdsim measured compute trace
//     # KEY: JSON VALUE           (model, data, batch, machine, backend, commit, date, ...)
//     0.000251                    (one timed step's wall seconds per line, in timing order)
// so the trace distribution reads it as any trace (it skips '#' lines), and a config may
// point dist "trace" at another machine's file. Not here: the timing itself and when it
// happens (experiments/run/calibration.h).
#pragma once
#include <cstddef>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

namespace asgd {

struct MeasuredTrace {
  nlohmann::json header = nlohmann::json::object();  // the "# KEY: VALUE" lines, by key
  std::vector<double> step_seconds;                  // wall seconds, one per timed step
};

// The trace's path inside the experiment folder for a run's resolved model and data
// sections and per-worker batch: "calibration/<model type>-b<batch>-<8 hex digits>.trace",
// the digits an FNV-1a hash of the three (runs that compute the same gradient share it),
// and of `sources` where it holds any (null: none): the fingerprints of a PyTorch model's
// files (run.sources), so that an edited model file is another trace.
std::string measured_trace_name(const nlohmann::json& model, const nlohmann::json& data, size_t batch,
                                const nlohmann::json& sources = nullptr);

// The file's text (header keys in the json's order, then the step times to ns).
std::string format_measured_trace(const MeasuredTrace& trace);

// Reads a trace file. A missing or unreadable file, one that is not whole (its first line
// not "# asgdsim measured compute trace", its last line without a newline, a NUL byte), a
// line that is not a duration, a header line that is not "# KEY: JSON", or no durations
// throws DataError naming the file (and the line).
MeasuredTrace read_measured_trace(const std::string& path);

// What summary.json's compute_model says of a run that replays `trace` (found at `name`
// in the experiment folder): dist "measured", the file, its machine, backend, commit and
// date (of the measurement), the number of steps and their median and mean (seconds), and
// from_cache, the calibration cache's file it was copied from, where it was.
nlohmann::json measured_compute_model(const MeasuredTrace& trace, const std::string& name);

double median_of(std::vector<double> values);  // NaN for none

}  // namespace asgd
