// kernels/hd.h — the one host/device qualifier macro for single-source kernels.
// CCCL 3 no longer defines __host__/__device__ for g++, so plain-C++ builds see nothing.
#pragma once
#if defined(__CUDACC__)
#define ASGD_HD __host__ __device__
#else
#define ASGD_HD
#endif
