// Files of clashd's stores: capped reads, folders, leftovers of interrupted writes (atomic
// writes and capped reads are clash::cad's WriteFileAtomically and ReadFileCapped).
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "clash/cad/durable_file.h"

namespace clash::server {

using cad::ReadFileCapped;
using cad::RemoveAbandonedTemporaries;
using cad::RemoveAllTemporaries;
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

/// Record files (scenes, assemblies) are sealed: a header of kRecordHeaderBytes, the magic
/// "CLASHREC", format 1 (4 bytes, little-endian), the payload's size (8 bytes) and its SHA-256,
/// then the payload. A file cut short, at whatever byte, or damaged is then told from a whole one:
/// a protobuf payload alone cut at a field's end still parses, as a record with fields missing.
inline constexpr std::size_t kRecordHeaderBytes = 8 + 4 + 8 + 32;

/// The sealed file of `payload` (for tests and tools; the stores use SerializeSealed).
[[nodiscard]] std::string SealRecord(std::string_view payload);

/// Seals `record` in place: it holds kRecordHeaderBytes (of any value) then the payload, as
/// serializing after that many bytes makes it, which saves SealRecord's copy of the payload.
void SealRecordInPlace(std::string* record);

/// The sealed file of a protobuf message; false when it does not serialize.
template <class Message>
[[nodiscard]] bool SerializeSealed(const Message& message, std::string* out) {
  out->assign(kRecordHeaderBytes, '\0');
  if (!message.AppendToString(out)) return false;
  SealRecordInPlace(out);
  return true;
}

/// The payload of a record file. A file written before records were sealed (a protobuf message
/// whose first field, an id, is tag 0x0A, which no header starts with) is its own payload.
/// DATA_LOSS when the header is damaged or the payload's size or hash differ from it.
[[nodiscard]] absl::StatusOr<std::string_view> UnsealRecord(std::string_view file);

/// Files set aside as damaged (scene files that do not parse) end in this.
inline constexpr std::string_view kDamagedSuffix = ".damaged";

/// True for the name of a file set aside as damaged: "<file>.<time>.damaged" (MoveAsideDamaged),
/// or "<file>.damaged" as versions before the time was named set them aside.
[[nodiscard]] bool IsDamagedFileName(std::string_view name);

/// When the damaged file named `name` was set aside, from its name; nullopt for a name without
/// a time (versions before the time was named), or not of a damaged file.
[[nodiscard]] std::optional<absl::Time> DamagedSince(std::string_view name);

/// Moves the file at `path` aside as damaged, never over another file: renamed to
/// "<path>.<time>.damaged", the UTC time `now` as "YYYYMMDDTHHMMSSZ" (with "-<n>" after it when
/// that name is taken), which the retention of damaged files counts from (PruneDamagedFiles).
/// Returns the new path; INTERNAL when it cannot be renamed (the file then stays at `path`),
/// which is logged.
[[nodiscard]] absl::StatusOr<std::string> MoveAsideDamaged(const std::string& path,
                                                           absl::Time now = absl::Now());

/// The damaged files of a folder, after PruneDamagedFiles.
struct DamagedFiles {
  std::size_t kept = 0;     ///< Still there (those of unknown time included).
  std::size_t removed = 0;  ///< Removed now.
};

/// Removes the files in `dir` set aside as damaged more than `retention` before `now` (by the
/// time in their names), logging each; files whose name holds no time (set aside by versions
/// before the time was named) are kept, for an operator to remove. With InfiniteDuration (or a
/// folder that cannot be listed) nothing is removed: the files are only counted.
DamagedFiles PruneDamagedFiles(const std::string& dir, absl::Duration retention,
                               absl::Time now = absl::Now());

/// An exclusive lock on a data folder ("<dir>/clashd.lock", flock), held while the object lives,
/// so that two servers never write one folder: each would overwrite the other's acknowledged
/// edits, and one starting would empty the other's temporary folders. The file holds the
/// holder's pid, for the message. Not inherited by child processes (the CAD workers).
class DataFolderLock {
 public:
  /// FAILED_PRECONDITION naming the holder's pid when another process holds the lock (or this
  /// one, through another object); INTERNAL when the file cannot be opened or locked.
  [[nodiscard]] static absl::StatusOr<DataFolderLock> Acquire(const std::string& dir);
  DataFolderLock(DataFolderLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  DataFolderLock& operator=(DataFolderLock&& other) noexcept;
  DataFolderLock(const DataFolderLock&) = delete;
  DataFolderLock& operator=(const DataFolderLock&) = delete;
  ~DataFolderLock();

 private:
  explicit DataFolderLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace clash::server
