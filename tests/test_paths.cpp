// tests/test_paths.cpp — the paths tests/test_paths.h declares, from the build's defines.
#include "tests/test_paths.h"

namespace asgd::testing {
const char* source_dir() { return ASGD_SOURCE_DIR; }
const char* binary() { return ASGD_BINARY; }
}  // namespace asgd::testing
