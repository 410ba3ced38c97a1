// sim/base/errors.cpp — ConfigError's text, and the one error → exit code mapping.
#include "sim/base/errors.h"
#include <cstdio>
#include "sim/base/interrupt.h"

namespace asgd {

std::string printable(const std::string& s) {
  auto hex = [](unsigned char c) {
    char b[8];
    std::snprintf(b, sizeof(b), "\\x%02x", unsigned(c));
    return std::string(b);
  };
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= '0' && c <= '9') {
      size_t j = i;
      while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
      if (j - i > 24)
        out += s.substr(i, 8) + "..." + s.substr(j - 4, 4) + " (" + std::to_string(j - i) + " digits)";
      else
        out += s.substr(i, j - i);
      i = j;
      continue;
    }
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (!ok || (len == 1 && ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f))) {
      out += hex(c);
      ++i;
    } else {
      out += s.substr(i, len);
      i += len;
    }
    if (out.size() > 4000) return out + "... (" + std::to_string(s.size()) + " bytes in all)";
  }
  return out;
}

// what() is a C string: its issues are written printable, so a NUL in a config's key or
// value ("a\u0000b") cannot cut the text short.
ConfigError::ConfigError(const std::string& source, std::vector<ConfigIssue> issues)
    : std::runtime_error([&] {
        std::string s;
        for (const auto& i : issues) {
          if (!s.empty()) s += "\n";
          s += source.empty() ? "" : printable(source) + ": ";
          s += printable(i.path.empty() ? i.message : i.path + ": " + i.message);
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
  } catch (const NoProgress&) {  // the config's steps take no virtual time
    return 2;
  } catch (const Interrupted&) {  // a signal, before a run could mark itself interrupted
    return 130;
  } catch (...) {
    return 1;
  }
}

std::string error_message(std::exception_ptr error) {
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const UsageError& e) {
    return printable(e.what());
  } catch (const ConfigError& e) {
    return std::string("invalid config:\n") + e.what();
  } catch (const DataError& e) {
    return "bad data: " + printable(e.what());
  } catch (const IoError& e) {
    return printable(e.what());
  } catch (const TimeOverflow& e) {
    return "virtual time overflow: " + printable(e.what());
  } catch (const NoProgress& e) {
    return "no progress in virtual time: " + printable(e.what());
  } catch (const Interrupted& e) {
    return printable(e.what());
  } catch (const std::exception& e) {
    return "error: " + printable(e.what());
  } catch (...) {
    return "error: unknown failure";
  }
}

}  // namespace asgd
