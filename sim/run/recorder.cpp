// sim/run/recorder.cpp
#include "sim/run/recorder.h"
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include "sim/run/atomic_file.h"

namespace asgd {

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

void Recorder::write_metrics(const std::string& path) const {
  std::string out =
      "time,updates,gradients,samples,epoch,lr,train_loss,test_loss,test_accuracy,worker_loss,"
      "mean_staleness,dropped\n";
  for (const auto& r : rows_) {
    out += format_number(sim_to_seconds(r.time)) + "," + std::to_string(r.updates) + "," + std::to_string(r.gradients) +
           "," + std::to_string(r.samples) + "," + format_number(r.epoch) + "," + format_number(r.lr) + "," +
           format_number(r.train_loss) + "," + format_number(r.test_loss) + "," + format_number(r.test_accuracy) + "," +
           format_number(r.worker_loss) + "," + format_number(r.mean_staleness) + "," + std::to_string(r.dropped) +
           "\n";
  }
  write_file_atomic(path, out);
}

void Recorder::write_staleness(const std::string& path, const std::map<uint64_t, uint64_t>& hist) {
  std::string out = "staleness,count\n";
  for (const auto& [s, c] : hist) out += std::to_string(s) + "," + std::to_string(c) + "\n";
  write_file_atomic(path, out);
}

void Recorder::write_workers(const std::string& path, const std::vector<WorkerStats>& workers, SimTime end_time) {
  std::string out =
      "worker,gradients,applied,dropped,lost,compute_time,comm_time,wait_time,down_time,cancelled,wasted_time\n";
  for (size_t w = 0; w < workers.size(); ++w) {
    const auto& s = workers[w];
    SimTime wait = end_time - s.compute - s.comm - s.down;
    if (wait < 0) wait = 0;
    out += std::to_string(w) + "," + std::to_string(s.gradients) + "," + std::to_string(s.applied) + "," +
           std::to_string(s.dropped) + "," + std::to_string(s.lost) + "," + format_number(sim_to_seconds(s.compute)) +
           "," + format_number(sim_to_seconds(s.comm)) + "," + format_number(sim_to_seconds(wait)) + "," +
           format_number(sim_to_seconds(s.down)) + "," + std::to_string(s.cancelled) + "," +
           format_number(sim_to_seconds(s.wasted)) + "\n";
  }
  write_file_atomic(path, out);
}

void Recorder::write_trace(const std::string& path, int workers) const {
  // Chrome trace-event format; ts/dur in microseconds. Perfetto opens it directly.
  const std::string pid = std::to_string(pid_);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  if (!process_name_.empty())  // a run id: letters, digits and . - _ = only, nothing to escape
    out +=
        "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid + ",\"args\":{\"name\":\"" + process_name_ + "\"}},\n";
  out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":\"server\"}}";
  for (int w = 0; w < workers; ++w)
    out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" + std::to_string(w + 1) +
           ",\"args\":{\"name\":\"worker " + std::to_string(w) + "\"}}";
  char buf[320];
  for (const auto& s : spans_) {
    if (s.start == s.end && s.track == 0) {  // updates of the model of record: instants
      std::snprintf(buf, sizeof(buf), ",\n{\"ph\":\"i\",\"s\":\"t\",\"name\":\"%s\",\"pid\":%d,\"tid\":0,\"ts\":%.3f}",
                    s.name, pid_, double(s.start) / 1e3);
      out += buf;
      continue;
    }
    std::snprintf(buf, sizeof(buf), ",\n{\"ph\":\"X\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f",
                  s.name, pid_, s.track, double(s.start) / 1e3, double(s.end - s.start) / 1e3);
    out += buf;
    std::string args;
    if (s.args.step >= 0) args += ",\"step\":" + std::to_string(s.args.step);
    if (s.args.staleness >= 0) args += ",\"staleness\":" + std::to_string(s.args.staleness);
    if (s.args.bytes >= 0) args += ",\"bytes\":" + format_number(s.args.bytes);
    out += args.empty() ? "}" : ",\"args\":{" + args.substr(1) + "}}";
  }
  out += "\n]}\n";
  write_file_atomic(path, out);
}

void Recorder::checkpoint(StateArchive& a) {
  a.tag("recorder");
  a.io(rows_);
  // A span's name is one of these literals; the checkpoint holds its index.
  static const char* const kNames[] = {"compute", "pull",  "push", "wait",      "down",
                                       "update",  "apply", "send", "collective"};
  constexpr size_t kCount = sizeof(kNames) / sizeof(kNames[0]);
  uint64_t n = spans_.size();
  a.io(n);
  if (!a.saving()) spans_.assign(size_t(n), Span{0, kNames[0], 0, 0, {}});
  for (Span& sp : spans_) {
    uint8_t name = 0;
    if (a.saving()) {
      while (name < kCount && std::strcmp(kNames[name], sp.name) != 0) ++name;
      if (name == kCount)
        throw std::logic_error(std::string("Recorder: span name \"") + sp.name + "\" has no checkpoint code");
    }
    a.io(sp.track);
    a.io(name);
    a.io(sp.start);
    a.io(sp.end);
    a.io(sp.args);
    if (!a.saving()) {
      if (name >= kCount) a.fail("a span name code " + std::to_string(name));
      sp.name = kNames[name];
    }
  }
  std::map<uint64_t, uint64_t> first;
  if (a.saving())
    for (const auto& kv : first_span_of_step_) first[kv.first] = kv.second;
  a.io(first);
  if (a.saving()) return;
  first_span_of_step_.clear();
  for (const auto& kv : first) first_span_of_step_[kv.first] = size_t(kv.second);
}

}  // namespace asgd
