#include "log.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace clash::server {
namespace {
std::atomic<bool> quiet{false};

// The largest prefix of `text` of at most `max` bytes that does not end inside a UTF-8
// character (it backs off over continuation bytes, at most three).
std::size_t CutAt(std::string_view text, std::size_t max) {
  if (text.size() <= max) return text.size();
  std::size_t n = max;
  for (int k = 0; k < 3 && n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80; ++k) {
    --n;
  }
  return n;
}

// The note that ends a cut text.
std::string CutNote(std::size_t left_out) { return absl::StrCat("...[", left_out, " more bytes]"); }
}  // namespace

void SetQuietLogging(bool q) { quiet = q; }

bool InfoLogged() { return !quiet; }

std::string LogText(std::string_view message) {
  // A message is cut where its escaped form passes the limit less room for the note.
  constexpr std::size_t kLimit = kMaxLogMessageBytes - 32;
  std::string out;
  std::size_t i = 0;
  for (; i < message.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(message[i]);
    const bool control = c < 0x20 || c == 0x7f;
    if (out.size() + (control ? 4 : 1) > kLimit) break;
    if (control) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (i == message.size()) return out;
  // Not inside a UTF-8 character (its bytes, all >= 0x80, were copied as they are).
  // (Only bytes >= 0x80 are given back: an escaped control character before an invalid
  // continuation byte stays whole.)
  for (int k = 0; k < 3 && i > 0 && (static_cast<unsigned char>(message[i]) & 0xC0) == 0x80 &&
                  static_cast<unsigned char>(message[i - 1]) >= 0x80;
       ++k) {
    out.pop_back();
    --i;
  }
  return out + CutNote(message.size() - i);
}

std::string LogQuote(std::string_view text, std::size_t max_bytes) {
  const std::size_t n = CutAt(text, max_bytes);
  std::string out = "\"";
  for (char c : text.substr(0, n)) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  if (n < text.size()) out += CutNote(text.size() - n);
  return out;
}

void LogLine(LogLevel level, std::string_view message) {
  if (level == LogLevel::kInfo && quiet) return;
  const char* tag = level == LogLevel::kInfo ? "I" : level == LogLevel::kWarning ? "W" : "E";
  std::string line =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ ", absl::Now(), absl::UTCTimeZone()) + tag + " ";
  line += LogText(message);
  line.push_back('\n');
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace clash::server
