// experiments/cluster/mpi_env.cpp — MPI set-up and tear-down, the heartbeat that tells a dead
// peer from a slow one, and the bounded start-up agreement and final reduction; or a
// single process without MPI.
#include "experiments/cluster/mpi_env.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/base/hash.h"
#include "sim/base/interrupt.h"
#if ASGD_WITH_MPI
#include <mpi.h>
#endif

namespace asgd {
namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}
#if ASGD_WITH_MPI
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::string clip(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n - 3) + "...";
  return s;
}
// The first difference between rank 0's text and this rank's, in words: a JSON path
// when both are JSON, else the first differing line.
std::string first_difference(const std::string& root, const std::string& mine) {
  using nlohmann::json;
  json a = json::parse(root, nullptr, false), b = json::parse(mine, nullptr, false);
  if (!a.is_discarded() && !b.is_discarded()) {
    json patch = json::diff(a, b);
    std::string out;
    for (size_t k = 0; k < patch.size() && k < 3; ++k) {
      const json& op = patch[k];
      std::string path = op.value("path", "");
      json::json_pointer ptr(path);
      std::string theirs = a.contains(ptr) ? a.at(ptr).dump() : "(absent)";
      std::string ours = op.contains("value") ? op["value"].dump() : "(absent)";
      std::string dotted = path.empty() ? "(the whole config)" : path.substr(1);
      std::replace(dotted.begin(), dotted.end(), '/', '.');
      out += (k ? "; " : "") + dotted + " is " + clip(ours, 60) + " here, " + clip(theirs, 60) + " on rank 0";
    }
    if (patch.size() > 3) out += " (and " + std::to_string(patch.size() - 3) + " more difference(s))";
    if (!out.empty()) return out;
  }
  size_t i = 0, j = 0;
  for (int line = 1;; ++line) {
    size_t ei = root.find('\n', i), ej = mine.find('\n', j);
    std::string x = root.substr(i, ei == std::string::npos ? std::string::npos : ei - i);
    std::string y = mine.substr(j, ej == std::string::npos ? std::string::npos : ej - j);
    if (x != y)
      return "line " + std::to_string(line) + " is '" + clip(y, 80) + "' here, '" + clip(x, 80) + "' on rank 0";
    if (ei == std::string::npos || ej == std::string::npos) return "the texts differ in length";
    i = ei + 1;
    j = ej + 1;
  }
}
#endif  // ASGD_WITH_MPI: what only the MPI side uses
}  // namespace

#if ASGD_WITH_MPI
namespace {
constexpr int kTagBeat = 1;
}

struct MpiEnv::Heartbeat {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<int> lost{-1};  // first rank this rank knows lost
  std::atomic<double> timeout{60};
  std::unique_ptr<std::atomic<double>[]> last_seen;  // by rank: steady seconds
  std::vector<MPI_Request> req;                      // by rank: the beat in flight to it
  std::vector<int> out;                              // by rank: its buffer

  void start(int r, int n) {
    rank = r;
    size = n;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    last_seen.reset(new std::atomic<double>[size_t(n)]);
    double now = steady_seconds();
    for (int k = 0; k < n; ++k) last_seen[size_t(k)] = now;
    req.assign(size_t(n), MPI_REQUEST_NULL);
    out.assign(size_t(n), -1);
    thread = std::thread([this] { loop(); });
  }
  void beat(int to) {
    int done = 1;
    if (req[size_t(to)] != MPI_REQUEST_NULL) MPI_Test(&req[size_t(to)], &done, MPI_STATUS_IGNORE);
    if (!done) return;  // the last beat is not taken yet (a dead or stopped peer): no pile-up
    out[size_t(to)] = lost.load();
    MPI_Isend(&out[size_t(to)], 1, MPI_INT, to, kTagBeat, comm, &req[size_t(to)]);
  }
  void loop() {
    double next = 0;
    while (!stop.load()) {
      double now = steady_seconds();
      if (now >= next) {
        next = now + kHeartbeatSeconds;
        if (rank == 0)
          for (int k = 1; k < size; ++k) beat(k);
        else
          beat(0);
      }
      for (;;) {  // take in every beat that came
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, kTagBeat, comm, &flag, &st) != MPI_SUCCESS || !flag) break;
        int v = -1;
        MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, kTagBeat, comm, MPI_STATUS_IGNORE);
        last_seen[size_t(st.MPI_SOURCE)] = steady_seconds();
        if (rank != 0 && v >= 0 && lost.load() < 0) lost = v;  // rank 0's relay
      }
      const double limit = timeout.load();
      for (int k = 0; k < size && lost.load() < 0; ++k)
        if ((rank == 0 || k == 0) && k != rank && now - last_seen[size_t(k)].load() > limit) lost = k;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (auto& r : req)
      if (r != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (!done) {
          MPI_Cancel(&r);
          MPI_Request_free(&r);
        }
      }
  }
  void finish() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

namespace {
// Waits for `n` requests, polling: throws PeerLost when the heartbeat says a peer is lost,
// or when `limit` seconds pass (limit <= 0: no deadline), or, after an interrupt, when the
// peers have not caught up within the peer timeout.
void wait_bounded(const MpiEnv& mpi, MPI_Request* reqs, int n, double limit, const std::string& what) {
  const double start = steady_seconds();
  double interrupted_at = 0;
  for (;;) {
    int done = 0;
    MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    const double now = steady_seconds();
    if (int r = mpi.lost_peer(); r >= 0) {
      mpi.note_peer_lost();
      throw PeerLost("rank " + std::to_string(r) + " stopped answering (no heartbeat for " +
                     std::to_string(int(mpi.peer_timeout())) + " s: it died or hangs) while rank " +
                     std::to_string(mpi.rank()) + " waited for " + what);
    }
    if (limit > 0 && now - start > limit) {
      mpi.note_peer_lost();
      throw PeerLost("rank " + std::to_string(mpi.rank()) + " waited " + std::to_string(int(limit)) + " s for " + what +
                     " and some rank never came");
    }
    if (interrupt_requested() && interrupted_at == 0) interrupted_at = now;
    if (interrupted_at > 0 && now - interrupted_at > mpi.peer_timeout()) {
      mpi.note_peer_lost();
      throw Interrupted("interrupted by a signal while waiting for " + what);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}
}  // namespace
#else
struct MpiEnv::Heartbeat {};
#endif

bool MpiEnv::built_with_mpi() {
#if ASGD_WITH_MPI
  return true;
#else
  return false;
#endif
}

int MpiEnv::launcher_size() {
  // Open MPI's mpirun, MPICH/Hydra (PMI_SIZE) and Slurm's srun (SLURM_NTASKS with a PMI).
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (int n = env_int(v); n > 0) return n;
  if (std::getenv("PMIX_RANK") || std::getenv("PMI_RANK")) return std::max(1, env_int("SLURM_NTASKS"));
  return 0;
}

MpiEnv::MpiEnv(int& argc, char**& argv) {
#if ASGD_WITH_MPI
  if (launcher_size() == 0) return;  // a plain process: a singleton MPI_Init would start a daemon
  // The main thread makes every MPI call but the heartbeat's, which runs on its own
  // communicator: that needs MPI_THREAD_MULTIPLE.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  active_ = true;
  if (size_ > 1 && provided >= MPI_THREAD_MULTIPLE) {
    heartbeat_ = std::make_unique<Heartbeat>();
    heartbeat_->start(rank_, size_);
  }
#else
  (void)argc;
  (void)argv;
#endif
}

MpiEnv::~MpiEnv() {
#if ASGD_WITH_MPI
  if (heartbeat_) heartbeat_->finish();
  if (heartbeat_ && heartbeat_->comm != MPI_COMM_NULL) MPI_Comm_free(&heartbeat_->comm);
  if (active_) MPI_Finalize();
#endif
}

void MpiEnv::set_peer_timeout(double seconds) const {
#if ASGD_WITH_MPI
  if (heartbeat_) heartbeat_->timeout = std::max(seconds, 4 * kHeartbeatSeconds);
#else
  (void)seconds;
#endif
}

double MpiEnv::peer_timeout() const {
#if ASGD_WITH_MPI
  if (heartbeat_) return heartbeat_->timeout.load();
#endif
  return 60;
}

int MpiEnv::lost_peer() const {
#if ASGD_WITH_MPI
  if (heartbeat_) return heartbeat_->lost.load();
#endif
  return -1;
}

double MpiEnv::silent_for(int rank) const {
#if ASGD_WITH_MPI
  if (heartbeat_ && rank >= 0 && rank < size_) return steady_seconds() - heartbeat_->last_seen[size_t(rank)].load();
#else
  (void)rank;
#endif
  return 0;
}

void MpiEnv::agree(const std::string& text, bool failed, const std::string& what) const {
#if ASGD_WITH_MPI
  if (!active_ || size_ < 2) return;
  // A rank that failed stands for its error's text: ranks that all failed alike agree (and
  // each then reports its own error, as one process would).
  const std::string mine = failed ? "error: " + what : text;
  uint64_t hash = fnv1a64(mine);
  uint64_t root_hash = hash;
  MPI_Request r;
  MPI_Ibcast(&root_hash, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD, &r);
  wait_bounded(*this, &r, 1, kStartupSeconds, "the ranks to compare their configs");
  int mismatch = hash != root_hash ? 1 : 0, any = 0;
  MPI_Iallreduce(&mismatch, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r);
  wait_bounded(*this, &r, 1, kStartupSeconds, "the ranks to compare their configs");
  if (!any) return;
  // Someone differs: rank 0's text goes to all, each differing rank says how it differs.
  uint64_t len = mine.size();
  MPI_Ibcast(&len, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD, &r);
  wait_bounded(*this, &r, 1, kStartupSeconds, "rank 0's config");
  std::string root = rank_ == 0 ? mine : std::string(len, '\0');
  MPI_Ibcast(root.data(), int(len), MPI_CHAR, 0, MPI_COMM_WORLD, &r);
  wait_bounded(*this, &r, 1, kStartupSeconds, "rank 0's config");
  constexpr int kLine = 400;
  std::string line;
  if (failed && (mismatch || rank_ == 0))
    line = what;  // "could not read its config: ...", "refused its command line: ..."
  else if (mismatch)
    line = root.rfind("error: ", 0) == 0 ? "read its config (rank 0 could not)" : first_difference(root, text);
  line = clip(line, kLine - 1);
  line.resize(kLine, '\0');
  std::vector<char> all(rank_ == 0 ? size_t(size_) * kLine : 0);
  MPI_Igather(line.data(), kLine, MPI_CHAR, all.data(), kLine, MPI_CHAR, 0, MPI_COMM_WORLD, &r);
  wait_bounded(*this, &r, 1, kStartupSeconds, "the ranks' differences");
  std::string msg = "the " + std::to_string(size_) +
                    " ranks of this MPI job were not started alike (every rank needs the same config, --set "
                    "values and options; nothing was run):";
  if (rank_ == 0)
    for (int k = 0; k < size_; ++k) {
      std::string s(all.data() + size_t(k) * kLine);
      if (!s.empty()) msg += "\n  rank " + std::to_string(k) + ": " + s;
    }
  throw RankMismatch(msg);
#else
  (void)text;
  (void)failed;
  (void)what;
#endif
}

int MpiEnv::all_max(int value) const {
#if ASGD_WITH_MPI
  if (active_ && size_ > 1) {
    int out = value;
    MPI_Request r;
    MPI_Iallreduce(&value, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r);
    wait_bounded(*this, &r, 1, 0, "every rank to finish its runs");
    return out;
  }
#endif
  return value;
}

void MpiEnv::exit_without_finalize(int code) const {
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
  std::_Exit(code);
}

std::string MpiEnv::where() const {
  return active_ ? ", rank " + std::to_string(rank_) + " of " + std::to_string(size_) : "";
}

}  // namespace asgd
