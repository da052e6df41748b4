// Pre-started import workers: clash-cad-worker processes that have exec'd, loaded OCCT and set up
// its translators, and wait on a socket for one job (RELIABILITY.md, requirements 1-3 still hold).
//
// A cold import spends ~40 ms of CPU starting a worker (dynamic linking of ~95 libraries, OCCT's
// static set-up) before it reads a byte; on small files that is most of the gap to OCCT's own
// in-process time. An ImportIsolated call whose IsolationLimits name a pool takes an idle worker
// instead, applies its own limits to that process (prlimit: CPU, address space, file size), starts
// its wall clock and cancellation, and sends the job (file, options, private temp folder). Each
// worker runs ONE job and is then killed and reaped like a fresh one; the pool replaces it in the
// background. When no idle worker is ready the call starts a fresh worker, as without a pool.
//
// Process rules: every worker is started from one long-lived thread owned by the pool, so its
// PR_SET_PDEATHSIG (SIGKILL) fires only when this process dies; an idle worker also exits when its
// job socket closes. Idle workers block in read(2) and use no CPU. The destructor kills and reaps
// the idle workers and waits for the calls still using a pooled worker.
#ifndef CLASH_CAD_WORKER_POOL_H_
#define CLASH_CAD_WORKER_POOL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace clash::cad {

namespace internal {
struct WorkerPoolAccess;
}  // namespace internal

/// Options of a WorkerPool.
struct WorkerPoolOptions {
  /// Worker executable; empty: as ResolveWorkerPath for limits without a worker_path. Only calls
  /// whose limits resolve to the same executable use the pool.
  std::string worker_path;
  /// Workers kept started and idle; 0 starts none (every call starts a fresh worker).
  int idle_workers = 2;
  /// Called from the pool's thread when the pool turns unable to start workers
  /// (kFailuresToBeBroken start-ups in a row failed: false) and when a worker starts again
  /// after that (true). Start-ups run no job, so no imported file can trigger it.
  std::function<void(bool can_start)> on_can_start_changed = nullptr;
};

/// Failed worker start-ups in a row after which the pool reports that it cannot start workers.
inline constexpr int kFailuresToBeBroken = 3;

/// A set of pre-started, single-use import workers. Thread-safe. Must outlive the calls that use
/// it (the destructor waits for them).
class WorkerPool {
 public:
  /// Starts the pool's thread, which starts `options.idle_workers` workers in the background.
  explicit WorkerPool(WorkerPoolOptions options = {});
  /// Kills and reaps the idle workers, waits for the calls using a pooled worker, stops the thread.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// The worker executable of this pool.
  [[nodiscard]] const std::string& worker_path() const;
  /// Idle workers ready now.
  [[nodiscard]] int idle() const;
  /// Process ids of the idle workers (for tests and diagnostics).
  [[nodiscard]] std::vector<int> IdlePids() const;
  /// Waits until `idle_workers` workers are idle and no worker is starting, or `timeout` passes;
  /// true when they are.
  [[nodiscard]] bool WaitUntilFull(std::chrono::milliseconds timeout) const;
  /// Jobs sent to pre-started workers so far.
  [[nodiscard]] std::uint64_t jobs_dispatched() const;
  /// Workers started by the pool so far (ready or not).
  [[nodiscard]] std::uint64_t workers_started() const;
  /// Workers that failed to become ready (exec failed, died during start-up, timed out).
  [[nodiscard]] std::uint64_t start_failures() const;

 private:
  friend struct internal::WorkerPoolAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clash::cad

#endif  // CLASH_CAD_WORKER_POOL_H_
