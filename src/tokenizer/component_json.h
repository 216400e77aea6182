#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/regex.h"

namespace kvlab::tok {

// Reading tokenizer.json's components. `where` is the JSON path of the object being read
// ("pre_tokenizer.pretokenizers[1]"); every error names it as the field.

// The object's "type" string; throws when missing or not a string.
std::string component_type(const nlohmann::json& object, const std::string& where);
// A member that must exist with the given JSON type.
const nlohmann::json& member(const nlohmann::json& object, const char* key,
                             const std::string& where);
std::string string_member(const nlohmann::json& object, const char* key, const std::string& where);
bool bool_member_or(const nlohmann::json& object, const char* key, bool fallback,
                    const std::string& where);
// Throws naming every member of `object` that is not in `known` (an unknown option would
// otherwise change the result silently).
void check_members(const nlohmann::json& object, std::initializer_list<const char*> known,
                   const std::string& where);

// {"String": "..."} (literal) or {"Regex": "..."} as a compiled pattern.
Regex read_pattern(const nlohmann::json& object, const std::string& where);

// A factory table keyed by "type": builds the component or throws naming the unsupported type
// and listing the supported ones.
template <typename Component>
using ComponentFactories = std::map<std::string, std::unique_ptr<Component> (*)(
                                                     const nlohmann::json&, const std::string&)>;

template <typename Component>
std::unique_ptr<Component> build_component(const ComponentFactories<Component>& factories,
                                           const nlohmann::json& object, const std::string& where);

void throw_unsupported_type(const std::string& type, const std::string& supported,
                            const std::string& where);
void throw_not_an_array(const std::string& where);
void throw_not_an_object(const std::string& where, const nlohmann::json& value);

// The components of a Sequence: object[key] must be an array of objects, each built by
// make(element, "where.key[i]").
template <typename Component, typename Make>
std::vector<std::unique_ptr<Component>> read_steps(const nlohmann::json& object, const char* key,
                                                   const std::string& where, Make make) {
  const nlohmann::json& list = member(object, key, where);
  if (!list.is_array()) throw_not_an_array(where + "." + key);
  std::vector<std::unique_ptr<Component>> steps;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string step_where = where + "." + key + "[" + std::to_string(i) + "]";
    if (!list[i].is_object()) throw_not_an_object(step_where, list[i]);
    steps.push_back(make(list[i], step_where));
  }
  return steps;
}

template <typename Component>
std::unique_ptr<Component> build_component(const ComponentFactories<Component>& factories,
                                           const nlohmann::json& object, const std::string& where) {
  const std::string type = component_type(object, where);
  const auto it = factories.find(type);
  if (it == factories.end()) {
    std::string supported;
    for (const auto& [name, factory] : factories)
      supported += (supported.empty() ? "" : ", ") + name;
    throw_unsupported_type(type, supported, where);
  }
  return it->second(object, where);
}

}  // namespace kvlab::tok
