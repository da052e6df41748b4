#include "cpu_latency.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace clash::server {
namespace {

absl::Status OpenError(const std::string& device, int err) {
  const std::string message = absl::StrCat("cannot open ", device, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  if (err == ENOENT || err == ENODEV || err == ENXIO) return absl::NotFoundError(message);
  return absl::UnavailableError(message);
}

}  // namespace

absl::StatusOr<CpuLatencyHold> CpuLatencyHold::Acquire(int32_t microseconds,
                                                       const std::string& device) {
  if (microseconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU wake-up latency limit ", microseconds, " µs is negative"));
  }
  const int fd = open(device.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return OpenError(device, errno);
  // The device takes the limit as a binary 32-bit integer (or as hexadecimal text).
  ssize_t written;
  do {
    written = write(fd, &microseconds, sizeof microseconds);
  } while (written < 0 && errno == EINTR);
  if (written != static_cast<ssize_t>(sizeof microseconds)) {
    const int err = written < 0 ? errno : EIO;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot write ", device, ": ", std::strerror(err)));
  }
  return CpuLatencyHold(fd, microseconds);
}

absl::StatusOr<int32_t> CpuLatencyHold::Current(const std::string& device) {
  const int fd = open(device.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenError(device, errno);
  int32_t value = 0;
  ssize_t got;
  do {
    got = read(fd, &value, sizeof value);
  } while (got < 0 && errno == EINTR);
  const int err = errno;
  close(fd);
  if (got != static_cast<ssize_t>(sizeof value)) {
    return absl::UnavailableError(
        absl::StrCat("cannot read ", device, ": ", got < 0 ? std::strerror(err) : "short read"));
  }
  return value;
}

CpuLatencyHold::CpuLatencyHold(CpuLatencyHold&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), microseconds_(other.microseconds_) {}

CpuLatencyHold& CpuLatencyHold::operator=(CpuLatencyHold&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    microseconds_ = other.microseconds_;
  }
  return *this;
}

CpuLatencyHold::~CpuLatencyHold() {
  if (fd_ >= 0) close(fd_);  // the kernel drops the limit with the last reference
}

}  // namespace clash::server
