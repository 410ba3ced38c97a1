// experiments/mpi_env.cpp — MPI set-up and tear-down, or a single process without it.
#include "experiments/mpi_env.h"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#if ASGD_WITH_MPI
#include <mpi.h>
#endif

namespace asgd {
namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}
}  // namespace

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
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);  // MPI calls from the main thread only
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  active_ = true;
#else
  (void)argc;
  (void)argv;
#endif
}

MpiEnv::~MpiEnv() {
#if ASGD_WITH_MPI
  if (active_) MPI_Finalize();
#endif
}

int MpiEnv::all_max(int value) const {
#if ASGD_WITH_MPI
  if (active_) {
    int out = value;
    MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
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
