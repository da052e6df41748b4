// clashctl's command line: subcommands parsed with CLI11, one client-library call (or a few)
// per command, output through format.h. main() only supplies the streams and the terminal.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace clash::clashctl {

/// What Run needs from its surroundings.
struct Terminal {
  /// Standard error is a terminal: draw the import progress bar there.
  bool err_is_tty = false;
};

/// Runs clashctl with `args` (args[0] is the program name), printing results on `out` and
/// diagnostics on `err`. Returns the exit code (see ExitCode in format.h).
[[nodiscard]] int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                      const Terminal& terminal = {});

}  // namespace clash::clashctl
