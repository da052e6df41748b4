// clash-cad-worker: reads one STEP/IGES file with OCCT in its own process and writes the result
// (the whole file as one mesh, or its assembly tree; or the error) to a result file;
// clash::cad::ImportIsolated and ImportAssemblyIsolated start it under resource limits.
//
//   clash-cad-worker [--kind=mesh|assembly] [--linear-deflection-mm=X] [--relative-deflection=X]
//                    [--angular-deflection-rad=X] [--max-triangles=N] [--parallel=0|1]
//                    [--max-output-bytes=N] [--temp-dir=DIR] [--test-fault=F]
//                    [--] <input-path> <output-path>
//   clash-cad-worker --pool
//
// Every argument that starts with "--" is a flag until a lone "--"; the arguments after it are
// paths, whatever their names (a file may be called "--x.step"). ImportIsolated always passes it.
//
// Exit codes: 0 result file written (mesh or error), 64 bad arguments, 74 result not written.
// Test hook: CLASH_WORKER_TEST_FAULT=crash|hang|spin|oom|garbage|exit (or --test-fault) makes the
// worker crash, sleep forever, burn CPU forever, allocate until out of memory, write garbage, or
// exit with 3 before reading the input, so tests can prove each failure path without relying on
// OCCT bugs.
//
// --pool (WorkerPool): the worker loads OCCT and initialises its readers, writes one byte 'R' to
// fd 1 (then points fd 1 at /dev/null), and blocks reading one job from fd 0: the arguments
// above, each ended by a NUL byte, up to end of file. An empty job (the pool shut down or its
// process died) exits at once. --temp-dir becomes TMPDIR and receives stderr.txt, which is how a
// fresh worker is started too; the job's --test-fault replaces the environment variable. The
// caller applies the resource limits to the process before it sends the job. One job, then exit:
// a process that ran OCCT on an untrusted file is never reused.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>  // setenv
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
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
#include "clash/cad/isolated_import.h"
#include "clash/cad/tessellate.h"
#include "occt_warm_up.h"
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
  std::size_t max_output_bytes = clash::cad::kDefaultMaxOutputBytes;
  std::string input;
  std::string output;
  /// Private temp folder (--temp-dir): becomes TMPDIR and holds stderr.txt; empty: unchanged.
  std::string temp_dir;
  /// Test fault (--test-fault); empty: $CLASH_WORKER_TEST_FAULT.
  std::string test_fault;
};

// Fills `args`; returns kWorkerExitOk or kWorkerExitUsage (after printing why).
int ParseArgs(int argc, char** argv, Args* args) {
  std::vector<std::string> positional;
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (flags_ended || !arg.starts_with("--")) {
      positional.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
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
    } else if (name == "temp-dir") {
      ok = !value.empty();
      args->temp_dir = value;
    } else if (name == "test-fault") {
      ok = true;
      args->test_fault = value;
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
  if (!result.ok() && !internal::IsWorkerErrorCode(result.status().code())) {
    // The caller refuses any other code as malformed output: this one is a fault of ours, and
    // keeps its name in the message.
    result = absl::InternalError(absl::StrCat(absl::StatusCodeToString(result.status().code()),
                                              ": ", result.status().message()));
  }
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
  const char* fault =
      args.test_fault.empty() ? std::getenv("CLASH_WORKER_TEST_FAULT") : args.test_fault.c_str();
  if (fault != nullptr) {
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

// Points TMPDIR at the job's temp folder and stderr at a file in it (a fresh worker gets both
// from the process that starts it).
void EnterTempDir(const Args& args) {
  if (args.temp_dir.empty()) return;
  setenv("TMPDIR", args.temp_dir.c_str(), 1);
  const std::string err_path = args.temp_dir + "/stderr.txt";
  const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (err >= 0) {
    dup2(err, 2);
    close(err);
  }
}

// Reads the whole job from fd 0 (NUL-ended arguments up to end of file).
std::string ReadJob() {
  std::string job;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(0, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    job.append(buffer, static_cast<std::size_t>(n));
    if (job.size() > (1u << 20)) return {};  // no real job is this long
  }
  return job;
}

// --pool: warm up, report ready, wait for one job, run it.
int RunPooled(Args* args) {
  // Until a job arrives the process is named clash-cad-idle (/proc/PID/comm), so that tools and
  // tests can tell a waiting worker from a busy one.
  prctl(PR_SET_NAME, "clash-cad-idle");
  clash::cad::internal::WarmUpOcct();
  const char ready = 'R';
  if (write(1, &ready, 1) != 1) return internal::kWorkerExitIoError;
  if (const int null = open("/dev/null", O_WRONLY | O_CLOEXEC); null >= 0) {
    dup2(null, 1);
    close(null);
  }
  const std::string job = ReadJob();
  if (job.empty() || job.back() != '\0') return internal::kWorkerExitOk;  // shut down
  prctl(PR_SET_NAME, "clash-cad-worke");  // the name a fresh worker has (15 characters)
  std::vector<std::string> words;
  for (std::size_t start = 0; start < job.size();) {
    const std::size_t end = job.find('\0', start);
    words.emplace_back(job.substr(start, end - start));
    start = end + 1;
  }
  std::vector<char*> argv{const_cast<char*>("clash-cad-worker")};
  for (std::string& word : words) argv.push_back(word.data());
  if (const int code = ParseArgs(static_cast<int>(argv.size()), argv.data(), args);
      code != internal::kWorkerExitOk) {
    return code;
  }
  EnterTempDir(*args);
  return Run(*args);
}

}  // namespace

// OCCT keeps one-time registrations (parameter tables, type descriptors) for the process
// lifetime; in sanitizer builds LeakSanitizer would report them at exit and turn a successful
// import into exit code 1. Only leaks allocated inside OCCT's libTK* are suppressed.
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

int main(int argc, char** argv) {
  // ReadAndTessellate and ReadAssembly catch their own bad_alloc; this catches one thrown while
  // parsing arguments, running the "oom" test fault, or writing the result.
  // The result is on disk once Run returns: _exit skips OCCT's static destructors, which only
  // delay the moment the caller sees the exit.
  Args args;
  int code = internal::kWorkerExitOk;
  try {
    if (argc == 2 && std::string_view(argv[1]) == "--pool") {
      code = RunPooled(&args);
    } else if (code = ParseArgs(argc, argv, &args); code == internal::kWorkerExitOk) {
      EnterTempDir(args);
      code = Run(args);
    }
  } catch (const std::bad_alloc&) {
    code = WriteOutOfMemory(args);
  }
  std::fflush(nullptr);
  _exit(code);
}
