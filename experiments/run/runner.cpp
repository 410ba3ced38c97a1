// experiments/run/runner.cpp — from RunSpecs to run folders.
#include "experiments/run/runner.h"
#include "experiments/run/calibration.h"
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <charconv>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <ctime>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include "engines/engine_registry.h"
#include "experiments/run/build_info.h"
#include "experiments/run/experiment_folder.h"
#include "experiments/config/records.h"
#include "experiments/config/resources.h"
#include "experiments/run/run_parts.h"
#include "sim/models/external.h"
#include "sim/run/atomic_file.h"
#include "kernels/rng.h"
#include "sim/data/dataset.h"
#include "sim/data/idx_reader.h"
#include "sim/base/interrupt.h"
#include "sim/core/simulation.h"
#include "sim/base/hash.h"
#include "sim/base/state_archive.h"

namespace asgd {

namespace {

// ---- progress ----

double progress_fraction(const RunSettings& s, const MetricsRow& r) {
  double f = 0;
  if (s.stop_epochs > 0) f = std::max(f, r.epoch / s.stop_epochs);
  if (s.stop_time != kNever) f = std::max(f, double(r.time) / double(s.stop_time));
  if (s.stop_updates) f = std::max(f, double(r.updates) / double(s.stop_updates));
  if (s.stop_gradients) f = std::max(f, double(r.gradients) / double(s.stop_gradients));
  return std::min(1.0, f);
}

RunProgress progress_of(const RunSpec& run, size_t k, size_t runs, double fraction, const MetricsRow& r,
                        const std::string& status) {
  RunProgress p;
  p.run_id = run.run_id;
  p.run = k;
  p.runs = runs;
  p.fraction = fraction;
  p.time = sim_to_seconds(r.time);
  p.epoch = r.epoch;
  p.updates = r.updates;
  p.train_loss = r.train_loss;
  p.test_loss = r.test_loss;
  p.test_accuracy = r.test_accuracy;
  p.status = status;
  return p;
}

// How often (wall time) a run's metrics.csv is rewritten while the run goes on.
constexpr std::chrono::seconds kMetricsWriteInterval{1};

// "45s", "2m05s", "1h02m".
std::string format_duration(double seconds) {
  long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof(buf), "%lds", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  return buf;
}

}  // namespace

std::string experiment_progress(size_t done, size_t total, double work, double elapsed_seconds) {
  const double fraction = total ? std::clamp(work / double(total), 0.0, 1.0) : 1.0;
  char buf[96];
  std::snprintf(buf, sizeof(buf), "runs %zu/%zu done  %3.0f%%", done, total, 100 * fraction);
  std::string text = buf;
  if (fraction >= 0.01 && fraction < 1.0)
    text += "  ETA " + format_duration(elapsed_seconds * (1 - fraction) / fraction);
  return text;
}

namespace {

// ---- running runs side by side (--jobs) ----

// Data sets shared by every lane, keyed by data_key: a data set is read once
// even when two lanes ask for it at the same moment, and one no run holds any more is
// dropped when another is needed (so --jobs 1 keeps one at a time, as before).
class DataCache {
 public:
  explicit DataCache(std::string base_dir) : base_dir_(std::move(base_dir)) {}

  std::shared_ptr<LoadedData> get(const RunSpec& run) {
    json key = data_key(run);
    std::promise<std::shared_ptr<LoadedData>> promise;
    std::shared_future<std::shared_ptr<LoadedData>> future;
    bool mine = false;  // this call loads it
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [k, f] : entries_)
        if (k == key) future = f;
      if (!future.valid()) {
        drop_unused_locked();
        future = promise.get_future().share();
        entries_.emplace_back(key, future);
        mine = true;
      }
    }
    if (!mine) return future.get();  // another lane loads it (or did); rethrows its error
    try {
      promise.set_value(load_data(run, base_dir_));
    } catch (...) {
      promise.set_exception(std::current_exception());
    }
    return future.get();
  }

 private:
  void drop_unused_locked() {
    auto unused = [](const auto& entry) {
      const auto& f = entry.second;
      if (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
      try {
        return f.get().use_count() == 1;  // only this cache holds it
      } catch (...) {
        return true;  // a failed load: let the next run try again
      }
    };
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(), unused), entries_.end());
  }

  std::string base_dir_;
  std::mutex mutex_;
  std::vector<std::pair<json, std::shared_future<std::shared_ptr<LoadedData>>>> entries_;
};

// Everything the runs print goes through here, so lines stay whole when runs finish side
// by side: per-run lines on stdout, and (on a terminal) one live progress line on stderr:
// the experiment as a whole (runs done of those this process makes, overall ETA), then
// every lane's run.
class Console {
 public:
  Console(bool quiet, bool live, int lanes, size_t runs)
      : quiet_(quiet),
        live_(live),
        lanes_(size_t(lanes)),
        fractions_(size_t(lanes), 0.0),
        runs_(runs),
        start_(std::chrono::steady_clock::now()) {}
  bool live() const { return live_; }

  void line(const std::string& text) {
    if (quiet_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (live_) std::cerr << "\r\033[K" << std::flush;
    std::cout << text << "\n" << std::flush;
    if (live_) draw_locked();
  }
  void error(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (live_) std::cerr << "\r\033[K";
    std::cerr << text << "\n" << std::flush;
  }
  // Sets lane `lane`'s part of the progress line and its run's fraction done; redraws at
  // most every 100 ms.
  void progress(int lane, std::string text, double fraction) {
    if (!live_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    lanes_[size_t(lane)] = std::move(text);
    fractions_[size_t(lane)] = fraction;
    auto t = std::chrono::steady_clock::now();
    if (t - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = t;
    draw_locked();
  }
  // Lane `lane` is idle: its run ended (`finished`: it counts as done) or never started.
  void idle(int lane, bool finished) {
    std::lock_guard<std::mutex> lock(mutex_);
    lanes_[size_t(lane)].clear();
    fractions_[size_t(lane)] = 0;
    if (finished) ++done_;
  }
  void clear() {
    if (!live_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    std::cerr << "\r\033[K" << std::flush;
  }

 private:
  void draw_locked() {
    double work = double(done_);
    for (double f : fractions_) work += f;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::string all = experiment_progress(done_, runs_, work, elapsed);
    for (const auto& l : lanes_)
      if (!l.empty()) all += "  |  " + l;
    winsize ws{};
    size_t width = ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 120;
    if (all.size() >= width) all.resize(width - 1);  // a wrapped line cannot be redrawn with \r
    std::cerr << "\r\033[K" << all << std::flush;
  }

  const bool quiet_, live_;
  std::mutex mutex_;
  std::vector<std::string> lanes_;
  std::vector<double> fractions_;
  size_t done_ = 0;
  const size_t runs_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

// What a lane needs to make one run.
struct Lane {
  int index = 0;
  int lanes = 1;
  WorkerPool* pool = nullptr;
};

// ---- checkpoints (docs/reliability.md, "Checkpoints") ----
// RUN/checkpoint.bin: a first line naming the format, a line of JSON (what wrote it, for
// which config, where the run was), then the state's bytes (Simulation::CheckpointHooks).
constexpr const char* kCheckpointFile = "checkpoint.bin";
constexpr const char* kCheckpointFormat = "asgdsim-checkpoint 1";

// What must match for a checkpoint to be read back: the build (the bytes are its layout
// and its arithmetic) and the run's config with its PyTorch files' fingerprints.
json checkpoint_identity(const RunSpec& run) {
  return {{"git_commit", build::git_commit},
          {"git_dirty", build::git_dirty},
          {"backend", build::backend},
          {"build_type", build::build_type},
          {"config", fnv1a64_hex(run.config.dump() + sources_of(run).dump())}};
}

// checkpoint.bin's header line: written from these fields, and read back through them.
struct CheckpointHeader {
  json identity;            // checkpoint_identity of the run that wrote it
  uint64_t updates = 0;     // where the run was
  double time = 0;          // virtual seconds
  double wall_seconds = 0;  // spent on the run up to it, over every process that took it up
  std::string written;      // when (UTC, ISO 8601)
};
const Section<CheckpointHeader>& checkpoint_header() {
  using H = CheckpointHeader;
  static const Section<H> s = record<H>(
      "", "checkpoint.bin's header line",
      {field(&H::identity, keys::any("identity", nullptr, "what must match to resume: the build and the run's config")),
       field(&H::updates, keys::integer("updates", nullptr, "updates applied when it was written", 0, kMaxCount)),
       field(&H::time, keys::num("time", nullptr, "virtual seconds when it was written", 0)),
       field(&H::wall_seconds, keys::num("wall_seconds", nullptr, "wall seconds spent on the run up to it", 0)),
       field(&H::written, keys::str("written", nullptr, "when it was written (UTC, ISO 8601)"))});
  return s;
}

struct Checkpoint {
  CheckpointHeader header;
  std::string state;  // the state's bytes
};

// The run folder's checkpoint, if it is one this run can resume from; one that is not
// (another build's or config's, or unreadable) is removed, and `console` says why.
std::optional<Checkpoint> read_checkpoint(const std::string& dir, const RunSpec& run, const std::string& tag,
                                          Console& console) {
  const std::string path = dir + "/" + kCheckpointFile;
  const int fd = open_output_file(path);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[1 << 16];
  for (ssize_t got; (got = ::read(fd, buf, sizeof(buf))) > 0;) text.append(buf, size_t(got));
  ::close(fd);
  std::string why;
  Checkpoint c;
  const size_t first = text.find('\n'), second = first == std::string::npos ? first : text.find('\n', first + 1);
  if (second == std::string::npos || text.compare(0, first, kCheckpointFormat) != 0) {
    why = "it is not a checkpoint of this format (" + std::string(kCheckpointFormat) + ")";
  } else {
    const json line = json::parse(text.begin() + long(first) + 1, text.begin() + long(second), nullptr, false);
    const auto header = read_record(checkpoint_header(), line);
    if (!header)
      why = "its header is not readable (" + (line.is_discarded() ? std::string("not JSON") : header.why) + ")";
    else if (header->identity != checkpoint_identity(run))
      why = "it was written by another build or for another config (" +
            config_differences(header->identity, checkpoint_identity(run), 3) + ")";
    else
      c.header = *header;
  }
  if (why.empty()) {
    c.state = text.substr(second + 1);
    return c;
  }
  console.line(tag + ": " + path + " cannot be resumed from: " + why + "; starting the run over");
  ::unlink(path.c_str());
  return std::nullopt;
}

void write_checkpoint(const std::string& dir, const RunSpec& run, std::string&& state, uint64_t updates, SimTime time,
                      double wall_seconds) {
  const CheckpointHeader header{checkpoint_identity(run), updates, sim_to_seconds(time), wall_seconds, iso_now()};
  std::string text =
      std::string(kCheckpointFormat) + "\n" + get_fields(checkpoint_header().fields, header).dump() + "\n";
  text += state;
  write_file_atomic(dir + "/" + kCheckpointFile, text);
}

// Makes run `k` into `dir`: config.json and meta.json first, summary.json last. Returns
// the run's status (completed, stalled, diverged or interrupted); throws on failure.
std::string make_run(const Experiment& exp, size_t k, const ExperimentFolder& folder, const RunnerOptions& opts,
                     const Lane& lane, DataCache& cache, Console& console) {
  const RunSpec& run = exp.runs[k];
  const std::string tag = run_tag(exp, k);
  const std::string dir = folder.open_run(run);
  remove_stale_temp_files(dir, {kCheckpointFile});
  const bool checkpointing = opts.checkpoint_every > 0;
  std::optional<Checkpoint> resume;
  if (checkpointing && !opts.replace.rerun)
    resume = read_checkpoint(dir, run, tag, console);
  else
    ::unlink((dir + "/" + kCheckpointFile).c_str());  // (an earlier attempt's: this one starts over)
  write_file_atomic(dir + "/config.json", run.config.dump(2) + "\n");

  json meta = run_meta(opts.command_line);
  meta["threads"] = lane.pool->threads();
  meta["jobs"] = lane.lanes;
  if (opts.shards > 1) meta["shard"] = std::to_string(opts.shard) + "/" + std::to_string(opts.shards);
  if (resume) {
    meta["resumed"] = {{"updates", resume->header.updates},
                       {"time", resume->header.time},
                       {"checkpoint_written", resume->header.written}};
    console.line(tag + ": resuming from its checkpoint at update " + std::to_string(resume->header.updates) +
                 " (virtual " + format_number(resume->header.time) + " s)");
  }
  write_file_atomic(dir + "/meta.json", meta.dump(2) + "\n");

  auto wall_start = std::chrono::steady_clock::now();
  // wall seconds spent on the run before this process took it up (its checkpoint's)
  const double wall_before = resume ? resume->header.wall_seconds : 0.0;
  RunSettings with_trace = run.settings;
  with_trace.trace = with_trace.trace || opts.trace;
  const RunParts parts = make_run_parts(run, std::move(with_trace), cache.get(run), exp.base_dir);
  const RunSettings& settings = parts.settings;
  Recorder recorder(settings.trace);
  recorder.set_process(int(k) + 1, run.run_id);  // trace.json: a process per run, in run order
  RunOutcome outcome;
  std::string checkpoint_line;  // what an interrupted run's last line says of its checkpoint
  {
    const std::unique_ptr<Simulation> simulation = parts.simulation(*lane.pool, recorder);
    Simulation& sim = *simulation;
    // metrics.csv as the rows come: the first row's, then at most once a wall second, each
    // write atomic (a reader sees a whole file); the run's end writes it whole, so the
    // final bytes do not depend on when these writes fell. No virtual time is charged.
    std::chrono::steady_clock::time_point metrics_written{};
    sim.on_row = [&](const MetricsRow& r) {
      const auto now = std::chrono::steady_clock::now();
      if (recorder.rows().size() == 1 || now - metrics_written >= kMetricsWriteInterval) {
        recorder.write_metrics(dir + "/metrics.csv");
        metrics_written = now;
      }
      const double f = progress_fraction(settings, r);
      if (opts.on_progress) opts.on_progress(progress_of(run, k, exp.runs.size(), f, r, ""));
      if (!console.live()) return;
      char buf[256];
      if (lane.lanes == 1)
        std::snprintf(buf, sizeof(buf), "%s  t=%.3gs  epoch %.2f  train_loss %.4g%s  %3.0f%%", tag.c_str(),
                      sim_to_seconds(r.time), r.epoch, r.train_loss,
                      std::isnan(r.test_accuracy)
                          ? ""
                          : ("  acc " + format_number(std::round(r.test_accuracy * 1000) / 1000)).c_str(),
                      100 * f);
      else
        std::snprintf(buf, sizeof(buf), "%s %3.0f%%", tag.c_str(), 100 * f);
      console.progress(lane.index, buf, f);
    };
    // (the hooks live as long as sim: what they refer to is declared in this scope)
    const auto every = std::chrono::duration<double>(opts.checkpoint_every);
    const uint64_t start_updates = resume ? resume->header.updates : 0;
    auto last_checkpoint = std::chrono::steady_clock::now();
    Simulation::CheckpointHooks hooks;
    hooks.due = [&opts, &last_checkpoint, every, start_updates, checkpointing](uint64_t updates) {
      const uint64_t stop_at = opts.interrupt_after_updates;
      if (stop_at > 0 && start_updates < stop_at && updates >= stop_at && !interrupt_requested())
        interrupt_count().fetch_add(1);  // (testing: as SIGINT would)
      return checkpointing && std::chrono::steady_clock::now() - last_checkpoint >= every;
    };
    if (checkpointing)
      hooks.write = [&](std::string&& state, uint64_t updates, SimTime time) {
        const double wall =
            wall_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
        write_checkpoint(dir, run, std::move(state), updates, time, wall);
        last_checkpoint = std::chrono::steady_clock::now();
        checkpoint_line = "its checkpoint at update " + std::to_string(updates) + " resumes it";
      };
    sim.set_checkpoints(std::move(hooks));
    if (resume) {
      StateArchive from(resume->state, dir + "/" + kCheckpointFile);
      try {
        outcome = sim.run(*parts.engine, &from);
      } catch (const CheckpointError& e) {  // (its header matched: a damaged file)
        ::unlink((dir + "/" + kCheckpointFile).c_str());
        throw std::runtime_error(std::string(e.what()) + "; removed it: a re-run starts the run over");
      }
    } else {
      outcome = sim.run(*parts.engine);
    }
    // (the newest checkpoint there resumes it: one this attempt wrote, else the one it resumed from)
    if (!checkpointing)
      checkpoint_line = "checkpoints are off (--checkpoint-every 0): a re-run starts it over";
    else if (checkpoint_line.empty() && resume)
      checkpoint_line = "its checkpoint at update " + std::to_string(resume->header.updates) + " resumes it";
    else if (checkpoint_line.empty() && !sim.checkpoint_refused().empty())
      checkpoint_line = "no checkpoint (" + sim.checkpoint_refused() + "): a re-run starts it over";
    else if (checkpoint_line.empty())
      checkpoint_line = "no checkpoint was written: a re-run starts it over";
  }
  console.idle(lane.index, true);
  double wall = wall_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  const MetricsRow& last = recorder.rows().back();
  for (const auto& note : run.notes) outcome.note += "; " + note;  // what would mislead (config.h)
  json summary = summary_json(run, outcome, last, parts.engine->describe(), outcome.note, wall);
  write_run_results(dir, recorder, outcome, settings.workers, meta, summary);

  std::string text =
      tag + ": " + outcome.status + " (" + outcome.note + "), train_loss " + format_number(last.train_loss);
  if (!std::isnan(last.test_accuracy)) text += ", test_accuracy " + format_number(last.test_accuracy);
  text += ", virtual " + format_number(sim_to_seconds(outcome.time)) + " s, " + std::to_string(outcome.updates) +
          " updates, " + format_number(std::round(wall * 100) / 100) + " s wall";
  if (outcome.status == "interrupted")
    text += "; " + checkpoint_line;
  else
    ::unlink((dir + "/" + kCheckpointFile).c_str());  // it ended: nothing to resume
  console.line(text);
  if (opts.on_progress)
    opts.on_progress(progress_of(run, k, exp.runs.size(), progress_fraction(settings, last), last, outcome.status));
  return outcome.status;
}

}  // namespace

[[noreturn]] void rethrow_naming_run(const std::exception_ptr& error, const std::string& run_id) {
  const std::string prefix = "run " + run_id + ": ";
  try {
    std::rethrow_exception(error);
  } catch (const DataError& e) {
    std::throw_with_nested(DataError(prefix + e.what()));
  } catch (const IoError& e) {
    throw IoError(prefix + e.what());
  } catch (const ConfigError&) {
    throw;  // already names its source and JSON paths
  } catch (const TimeOverflow& e) {
    throw TimeOverflow(prefix + e.what());
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(prefix + out_of_memory_text("while making it"));
  } catch (const NoProgress& e) {
    throw NoProgress(prefix + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error(prefix + e.what());
  }
}

namespace {

std::string error_text(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    return out_of_memory_text("while making the run");
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "unknown error";
}

// Writes the summary.json of a run that ended without results (status "failed" or
// "interrupted", and why), so that its folder is marked: index.csv says so and a resume
// re-runs it. The metrics.csv written while it ran goes first: a run without results
// shows none. Best effort: when the error was that nothing can be written there (a full
// disk), this cannot be written either.
void mark_ended(const RunSpec& run, const std::string& dir, const std::string& status, const std::string& why) {
  ::unlink((dir + "/metrics.csv").c_str());
  try {
    if (::access((dir + "/config.json").c_str(), F_OK) == 0)
      write_file_atomic(dir + "/summary.json", ended_summary_json(run, status, why).dump(2) + "\n");
  } catch (...) {
  }
}

// resolve_experiment refused every run that alone needs more memory than there is; with
// --jobs N, the N largest run side by side.
void check_lanes_fit_in_memory(const Experiment& exp, const std::vector<size_t>& todo, int lanes) {
  std::vector<double> need;
  std::vector<std::pair<json, std::shared_ptr<Distribution>>> dists;  // trace files read once
  for (size_t k : todo) {
    const BoundDistribution& bound = *exp.runs[k].settings.compute_dist;
    const json spec = bound.spec();
    std::shared_ptr<Distribution> dist;
    for (const auto& [s, d] : dists)
      if (s == spec) dist = d;
    if (!dist) dists.emplace_back(spec, dist = bound.make(exp.base_dir));
    need.push_back(estimate_run_memory(exp.runs[k], *dist).total);
  }
  std::sort(need.begin(), need.end(), std::greater<double>());
  double together = 0;
  for (int i = 0; i < lanes; ++i) together += need[size_t(i)];
  const double budget = memory_limit_bytes();
  if (together > budget)
    throw ConfigError(
        "--jobs", {{"", std::to_string(lanes) + " runs side by side would need about " + format_bytes(together) +
                            " of memory, more than the " + format_bytes(budget) + " this machine has: lower --jobs"}});
}

}  // namespace

int parse_count(const std::string& option, const std::string& text, int lo, int hi, const std::string& note) {
  int v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  if (b < e && *b == '+') ++b;
  auto r = std::from_chars(b, e, v);
  if (b == e || r.ec != std::errc() || r.ptr != e || v < lo || v > hi)
    throw UsageError(option + " must be a whole number in " + std::to_string(lo) + ".." + std::to_string(hi) + note +
                     ", got '" + printable(text) + "'");
  return v;
}

void set_run_counts(RunnerOptions& ro, const std::string& threads, const std::string& jobs,
                    const std::string& threads_name, const std::string& jobs_name) {
  ro.threads = parse_count(threads_name, threads, 0, kMaxThreads, " (0 = the cores)");
  ro.jobs = parse_count(jobs_name, jobs, 1, kMaxThreads);
}

namespace {

// What the lanes made of each run (by run index): its status, or the error that ended it.
struct LaneResults {
  std::vector<std::string> status;
  std::vector<std::exception_ptr> errors;
};

// Lanes: up to `lanes` runs at once, each on its own worker pool with a share of the
// threads (at least one, the lane's thread itself). Results do not depend on the pool
// size, so they do not depend on --jobs either. After a failure or an interruption no lane
// starts another run.
LaneResults run_lanes(const Experiment& exp, const ExperimentFolder& folder, const RunnerOptions& opts,
                      const std::vector<size_t>& todo, int lanes, DataCache& cache, Console& console) {
  const int threads = opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  LaneResults r{std::vector<std::string>(exp.runs.size()), std::vector<std::exception_ptr>(exp.runs.size())};
  auto lane_main = [&](int index) {
    Lane lane;
    lane.index = index;
    lane.lanes = lanes;
    std::unique_ptr<WorkerPool> pool;
    for (;;) {
      if (failed.load() || interrupt_requested()) return;  // start nothing new
      size_t i = next.fetch_add(1);
      if (i >= todo.size()) return;
      size_t k = todo[i];
      try {
        // the lane's own thread, which runs the simulation, is one of its threads
        if (!pool)
          pool = std::make_unique<WorkerPool>(std::max(1, threads / lanes + (index < threads % lanes ? 1 : 0)),
                                              /*caller_computes=*/true);
        lane.pool = pool.get();
        r.status[k] = make_run(exp, k, folder, opts, lane, cache, console);
      } catch (const Interrupted& e) {  // before its simulation started: marked, not an error
        r.status[k] = "interrupted";
        console.idle(index, true);
        mark_ended(exp.runs[k], folder.run_dir(exp.runs[k]), "interrupted", e.what());
      } catch (...) {
        r.errors[k] = std::current_exception();
        failed.store(true);
        console.idle(index, true);
        mark_ended(exp.runs[k], folder.run_dir(exp.runs[k]), "failed", error_text(r.errors[k]));
      }
    }
  };
  if (lanes == 1) {
    lane_main(0);
  } else {
    std::vector<std::thread> pool_of_lanes;
    try {
      for (int i = 0; i < lanes; ++i) pool_of_lanes.emplace_back(lane_main, i);
    } catch (...) {  // lanes already started finish their run and start no other; then rethrow
      failed.store(true);
      for (auto& t : pool_of_lanes) t.join();
      throw;
    }
    for (auto& t : pool_of_lanes) t.join();
  }
  console.clear();
  return r;
}

// The end: index.csv rewritten, the first failure (in run order) thrown and the others that
// ran beside it printed so none is lost, where the results are and how to look at them.
// Returns the exit code: 130 when interrupted, else 0.
int finish_experiment(const Experiment& exp, const ExperimentFolder& folder, const RunnerOptions& opts,
                      const LaneResults& r, Console& console) {
  const std::string& exp_dir = folder.path();
  if (opts.write_index) {
    try {
      folder.write_index(exp);
    } catch (const std::exception& e) {
      bool run_failed = std::any_of(r.errors.begin(), r.errors.end(), [](const auto& e) { return bool(e); });
      if (!run_failed) throw;
      console.error(std::string("asgdsim: ") + e.what());  // a run's own error (the cause, often) follows
    }
  }
  std::optional<size_t> first_error;
  for (size_t k = 0; k < r.errors.size(); ++k) {
    if (!r.errors[k]) continue;
    if (!first_error) {
      first_error = k;
      continue;
    }
    try {
      rethrow_naming_run(r.errors[k], exp.runs[k].run_id);
    } catch (const std::exception& e) {
      console.error(std::string("asgdsim: ") + e.what());
    }
  }
  if (first_error) rethrow_naming_run(r.errors[*first_error], exp.runs[*first_error].run_id);

  if (opts.write_index) std::cout << "results: " << exp_dir << "\n";  // --quiet too: where the results went
  // How to look at them (the analysis is in the source tree this binary was built from).
  const std::string plot = std::string(build::source_dir) + "/analysis/plot.py";
  if (opts.write_index && !opts.quiet && ::access(plot.c_str(), R_OK) == 0)
    std::cout << "report: /usr/bin/python3 " << plot << " " << exp_dir
              << "   (figures and report.html; --target-accuracy X to ask for a target)\n";
  bool interrupted = interrupt_requested();
  for (const auto& s : r.status) interrupted = interrupted || s == "interrupted";
  return interrupted ? 130 : 0;
}

}  // namespace

int run_experiment(const Experiment& given, const RunnerOptions& opts) {
  if (!external_provider())  // a PyTorch model or data set runs from Python: refused before anything is written
    for (const RunSpec& run : given.runs)
      if (const std::string key = external_key(run.config); !key.empty())
        throw UsageError(external_provider_missing(key));
  // The folder is this process's (shared with the other shards of the same experiment)
  // until it returns: no other asgdsim writes into it meanwhile. Shards share it only with
  // shards of the same config: another config's --supersede or --rerun would move or
  // remake the runs they are writing.
  const bool sharded = opts.shards > 1;
  ExperimentFolder folder(opts.out_dir, experiment_name(given),
                          {sharded ? ExperimentLock::Mode::Shared : ExperimentLock::Mode::Exclusive, opts.wait,
                           opts.command_line, opts.quiet, experiment_identity(given.resolved, opts.shards)});
  if (!folder.held()) return 130;  // interrupted while waiting for it
  const std::string& exp_dir = folder.path();
  for (const auto& w : given.warnings) std::cerr << "asgdsim: warning: " << w << "\n";
  if (opts.recalibrate && sharded)  // each process would measure in turn, and the shards replay different traces
    throw UsageError(
        "--recalibrate with --shard or mpirun: measure once without sharding (asgdsim run CONFIG "
        "--recalibrate), then share the experiment folder");
  // cluster.compute "measured": a run whose trace is measured now is made again (its
  // earlier results replayed another trace)
  const std::set<size_t> remeasured = runs_measured_anew(given, exp_dir, opts.recalibrate);
  // Everything is checked before anything is written: skip runs already done (their result
  // files complete), refuse folders that hold another config. A refusal leaves every file
  // as it was, experiment.json included.
  RunPlan plan = folder.plan(given, {}, opts.replace, opts.shard, opts.shards, remeasured);
  // then the traces are measured (or found), and the runs replay them
  const Experiment exp = with_measured_compute(given, exp_dir, {opts.recalibrate, opts.quiet, {}});
  const int lanes = int(std::max<size_t>(1, std::min<size_t>(size_t(std::max(1, opts.jobs)), plan.todo.size())));
  if (lanes > 1) check_lanes_fit_in_memory(exp, plan.todo, lanes);
  folder.prepare(exp, plan, opts.shard, opts.shards, opts.replace.supersede, opts.write_index);

  Console console(opts.quiet, !opts.quiet && ::isatty(STDERR_FILENO), lanes, plan.todo.size());
  for (const auto& l : plan.lines)
    if (!l.empty()) console.line(l);
  DataCache cache(exp.base_dir);
  const LaneResults results = run_lanes(exp, folder, opts, plan.todo, lanes, cache, console);
  return finish_experiment(exp, folder, opts, results, console);
}

namespace {

// Run k of the runner's order: (engine, the sweep values' positions in their lists, the
// last key fastest, repeat); a key that does not apply to the run's engine is at 0, as the
// runner leaves it. Empty when the run is not one experiment.json makes: `why` says why.
std::vector<size_t> run_order(const ExperimentRecord& exp, const RunRecord& run, std::string& why) {
  std::vector<size_t> order;
  size_t e = 0;
  while (e < exp.engines.size() && exp.engines[e].name != run.engine) ++e;
  if (e == exp.engines.size()) {
    why = "engine " + json(run.engine).dump() + " is not in its engines";
    return {};
  }
  order.push_back(e);
  for (const auto& [key, value] : run.sweep.items())
    if (!exp.sweep.contains(key)) {
      why = "sweep key " + key + " is not in its sweep";
      return {};
    }
  for (const auto& [key, values] : exp.sweep.items()) {
    size_t at = 0;
    if (run.sweep.contains(key)) {
      const json& v = run.sweep[key];
      while (at < values.size() && values[at] != v) ++at;
      if (at == values.size()) {
        why = key + "=" + v.dump() + " is not in its sweep";
        return {};
      }
    }
    order.push_back(at);
  }
  if (uint64_t(run.repeat) >= exp.repeats || run.seed != exp.seed + uint64_t(run.repeat)) {
    why = "repeat " + std::to_string(run.repeat) + " with seed " + std::to_string(run.seed) + " is not one of its " +
          std::to_string(exp.repeats) + " repeats from seed " + std::to_string(exp.seed);
    return {};
  }
  order.push_back(size_t(run.repeat));
  return order;
}

}  // namespace

namespace {

// The run a run folder `name` at `path` holds, with its place in the experiment's run order,
// as its config.json's run record says; nullopt, and `why`, when the folder is not one of
// the runs `exp` (its experiment.json) makes.
std::optional<std::pair<std::vector<size_t>, RunSpec>> run_of_folder(const std::string& path, const std::string& name,
                                                                     const ExperimentRecord& exp, std::string& why) {
  json config;
  if (!read_json(path + "/config.json", config)) {
    why = "its config.json is not JSON";
    return std::nullopt;
  }
  const auto record = read_record(run_config_record(), config);
  if (!record) {
    why = "its config.json has no run record (" + record.why + ")";
    return std::nullopt;
  }
  const RunRecord& run = record->run;
  if (run.run_id != name)
    why = "its config.json is run " + json(run.run_id).dump();
  else if (run.experiment != exp.name)
    why = "its config.json is of experiment " + json(run.experiment).dump();
  std::vector<size_t> order;
  if (why.empty()) order = run_order(exp, run, why);
  if (!why.empty()) return std::nullopt;
  RunSpec spec;
  spec.run_id = name;
  spec.config = config;  // index.csv checks its result files as `asgdsim run` does
  spec.engine = run.engine;
  spec.sweep_values = run.sweep;
  spec.seed = run.seed;
  spec.repeat = run.repeat;
  return std::make_pair(std::move(order), std::move(spec));
}

}  // namespace

size_t rebuild_index(const std::string& dir, const std::string& command_line, bool quiet, bool wait) {
  namespace fs = std::filesystem;
  std::string exp_dir = dir;
  while (exp_dir.size() > 1 && exp_dir.back() == '/') exp_dir.pop_back();
  std::error_code ec;
  if (!fs::is_directory(exp_dir, ec))
    throw IoError(exp_dir + ": no such folder (give OUT/<name>, an experiment folder)");
  refuse_link(exp_dir);
  json resolved;
  const bool json_read = read_json(exp_dir + "/experiment.json", resolved);
  const auto record = read_record(experiment_record(), resolved);
  if (!json_read || !record)
    throw IoError(exp_dir + " is not an experiment folder: it has no readable experiment.json (" +
                  (json_read ? record.why + "; " : "") +
                  "asgdsim run writes one into OUT/<name>/, beside the run folders; copy it back with them)");
  ExperimentLock lock(exp_dir, ExperimentLock::Mode::Shared, wait, command_line, quiet);
  if (!lock.held()) return 0;  // interrupted while waiting for it

  std::vector<std::pair<std::vector<size_t>, RunSpec>> found;
  std::vector<std::string> foreign;
  for (fs::directory_iterator it(exp_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const fs::file_type type = it->symlink_status().type();
    if (type == fs::file_type::symlink && fs::exists(it->path() / "config.json", ec))
      refuse_link(it->path().string());  // a run folder through a link: never read as this experiment's
    if (type != fs::file_type::directory || !fs::exists(fs::symlink_status(it->path() / "config.json", ec)))
      continue;  // not a run folder (superseded-*/ holds run folders one level down)
    std::string why;
    auto run = run_of_folder(it->path().string(), name, *record, why);  // (its place in the run order, the run)
    if (!run) {
      foreign.push_back(name + " (" + why + ")");
      continue;
    }
    found.push_back(std::move(*run));
  }
  if (ec) throw IoError("cannot read the folder " + exp_dir + ": " + ec.message());
  if (!foreign.empty()) {
    std::sort(foreign.begin(), foreign.end());
    std::string named;
    for (size_t i = 0; i < foreign.size() && i < 3; ++i) named += (i ? "; " : "") + foreign[i];
    if (foreign.size() > 3) named += "; ... (" + std::to_string(foreign.size() - 3) + " more)";
    throw IoError(exp_dir + " holds " + std::to_string(foreign.size()) + " run folder" +
                  (foreign.size() == 1 ? "" : "s") + " that its experiment.json does not make: " + named +
                  "; their results would be indexed as this experiment's: move them out (asgdsim run CONFIG "
                  "--supersede moves them aside)");
  }
  if (found.empty()) throw IoError(exp_dir + " holds no run folder (a folder with a config.json): nothing to index");
  // Two folders cannot be the same run (the run id is the folder's name), so the order is total.
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Experiment exp;
  exp.resolved = resolved;
  for (const auto& [key, values] : record->sweep.items()) exp.sweep_keys.push_back(key);
  for (auto& [order, spec] : found) exp.runs.push_back(std::move(spec));
  write_index(exp, exp_dir);
  if (!quiet) {
    std::map<std::string, size_t> statuses;
    for (const RunSpec& run : exp.runs) {
      json s;
      ++statuses[listed_status(exp_dir, run, s)];
    }
    std::string counts;
    for (const auto& [status, n] : statuses) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + status;
    std::cout << "index: " << exp_dir << "/index.csv lists " << exp.runs.size() << " run"
              << (exp.runs.size() == 1 ? "" : "s") << " (" << counts << ")\n";
  }
  return exp.runs.size();
}

}  // namespace asgd
