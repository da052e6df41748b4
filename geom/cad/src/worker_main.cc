// clash-cad-worker: reads one STEP/IGES file with OCCT in its own process and writes the result
// (the whole file as one mesh, or its assembly tree; or the error) to a result file;
// clash::cad::ImportIsolated and ImportAssemblyIsolated start it under resource limits.
//
//   clash-cad-worker [--kind=mesh|assembly] [--linear-deflection-mm=X] [--relative-deflection=X]
//                    [--angular-deflection-rad=X] [--max-triangles=N] [--parallel=0|1]
//                    [--max-output-bytes=N] <input-path> <output-path>
//
// Exit codes: 0 result file written (mesh or error), 64 bad arguments, 74 result not written.
// Test hook: CLASH_WORKER_TEST_FAULT=crash|hang|spin|oom|garbage|exit makes the worker crash,
// sleep forever, burn CPU forever, allocate until out of memory, write garbage, or exit with 3
// before reading the input, so tests can prove each failure path without relying on OCCT bugs.
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "clash/cad/assembly.h"
#include "clash/cad/tessellate.h"
#include "worker_format.h"

namespace {

using clash::cad::ImportedAssembly;
using clash::cad::MeshBuffers;
using clash::cad::TessellationOptions;
namespace internal = clash::cad::internal;

bool ParseDouble(std::string_view text, double* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

bool ParseSize(std::string_view text, std::size_t* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// Runs the requested test fault; returns only for "garbage" (after writing it) or no fault.
int RunTestFault(std::string_view fault, const std::string& output_path) {
  if (fault == "crash") {
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    _exit(1);
  }
  if (fault == "hang") {
    for (;;) pause();
  }
  if (fault == "spin") {
    volatile uint64_t counter = 0;
    for (;;) counter = counter + 1;
  }
  if (fault == "oom") {
    // Allocate and touch 64 MiB blocks until the address-space limit makes new throw.
    // The blocks are freed while the exception unwinds, so the result file can still be written.
    std::vector<std::unique_ptr<char[]>> blocks;
    for (;;) {
      blocks.push_back(std::make_unique<char[]>(64u << 20));
      std::memset(blocks.back().get(), 1, 64u << 20);
    }
  }
  if (fault == "garbage") {
    std::FILE* file = std::fopen(output_path.c_str(), "wb");
    if (file == nullptr) return internal::kWorkerExitIoError;
    const char garbage[] = "CLSHMSH1\x01\x00\x00\x00\x00\x00\x00\x00not a mesh at all";
    std::fwrite(garbage, 1, sizeof(garbage) - 1, file);
    return std::fclose(file) == 0 ? internal::kWorkerExitOk : internal::kWorkerExitIoError;
  }
  if (fault == "exit") _exit(3);
  return -1;
}

int Usage(const char* message) {
  std::fprintf(stderr, "clash-cad-worker: %s\n", message);
  return internal::kWorkerExitUsage;
}

// What to read the file as.
enum class Kind { kMesh, kAssembly };

// The command line.
struct Args {
  Kind kind = Kind::kMesh;
  TessellationOptions options;
  std::size_t max_output_bytes = std::size_t{2} << 30;
  std::string input;
  std::string output;
};

// Fills `args`; returns kWorkerExitOk or kWorkerExitUsage (after printing why).
int ParseArgs(int argc, char** argv, Args* args) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!arg.starts_with("--")) {
      positional.emplace_back(arg);
      continue;
    }
    const std::size_t eq = arg.find('=');
    if (eq == std::string_view::npos) return Usage("flags take the form --name=value");
    const std::string_view name = arg.substr(2, eq - 2);
    const std::string_view value = arg.substr(eq + 1);
    TessellationOptions& options = args->options;
    bool ok = false;
    if (name == "kind") {
      ok = value == "mesh" || value == "assembly";
      args->kind = value == "assembly" ? Kind::kAssembly : Kind::kMesh;
    } else if (name == "linear-deflection-mm") {
      ok = ParseDouble(value, &options.linear_deflection_mm);
    } else if (name == "relative-deflection") {
      ok = ParseDouble(value, &options.relative_deflection);
    } else if (name == "angular-deflection-rad") {
      ok = ParseDouble(value, &options.angular_deflection_rad);
    } else if (name == "max-triangles") {
      ok = ParseSize(value, &options.max_triangles);
    } else if (name == "max-output-bytes") {
      ok = ParseSize(value, &args->max_output_bytes);
    } else if (name == "parallel") {
      ok = value == "0" || value == "1";
      options.parallel = value == "1";
    }
    if (!ok) return Usage(("bad flag: " + std::string(arg)).c_str());
  }
  if (positional.size() != 2) return Usage("expected <input-path> <output-path>");
  args->input = positional[0];
  args->output = positional[1];
  return internal::kWorkerExitOk;
}

// Reads the input with `read`, caps the result's encoded size and writes the result file.
template <typename T, typename Read>
int ImportAndWrite(const Args& args, Read read) {
  absl::StatusOr<T> result = read(args.input, args.options);
  if (result.ok() && internal::EncodedSize(*result) > args.max_output_bytes) {
    result = absl::ResourceExhaustedError(
        absl::StrCat("mesh: the result of ", internal::EncodedSize(*result),
                     " bytes exceeds the output limit of ", args.max_output_bytes, " bytes"));
  }
  const absl::Status written = internal::WriteWorkerOutput(args.output, result);
  if (!written.ok()) {
    std::fprintf(stderr, "clash-cad-worker: %s\n", std::string(written.message()).c_str());
    return internal::kWorkerExitIoError;
  }
  return internal::kWorkerExitOk;
}

int Run(const Args& args) {
  if (const char* fault = std::getenv("CLASH_WORKER_TEST_FAULT"); fault != nullptr) {
    const int code = RunTestFault(fault, args.output);
    if (code >= 0) return code;
  }
  if (args.kind == Kind::kAssembly) {
    return ImportAndWrite<ImportedAssembly>(args, clash::cad::ReadAssembly);
  }
  return ImportAndWrite<MeshBuffers>(args, clash::cad::ReadAndTessellate);
}

// Writes an out-of-memory error as the result of `args`' kind.
int WriteOutOfMemory(const Args& args) {
  if (args.output.empty()) return internal::kWorkerExitUsage;
  const absl::Status error = absl::ResourceExhaustedError("import: out of memory");
  const absl::Status written =
      args.kind == Kind::kAssembly
          ? internal::WriteWorkerOutput<ImportedAssembly>(args.output, error)
          : internal::WriteWorkerOutput<MeshBuffers>(args.output, error);
  return written.ok() ? internal::kWorkerExitOk : internal::kWorkerExitIoError;
}

}  // namespace

// OCCT keeps one-time registrations (parameter tables, type descriptors) for the process
// lifetime; in sanitizer builds LeakSanitizer would report them at exit and turn a successful
// import into exit code 1. Only leaks allocated inside OCCT's libTK* are suppressed.
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

int main(int argc, char** argv) {
  // ReadAndTessellate and ReadAssembly catch their own bad_alloc; this catches one thrown while
  // parsing arguments, running the "oom" test fault, or writing the result.
  Args args;
  try {
    if (const int code = ParseArgs(argc, argv, &args); code != internal::kWorkerExitOk) {
      return code;
    }
    return Run(args);
  } catch (const std::bad_alloc&) {
    return WriteOutOfMemory(args);
  }
}
