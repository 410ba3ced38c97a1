// experiments/mpi_env.h — this process's place in an MPI job. When asgdsim is built with
// ASGD_MPI and started by an MPI launcher (mpirun, mpiexec, srun: seen from the
// environment they set), MPI is initialised here and finalised when the MpiEnv goes;
// otherwise, and in builds without MPI, the process is rank 0 of 1 and nothing touches
// MPI. One MpiEnv per process, made first thing in main().
#pragma once
#include <string>

namespace asgd {

class MpiEnv {
 public:
  MpiEnv(int& argc, char**& argv);
  ~MpiEnv();
  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

  static bool built_with_mpi();
  // The environment says an MPI launcher started this process (and how many ranks).
  static int launcher_size();
  bool active() const { return active_; }   // MPI initialised here
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_size() const { return local_size_; }  // ranks on this host (for thread shares)
  // Largest `value` over all ranks (a barrier too); `value` itself when not active.
  int all_max(int value) const;
  // Ends this process with `code` without MPI_Finalize (after a rank of the job died;
  // streams are flushed first).
  [[noreturn]] void exit_without_finalize(int code) const;
  // "" or ", rank R of K" for messages.
  std::string where() const;
  // A rank of the job died: MPI_Finalize would wait for it forever (Open MPI 4 under
  // --enable-recovery), so main() leaves with exit_without_finalize() instead.
  void note_peer_lost() const { peer_lost_ = true; }
  bool peer_lost() const { return peer_lost_; }

 private:
  bool active_ = false;
  int rank_ = 0, size_ = 1, local_size_ = 1;
  mutable bool peer_lost_ = false;
};

}  // namespace asgd
