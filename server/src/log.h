// clashd's log: one line per event on stderr, "<UTC time> <level> <message>", written with a
// single write of at most PIPE_BUF bytes so lines from several threads never interleave, even
// on a pipe (Docker's). (Debian 12's Abseil predates absl/log.)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace clash::server {

enum class LogLevel { kInfo, kWarning, kError };

/// Longest message a line carries, in bytes (with its time stamp and level, a line stays within
/// PIPE_BUF, 4096).
inline constexpr std::size_t kMaxLogMessageBytes = 3968;

/// Writes one log line: LogText(message).
void LogLine(LogLevel level, std::string_view message);

/// `message` as a log line carries it: control characters (line breaks, carriage returns,
/// terminal escapes) written as \xNN, so that text a client sent cannot forge or hide lines;
/// cut to kMaxLogMessageBytes with a note of the bytes left out.
[[nodiscard]] std::string LogText(std::string_view message);

/// `text` in double quotes for a log field: '"' and '\' escaped with '\', cut (on a UTF-8
/// character boundary) at `max_bytes` with a note of the bytes left out. Control characters
/// are left for LogText.
[[nodiscard]] std::string LogQuote(std::string_view text, std::size_t max_bytes = 1024);

/// Silences kInfo lines (tests).
void SetQuietLogging(bool quiet);

/// False when kInfo lines are silenced: callers need not format them.
[[nodiscard]] bool InfoLogged();

}  // namespace clash::server
