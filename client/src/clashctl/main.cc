// clashctl: the command-line client of clashd (see `clashctl --help` and README.md).
#include <openssl/crypto.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "clashctl/cli.h"

int main(int argc, char** argv) {
  // OpenSSL (under gRPC's TLS) must not tear itself down in an atexit handler: gRPC's threads
  // still finish after main returns, and one that does so after that cleanup can no longer free
  // its OpenSSL per-thread state (leaked, and reported by LeakSanitizer) or may still call into
  // the freed library. The first initialisation decides, so this comes before any gRPC call.
  // (Should it fail, OpenSSL initialises later as before.)
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  const std::vector<std::string> args(argv, argv + argc);
  return clash::clashctl::Run(args, std::cout, std::cerr, {.err_is_tty = isatty(2) == 1});
}
