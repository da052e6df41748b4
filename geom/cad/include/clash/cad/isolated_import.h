// Reading an untrusted STEP or IGES file in a separate worker process (RELIABILITY.md, req. 1-3).
//
// OCCT can crash, loop forever or exhaust memory on malformed files, so ImportIsolated never runs
// it in the calling process: it starts clash-cad-worker under address-space, CPU and wall-clock
// limits, in its own process group and private temp folder, and reads back its result file as
// untrusted input. Calls from several threads run in several worker processes at once.
// ImportAssemblyIsolated does the same for ReadAssembly.
#ifndef CLASH_CAD_ISOLATED_IMPORT_H_
#define CLASH_CAD_ISOLATED_IMPORT_H_

#include <atomic>
#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "clash/cad/assembly.h"
#include "clash/cad/tessellate.h"
#include "clash/cad/worker_pool.h"

namespace clash::cad {

/// Name of the environment variable that can name the worker executable.
inline constexpr char kWorkerPathEnv[] = "CLASH_CAD_WORKER";

/// Default largest result file of a worker (IsolationLimits::max_output_bytes), 2 GiB: above what
/// clashd's default triangle cap can need (see its MaxWorkerOutputBytes).
inline constexpr std::size_t kDefaultMaxOutputBytes = std::size_t{2} << 30;

/// Resource limits for one isolated import.
struct IsolationLimits {
  /// Worker executable; empty: $CLASH_CAD_WORKER, else clash-cad-worker next to the running
  /// executable.
  std::string worker_path;
  /// Wall-clock limit in seconds; the worker's process group is killed when it is reached.
  double wall_seconds = 120;
  /// CPU-time limit of the worker in seconds (RLIMIT_CPU, rounded up to whole seconds; for a
  /// pre-started worker, on top of the CPU time its start-up used).
  double cpu_seconds = 120;
  /// Address-space limit of the worker (RLIMIT_AS); not applied in AddressSanitizer builds.
  std::size_t address_space_bytes = std::size_t{4} << 30;
  /// Largest accepted result file (RLIMIT_FSIZE of the worker and the parser's limit).
  std::size_t max_output_bytes = kDefaultMaxOutputBytes;
  /// Folder for the worker's private temp folder; empty: $TMPDIR, else /tmp. A folder the
  /// caller empties at start-up leaves nothing behind even when the caller is killed.
  std::string temp_dir;
  /// Pre-started workers to take this call's worker from (see worker_pool.h); used when it has
  /// an idle worker of the same executable, else (and when null) a fresh worker is started. The
  /// limits above apply either way, from the moment the job is handed over.
  WorkerPool* pool = nullptr;
};

/// Returns the worker executable that `limits` selects (see IsolationLimits::worker_path).
[[nodiscard]] std::string ResolveWorkerPath(const IsolationLimits& limits);

/// Reads and tessellates the file at `path` like ReadAndTessellate, but in a worker process
/// (pre-started when `limits.pool` has one idle; used for this call only, then killed).
/// Errors: the worker's own (NOT_FOUND, INVALID_ARGUMENT naming the phase, RESOURCE_EXHAUSTED,
/// INTERNAL for a fault of the worker itself; a result file with any other code is malformed);
/// INVALID_ARGUMENT "import worker crashed (signal N) reading <file>" when a signal killed it;
/// DEADLINE_EXCEEDED past the wall-clock or CPU limit; RESOURCE_EXHAUSTED past the memory or
/// output limit; CANCELLED once `*cancel` becomes true (the worker is killed within ~10 ms);
/// FAILED_PRECONDITION when the worker cannot be started; INTERNAL "malformed worker output" for
/// a result file that breaks the format, or when the temp folder cannot be created.
/// No worker process or temp file outlives the call.
[[nodiscard]] absl::StatusOr<MeshBuffers> ImportIsolated(const std::string& path,
                                                         const TessellationOptions& options,
                                                         const IsolationLimits& limits,
                                                         const std::atomic<bool>* cancel = nullptr);

/// Reads the file at `path` as an assembly like ReadAssembly, but in a worker process, with the
/// limits, error mapping, cancellation and cleanup of ImportIsolated. The worker's result is
/// checked like ImportIsolated's, and also: string lengths, part indices of instances, placements
/// (finite, bounded) and colours (in [0, 1]); INTERNAL "malformed worker output" otherwise.
[[nodiscard]] absl::StatusOr<ImportedAssembly> ImportAssemblyIsolated(
    const std::string& path, const TessellationOptions& options, const IsolationLimits& limits,
    const std::atomic<bool>* cancel = nullptr);

}  // namespace clash::cad

#endif  // CLASH_CAD_ISOLATED_IMPORT_H_
