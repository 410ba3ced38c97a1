// sim/config/param.h — how a component describes one of its configuration parameters:
// type, default, allowed range or choices, meaning. The config validator, `asgdsim list`
// and docs/config.md all read these descriptions, so each fact is written once, beside
// the code that uses it.
#pragma once
#include <limits>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/base/time.h"  // kMaxConfigSeconds

namespace asgd {

enum class ParamType { Number, Integer, Boolean, String, NumberList, IntegerList, Any };

struct ParamInfo {
  std::string name;
  ParamType type = ParamType::Number;
  nlohmann::json default_value;  // null: required
  std::string doc;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;        // value must be > min instead of >= min
  std::vector<std::string> choices;  // for String: the allowed values (empty: any)

  bool required() const { return default_value.is_null(); }
};

// A family member chosen by a "type" (or "dist") key: a model, an engine, a distribution.
struct ComponentInfo {
  std::string name;
  std::string doc;
  std::vector<ParamInfo> params;
};

// Short constructors for declarations (each key's range written where it is declared).
namespace keys {
inline constexpr double kInf = std::numeric_limits<double>::infinity();
// A key in virtual seconds: at most kMaxConfigSeconds (sim/base/time.h), so the int64
// nanosecond clock cannot overflow from the config alone.
inline ParamInfo seconds(std::string name, nlohmann::json def, std::string doc, double min = 0, bool excl = false) {
  return ParamInfo{std::move(name), ParamType::Number, std::move(def), std::move(doc), min, kMaxConfigSeconds, excl};
}
inline ParamInfo num(std::string name, nlohmann::json def, std::string doc, double min = -kInf, bool excl = false,
                     double max = kInf) {
  return ParamInfo{std::move(name), ParamType::Number, std::move(def), std::move(doc), min, max, excl};
}
inline ParamInfo integer(std::string name, nlohmann::json def, std::string doc, double min = 0, double max = kInf) {
  return ParamInfo{std::move(name), ParamType::Integer, std::move(def), std::move(doc), min, max};
}
inline ParamInfo str(std::string name, nlohmann::json def, std::string doc, std::vector<std::string> choices = {}) {
  ParamInfo p{std::move(name), ParamType::String, std::move(def), std::move(doc)};
  p.choices = std::move(choices);
  return p;
}
inline ParamInfo boolean(std::string name, bool def, std::string doc) {
  return ParamInfo{std::move(name), ParamType::Boolean, def, std::move(doc)};
}
inline ParamInfo any(std::string name, nlohmann::json def, std::string doc) {
  return ParamInfo{std::move(name), ParamType::Any, std::move(def), std::move(doc)};
}
inline ParamInfo list(std::string name, ParamType t, nlohmann::json def, std::string doc, double min = -kInf,
                      bool excl = false) {
  return ParamInfo{std::move(name), t, std::move(def), std::move(doc), min, kInf, excl};
}
}  // namespace keys

inline const char* param_type_name(ParamType t) {
  switch (t) {
    case ParamType::Number:
      return "number";
    case ParamType::Integer:
      return "integer";
    case ParamType::Boolean:
      return "boolean";
    case ParamType::String:
      return "string";
    case ParamType::NumberList:
      return "list of numbers";
    case ParamType::IntegerList:
      return "list of integers";
    case ParamType::Any:
      return "any";
  }
  return "?";
}

}  // namespace asgd
