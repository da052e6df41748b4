#include "log.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace clash::server {
namespace {
std::atomic<bool> quiet{false};
}  // namespace

void SetQuietLogging(bool q) { quiet = q; }

bool InfoLogged() { return !quiet; }

void LogLine(LogLevel level, std::string_view message) {
  if (level == LogLevel::kInfo && quiet) return;
  const char* tag = level == LogLevel::kInfo ? "I" : level == LogLevel::kWarning ? "W" : "E";
  std::string line =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ ", absl::Now(), absl::UTCTimeZone()) + tag + " ";
  for (char c : message) line.push_back(c == '\n' ? ' ' : c);
  line.push_back('\n');
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace clash::server
