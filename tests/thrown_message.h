// What a call throws, as text (kvlab, not kvlab::testing: a unity batch would hide gtest's
// ::testing), for tests that assert an error message word for word.
#pragma once

#include <exception>
#include <string>

namespace kvlab {

// call()'s exception's what(), or "no error" when it returns.
template <class Call>
std::string thrown_message(Call&& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace kvlab
