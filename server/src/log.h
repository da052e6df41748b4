// clashd's log: one line per event on stderr, "<UTC time> <level> <message>", written with a
// single write so lines from several threads never interleave. (Debian 12's Abseil predates
// absl/log.)
#pragma once

#include <string_view>

namespace clash::server {

enum class LogLevel { kInfo, kWarning, kError };

/// Writes one log line; newlines in `message` are replaced by spaces.
void LogLine(LogLevel level, std::string_view message);

/// Silences kInfo lines (tests).
void SetQuietLogging(bool quiet);

/// False when kInfo lines are silenced: callers need not format them.
[[nodiscard]] bool InfoLogged();

}  // namespace clash::server
