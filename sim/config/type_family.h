// sim/config/type_family.h — one family of component types chosen by a config's type key:
// the engines (engines[].type), models (model.type), data sets (data.type), topologies
// (cluster.topology.type) and distributions (a "dist" key). A TypeFamily holds its types in
// the order `asgdsim list` shows them, finds one by name, names them for messages, describes
// them once as the ComponentInfos the validator and `asgdsim list` read, throws the one
// "unknown type" error of an object built in code, and binds a validated object to its
// type's bound product (its `bind` hook). What one type is (its keys, its typed hooks, its
// family's own flags: an engine's `population`, a model's `reads`, a data set's `layout`)
// stays on the family's Type struct, which has `name`, `doc` and `params`.
// What it is not: the validation of an object against the catalog (Validator::component),
// or field.h's Family<S>, whose members fill one struct S (staleness modes, lr schedules).
#pragma once
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/config/param.h"
#include "sim/config/validator.h"

namespace asgd {

template <class Type>
class TypeFamily {
 public:
  // `what` names the family in messages ("engine type", "distribution"); `type_key` is the
  // key that names a type in an object ("type", "dist"); `types` in `asgdsim list` order,
  // their names unique (a repeated name is a declaration error: std::logic_error).
  TypeFamily(std::string what, std::string type_key, std::vector<Type> types)
      : what_(std::move(what)), type_key_(std::move(type_key)), types_(std::move(types)) {
    for (const Type& t : types_) {
      if (find(t.name) != &t) throw std::logic_error(what_ + " '" + t.name + "' is declared twice");
      catalog_.push_back({t.name, t.doc, t.params});
    }
  }
  TypeFamily(const TypeFamily&) = delete;  // a bound product may point at its type
  TypeFamily& operator=(const TypeFamily&) = delete;

  const std::vector<Type>& types() const { return types_; }
  typename std::vector<Type>::const_iterator begin() const { return types_.begin(); }
  typename std::vector<Type>::const_iterator end() const { return types_.end(); }
  const std::string& type_key() const { return type_key_; }
  // nullptr for an unknown name.
  const Type* find(const std::string& name) const {
    for (const Type& t : types_)
      if (t.name == name) return &t;
    return nullptr;
  }
  // The type named `name`; throws std::invalid_argument "unknown <what> 'name' (valid: a,
  // b, ...)" for none.
  const Type& at(const std::string& name) const {
    if (const Type* t = find(name)) return *t;
    throw std::invalid_argument("unknown " + what_ + " '" + name + "' (valid: " + names() + ")");
  }
  // The type an object names under the type key (at(): an unknown or missing name throws).
  const Type& type_of(const nlohmann::json& object) const { return at(text_of(object, type_key_.c_str())); }
  // The names, in list order, joined by `sep`, of the types `keep` accepts (all by default).
  std::string names(const std::string& sep = ", ") const {
    return names(sep, [](const Type&) { return true; });
  }
  template <class Keep>
  std::string names(const std::string& sep, Keep keep) const {
    std::string out;
    for (const Type& t : types_)
      if (keep(t)) out += (out.empty() ? "" : sep) + t.name;
    return out;
  }
  // The types and their keys, as the validator and `asgdsim list` read them.
  const std::vector<ComponentInfo>& catalog() const { return catalog_; }
  // A validated object (defaults filled; in an object built in code a key it lacks takes
  // its default) bound to its type's product: the type's `bind(type, object)` hook.
  auto bind(const nlohmann::json& object) const {
    const Type& t = type_of(object);
    return t.bind(t, object);
  }
  // Validates `user` (the object as the config gave it) at `path` against the catalog
  // (Validator::component: `common` keys every type accepts and its section binds,
  // `default_type` when it names none) and returns it with defaults filled; where it names
  // a type, `own(type, resolved)` then does what is that type's own (derived keys, values
  // its ParamInfos cannot describe); when nothing in it was reported, binds it into `out`.
  template <class Bound, class Own>
  nlohmann::json resolve(const nlohmann::json& user, const std::string& path, Validator& v, Bound& out, Own own,
                         const std::vector<ParamInfo>& common = {}, const std::string& default_type = "") const {
    const size_t before = v.issues().size();
    nlohmann::json resolved = v.component(user, path, type_key_, catalog_, common, default_type);
    if (const Type* t = find(text_of(resolved, type_key_.c_str()))) own(*t, resolved);
    if (v.issues().size() == before) out = bind(resolved);  // its own keys valid: bound once
    return resolved;
  }

 private:
  std::string what_, type_key_;
  std::vector<Type> types_;
  std::vector<ComponentInfo> catalog_;
};

}  // namespace asgd
