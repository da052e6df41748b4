#include "storage.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "clash/geom/status_macros.h"
#include "log.h"
#include "openssl/sha.h"

namespace clash::server {

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool IsHexId(const std::string& id, char prefix) {
  return id.size() == 33 && id[0] == prefix && IsLowerHex(std::string_view(id).substr(1));
}

absl::Status ForEachInFolder(
    const std::string& dir,
    const std::function<absl::Status(const std::filesystem::directory_entry&)>& fn) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    CLASH_RETURN_IF_ERROR(fn(*it));
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, " cannot be listed: ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::set<std::string>> IdsInFolder(const std::string& dir, char prefix) {
  std::set<std::string> ids;
  CLASH_RETURN_IF_ERROR(ForEachInFolder(dir, [&](const std::filesystem::directory_entry& entry) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, ".pb")) return absl::OkStatus();
    std::string id = name.substr(0, name.size() - 3);
    if (IsHexId(id, prefix)) ids.insert(std::move(id));
    return absl::OkStatus();
  }));
  return ids;
}

std::string RandomHex(int words) {
  std::random_device rd;
  std::string s;
  for (int i = 0; i < words; ++i) absl::StrAppendFormat(&s, "%08x", rd());
  return s;
}

bool FileGone(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::symlink_status(path, ec);
  return st.type() == std::filesystem::file_type::not_found;
}

absl::Status MakeDirs(const std::string& dir) { return cad::MakeDirsDurably(dir); }

namespace {

constexpr std::string_view kRecordMagic = "CLASHREC";
constexpr uint32_t kRecordFormat = 1;

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(std::string_view in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

std::array<unsigned char, SHA256_DIGEST_LENGTH> Sha256Of(std::string_view bytes) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest;
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest.data());
  return digest;
}

}  // namespace

void SealRecordInPlace(std::string* record) {
  const std::string_view payload = std::string_view(*record).substr(kRecordHeaderBytes);
  std::string header;
  header.reserve(kRecordHeaderBytes);
  header.append(kRecordMagic);
  PutLittleEndian(kRecordFormat, 4, &header);
  PutLittleEndian(payload.size(), 8, &header);
  const auto digest = Sha256Of(payload);
  header.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  record->replace(0, kRecordHeaderBytes, header);
}

std::string SealRecord(std::string_view payload) {
  std::string out(kRecordHeaderBytes, '\0');
  out.append(payload);
  SealRecordInPlace(&out);
  return out;
}

absl::StatusOr<std::string_view> UnsealRecord(std::string_view file) {
  static_assert(kRecordHeaderBytes == 8 + 4 + 8 + SHA256_DIGEST_LENGTH);
  if (!file.starts_with(kRecordMagic.substr(0, std::min(file.size(), kRecordMagic.size())))) {
    return file;  // written before records were sealed
  }
  if (file.size() < kRecordHeaderBytes || !file.starts_with(kRecordMagic)) {
    return absl::DataLossError(
        absl::StrCat("record file cut short in its header (", file.size(), " bytes)"));
  }
  const uint64_t format = GetLittleEndian(file.substr(8), 4);
  if (format != kRecordFormat) {
    return absl::DataLossError(absl::StrCat("record file of format ", format,
                                            "; this clashd "
                                            "reads format ",
                                            kRecordFormat));
  }
  const uint64_t size = GetLittleEndian(file.substr(12), 8);
  const std::string_view payload = file.substr(kRecordHeaderBytes);
  if (payload.size() != size) {
    return absl::DataLossError(absl::StrCat("record file holds ", payload.size(),
                                            " bytes of payload; its header says ", size));
  }
  const auto digest = Sha256Of(payload);
  if (file.substr(20, digest.size()) !=
      std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size())) {
    return absl::DataLossError("record file's payload does not match its hash (damaged)");
  }
  return payload;
}

namespace {

// The time in a damaged file's name (MoveAsideDamaged).
constexpr const char* kDamagedTimeFormat = "%E4Y%m%dT%H%M%SZ";  // (%Y would read every digit)

}  // namespace

bool IsDamagedFileName(std::string_view name) {
  return name.size() > kDamagedSuffix.size() && name.ends_with(kDamagedSuffix);
}

std::optional<absl::Time> DamagedSince(std::string_view name) {
  if (!IsDamagedFileName(name)) return std::nullopt;
  name.remove_suffix(kDamagedSuffix.size());
  const std::size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  std::string_view stamp = name.substr(dot + 1);
  stamp = stamp.substr(0, stamp.find('-'));  // (without the "-<n>" of a name taken)
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(kDamagedTimeFormat, std::string(stamp), absl::UTCTimeZone(), &t, &error)) {
    return std::nullopt;
  }
  return t;
}

absl::StatusOr<std::string> MoveAsideDamaged(const std::string& path, absl::Time now) {
  const std::string stamp = absl::FormatTime(kDamagedTimeFormat, now, absl::UTCTimeZone());
  // Only this server writes the folder (DataFolderLock), and its store moves one file at a
  // time: a name found free stays free until the rename.
  std::string aside;
  for (int n = 1; n <= 1000; ++n) {
    std::string name = absl::StrCat(path, ".", stamp, n > 1 ? absl::StrCat("-", n) : "",
                                    std::string(kDamagedSuffix));
    if (FileGone(name)) {
      aside = std::move(name);
      break;
    }
  }
  const bool moved = !aside.empty() && std::rename(path.c_str(), aside.c_str()) == 0;
  if (!moved) {
    const std::string why = aside.empty() ? "no free name" : std::strerror(errno);
    const absl::Status error = absl::InternalError(
        absl::StrCat("cannot move ", path, " aside as damaged: ", why, "; it stays where it is"));
    LogLine(LogLevel::kError, std::string(error.message()));
    return error;
  }
  return aside;
}

DamagedFiles PruneDamagedFiles(const std::string& dir, absl::Duration retention, absl::Time now) {
  DamagedFiles out;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!IsDamagedFileName(name)) continue;
    const std::optional<absl::Time> since = DamagedSince(name);
    std::error_code remove_ec;
    if (since && now - *since > retention && std::filesystem::remove(it->path(), remove_ec)) {
      ++out.removed;
      LogLine(LogLevel::kWarning,
              absl::StrCat("removed ", it->path().string(), ", set aside as damaged on ",
                           absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", *since, absl::UTCTimeZone()),
                           ", after the ", absl::ToDoubleHours(retention) / 24,
                           " days damaged files are kept (--damaged-file-retention-days)"));
      continue;
    }
    if (remove_ec) {
      LogLine(LogLevel::kError,
              absl::StrCat("cannot remove ", it->path().string(), ": ", remove_ec.message()));
    }
    ++out.kept;
  }
  return out;
}

absl::StatusOr<DataFolderLock> DataFolderLock::Acquire(const std::string& dir) {
  const std::string path = dir + "/clashd.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  DataFolderLock lock(fd);  // closes it on every return below
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      return absl::InternalError(absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
    }
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    std::string holder(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    holder.erase(
        std::remove_if(holder.begin(), holder.end(), [](char c) { return c < '0' || c > '9'; }),
        holder.end());
    return absl::FailedPreconditionError(
        absl::StrCat("the data folder ", dir, " is in use by another clashd",
                     holder.empty() ? std::string() : absl::StrCat(" (pid ", holder, ")"), ": ",
                     path, " is locked; one folder serves one server"));
  }
  // The holder's pid, for the message above (best effort: the lock is what counts).
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, pid.data(), pid.size(), 0);
  }
  return lock;
}

DataFolderLock& DataFolderLock::operator=(DataFolderLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

DataFolderLock::~DataFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // (closing the last descriptor releases the lock)
}

}  // namespace clash::server
