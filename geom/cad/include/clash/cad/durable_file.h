// Whole files written durably and read with a size cap, shared by the worker protocol, the
// import cache and clashd's stores.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace clash::cad {

/// Closes a file descriptor when it goes out of scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

 private:
  int fd_;
};

/// Replaces `path` with `bytes` atomically and durably: a temporary ".tmp-*" file in the same
/// folder, fsync, rename, fsync of the folder. Readers see the old content or the new, never a
/// mix; after a crash the file holds one of them. RESOURCE_EXHAUSTED when the disk or the
/// user's disk quota is full, INTERNAL on other I/O errors (the temporary is removed). When
/// only the last step fails (the folder cannot be synced), the new content is in place but may
/// not survive a crash: INTERNAL too, with *in_place (when given) set, which tells the caller
/// that readers see the new content. (A file system whose folders cannot be synced at all,
/// EINVAL or ENOTSUP, counts as synced.)
[[nodiscard]] absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                                               bool* in_place = nullptr);

/// The status of a failed write (`what`: e.g. "cannot write <path>") with errno `err`:
/// RESOURCE_EXHAUSTED when the disk or the user's disk quota is full (freeing space helps),
/// INTERNAL otherwise.
[[nodiscard]] absl::Status WriteError(const std::string& what, int err);

/// Creates the folder `dir` and its missing parents durably: each folder created is synced into
/// its parent (fsync of the parent), so that a crash cannot lose a folder, and the files later
/// written in it, that were acknowledged. INTERNAL when a folder cannot be created or synced.
[[nodiscard]] absl::Status MakeDirsDurably(const std::string& dir);

/// Removes `path` durably: unlink, then fsync of its folder, so that a crash cannot bring the
/// file back. OK when it did not exist; INTERNAL on other errors, including a folder that
/// cannot be synced (the file is then gone but may come back after a crash).
[[nodiscard]] absl::Status RemoveFileDurably(const std::string& path);

/// Removes the temporaries of WriteFileAtomically in `dir` (".tmp-<name>-<writer>-<n>", the
/// writer as WriterTag gives it) that a crash or a kill left behind: those of this process (call
/// it when no write into `dir` is under way) and those whose writer no longer runs. A writer is
/// the process instance, not only its pid: a temporary whose pid now belongs to another process
/// (the pid was reused after the writer died; its start time differs) or that was written before
/// the machine last booted is removed. A running writer's are kept: it may still rename them
/// (the import cache is shared with other processes on the same machine). Temporaries named by
/// older versions (".tmp-<name>-<pid>-<n>") are judged by their pid alone. Files named otherwise
/// are not touched.
void RemoveAbandonedTemporaries(const std::string& dir);

/// Removes every temporary of WriteFileAtomically in `dir`, whoever wrote it: for a folder that
/// only this process writes (its owner holds a lock on it, such as clashd's data-folder lock),
/// when none of its own writes into `dir` is under way. Files named otherwise are not touched.
void RemoveAllTemporaries(const std::string& dir);

/// The whole regular file at `path`. NOT_FOUND when missing, RESOURCE_EXHAUSTED above
/// `max_bytes`, INTERNAL when it is not a regular file, cannot be read or is shorter than it
/// claimed.
[[nodiscard]] absl::StatusOr<std::string> ReadFileCapped(const std::string& path,
                                                         std::size_t max_bytes);

/// At most the first `max_bytes` of the regular file at `path` (files whose size the file system
/// does not report, such as /proc's, too). Errors as ReadFileCapped, except that a longer file is
/// no error.
[[nodiscard]] absl::StatusOr<std::string> ReadFilePrefix(const std::string& path,
                                                         std::size_t max_bytes);

namespace internal {
/// The writer part of the temporaries' names for process `pid`: "<pid>.<start>.<boot>", its
/// start time (clock ticks after boot, /proc/<pid>/stat) and the first 8 hex digits of the
/// machine's boot id, which together tell it from another process given the same pid later;
/// "<pid>" alone when /proc does not tell them (nullopt when no process `pid` can be read).
[[nodiscard]] std::optional<std::string> WriterTag(int pid);

/// For tests of failing disks: the writes and removals above call `fsync_fn` instead of fsync
/// (for files and folders alike, in every thread; nullptr restores fsync).
void SetFsyncForTesting(int (*fsync_fn)(int));
}  // namespace internal

}  // namespace clash::cad
