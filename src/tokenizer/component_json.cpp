#include "tokenizer/component_json.h"

#include <algorithm>

#include "io/json_document.h"
#include "spec/spec_error.h"

namespace kvlab::tok {

std::string component_type(const nlohmann::json& object, const std::string& where) {
  if (!object.is_object()) {
    throw SpecError(where, "expected an object, got " + json_excerpt(object));
  }
  return string_member(object, "type", where);
}

const nlohmann::json& member(const nlohmann::json& object, const char* key,
                             const std::string& where) {
  if (!object.is_object() || !object.contains(key)) {
    throw SpecError(where + "." + key, "missing");
  }
  return object.at(key);
}

std::string string_member(const nlohmann::json& object, const char* key, const std::string& where) {
  const nlohmann::json& value = member(object, key, where);
  if (!value.is_string()) {
    throw SpecError(where + "." + key, "expected a string, got " + json_excerpt(value));
  }
  return value.get<std::string>();
}

bool bool_member_or(const nlohmann::json& object, const char* key, bool fallback,
                    const std::string& where) {
  if (!object.contains(key) || object.at(key).is_null()) return fallback;
  if (!object.at(key).is_boolean()) {
    throw SpecError(where + "." + key,
                    "expected true or false, got " + json_excerpt(object.at(key)));
  }
  return object.at(key).get<bool>();
}

void check_members(const nlohmann::json& object, std::initializer_list<const char*> known,
                   const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    const bool listed =
        std::any_of(known.begin(), known.end(), [&](const char* name) { return key == name; });
    if (!listed) {
      throw SpecError(where + "." + key, "is not an option kvlab's tokenizer understands");
    }
  }
}

Regex read_pattern(const nlohmann::json& object, const std::string& where) {
  const std::string field = where + ".pattern";
  const nlohmann::json& pattern = member(object, "pattern", where);
  if (pattern.is_object() && pattern.size() == 1 && pattern.contains("String") &&
      pattern.at("String").is_string()) {
    return Regex(escape_regex(pattern.at("String").get<std::string>()), field);
  }
  if (pattern.is_object() && pattern.size() == 1 && pattern.contains("Regex") &&
      pattern.at("Regex").is_string()) {
    return Regex(pattern.at("Regex").get<std::string>(), field);
  }
  throw SpecError(field,
                  R"(expected {"String": ...} or {"Regex": ...}, got )" + json_excerpt(pattern));
}

void throw_unsupported_type(const std::string& type, const std::string& supported,
                            const std::string& where) {
  throw SpecError(where + ".type",
                  "'" + type + "' is not supported (kvlab reads: " + supported + ")");
}

void throw_not_an_array(const std::string& where) { throw SpecError(where, "expected an array"); }

void throw_not_an_object(const std::string& where, const nlohmann::json& value) {
  throw SpecError(where, "expected an object, got " + json_excerpt(value));
}

}  // namespace kvlab::tok
