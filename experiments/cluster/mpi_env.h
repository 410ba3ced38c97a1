// experiments/cluster/mpi_env.h — this process's place in an MPI job. When asgdsim is built with
// ASGD_MPI and started by an MPI launcher (mpirun, mpiexec, srun: seen from the
// environment they set), MPI is initialised here and finalised when the MpiEnv goes;
// otherwise, and in builds without MPI, the process is rank 0 of 1 and nothing touches
// MPI. One MpiEnv per process, made first thing in main().
//
// Liveness: MPI (Open MPI 4, even under --enable-recovery) never reports a dead peer, so
// a receive or collective involving one waits forever. Each rank therefore runs a
// heartbeat thread on a communicator of its own: rank 0 and every other rank exchange a
// small message every kHeartbeatSeconds (a star, so N ranks send 2N messages per beat).
// A peer whose heartbeats stop for peer_timeout() seconds is lost; rank 0 relays the
// first lost rank it sees in its heartbeats, so every rank learns of it. Every wait here
// polls: it ends when it completes, when a peer it depends on is lost, on its deadline,
// or (where said) on an interrupt.
#pragma once
#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include "sim/run/atomic_file.h"  // IoError

namespace asgd {

// The ranks of one job disagree about what they run (config, options or data): exit 2.
class RankMismatch : public IoError {
 public:
  using IoError::IoError;
};

// A rank of the job stopped answering (died, or hangs) while others waited for it.
class PeerLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class MpiEnv {
 public:
  MpiEnv(int& argc, char**& argv);
  ~MpiEnv();
  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

  static bool built_with_mpi();
  // The environment says an MPI launcher started this process (and how many ranks).
  static int launcher_size();
  bool active() const { return active_; }  // MPI initialised here
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_size() const { return local_size_; }  // ranks on this host (for thread shares)

  // Every rank passes what it is about to run (its resolved config and options, or, with
  // `failed`, the error it met parsing its command line or reading its config, in words
  // that say which: rank 0 prints them after the rank's number). Rank 0 broadcasts a hash of its
  // text; a rank whose text differs, or that failed, is named to rank 0 with the first
  // difference, and every rank throws RankMismatch (rank 0's what() names them; the
  // others' is the same text, which main() does not print twice). Bounded: peers lost or
  // kStartupSeconds passing end it with PeerLost.
  void agree(const std::string& text, bool failed, const std::string& what) const;
  // Largest `value` over all ranks, waiting as long as every peer is alive (ranks finish
  // their shares at different times): throws PeerLost when one is lost. `value` itself
  // when not active.
  int all_max(int value) const;

  // Seconds of heartbeat silence after which a peer is lost (default 60; set from
  // real.worker_timeout once the config is known).
  void set_peer_timeout(double seconds) const;
  double peer_timeout() const;
  // The first rank known lost (by this rank's heartbeats or rank 0's relay), or -1.
  int lost_peer() const;
  bool has_heartbeat() const { return bool(heartbeat_); }
  // Seconds since anything was heard from `rank` on the heartbeat channel (0 without one).
  double silent_for(int rank) const;

  // Ends this process with `code` without MPI_Finalize (after a rank of the job died;
  // streams are flushed first).
  [[noreturn]] void exit_without_finalize(int code) const;
  // "" or ", rank R of K" for messages.
  std::string where() const;
  // A rank of the job died: MPI_Finalize would wait for it forever (Open MPI 4 under
  // --enable-recovery), so main() leaves with exit_without_finalize() instead.
  void note_peer_lost() const { peer_lost_ = true; }
  bool peer_lost() const { return peer_lost_ || lost_peer() >= 0; }

  static constexpr double kHeartbeatSeconds = 0.25;
  static constexpr double kStartupSeconds = 300;  // ranks reach agree() within this of each other

 private:
  struct Heartbeat;
  bool active_ = false;
  int rank_ = 0, size_ = 1, local_size_ = 1;
  mutable bool peer_lost_ = false;
  std::unique_ptr<Heartbeat> heartbeat_;
};

}  // namespace asgd
