// RETURN_IF_ERROR / ASSIGN_OR_RETURN for Debian's abseil 20220623, which lacks them. Same
// meaning as abseil's later versions, so moving to those is a rename.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CLASH_CONCAT_INNER_(a, b) a##b
#define CLASH_CONCAT_(a, b) CLASH_CONCAT_INNER_(a, b)

/// Returns the status from the enclosing function when `expr` is not OK.
#define CLASH_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status clash_status_ = (expr);         \
    if (!clash_status_.ok()) return clash_status_; \
  } while (false)

/// Evaluates a StatusOr expression; on error returns its status, else moves the value to lhs.
#define CLASH_ASSIGN_OR_RETURN(lhs, expr) \
  CLASH_ASSIGN_OR_RETURN_IMPL_(CLASH_CONCAT_(clash_statusor_, __LINE__), lhs, expr)
#define CLASH_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()
