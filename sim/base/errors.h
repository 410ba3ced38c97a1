// sim/base/errors.h — the error types every layer throws, and the one mapping from an error to
// the exit code and the message the command line gives it (used by `asgdsim run`,
// `validate` and `cluster` alike, on every rank). What it is not: a logging facility;
// only main() (and the ranks of `asgdsim cluster`) turn errors into exit codes.
//
// Exit codes (the contract in docs/outputs.md): 2 invalid input — a usage error, an
// invalid config, missing or corrupt data, a file that cannot be written (full disk,
// file-size limit), virtual time driven out of the clock's range by the config or unable to
// advance under it (NoProgress); 1 any
// other failure; 130 interrupted (decided by the caller, or an Interrupted error:
// sim/base/interrupt.h, a signal while nothing could mark a run interrupted).
#pragma once
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace asgd {

// A command line the program cannot act on (unknown command or option, bad option value).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One problem in a config, at its JSON path ("" for the whole document).
struct ConfigIssue {
  std::string path;
  std::string message;
};

// Invalid input: carries every issue found; what() lists them one per line, each as
// "SOURCE: PATH: MESSAGE".
class ConfigError : public std::runtime_error {
 public:
  ConfigError(const std::string& source, std::vector<ConfigIssue> issues);
  const std::vector<ConfigIssue>& issues() const { return issues_; }

 private:
  std::vector<ConfigIssue> issues_;
};

// Data that is missing, truncated or malformed (IDX, svmlight, traces); names the file.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file or folder that cannot be read, written or created; names the path and reason.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Virtual time left the clock's range (or a duration was not a finite number).
class TimeOverflow : public std::overflow_error {
 public:
  using std::overflow_error::overflow_error;
};

// A message as the terminal should show it: control characters (but newline and tab) and
// bytes that are not UTF-8 as \xNN, a run of more than 24 digits shortened to its first
// and last digits and its length, and at most 4,000 bytes. Values in messages come from
// users (a --set, a path, a config key): raw bytes or a 300-digit number tell them nothing.
std::string printable(const std::string& s);

// Virtual time cannot advance: the config makes every step take 0 ns while stop.time is
// the run's only limit (Simulation::run's no-progress rule), so the run would never end.
class NoProgress : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The exit code for `error` (see the list above): 2 for invalid input, 130 for Interrupted, else 1.
int exit_code_of(std::exception_ptr error);
// The message main() prints for `error`: "invalid config:\n...", "bad data: ...", ...
// (without the "asgdsim: " prefix and the usage text), printable.
std::string error_message(std::exception_ptr error);

}  // namespace asgd
