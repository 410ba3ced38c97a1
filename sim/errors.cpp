// sim/errors.cpp — ConfigError's text, and the one error → exit code mapping.
#include "sim/errors.h"

namespace asgd {

ConfigError::ConfigError(const std::string& source, std::vector<ConfigIssue> issues)
    : std::runtime_error([&] {
        std::string s;
        for (const auto& i : issues) {
          if (!s.empty()) s += "\n";
          s += source.empty() ? "" : source + ": ";
          s += i.path.empty() ? i.message : i.path + ": " + i.message;
        }
        return s;
      }()),
      issues_(std::move(issues)) {}

int exit_code_of(std::exception_ptr error) {
  if (!error) return 0;
  try {
    std::rethrow_exception(error);
  } catch (const UsageError&) {
    return 2;
  } catch (const ConfigError&) {
    return 2;
  } catch (const DataError&) {
    return 2;
  } catch (const IoError&) {
    return 2;
  } catch (const TimeOverflow&) {  // the config drove virtual time out of the clock's range
    return 2;
  } catch (...) {
    return 1;
  }
}

std::string error_message(std::exception_ptr error) {
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const UsageError& e) {
    return e.what();
  } catch (const ConfigError& e) {
    return std::string("invalid config:\n") + e.what();
  } catch (const DataError& e) {
    return std::string("bad data: ") + e.what();
  } catch (const IoError& e) {
    return e.what();
  } catch (const TimeOverflow& e) {
    return std::string("virtual time overflow: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what();
  } catch (...) {
    return "error: unknown failure";
  }
}

}  // namespace asgd
