#include "cpu_latency.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "clash/geom/status_macros.h"

namespace clash::server {
namespace {

absl::Status OpenError(const std::string& device, int err) {
  const std::string message = absl::StrCat("cannot open ", device, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  if (err == ENOENT || err == ENODEV || err == ENXIO) return absl::NotFoundError(message);
  return absl::UnavailableError(message);
}

// Writes a limit to the open device `fd` (named `what` in the error): the device takes it as a
// binary 32-bit integer (or as hexadecimal text).
absl::Status WriteLimit(int fd, int32_t microseconds, const std::string& what) {
  ssize_t written;
  do {
    written = write(fd, &microseconds, sizeof microseconds);
  } while (written < 0 && errno == EINTR);
  if (written == static_cast<ssize_t>(sizeof microseconds)) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("cannot write ", what, ": ",
                                             written < 0 ? std::strerror(errno) : "short write"));
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
  CpuLatencyHold hold(fd, microseconds);  // closes the device on failure
  if (absl::Status s = WriteLimit(fd, microseconds, device); !s.ok()) return s;
  return hold;
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

absl::Status CpuLatencyHold::Set(int32_t microseconds) {
  if (fd_ < 0) return absl::FailedPreconditionError("no CPU latency device held");
  CLASH_RETURN_IF_ERROR(WriteLimit(fd_, microseconds, "the CPU latency limit"));
  microseconds_ = microseconds;
  return absl::OkStatus();
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

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

CpuLatencyGovernor::CpuLatencyGovernor(CpuLatencyHold hold, std::chrono::milliseconds idle)
    : hold_(std::move(hold)), limit_(hold_.microseconds()), idle_(idle) {
  if (idle_.count() <= 0) {
    engaged_ = true;
    return;
  }
  // Let go until the first call; should the device refuse, the limit simply stays held.
  engaged_ = !hold_.Set(kNoCpuLatencyLimit).ok();
  thread_ = std::thread([this] { Run(); });
}

CpuLatencyGovernor::~CpuLatencyGovernor() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CpuLatencyGovernor::Touch() {
  last_call_ns_.store(NowNs());
  if (engaged_.load()) return;
  std::lock_guard lock(mu_);
  if (engaged_.load()) return;
  if (hold_.Set(limit_).ok()) {
    engaged_.store(true);
    cv_.notify_all();
  }
}

int32_t CpuLatencyGovernor::held_microseconds() const { return engaged_.load() ? limit_ : -1; }

void CpuLatencyGovernor::Run() {
  const int64_t idle_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(idle_).count();
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (!engaged_.load()) {
      cv_.wait(lock, [&] { return stop_ || engaged_.load(); });
      continue;
    }
    const int64_t last = last_call_ns_.load();
    const int64_t now = NowNs();
    if (now - last < idle_ns) {
      cv_.wait_for(lock, std::chrono::nanoseconds(last + idle_ns - now));
      continue;
    }
    // Sequentially consistent: a Touch that still saw the limit held has stored its time
    // before this load, and one that comes later sees it let go and takes the lock to hold it.
    engaged_.store(false);
    if (last_call_ns_.load() != last) {
      engaged_.store(true);  // a call came meanwhile
      continue;
    }
    if (!hold_.Set(kNoCpuLatencyLimit).ok()) {
      engaged_.store(true);  // the device refuses: the limit stays, as with idle 0
      cv_.wait(lock, [&] { return stop_; });
    }
  }
}

}  // namespace clash::server
