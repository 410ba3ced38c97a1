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
  // ParamType::Any): why its value is not allowed ("": it is). Optional.
  std::function<std::string(const json& value)> why_not;
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
  Field<S> out{std::move(f.info), {}, {}, std::move(f.why_not)};
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

  bool number_allowed(double x) const {
    return std::isfinite(x) && (range.min_exclusive ? x > range.min : x >= range.min) && x <= range.max;
  }
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

// Reports each key of `resolved` whose value its field's why_not refuses, at `path`.key.
template <class S>
void check_values(const std::vector<Field<S>>& fields, const json& resolved, const std::string& path, Validator& v) {
  for (const auto& f : fields)
    if (f.why_not && resolved.is_object() && resolved.contains(f.info.name))
      if (const std::string why = f.why_not(resolved.at(f.info.name)); !why.empty())
        v.error(join_path(path, f.info.name), why);
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
