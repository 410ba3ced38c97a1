// sim/base/hash.h — FNV-1a (64 bits) of a byte string: names and fingerprints that must be
// the same on every machine and build (a trace file's name, which config holds an
// experiment folder, a model file's text), where std::hash promises neither. Not a
// cryptographic hash: it tells edits apart, not attacks.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace asgd {

inline uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The hash as 16 hex digits.
inline std::string fnv1a64_hex(const std::string& bytes) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(fnv1a64(bytes)));
  return hex;
}

}  // namespace asgd
