#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace kvlab {

// Thrown for a spec, model shape, preset or config that cannot exist. `field` names what
// is wrong ("groups", "head_dim", "rope_theta", ...) so a caller can point the user at it;
// what() reads "field: message".
class SpecError : public std::invalid_argument {
 public:
  SpecError(std::string field, const std::string& message)
      : std::invalid_argument(field + ": " + message), field_(std::move(field)) {}

  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

}  // namespace kvlab
