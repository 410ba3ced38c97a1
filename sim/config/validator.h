// sim/config/validator.h — strict validation of JSON against parameter descriptions
// (sim/config/param.h): unknown keys (with the nearest valid key suggested), wrong types,
// out-of-range values and missing required keys are collected, every one with its JSON
// path (e.g. engines[2].backups); defaults are filled in. Nothing here knows the config's
// meaning: each component declares its own keys (sim/config/field.h), and
// experiments/config/config.cpp binds a config's sections with them.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/config/param.h"
#include "sim/base/errors.h"  // ConfigIssue, ConfigError

namespace asgd {

using nlohmann::json;

class Validator {
 public:
  void error(const std::string& path, const std::string& message);
  bool ok() const { return issues_.empty(); }
  const std::vector<ConfigIssue>& issues() const { return issues_; }
  // Throws ConfigError(source, issues) if any were found.
  void throw_if_failed(const std::string& source) const;

  // Validates the object at `path` against `params` (plus `also_allowed` keys that the
  // caller checks itself) and returns it with defaults filled in.
  json object(const json& value, const std::string& path, const std::vector<ParamInfo>& params,
              const std::vector<std::string>& also_allowed = {});
  // Validates one value against one parameter description; false if it reported an issue.
  bool value(const json& v, const ParamInfo& p, const std::string& path);
  // For {"<type_key>": name, ...}: finds the component, reports an unknown name with the
  // nearest valid one, validates its parameters. Returns the filled object (or `value`
  // unchanged if the type is unusable).
  json component(const json& value, const std::string& path, const std::string& type_key,
                 const std::vector<ComponentInfo>& catalog, const std::vector<ParamInfo>& common = {},
                 const std::string& default_type = "");

 private:
  std::vector<ConfigIssue> issues_;
};

// ---- reading JSON text strictly ----

// Nesting deeper than this is refused while parsing (a config needs about 6 levels; a
// 100,000-deep document would otherwise exhaust the stack in later recursive code).
inline constexpr int kMaxJsonDepth = 64;

// JSON text that parses but that strict reading refuses: a key repeated in one object
// (which would silently keep the last value), or nesting deeper than kMaxJsonDepth.
class StrictJsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// json::parse with comments allowed or not, that also throws StrictJsonError for a
// repeated key (naming its JSON path) or too deep a nesting. Syntax errors and invalid
// UTF-8 throw json::parse_error as json::parse does.
json parse_json_strict(const std::string& text, bool allow_comments);
// Whether `text` is well-formed UTF-8; if not, `bad_offset` is the first bad byte.
bool valid_utf8(const std::string& text, size_t* bad_offset = nullptr);
// `text` with every byte that is not UTF-8 replaced by '?' (for JSON, which holds only
// UTF-8: a command line's paths may hold any byte).
std::string utf8_or_question_marks(std::string text);

// Whether a value > 0 stays > 0 and finite in fp32 (the kernels compute in float: a
// curvature or an eps that float rounds to 0 or infinity is not the one asked for), and
// the range to name when it does not.
bool float_positive_finite(double value);
inline constexpr const char* kFloatRange = " (the model computes in fp32: use 1.2e-38 to 3.4e38)";

// ---- limits every numeric key gets ----

// An Integer (or IntegerList) parameter whose ParamInfo sets no finite max gets this one:
// what an int holds. Keys stored wider say so with an explicit max (kMaxCount).
inline constexpr double kDefaultIntegerMax = 2147483647.0;  // INT32_MAX
// The max of count-like keys stored in 64 bits (seed, stop.updates, ...): exactly
// representable in a double, far beyond any run.
inline constexpr double kMaxCount = 1e15;
// The max a parameter is checked against: its own, else kDefaultIntegerMax for integers.
double effective_max(const ParamInfo& p);
// Whether `x` is finite and within `p`'s min (or above it, min_exclusive) and effective max.
bool number_in_range(const ParamInfo& p, double x);

// Members read while validating, when the validator may already have reported them as the
// wrong type: a wrong type reads as absent instead of throwing.
std::string text_of(const json& o, const char* key);
int64_t int_of(const json& o, const char* key, int64_t fallback);

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c"
std::string join_path(const std::string& base, const std::string& key);
std::string index_path(const std::string& base, size_t i);
// The candidate closest to `key` by edit distance, or "" if none is close.
std::string nearest_key(const std::string& key, const std::vector<std::string>& candidates);
// A value as it would appear in JSON, shortened for messages.
std::string brief(const json& v);
// "an integer >= 1", "one of: a, b", ...: what a parameter accepts.
std::string describe_allowed(const ParamInfo& p);

}  // namespace asgd
