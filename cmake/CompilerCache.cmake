# cmake/CompilerCache.cmake — compiles through ccache when ASGD_CCACHE is ON (the scripts
# turn it on; a plain `cmake` leaves it off). The cache lives outside the tree
# (ASGD_CCACHE_DIR, default ~/.cache/asgdsim/ccache), so it survives a fresh clone, and its
# settings travel with the build (the launcher sets them), so `cmake --build` by hand hits
# the same cache as the scripts:
# - CCACHE_BASEDIR is this tree: the compiler sees paths relative to the build folder, so a
#   clone elsewhere (a CI checkout) hits the entries another clone wrote;
# - CCACHE_NOHASHDIR: debug info may then name another clone's build folder (harmless);
# - CCACHE_COMPILERCHECK=content: a reinstalled compiler is a different compiler.
# A hit is a compilation ccache has seen with the same compiler, arguments and included
# files' contents, so nothing built differs with the cache; a miss compiles as usual.
option(ASGD_CCACHE "Compile through ccache (cache in ASGD_CCACHE_DIR)" OFF)
set(ASGD_CCACHE_DIR "" CACHE PATH "ccache's folder (empty: ~/.cache/asgdsim/ccache)")
set(ASGD_CCACHE_SIZE "8G" CACHE STRING "ccache's size limit")
if(ASGD_CCACHE)
  find_program(ASGD_CCACHE_PROGRAM ccache)
  if(NOT ASGD_CCACHE_PROGRAM)
    message(STATUS "asgdsim: ccache not found: building without a compiler cache")
  else()
    set(_asgd_ccache_dir "${ASGD_CCACHE_DIR}")
    if(NOT _asgd_ccache_dir)
      if(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
        set(_asgd_ccache_dir "$ENV{XDG_CACHE_HOME}/asgdsim/ccache")
      else()
        set(_asgd_ccache_dir "$ENV{HOME}/.cache/asgdsim/ccache")
      endif()
    endif()
    set(_asgd_launcher ${CMAKE_COMMAND} -E env "CCACHE_DIR=${_asgd_ccache_dir}"
        "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1 CCACHE_COMPILERCHECK=content
        "CCACHE_MAXSIZE=${ASGD_CCACHE_SIZE}" ${ASGD_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${_asgd_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_asgd_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_asgd_launcher})
    message(STATUS "asgdsim: ccache on (${_asgd_ccache_dir})")
  endif()
endif()
