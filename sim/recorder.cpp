// sim/recorder.cpp
#include "sim/recorder.h"
#include <cmath>
#include <cstdio>
#include "sim/atomic_file.h"

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
    out += format_number(sim_to_seconds(r.time)) + "," + std::to_string(r.updates) + "," +
           std::to_string(r.gradients) + "," + std::to_string(r.samples) + "," +
           format_number(r.epoch) + "," + format_number(r.lr) + "," + format_number(r.train_loss) +
           "," + format_number(r.test_loss) + "," + format_number(r.test_accuracy) + "," +
           format_number(r.worker_loss) + "," + format_number(r.mean_staleness) + "," +
           std::to_string(r.dropped) + "\n";
  }
  write_file_atomic(path, out);
}

void Recorder::write_staleness(const std::string& path, const std::map<uint64_t, uint64_t>& hist) {
  std::string out = "staleness,count\n";
  for (const auto& [s, c] : hist) out += std::to_string(s) + "," + std::to_string(c) + "\n";
  write_file_atomic(path, out);
}

void Recorder::write_workers(const std::string& path, const std::vector<WorkerStats>& workers,
                             SimTime end_time) {
  std::string out = "worker,gradients,applied,dropped,lost,compute_time,comm_time,wait_time,down_time\n";
  for (size_t w = 0; w < workers.size(); ++w) {
    const auto& s = workers[w];
    SimTime wait = end_time - s.compute - s.comm - s.down;
    if (wait < 0) wait = 0;
    out += std::to_string(w) + "," + std::to_string(s.gradients) + "," + std::to_string(s.applied) +
           "," + std::to_string(s.dropped) + "," + std::to_string(s.lost) + "," +
           format_number(sim_to_seconds(s.compute)) + "," + format_number(sim_to_seconds(s.comm)) + "," +
           format_number(sim_to_seconds(wait)) + "," + format_number(sim_to_seconds(s.down)) + "\n";
  }
  write_file_atomic(path, out);
}

void Recorder::write_trace(const std::string& path, int workers) const {
  // Chrome trace-event format; ts/dur in microseconds. Perfetto opens it directly.
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"server\"}}";
  for (int w = 0; w < workers; ++w)
    out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":" + std::to_string(w + 1) +
           ",\"args\":{\"name\":\"worker " + std::to_string(w) + "\"}}";
  char buf[200];
  for (const auto& s : spans_) {
    if (s.start == s.end && s.track == 0)  // updates of the model of record: instants
      std::snprintf(buf, sizeof(buf), ",\n{\"ph\":\"i\",\"s\":\"t\",\"name\":\"%s\",\"pid\":0,\"tid\":0,\"ts\":%.3f}",
                    s.name, double(s.start) / 1e3);
    else
      std::snprintf(buf, sizeof(buf),
                    ",\n{\"ph\":\"X\",\"name\":\"%s\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                    s.name, s.track, double(s.start) / 1e3, double(s.end - s.start) / 1e3);
    out += buf;
  }
  out += "\n]}\n";
  write_file_atomic(path, out);
}

}  // namespace asgd
