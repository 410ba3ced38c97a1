# Resolves ASGD_BACKEND into ASGD_BACKEND_RESOLVED and defines the INTERFACE target
# asgd_backend (defines, include paths, libraries the kernels need).
# "nvcc found" is not "GPU usable": Auto picks CUDA only when a CUDA compiler exists
# AND nvidia-smi lists a GPU; otherwise OMP.
set(_asgd_allowed Auto CUDA OMP CPP)
if(NOT ASGD_BACKEND IN_LIST _asgd_allowed)
  message(FATAL_ERROR "ASGD_BACKEND='${ASGD_BACKEND}' is not one of: ${_asgd_allowed}")
endif()

include(CheckLanguage)
set(ASGD_BACKEND_RESOLVED ${ASGD_BACKEND})
if(ASGD_BACKEND STREQUAL "Auto")
  check_language(CUDA)
  set(_asgd_gpu_visible OFF)
  find_program(_asgd_nvidia_smi nvidia-smi)
  if(_asgd_nvidia_smi)
    execute_process(COMMAND ${_asgd_nvidia_smi} -L OUTPUT_VARIABLE _asgd_smi_out
                    RESULT_VARIABLE _asgd_smi_rc ERROR_QUIET)
    if(_asgd_smi_rc EQUAL 0 AND _asgd_smi_out MATCHES "GPU [0-9]+")
      set(_asgd_gpu_visible ON)
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER AND _asgd_gpu_visible)
    set(ASGD_BACKEND_RESOLVED CUDA)
  else()
    set(ASGD_BACKEND_RESOLVED OMP)
    message(STATUS "asgdsim: Auto backend -> OMP (CUDA compiler: '${CMAKE_CUDA_COMPILER}', GPU visible: ${_asgd_gpu_visible})")
  endif()
endif()

# Thrust/CCCL and cuRAND's header-only Philox come from the CUDA toolkit for every backend.
find_package(CUDAToolkit REQUIRED)
find_path(ASGD_CCCL_INCLUDE thrust/version.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS}/cccl ${CUDAToolkit_INCLUDE_DIRS}
  DOC "Directory holding thrust/ (CCCL)")
if(NOT ASGD_CCCL_INCLUDE)
  message(FATAL_ERROR "Thrust headers (thrust/version.h) not found under ${CUDAToolkit_INCLUDE_DIRS}")
endif()

add_library(asgd_backend INTERFACE)
if(ASGD_BACKEND_RESOLVED STREQUAL "CUDA")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)   # A100, H100/H200
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  target_compile_definitions(asgd_backend INTERFACE ASGD_BACKEND_CUDA=1
    THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CUDA)
  # --fmad=false: nvcc would otherwise fuse a*b+c into one FMA (one rounding), where the
  # CPU backends (baseline x86-64, no FMA) round twice; without fusion the elementwise
  # kernels (SGD steps, gradient noise, rounding to 16 bits) give the CPU's bits, which
  # the kernel tests check on both. They are memory-bound, so fusion buys no speed; the
  # GEMMs are cuBLAS's and round their own way.
  target_compile_options(asgd_backend INTERFACE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --extended-lambda --fmad=false>)
  target_link_libraries(asgd_backend INTERFACE CUDA::cudart CUDA::cublas)
else()
  # CPU backends: the .cu sources are plain C++ to g++ (-x c++); GEMMs go to OpenBLAS.
  set(BLA_VENDOR OpenBLAS)
  find_package(BLAS REQUIRED)
  find_path(ASGD_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu aarch64-linux-gnu)
  if(ASGD_BACKEND_RESOLVED STREQUAL "OMP")
    find_package(OpenMP REQUIRED COMPONENTS CXX)
    target_compile_definitions(asgd_backend INTERFACE ASGD_BACKEND_OMP=1
      THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP)
    target_link_libraries(asgd_backend INTERFACE OpenMP::OpenMP_CXX)
  else()
    target_compile_definitions(asgd_backend INTERFACE ASGD_BACKEND_CPP=1
      THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP)
  endif()
  target_include_directories(asgd_backend SYSTEM INTERFACE ${ASGD_CBLAS_INCLUDE})
  target_link_libraries(asgd_backend INTERFACE ${BLAS_LIBRARIES})
endif()
target_include_directories(asgd_backend SYSTEM INTERFACE ${ASGD_CCCL_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS})
target_compile_definitions(asgd_backend INTERFACE ASGD_BACKEND_NAME="${ASGD_BACKEND_RESOLVED}")

# Marks kernel sources: CUDA sources for nvcc, or C++ (-x c++) for the host compiler.
# On CUDA only the .cu files go to nvcc; .cpp kernel sources (rng.cpp: cuRAND's device
# API compiled for the host) stay host C++ on every backend, since nvcc would treat
# their curand_* calls as __device__-only.
function(asgd_kernel_sources)
  if(ASGD_BACKEND_RESOLVED STREQUAL "CUDA")
    set(_asgd_cu_sources ${ARGN})
    list(FILTER _asgd_cu_sources INCLUDE REGEX "\\.cu$")
    set_source_files_properties(${_asgd_cu_sources} DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTIES LANGUAGE CUDA)
  else()
    set_source_files_properties(${ARGN} DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++")
  endif()
endfunction()
