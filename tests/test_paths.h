// tests/test_paths.h — where the tests find this source tree and the asgdsim binary they
// run. The paths are compiled into one small file (test_paths.cpp), not into every test,
// so the suites' objects do not depend on where the tree was cloned (a compiler cache
// shares them between clones).
#pragma once

namespace asgd::testing {
const char* source_dir();  // the source tree (experiments/configs, tests/data, scripts)
const char* binary();      // BUILD/asgdsim of this build
}  // namespace asgd::testing
