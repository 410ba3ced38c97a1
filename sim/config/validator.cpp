// sim/config/validator.cpp — the validator, and strict reading of JSON text (repeated
// keys and deep nesting refused).
#include "sim/config/validator.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace asgd {

namespace {
std::string fmt_num(double v) {
  std::ostringstream s;
  s.precision(15);
  s << v;
  // A whole number whose exponent form needs several digits (the seed's bound,
  // 1000000000050000, read "1.00000000005e+15"): all its digits. (1e+15 stays.)
  const std::string e = s.str();
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0 && e.find('e') != std::string::npos &&
      e.find('.') != std::string::npos) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  return e;
}
const char* json_type_name(const json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "list";
  if (v.is_object()) return "object";
  return "null";
}
bool is_integral(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return true;
  if (v.is_number_float()) {
    double d = v.get<double>();
    return std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15;
  }
  return false;
}
}  // namespace

std::string text_of(const json& o, const char* key) {
  if (!o.is_object()) return "";
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}
int64_t int_of(const json& o, const char* key, int64_t fallback) {
  if (!o.is_object()) return fallback;
  auto it = o.find(key);
  return it != o.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

std::string join_path(const std::string& base, const std::string& key) { return base.empty() ? key : base + "." + key; }
std::string index_path(const std::string& base, size_t i) { return base + "[" + std::to_string(i) + "]"; }

std::string brief(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string nearest_key(const std::string& key, const std::vector<std::string>& candidates) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      }
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = distance(key, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  size_t limit = std::max<size_t>(2, key.size() / 3);
  return best_d <= limit ? best : "";
}

std::string describe_allowed(const ParamInfo& p) {
  std::string what;
  switch (p.type) {
    case ParamType::Number:
      what = "a number";
      break;
    case ParamType::Integer:
      what = "an integer";
      break;
    case ParamType::Boolean:
      return "true or false";
    case ParamType::String:
      if (!p.choices.empty()) {
        std::string s = "one of: ";
        for (size_t i = 0; i < p.choices.size(); ++i) s += (i ? ", " : "") + p.choices[i];
        return s;
      }
      return "a string";
    case ParamType::NumberList:
      what = "a list of numbers";
      break;
    case ParamType::IntegerList:
      what = "a list of integers";
      break;
    case ParamType::Any:
      return "a value";
  }
  const double max = effective_max(p);
  bool lo = std::isfinite(p.min), hi = std::isfinite(max);
  std::string each = (p.type == ParamType::NumberList || p.type == ParamType::IntegerList) ? " (each" : "";
  if (lo && hi)
    what += each + " in " + (p.min_exclusive ? "(" : "[") + fmt_num(p.min) + ", " + fmt_num(max) + "]";
  else if (lo)
    what += each + (p.min_exclusive ? " > " : " >= ") + fmt_num(p.min);
  else if (hi)
    what += each + " <= " + fmt_num(max);
  if (!each.empty() && (lo || hi)) what += ")";
  return what;
}

double effective_max(const ParamInfo& p) {
  bool integral = p.type == ParamType::Integer || p.type == ParamType::IntegerList;
  return integral && !std::isfinite(p.max) ? kDefaultIntegerMax : p.max;
}

bool number_in_range(const ParamInfo& p, double x) {
  if (!std::isfinite(x)) return false;
  if (p.min_exclusive ? !(x > p.min) : !(x >= p.min)) return false;
  return x <= effective_max(p);
}

void Validator::error(const std::string& path, const std::string& message) {
  for (const auto& i : issues_)
    if (i.path == path && i.message == message) return;  // sweeps can find the same twice
  issues_.push_back({path, message});
}

void Validator::throw_if_failed(const std::string& source) const {
  if (!issues_.empty()) throw ConfigError(source, issues_);
}

bool Validator::value(const json& v, const ParamInfo& p, const std::string& path) {
  auto bad = [&]() {
    error(path, "expected " + describe_allowed(p) + ", got " + brief(v) + " (" + json_type_name(v) + ")");
    return false;
  };
  auto in_range = [&](double d) { return number_in_range(p, d); };
  switch (p.type) {
    case ParamType::Any:
      return true;
    case ParamType::Boolean:
      return v.is_boolean() ? true : bad();
    case ParamType::String:
      if (!v.is_string()) return bad();
      if (!p.choices.empty() &&
          std::find(p.choices.begin(), p.choices.end(), v.get<std::string>()) == p.choices.end()) {
        std::string near = nearest_key(v.get<std::string>(), p.choices);
        error(path, "'" + v.get<std::string>() + "' is not allowed; expected " + describe_allowed(p) +
                        (near.empty() ? "" : " (did you mean '" + near + "'?)"));
        return false;
      }
      return true;
    case ParamType::Number:
      if (!v.is_number() || !in_range(v.get<double>())) return bad();
      return true;
    case ParamType::Integer:
      if (!is_integral(v) || !in_range(v.get<double>())) return bad();
      return true;
    case ParamType::NumberList:
    case ParamType::IntegerList: {
      if (!v.is_array()) return bad();
      bool ints = p.type == ParamType::IntegerList;
      for (const auto& e : v)
        if (!e.is_number() || (ints && !is_integral(e)) || !in_range(e.get<double>())) return bad();
      return true;
    }
  }
  return true;
}

json Validator::object(const json& value, const std::string& path, const std::vector<ParamInfo>& params,
                       const std::vector<std::string>& also_allowed) {
  if (!value.is_object()) {
    error(path, std::string("expected an object, got ") + brief(value) + " (" + json_type_name(value) + ")");
    return json::object();
  }
  std::vector<std::string> names(also_allowed);
  for (const auto& p : params) names.push_back(p.name);
  for (const auto& [key, v] : value.items()) {
    if (std::find(names.begin(), names.end(), key) != names.end()) continue;
    std::string near = nearest_key(key, names);
    std::string valid;
    for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
    error(join_path(path, key),
          "unknown key" + (near.empty() ? " (valid keys: " + (valid.empty() ? std::string("none") : valid) + ")"
                                        : " (did you mean '" + near + "'?)"));
  }
  json out = value;
  for (const auto& p : params) {
    std::string at = join_path(path, p.name);
    if (!value.contains(p.name)) {
      if (p.required())
        error(at, "missing required key (" + describe_allowed(p) + ": " + p.doc + ")");
      else
        out[p.name] = p.default_value;
      continue;
    }
    this->value(value.at(p.name), p, at);
  }
  return out;
}

json Validator::component(const json& value, const std::string& path, const std::string& type_key,
                          const std::vector<ComponentInfo>& catalog, const std::vector<ParamInfo>& common,
                          const std::string& default_type) {
  if (!value.is_object()) {
    error(path, std::string("expected an object with a \"") + type_key + "\" key, got " + brief(value));
    return value;
  }
  std::vector<std::string> names;
  for (const auto& c : catalog) names.push_back(c.name);
  std::string valid;
  for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
  json v = value;
  if (!v.contains(type_key)) {
    if (default_type.empty()) {
      error(join_path(path, type_key), "missing required key (one of: " + valid + ")");
      return value;
    }
    v[type_key] = default_type;
  }
  if (!v.at(type_key).is_string()) {
    error(join_path(path, type_key), "expected one of: " + valid + ", got " + brief(v.at(type_key)));
    return value;
  }
  std::string name = v.at(type_key).get<std::string>();
  auto it = std::find_if(catalog.begin(), catalog.end(), [&](const ComponentInfo& c) { return c.name == name; });
  if (it == catalog.end()) {
    std::string near = nearest_key(name, names);
    error(join_path(path, type_key), "unknown " + type_key + " '" + name + "'; valid: " + valid +
                                         (near.empty() ? "" : " (did you mean '" + near + "'?)"));
    return value;
  }
  std::vector<ParamInfo> params = common;
  params.insert(params.end(), it->params.begin(), it->params.end());
  return object(v, path, params, {type_key});
}

}  // namespace asgd

namespace asgd {

bool float_positive_finite(double value) {
  const float f = float(value);
  return f > 0 && std::isfinite(f);
}

std::string utf8_or_question_marks(std::string text) {
  size_t bad;
  while (!valid_utf8(text, &bad)) text[bad] = '?';
  return text;
}

bool valid_utf8(const std::string& text, size_t* bad_offset) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (s[i + k] & 0xc0) == 0x80;
    if (ok && len > 1) {  // no overlong forms, no surrogates, nothing past U+10FFFF
      uint32_t cp = c & (0xff >> (len + 1));
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (s[i + k] & 0x3f);
      ok = cp >= (len == 2 ? 0x80u : len == 3 ? 0x800u : 0x10000u) && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    }
    if (!ok) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

json parse_json_strict(const std::string& text, bool allow_comments) {
  // The parser's callback sees every object start, key, value and end in document order:
  // a stack of the open objects' keys finds a repeat, its size is the depth.
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;   // object: the key being read
    size_t items = 0;  // array: elements begun so far
  };
  std::vector<Frame> open;
  auto path = [&open]() {
    std::string p;
    for (const auto& f : open) {
      if (&f == &open.back()) break;
      p += f.object ? (p.empty() ? "" : ".") + f.key : "[" + std::to_string(f.items - 1) + "]";
    }
    return p;
  };
  auto element_begins = [&open]() {
    if (!open.empty() && !open.back().object) open.back().items++;
  };
  json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        element_begins();
        open.push_back(Frame{event == json::parse_event_t::object_start, {}, {}, 0});
        if (open.size() > size_t(kMaxJsonDepth)) {
          std::string at = path();
          if (at.size() > 60) at = at.substr(0, 60) + "...";
          throw StrictJsonError("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (at " +
                                (at.empty() ? std::string("the top") : at) + ")");
        }
        break;
      case json::parse_event_t::key: {
        Frame& f = open.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) {
          const std::string key = f.key;  // `f` dangles once `open` grows
          open.push_back(Frame{});        // so that path() names the repeated key itself
          throw StrictJsonError("key \"" + key + "\" appears twice in one object (" + path() +
                                "): JSON would silently keep only the last value");
        }
        break;
      }
      case json::parse_event_t::value:
        element_begins();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        open.pop_back();
        break;
    }
    return true;
  };
  return json::parse(text, callback, /*allow_exceptions=*/true, allow_comments);
}

}  // namespace asgd
