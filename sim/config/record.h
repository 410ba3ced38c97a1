// sim/config/record.h — reading back what asgdsim wrote to disk (a run's config.json `run`
// record, experiment.json, a checkpoint's header, summary.json) through a declaration: a
// record is a Section of fields bound to a typed struct, and read_record checks each key it
// declares with the Validator (the file may have been edited or cut since it was written)
// before any member is set; what is not readable is said as the first issue with its JSON
// path ("run.seed: expected an integer ..., got \"x\" (string)"). Keys a record does not
// declare are let be: asgdsim's files hold more than any one reader needs. A key whose value
// holds records of its own (an object, a list of objects) is a shaped key (field.h),
// checked at its own path.
// What it is not: a config validator (nothing is reported of undeclared keys) nor a writer:
// where a file holds exactly a record's keys, get_fields writes it from the same fields.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/config/field.h"
#include "sim/config/validator.h"

namespace asgd {

// The keys `value` holds when it is an object (none otherwise): a record allows all of them.
inline std::vector<std::string> own_keys(const json& value) {
  std::vector<std::string> keys;
  if (value.is_object())
    for (const auto& [key, member] : value.items()) keys.push_back(key);
  return keys;
}

// Validates `value` at `path` against `record`'s keys (any other key allowed) and, when
// nothing in it was reported, fills `out`.
template <class S>
void bind_record(const Section<S>& record, const json& value, const std::string& path, Validator& v, S& out) {
  record.bind(value, path, v, out, own_keys(value));
}

// Reports `value` at `path` unless it is a list (the Validator checks lists of numbers only).
inline bool check_list(const json& value, const std::string& path, Validator& v) {
  if (value.is_array()) return true;
  v.error(path, "expected a list, got " + brief(value));
  return false;
}

// Keys whose value holds records of their own are shaped keys (field.h): their Field's
// check validates the value at the key's own path ("run.seed", "engines[1].name").

// A key whose value is a record of its own, `inner`, read into `member`.
template <class S, class T>
Field<S> record_key(T S::*member, ParamInfo info, Section<T> inner) {
  auto shared = std::make_shared<const Section<T>>(std::move(inner));
  return shaped<S>(std::move(info),
                   {{object_shape<S>(
                        [shared](json& value, const std::string& path, Validator& v) {
                          T scratch{};
                          bind_record(*shared, value, path, v, scratch);
                        },
                        [member, shared](S& s, const json& value) { set_fields(shared->fields, value, s.*member); })},
                    "an object",
                    [member, shared](const S& s) { return get_fields(shared->fields, s.*member); }});
}

// A key whose value is a list of records `inner`, read into `member` in order.
template <class S, class T>
Field<S> record_list_key(std::vector<T> S::*member, ParamInfo info, Section<T> inner) {
  auto shared = std::make_shared<const Section<T>>(std::move(inner));
  return shaped<S>(std::move(info), {{list_shape<S>(
                                         [shared](json& item, const std::string& path, Validator& v) {
                                           T scratch{};
                                           bind_record(*shared, item, path, v, scratch);
                                         },
                                         0,
                                         [member, shared](S& s, const json& value) {
                                           (s.*member).clear();
                                           for (const json& e : value)
                                             set_fields(shared->fields, e, (s.*member).emplace_back());
                                         })},
                                     "a list of objects",
                                     [member, shared](const S& s) {
                                       json out = json::array();
                                       for (const T& e : s.*member) out.push_back(get_fields(shared->fields, e));
                                       return out;
                                     }});
}

// A key whose value is an object of any keys, kept as it is in `member` (a sweep point);
// `each`, when given, checks each of its members at path.key (a sweep's value lists).
template <class S>
Field<S> object_key(json S::*member, ParamInfo info, ShapeCheck each = {}) {
  return shaped<S>(std::move(info),
                   {{map_shape<S>(std::move(each), [member](S& s, const json& value) { s.*member = value; })},
                    "an object",
                    [member](const S& s) { return s.*member; }});
}

// A record: `fields`, then `keys` (the keys holding records of their own), as one Section
// named `name` (its path).
template <class S>
Section<S> record(std::string name, std::string doc, std::vector<Field<S>> fields, std::vector<Field<S>> keys = {}) {
  fields.insert(fields.end(), keys.begin(), keys.end());
  return Section<S>{std::move(name), std::move(doc), std::move(fields)};
}

// The declaration of key `name` in `section`: a record that reads back a config key takes
// the config's own (type, range, default). Throws std::logic_error when there is none.
template <class S>
ParamInfo declared_key(const Section<S>& section, const std::string& name) {
  for (const auto& f : section.fields)
    if (f.info.name == name) return f.info;
  throw std::logic_error("declared_key: " + section.name + " declares no key '" + name + "'");
}

// `key` with no default: a record requires what the config would default (the file was
// written resolved).
inline ParamInfo required_key(ParamInfo key) {
  key.default_value = nullptr;
  return key;
}

// A record read from a file: the typed struct, or why it is not readable.
template <class S>
struct RecordRead {
  std::optional<S> value;  // set when the record was readable
  std::string why;         // else the first issue: "run.seed: expected ..., got ..."

  explicit operator bool() const { return value.has_value(); }
  const S& operator*() const { return *value; }
  const S* operator->() const { return &*value; }
};

// Reads `value` (a file's JSON) as `record`, at the record's own path.
template <class S>
RecordRead<S> read_record(const Section<S>& record, const json& value) {
  Validator v;
  S out{};
  bind_record(record, value, record.name, v, out);
  if (v.ok()) return {std::move(out), ""};
  const ConfigIssue& first = v.issues().front();
  return {std::nullopt, first.path.empty() ? first.message : first.path + ": " + first.message};
}

}  // namespace asgd
