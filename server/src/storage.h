// Files of clashd's stores: capped reads, folders, leftovers of interrupted writes (atomic
// writes and capped reads are clash::cad's WriteFileAtomically and ReadFileCapped).
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "clash/cad/durable_file.h"

namespace clash::server {

using cad::ReadFileCapped;
using cad::RemoveAbandonedTemporaries;
using cad::RemoveFileDurably;
using cad::WriteFileAtomically;

/// True when every character is a lowercase hex digit (true for "").
[[nodiscard]] bool IsLowerHex(std::string_view s);

/// True for ids of the shape `prefix` + 32 lowercase hex digits (parts "p", assemblies "a",
/// scenes "s"): the only names that become file names.
[[nodiscard]] bool IsHexId(const std::string& id, char prefix);

/// Calls `fn` on each entry of the folder `dir` and stops at its first error, which it returns.
/// INTERNAL when the folder cannot be listed (no entry is left out silently).
[[nodiscard]] absl::Status ForEachInFolder(
    const std::string& dir,
    const std::function<absl::Status(const std::filesystem::directory_entry&)>& fn);

/// The ids (IsHexId with `prefix`) of the files "<id>.pb" in `dir`, in order. INTERNAL when the
/// folder cannot be listed.
[[nodiscard]] absl::StatusOr<std::set<std::string>> IdsInFolder(const std::string& dir,
                                                                char prefix);

/// `words` random 32-bit words as lowercase hex (8 digits each).
[[nodiscard]] std::string RandomHex(int words);

/// True only when no file is at `path` (false when that cannot be told): after a removal or
/// write that reported an error, whether the store must still count the file.
[[nodiscard]] bool FileGone(const std::string& path);

/// Creates the folder and its parents, durably (cad::MakeDirsDurably). INTERNAL when that fails.
[[nodiscard]] absl::Status MakeDirs(const std::string& dir);

}  // namespace clash::server
