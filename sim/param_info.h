// sim/param_info.h — how a component describes one of its configuration parameters:
// type, default, allowed range or choices, meaning. The config validator, `asgdsim list`
// and docs/config.md all read these descriptions, so each fact is written once, beside
// the code that uses it.
#pragma once
#include <limits>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

namespace asgd {

enum class ParamType { Number, Integer, Boolean, String, NumberList, IntegerList, Any };

struct ParamInfo {
  std::string name;
  ParamType type = ParamType::Number;
  nlohmann::json default_value;  // null: required
  std::string doc;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;         // value must be > min instead of >= min
  std::vector<std::string> choices;   // for String: the allowed values (empty: any)

  bool required() const { return default_value.is_null(); }
};

// A family member chosen by a "type" (or "dist") key: a model, an engine, a distribution.
struct ComponentInfo {
  std::string name;
  std::string doc;
  std::vector<ParamInfo> params;
};

inline const char* param_type_name(ParamType t) {
  switch (t) {
    case ParamType::Number: return "number";
    case ParamType::Integer: return "integer";
    case ParamType::Boolean: return "boolean";
    case ParamType::String: return "string";
    case ParamType::NumberList: return "list of numbers";
    case ParamType::IntegerList: return "list of integers";
    case ParamType::Any: return "any";
  }
  return "?";
}

}  // namespace asgd
