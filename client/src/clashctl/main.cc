// clashctl: the command-line client of clashd (see `clashctl --help` and README.md).
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "clashctl/cli.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  return clash::clashctl::Run(args, std::cout, std::cerr, {.err_is_tty = isatty(2) == 1});
}
