# cmake/build_info.cmake — writes generated/asgd/build_info.cpp at every build (cmake -P), so
# the commit and dirty flag that meta.json records are those of the sources being built,
# not of the last configure. configure_file rewrites the header only when its text
# changes, so an unchanged tree rebuilds nothing.
# In: SOURCE_DIR, OUT, IN, PROJECT_VERSION, ASGD_BACKEND_RESOLVED, CMAKE_BUILD_TYPE.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE ASGD_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE ASGD_GIT_STATUS OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT ASGD_GIT_COMMIT)
  set(ASGD_GIT_COMMIT "unknown")
endif()
if(ASGD_GIT_STATUS)
  set(ASGD_GIT_DIRTY true)
else()
  set(ASGD_GIT_DIRTY false)
endif()
configure_file(${IN} ${OUT} @ONLY)
