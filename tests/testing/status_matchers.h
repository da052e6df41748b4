// IsOk() and StatusIs(code, substring) for absl::Status and absl::StatusOr (Debian's abseil
// 20220623 has no status_matchers.h).
#pragma once

#include <gmock/gmock.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace clash::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

/// The value of a StatusOr that the test expects to be OK (the test fails, and the value
/// access aborts, when it is not).
template <typename T>
T ValueOrDie(absl::StatusOr<T> s) {
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P2(StatusIs, code, substring,
           std::string("has code ") + absl::StatusCodeToString(code) + " and a message with \"" +
               std::string(substring) + "\"") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code && s.message().find(substring) != std::string::npos;
}

}  // namespace clash::testing
