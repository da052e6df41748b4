// Durable files: whole-file atomic replacement and capped reads.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace clash::server {

/// Replaces `path` with `bytes` atomically and durably: a temporary file in the same folder,
/// fsync, rename, fsync of the folder. Readers see the old content or the new, never a mix;
/// after a crash the file holds one of them. INTERNAL on I/O errors (the temporary is removed).
[[nodiscard]] absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes);

/// The whole file. NOT_FOUND when missing, RESOURCE_EXHAUSTED above max_bytes, INTERNAL on
/// other errors.
[[nodiscard]] absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                                        std::size_t max_bytes);

/// Creates the folder and its parents. INTERNAL when that fails.
[[nodiscard]] absl::Status MakeDirs(const std::string& dir);

/// Removes files named ".tmp-*" left in `dir` by writes a crash interrupted.
void RemoveStaleTemporaries(const std::string& dir);

}  // namespace clash::server
