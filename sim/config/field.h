// sim/config/field.h — one declaration per config key, bound to the typed member it fills
// (in the manner of ns-3's AddAttribute): a Field carries the key's ParamInfo (type,
// default, range or choices, doc) and the setter that writes the validated value into a
// typed struct; a Section is a list of fields at one JSON path; a Family is a set of
// members chosen by a "type" key (engines, staleness modes, lr schedules), each with its
// own fields. Validation, the resolved config.json, `asgdsim list`, docs/config.md and the
// error hints read the ParamInfos; the typed run config is filled by the setters in the
// same pass that validates (Section::bind, Family::bind), and the getters read it back as
// the keys' values (an engine's describe(): get_fields).
// What it is not: a JSON mapper for arbitrary structs. Keys whose value takes a word or a
// number ("auto", "workers"), or that are derived from other keys, have a setter of their
// own; checks across keys belong to the component that owns them.
#pragma once
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/config/param.h"
#include "sim/config/validator.h"
#include "sim/base/time.h"

namespace asgd {

template <class S>
struct Field {
  ParamInfo info;
  // Writes the validated value (its default filled in) into the typed config; empty when
  // the key is resolved by its section's own code.
  std::function<void(S&, const json&)> set;
  // Reads the member back as the key's value (the inverse of `set` on the values it
  // accepts; a number key reads back as a floating-point number); empty where `set` is,
  // or where nothing reads the section back.
  std::function<json(const S&)> get;
  // For a key whose value the ParamInfo cannot describe (a number in a range or a word:
  // ParamType::Any), or a value the validator accepted that is still not allowed (a list
  // of the wrong length): why its value is not allowed ("": it is). Never called with a
  // value the validator reported. Optional.
  std::function<std::string(const json& value)> why_not;
  // For a key whose value has parts of its own (a list's items, an object's keys: a
  // shaped key, below): checks the value, reporting each issue at its own path under
  // `path` (the key's), and fills its parts' defaults. Optional.
  std::function<void(json& value, const std::string& path, Validator& v)> check;
};

// A key whose value is stored as it is (number, integer, boolean, string, list).
template <class S, class T>
Field<S> field(T S::*member, ParamInfo info) {
  return {std::move(info), [member](S& s, const json& v) { s.*member = v.get<T>(); },
          [member](const S& s) { return json(s.*member); }};
}
// A field of M, declared as any other (field, choice_field, ...), whose value lives in the
// member `outer` of S (s.optimizer.momentum: nested(&S::optimizer, field(&OptimizerSpec::momentum, ...))).
template <class S, class M>
Field<S> nested(M S::*outer, Field<M> f) {
  Field<S> out{std::move(f.info), {}, {}, std::move(f.why_not), std::move(f.check)};
  if (f.set) out.set = [outer, set = std::move(f.set)](S& s, const json& v) { set(s.*outer, v); };
  if (f.get) out.get = [outer, get = std::move(f.get)](const S& s) { return get(s.*outer); };
  return out;
}
// A key with a setter (and a getter, where the section is read back) of its own: a
// conversion.
template <class S>
Field<S> field(ParamInfo info, std::function<void(S&, const json&)> set, std::function<json(const S&)> get = {}) {
  return {std::move(info), std::move(set), std::move(get)};
}
// A key in virtual seconds stored as SimTime, where 0 means "no limit" (kNever) when
// `zero_is_never` is set.
template <class S>
Field<S> seconds_field(SimTime S::*member, ParamInfo info, bool zero_is_never) {
  return {std::move(info),
          [member, zero_is_never](S& s, const json& v) {
            const double sec = v.get<double>();
            s.*member = zero_is_never && sec <= 0 ? kNever : seconds_to_sim(sec);
          },
          // (t / 1e9, correctly rounded: a value of at most 9 decimals reads back as written)
          [member, zero_is_never](const S& s) {
            return json(zero_is_never && s.*member == kNever ? 0.0 : double(s.*member) / 1e9);
          }};
}
// The word of an enum value in a choice_field's list (the value is one of them).
template <class E>
const std::string& word_of(const std::vector<std::pair<std::string, E>>& words, E value) {
  for (const auto& w : words)
    if (w.second == value) return w.first;
  throw std::logic_error("word_of: a value without its word");
}

// A word from a fixed list stored as an enum: choices are the words, in order.
template <class S, class E>
Field<S> choice_field(E S::*member, ParamInfo info, std::vector<std::pair<std::string, E>> words) {
  info.type = ParamType::String;
  info.choices.clear();
  for (const auto& w : words) info.choices.push_back(w.first);
  return {std::move(info),
          [member, words](S& s, const json& v) {
            for (const auto& w : words)
              if (w.first == v.get<std::string>()) s.*member = w.second;
          },
          [member, words](const S& s) { return json(word_of(words, s.*member)); }};
}
// A key that takes a number in a range or one of a few words ("workers", "auto", a
// device's name): one declaration gives its ParamInfo (ParamType::Any, so the doc says
// what it takes), its check (why_not: "expected a number > 0 or \"workers\", got -1"; with
// several words "... or one of a, b; got x") and its setter and getter. `range` is the
// number's: a ParamType::Number ParamInfo whose min, max and min_exclusive are read (and
// whose name, default and doc are not); `number_note` and `word_note` follow the number's
// range and the words in the message (" (FLOP/s)", " (= 0.9 / workers)").
template <class S>
struct NumberOrWord {
  ParamInfo range;
  std::vector<std::string> words;
  std::function<void(S&, double)> set_number;
  std::function<void(S&, const std::string&)> set_word;
  std::function<json(const S&)> get;
  std::string number_note, word_note;

  bool number_allowed(double x) const { return number_in_range(range, x); }
  bool word_allowed(const std::string& w) const {
    for (const auto& allowed : words)
      if (allowed == w) return true;
    return false;
  }
  std::string why_not(const json& v) const {
    if ((v.is_number() && number_allowed(v.get<double>())) || (v.is_string() && word_allowed(v.get<std::string>())))
      return "";
    std::string listed;
    for (const auto& w : words) listed += (listed.empty() ? "" : ", ") + (words.size() > 1 ? w : json(w).dump());
    return "expected " + describe_allowed(range) + number_note + " or " + (words.size() > 1 ? "one of " : "") + listed +
           word_note + (words.size() > 1 ? "; got " : ", got ") + brief(v);
  }
};
template <class S>
Field<S> number_or_word(ParamInfo info, NumberOrWord<S> form) {
  info.type = ParamType::Any;
  auto shared = std::make_shared<const NumberOrWord<S>>(std::move(form));
  Field<S> f{std::move(info),
             [shared](S& s, const json& v) {
               if (v.is_string())
                 shared->set_word(s, v.get<std::string>());
               else
                 shared->set_number(s, v.get<double>());
             },
             shared->get};
  f.why_not = [shared](const json& v) { return shared->why_not(v); };
  return f;
}

// ---- keys that take one of several shapes ----
// A key whose value takes one of a few shapes, told apart by the value's JSON kind
// (cluster.speeds: a list of factors or a distribution; model.curvature: a number, a list
// or {min, max}; model.conv: a list of blocks; an experiment's sweep: an object of lists).
// Each shape says what it takes: a number (its `check`: number_check, a range), a list
// (each item's `check`, at its own path model.curvature[2]; none: any item), an object
// (its `check`: its section's or family's, which fills its defaults) or a map (an object
// whose every member `check` takes, at path.member). Shapes::check picks the shape by the
// value's kind, in this one place; a value of no shape's kind, or a list shorter than its
// shape's `min_items`, is refused as "expected <expected>, got <value>". The setter of the
// value's shape fills S (from the checked value, its defaults filled).
// Checks a value (or a part of one) at `path`, reporting in `v`; may fill its defaults.
using ShapeCheck = std::function<void(json& value, const std::string& path, Validator& v)>;

template <class S>
struct ValueShape {
  enum class Kind { Number, List, Object, Map };
  Kind kind = Kind::Number;
  ShapeCheck check;      // Number, Object: the value's; List: each item's; Map: each member's (none: any)
  size_t min_items = 0;  // List
  std::function<void(S&, const json& value)> set;
};
template <class S>
ValueShape<S> number_shape(ShapeCheck check, std::function<void(S&, const json&)> set) {
  return {ValueShape<S>::Kind::Number, std::move(check), 0, std::move(set)};
}
template <class S>
ValueShape<S> list_shape(ShapeCheck item, size_t min_items, std::function<void(S&, const json&)> set) {
  return {ValueShape<S>::Kind::List, std::move(item), min_items, std::move(set)};
}
template <class S>
ValueShape<S> object_shape(ShapeCheck check, std::function<void(S&, const json&)> set) {
  return {ValueShape<S>::Kind::Object, std::move(check), 0, std::move(set)};
}
template <class S>
ValueShape<S> map_shape(ShapeCheck member, std::function<void(S&, const json&)> set) {
  return {ValueShape<S>::Kind::Map, std::move(member), 0, std::move(set)};
}

template <class S>
struct Shapes {
  std::vector<ValueShape<S>> shapes;
  std::string expected;               // what the key takes, as a message says it ("a list of factors > 0 or ...")
  std::function<json(const S&)> get;  // optional (as Field::get)

  // The shape of `value`'s kind; nullptr for none.
  const ValueShape<S>* shape_of(const json& value) const {
    using Kind = typename ValueShape<S>::Kind;
    for (const auto& shape : shapes) {
      const bool of_kind = shape.kind == Kind::Number ? value.is_number()
                           : shape.kind == Kind::List ? value.is_array()
                                                      : value.is_object();
      if (of_kind) return &shape;
    }
    return nullptr;
  }
  void check(json& value, const std::string& path, Validator& v) const {
    using Kind = typename ValueShape<S>::Kind;
    const ValueShape<S>* shape = shape_of(value);
    if (!shape || (shape->kind == Kind::List && value.size() < shape->min_items)) {
      v.error(path, "expected " + expected + ", got " + brief(value));
      return;
    }
    if (!shape->check) return;
    if (shape->kind == Kind::List)
      for (size_t i = 0; i < value.size(); ++i) shape->check(value[i], index_path(path, i), v);
    else if (shape->kind == Kind::Map)
      for (auto& [member, item] : value.items()) shape->check(item, join_path(path, member), v);
    else
      shape->check(value, path, v);
  }
  void set(S& s, const json& value) const {
    if (const ValueShape<S>* shape = shape_of(value)) shape->set(s, value);
  }
};

// A check of a number in `range`'s range (a ParamType::Number ParamInfo whose min, max
// and min_exclusive are read): "expected a number > 0, got -2"; `also` refuses more of a
// number in range ("": allowed; optional).
inline ShapeCheck number_check(ParamInfo range, std::function<std::string(double)> also = {}) {
  return [range = std::move(range), also = std::move(also)](json& x, const std::string& path, Validator& v) {
    if (!x.is_number() || !number_in_range(range, x.get<double>()))
      v.error(path, "expected " + describe_allowed(range) + ", got " + brief(x));
    else if (also)
      if (const std::string why = also(x.get<double>()); !why.empty()) v.error(path, why);
  };
}

// The key of `info` (its type becomes ParamType::Any, so that the doc says what it takes)
// whose value takes `shapes`.
template <class S>
Field<S> shaped(ParamInfo info, Shapes<S> shapes) {
  info.type = ParamType::Any;
  auto shared = std::make_shared<const Shapes<S>>(std::move(shapes));
  Field<S> f{std::move(info), [shared](S& s, const json& v) { shared->set(s, v); }, shared->get};
  f.check = [shared](json& value, const std::string& path, Validator& v) { shared->check(value, path, v); };
  return f;
}

// A key that is validated and shown but read by no setter (its section's code reads it).
template <class S>
Field<S> unbound(ParamInfo info) {
  return {std::move(info), {}};
}

template <class S>
std::vector<ParamInfo> params_of(const std::vector<Field<S>>& fields) {
  std::vector<ParamInfo> out;
  for (const auto& f : fields) out.push_back(f.info);
  return out;
}

// Fills `out` from `resolved` (an object validated against `fields`, defaults filled). A
// key it lacks takes its declared default (an object built in code, not validated, as
// tests build engine specs); a required key it lacks is left as `out` holds it.
template <class S>
void set_fields(const std::vector<Field<S>>& fields, const json& resolved, S& out) {
  for (const auto& f : fields) {
    if (!f.set) continue;
    if (resolved.is_object() && resolved.contains(f.info.name))
      f.set(out, resolved.at(f.info.name));
    else if (!f.info.required())
      f.set(out, f.info.default_value);
  }
}

// The inverse of set_fields: the keys of `fields` as an object, read from `s` (every field
// has a getter: one without is a declaration error, thrown as std::logic_error).
template <class S>
json get_fields(const std::vector<Field<S>>& fields, const S& s) {
  json out = json::object();
  for (const auto& f : fields) {
    if (!f.get) throw std::logic_error("get_fields: key '" + f.info.name + "' has no getter");
    out[f.info.name] = f.get(s);
  }
  return out;
}

// Whether an issue was reported at `path` itself.
inline bool reported_at(const Validator& v, const std::string& path) {
  for (const auto& issue : v.issues())
    if (issue.path == path) return true;
  return false;
}

// Reports each key of `resolved` whose value its field's why_not refuses, at `path`.key
// (a value already reported there is not judged again).
template <class S>
void check_values(const std::vector<Field<S>>& fields, const json& resolved, const std::string& path, Validator& v) {
  for (const auto& f : fields)
    if (f.why_not && resolved.is_object() && resolved.contains(f.info.name) &&
        !reported_at(v, join_path(path, f.info.name)))
      if (const std::string why = f.why_not(resolved.at(f.info.name)); !why.empty())
        v.error(join_path(path, f.info.name), why);
}

// Checks the parts of each key of `resolved` whose field has a `check` (a shaped key), at
// `path`.key, filling their defaults in `resolved`.
template <class S>
void check_parts(const std::vector<Field<S>>& fields, json& resolved, const std::string& path, Validator& v) {
  for (const auto& f : fields)
    if (f.check && resolved.is_object() && resolved.contains(f.info.name))
      f.check(resolved.at(f.info.name), join_path(path, f.info.name), v);
}

// For an object whose other keys another declaration checks (an engine object's common
// keys beside its type's; an experiment's engines and sweep beside the run's keys): checks
// each key of `fields` the object has (its ParamInfo, check and why_not) at `path`.key,
// and sets each one that is valid in `out` (a key it lacks: its default, where it has
// one). An object that is not one is left to the declaration that reports it.
template <class S>
void bind_fields_of(const std::vector<Field<S>>& fields, json& object, const std::string& path, Validator& v, S& out) {
  for (const auto& f : fields) {
    const std::string at = join_path(path, f.info.name);
    if (!object.is_object() || !object.contains(f.info.name)) {
      if (!f.info.required() && f.set) f.set(out, f.info.default_value);
      continue;
    }
    json& value = object.at(f.info.name);
    const size_t before = v.issues().size();
    if (!v.value(value, f.info, at)) continue;
    if (f.check) f.check(value, at, v);
    if (f.why_not)
      if (const std::string why = f.why_not(value); !why.empty()) v.error(at, why);
    if (v.issues().size() == before && f.set) f.set(out, value);
  }
}

// The keys of one JSON object (a config section), bound to the members of S.
template <class S>
struct Section {
  std::string name;  // its path in the config ("train", "cluster.network", "model.conv[]")
  std::string doc;
  std::vector<Field<S>> fields;
  // What the section is when the config leaves it out, where that is more than its keys'
  // defaults (stop: {"epochs": 1}); null: {}.
  nlohmann::json left_out = nullptr;
  // Checks across its keys, reported under `path` (the resolved object, defaults filled;
  // its values may be ones already reported as invalid). Optional.
  std::function<void(const nlohmann::json& resolved, const std::string& path, Validator& v)> check;

  std::vector<ParamInfo> params() const { return params_of(fields); }
  nlohmann::json when_left_out() const { return left_out.is_null() ? nlohmann::json::object() : left_out; }
  // Validates `user` at `path` (`also_allowed`: sub-objects the caller binds itself) and
  // returns it with every default filled; when nothing in it was reported, fills `out`.
  json bind(const json& user, const std::string& path, Validator& v, S& out,
            const std::vector<std::string>& also_allowed = {}) const {
    const size_t before = v.issues().size();
    json resolved = v.object(user, path, params(), also_allowed);
    check_parts(fields, resolved, path, v);
    check_values(fields, resolved, path, v);
    if (check && v.issues().size() == before) check(resolved, path, v);
    if (v.issues().size() == before) set_fields(fields, resolved, out);
    return resolved;
  }
};

// A family member chosen by its name under the family's type key.
template <class S>
struct Member {
  std::string name;
  std::string doc;
  std::vector<Field<S>> fields;
};

// Members chosen by a type key ("type", "mode"): each member's keys are its own fields
// plus the family's common ones; `set_type` records the chosen member in S.
template <class S>
struct Family {
  std::string type_key;
  std::vector<Member<S>> members;
  std::vector<Field<S>> common;
  std::function<void(S&, const std::string&)> set_type;
  bool common_first = false;  // where the common keys stand in each member's list
  std::string default_type;   // the member when the type key is left out ("": it is required)

  // The members as `asgdsim list` and the validator see them.
  std::vector<ComponentInfo> catalog() const {
    std::vector<ComponentInfo> out;
    for (const auto& m : members) {
      std::vector<ParamInfo> own = params_of(m.fields), shared = params_of(common);
      std::vector<ParamInfo> p = common_first ? shared : own;
      const auto& rest = common_first ? own : shared;
      p.insert(p.end(), rest.begin(), rest.end());
      out.push_back({m.name, m.doc, std::move(p)});
    }
    return out;
  }
  const Member<S>* find(const std::string& name) const {
    for (const auto& m : members)
      if (m.name == name) return &m;
    return nullptr;
  }
  // Validates {type_key: name, ...} at `path` (an unknown name is reported with the
  // nearest valid one) and returns it with defaults filled; when nothing in it was
  // reported, fills `out` with the member's fields and the type. `extra` are keys every
  // member accepts that are validated but not bound (an engine's "name").
  json bind(const json& user, const std::string& path, Validator& v, S& out,
            const std::vector<ParamInfo>& extra = {}) const {
    const size_t before = v.issues().size();
    json resolved = v.component(user, path, type_key, catalog(), extra, default_type);
    const Member<S>* m = resolved.is_object() && resolved.contains(type_key) && resolved.at(type_key).is_string()
                             ? find(resolved.at(type_key).get<std::string>())
                             : nullptr;
    if (m) {  // each key's own value check, beside the validator's (a key of type Any)
      check_parts(m->fields, resolved, path, v);
      check_parts(common, resolved, path, v);
      check_values(m->fields, resolved, path, v);
      check_values(common, resolved, path, v);
    }
    if (v.issues().size() != before || !m) return resolved;
    if (set_type) set_type(out, m->name);
    set_fields(m->fields, resolved, out);
    set_fields(common, resolved, out);
    return resolved;
  }
};

}  // namespace asgd
