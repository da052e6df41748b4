#include "clash/cad/durable_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace clash::cad {

ScopedFd::~ScopedFd() { close(fd_); }

namespace {

// WriteFileAtomically's temporaries: kTemporaryPrefix + "<name>-<writer>-<n>", the writer as
// internal::WriterTag names it ("<pid>" alone in older versions).
constexpr absl::string_view kTemporaryPrefix = ".tmp-";

// The start time of process `pid` in clock ticks after boot (field 22 of /proc/<pid>/stat), or
// nullopt when it cannot be read (no such process, or no /proc).
std::optional<uint64_t> StartTicks(pid_t pid) {
  const absl::StatusOr<std::string> stat =
      ReadFilePrefix(absl::StrCat("/proc/", pid, "/stat"), 4096);
  if (!stat.ok()) return std::nullopt;
  // "<pid> (<comm>) <state> <ppid> ...": the command may hold spaces and parentheses, so the
  // fields are counted from the last ')'; the state is field 3.
  const std::size_t close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(*stat).substr(close + 1), ' ', absl::SkipEmpty());
  uint64_t ticks = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[22 - 3], &ticks)) return std::nullopt;
  return ticks;
}

// The first 8 hex digits of this boot's id (random at every boot), or "" without /proc.
const std::string& BootTag() {
  static const std::string tag = [] {
    const absl::StatusOr<std::string> id = ReadFilePrefix("/proc/sys/kernel/random/boot_id", 64);
    if (!id.ok() || id->size() < 8) return std::string();
    const std::string first = id->substr(0, 8);
    const bool hex = std::all_of(first.begin(), first.end(), [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    });
    return hex ? first : std::string();
  }();
  return tag;
}

// True when process `pid` exists (kill(pid, 0): ESRCH when it does not; EPERM means it runs
// under another user).
bool PidExists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// This process's WriterTag, computed once per process (a forked child computes its own).
std::string OwnWriterTag() {
  static std::mutex mu;
  static pid_t pid = 0;
  static std::string tag;
  std::lock_guard lock(mu);
  if (pid != getpid()) {
    pid = getpid();
    tag = internal::WriterTag(pid).value_or(absl::StrCat(pid));
  }
  return tag;
}

// Whether the writer named `writer` (a WriterTag, or an older version's "<pid>") may still be
// writing: false for this process, for a process that no longer runs, for another process that
// now has the writer's pid (its start time differs), and for a writer from before the last boot.
// When that cannot be told (no /proc, or a process whose /proc entry is hidden), any process
// with the pid may be it.
// nullopt when `writer` is no writer's tag.
std::optional<bool> WriterMayRun(absl::string_view writer) {
  const std::vector<absl::string_view> parts = absl::StrSplit(writer, '.');
  int64_t pid = 0;
  if ((parts.size() != 1 && parts.size() != 3) || !absl::SimpleAtoi(parts[0], &pid) || pid <= 0 ||
      pid > std::numeric_limits<pid_t>::max()) {
    return std::nullopt;
  }
  uint64_t start = 0;
  if (parts.size() == 3 && (!absl::SimpleAtoi(parts[1], &start) || parts[2].empty())) {
    return std::nullopt;
  }
  const auto p = static_cast<pid_t>(pid);
  if (p == getpid()) return false;
  if (parts.size() == 1) return PidExists(p);  // an older version's: the pid is all there is
  if (!BootTag().empty() && parts[2] != BootTag()) return false;  // before the last boot
  if (const std::optional<uint64_t> now = StartTicks(p)) return *now == start;
  return PidExists(p);  // gone, or its /proc entry is hidden (hidepid): kept while it may run
}

std::string Errno(int err) { return std::strerror(err); }

// fsync, or what a test put in its place (internal::SetFsyncForTesting).
std::atomic<int (*)(int)> g_fsync{&::fsync};
int Fsync(int fd) { return g_fsync.load(std::memory_order_relaxed)(fd); }

bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Makes the folder's entries (a rename, an unlink) durable: INTERNAL when they may not be (the
// folder cannot be opened or synced: after EIO the kernel may have dropped the entries it
// failed to write, so the change may not survive a crash). File systems that cannot sync a
// folder at all (EINVAL, ENOTSUP: some network and shared-folder mounts) are taken as they are
// (PostgreSQL likewise ignores EINVAL there): refusing every write would serve nothing.
absl::Status SyncDir(const std::string& dir, const std::string& what) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat(what, ": cannot open folder ", dir, " to sync it: ", Errno(errno)));
  }
  int rc;
  do rc = Fsync(fd);
  while (rc != 0 && errno == EINTR);
  const int err = errno;
  close(fd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP) {
    return absl::InternalError(absl::StrCat(what, ": cannot sync folder ", dir, ": ", Errno(err)));
  }
  return absl::OkStatus();
}

}  // namespace

void internal::SetFsyncForTesting(int (*fsync_fn)(int)) {
  g_fsync.store(fsync_fn != nullptr ? fsync_fn : &::fsync, std::memory_order_relaxed);
}

absl::Status WriteError(const std::string& what, int err) {
  const std::string message = absl::StrCat(what, ": ", Errno(err));
  return err == ENOSPC || err == EDQUOT ? absl::ResourceExhaustedError(message)
                                        : absl::InternalError(message);
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes, bool* in_place) {
  if (in_place != nullptr) *in_place = false;
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path target(path);
  const std::string dir = target.parent_path().string();
  const std::string tmp = absl::StrCat(dir, "/", kTemporaryPrefix, target.filename().string(), "-",
                                       OwnWriterTag(), "-", counter++);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return WriteError(absl::StrCat("cannot create ", tmp), errno);
  const bool written = WriteAll(fd, bytes) && Fsync(fd) == 0;
  const int write_err = errno;
  const bool closed = close(fd) == 0;
  const int close_err = errno;  // (a quota may only be reported at close, on NFS)
  if (!written || !closed || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = !written ? write_err : !closed ? close_err : errno;
    unlink(tmp.c_str());
    return WriteError(absl::StrCat("cannot write ", path), err);
  }
  if (in_place != nullptr) *in_place = true;
  return SyncDir(dir, absl::StrCat("wrote ", path, " but it may not survive a crash"));
}

absl::Status MakeDirsDurably(const std::string& dir) {
  // The folders to create, innermost first; then made from the outermost, each synced into
  // its parent.
  std::vector<std::filesystem::path> missing;
  std::error_code ec;
  for (std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
       !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;  // (a root)
  }
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create folder ", dir, ": ", ec.message()));
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    const std::filesystem::path parent = it->has_parent_path() ? it->parent_path() : ".";
    if (absl::Status st = SyncDir(parent.string(), absl::StrCat("created folder ", it->string(),
                                                                " but it may not survive a crash"));
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status RemoveFileDurably(const std::string& path) {
  if (unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", Errno(errno)));
  }
  return SyncDir(std::filesystem::path(path).parent_path().string(),
                 absl::StrCat("removed ", path, " but a crash may bring it back"));
}

std::optional<std::string> internal::WriterTag(int pid) {
  const auto p = static_cast<pid_t>(pid);
  if (const std::optional<uint64_t> start = StartTicks(p); start && !BootTag().empty()) {
    return absl::StrCat(pid, ".", *start, ".", BootTag());
  }
  if (!PidExists(p)) return std::nullopt;
  return absl::StrCat(pid);
}

namespace {

// Removes the temporaries in `dir` whose writer `remove` accepts (it gets the writer's part of
// the name, "" when the name holds none).
void RemoveTemporaries(const std::string& dir,
                       const std::function<bool(absl::string_view writer)>& remove) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::filesystem::directory_entry& e = *it;
    const std::string name = e.path().filename().string();
    if (!absl::StartsWith(name, kTemporaryPrefix)) continue;
    // The writer is the second field from the end ("<name>" may hold dashes itself).
    const std::vector<absl::string_view> fields = absl::StrSplit(name, '-');
    const absl::string_view writer = fields.size() >= 4 ? fields[fields.size() - 2] : "";
    std::error_code remove_ec;
    if (remove(writer)) std::filesystem::remove(e.path(), remove_ec);
  }
}

}  // namespace

void RemoveAbandonedTemporaries(const std::string& dir) {
  RemoveTemporaries(dir, [](absl::string_view writer) {
    const std::optional<bool> may_run = WriterMayRun(writer);
    return may_run.has_value() && !*may_run;
  });
}

void RemoveAllTemporaries(const std::string& dir) {
  RemoveTemporaries(dir, [](absl::string_view) { return true; });
}

namespace {

// `path` opened for reading (its descriptor, and its status in `st`) when it is a regular file.
// O_NONBLOCK: a FIFO planted where a file should be (by a hostile worker) must not block the
// open; it is refused as not a regular file. Regular files ignore the flag. Files read here are
// written by clashd itself or its workers, never as symbolic links: a link (to a device, a
// secret) is refused, and a terminal never becomes clashd's controlling one.
absl::StatusOr<int> OpenRegularFile(const std::string& path, struct stat* st) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", path));
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", Errno(errno)));
  }
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    close(fd);
    return absl::InternalError(absl::StrCat(path, " is not a regular file"));
  }
  return fd;
}

// Reads from `fd` into `buffer` until it is full or the file ends; the bytes read.
std::size_t ReadUpTo(int fd, std::string* buffer) {
  std::size_t done = 0;
  while (done < buffer->size()) {
    const ssize_t n = read(fd, buffer->data() + done, buffer->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

}  // namespace

absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, std::size_t max_bytes) {
  struct stat st {};
  const absl::StatusOr<int> opened = OpenRegularFile(path, &st);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  std::string text(max_bytes, '\0');
  text.resize(ReadUpTo(fd, &text));
  close(fd);
  return text;
}

absl::StatusOr<std::string> ReadFileCapped(const std::string& path, std::size_t max_bytes) {
  struct stat st {};
  const absl::StatusOr<int> opened = OpenRegularFile(path, &st);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  if (static_cast<std::size_t>(st.st_size) > max_bytes) {
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat(path, " is ", st.st_size, " bytes, above the limit of ", max_bytes));
  }
  std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
  const std::size_t done = ReadUpTo(fd, &bytes);
  close(fd);
  if (done != bytes.size()) return absl::InternalError(absl::StrCat("short read of ", path));
  return bytes;
}

}  // namespace clash::cad
