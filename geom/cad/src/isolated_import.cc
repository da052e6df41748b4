// ImportIsolated and ImportAssemblyIsolated: run clash-cad-worker (pre-started by a WorkerPool, or
// fresh) under rlimits in its own process group and temp folder, wait for it against the wall clock
// and the cancel flag, map every outcome to one status, and parse the result file. Both share
// RunWorker; only the parsed payload differs. WorkerPool is implemented here too: it starts
// workers with the same ExecChild.
#include "clash/cad/isolated_import.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>  // mkdtemp
#include <string.h>  // sigabbrev_np
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "clash/cad/durable_file.h"
#include "clash/cad/worker_pool.h"
#include "worker_format.h"

extern char** environ;

namespace clash::cad {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Longest pause between two polls of the worker; bounds the reaction time to cancel and timeout.
constexpr std::chrono::milliseconds kMaxPollInterval{10};
// Bytes of the worker's stderr quoted in INTERNAL messages.
constexpr std::size_t kStderrQuoteBytes = 2000;

// A private temp folder, removed with everything in it when this goes out of scope.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create(const std::string& in) {
    const char* env = std::getenv("TMPDIR");
    const std::string base = !in.empty()                        ? in
                             : (env != nullptr && *env != '\0') ? std::string(env)
                                                                : "/tmp";
    std::string pattern = absl::StrCat(base, "/clash-cad-worker-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot create a temp folder ", pattern, ": ", std::strerror(errno)));
    }
    return TempDir(std::move(pattern));
  }
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

std::string FormatDouble(double value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return ec == std::errc() ? std::string(buffer, end) : "nan";
}

std::string SignalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : "unknown";
}

// At most `max_bytes` of a small file; empty when it cannot be read or is not a regular file
// (the worker owns its folder: see ReadFilePrefix).
std::string ReadSmallFile(const std::string& path, std::size_t max_bytes) {
  return ReadFilePrefix(path, max_bytes).value_or(std::string());
}

// Reads the whole result file if it is no larger than `max_bytes`.
absl::Status ValidateLimits(const IsolationLimits& limits) {
  if (!(limits.wall_seconds > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("wall_seconds must be > 0, got ", limits.wall_seconds));
  }
  if (!(limits.cpu_seconds > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_seconds must be > 0, got ", limits.cpu_seconds));
  }
  if (limits.address_space_bytes == 0 || limits.max_output_bytes == 0) {
    return absl::InvalidArgumentError("address_space_bytes and max_output_bytes must be > 0");
  }
  return absl::OkStatus();
}

// Everything the child needs, prepared before fork: after fork only async-signal-safe calls.
struct ChildSetup {
  std::string worker;
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::string stderr_path;   // empty: /dev/null
  bool apply_limits = true;  // false for a pre-started worker: its caller applies them later
  rlim_t cpu_seconds = 0;
  rlim_t address_space = 0;
  rlim_t max_output = 0;
  pid_t parent = 0;  // the caller, whose death must take the worker with it
};

// `fd` moved to a number >= 10 (or -1), so that the dup2s into 0..3 cannot clobber it.
int HighFd(int fd) { return fd < 0 ? -1 : fcntl(fd, F_DUPFD, 10); }

// Runs in the forked child: own process group, death signal, default signals, limits, fds 0..3
// (in_fd or /dev/null, out_fd or /dev/null, stderr_path or /dev/null, the exec-error pipe), exec.
[[noreturn]] void ExecChild(const ChildSetup& setup, char* const* argv, char* const* envp,
                            int error_pipe, int in_fd, int out_fd) {
  setpgid(0, 0);
  // A caller killed with SIGKILL cannot kill its worker: the kernel does, as the forking thread
  // (which waits for the worker, or the pool's thread) dies. If the caller died before this
  // line, exit now.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != setup.parent) _exit(127);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGXCPU, SIGXFSZ, SIGSEGV, SIGBUS, SIGABRT, SIGINT, SIGTERM}) {
    sigaction(sig, &default_action, nullptr);
  }
  const rlimit core{0, 0};
  setrlimit(RLIMIT_CORE, &core);
  if (setup.apply_limits) {
    // SIGXCPU at the soft limit, SIGKILL one second later if the worker survives it.
    const rlimit cpu{setup.cpu_seconds, setup.cpu_seconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
    const rlimit fsize{setup.max_output, setup.max_output};
    setrlimit(RLIMIT_FSIZE, &fsize);
#if !defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer reserves terabytes of shadow address space and cannot start under
    // RLIMIT_AS.
    const rlimit as{setup.address_space, setup.address_space};
    setrlimit(RLIMIT_AS, &as);
#endif
  }
  const int error_fd = HighFd(error_pipe);
  const int in = HighFd(in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY));
  const int out = HighFd(out_fd >= 0 ? out_fd : open("/dev/null", O_WRONLY));
  const int err = HighFd(setup.stderr_path.empty()
                             ? open("/dev/null", O_WRONLY)
                             : open(setup.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600));
  if (error_fd < 0 || in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
      dup2(err, 2) < 0 || dup2(error_fd, 3) < 0) {
    const int e = errno;
    if (error_fd >= 0) (void)!write(error_fd, &e, sizeof(e));
    _exit(127);
  }
  fcntl(3, F_SETFD, FD_CLOEXEC);
  close_range(4, ~0u, 0);  // no descriptor of the caller leaks into the worker
  execve(setup.worker.c_str(), argv, envp);
  const int e = errno;
  (void)!write(3, &e, sizeof(e));
  _exit(127);
}

// Forks and execs `setup` (see ExecChild). Returns the child's pid once execve succeeded, or the
// errno of the failed fork (negative) or execve (positive) in `*error`, with the child reaped.
pid_t Spawn(const ChildSetup& setup, int in_fd, int out_fd, int* error) {
  std::vector<std::string> args = setup.args;
  std::vector<std::string> env = setup.env;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  *error = 0;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    *error = -errno;
    return -1;
  }
  const pid_t pid = fork();
  if (pid == 0) ExecChild(setup, argv.data(), envp.data(), pipe_fds[1], in_fd, out_fd);
  const int fork_error = errno;
  close(pipe_fds[1]);
  if (pid < 0) {
    close(pipe_fds[0]);
    *error = -fork_error;
    return -1;
  }
  setpgid(pid, pid);  // also in the child: whichever runs first, killpg works from here on

  // The pipe closes on a successful execve, or carries the child's errno.
  int exec_error = 0;
  ssize_t n = 0;
  do {
    n = read(pipe_fds[0], &exec_error, sizeof(exec_error));
  } while (n < 0 && errno == EINTR);
  close(pipe_fds[0]);
  if (n > 0) {
    killpg(pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    *error = exec_error != 0 ? exec_error : EINVAL;
    return -1;
  }
  return pid;
}

// A descriptor that polls readable once child `pid` exited; -1 when the kernel lacks pidfd_open
// (Linux < 5.3). Through syscall(2): Debian 12's <sys/pidfd.h> declares it without C linkage.
int OpenPidFd(pid_t pid) {
  const long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) return -1;
  fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  return static_cast<int>(fd);
}

// Kills a worker's process group and reaps the worker.
void KillAndReap(pid_t pid) {
  killpg(pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// The process's environment for pre-started workers, without the test hook (sent per job).
// TMPDIR stays, so that tools can tell whose workers they are; each job sets its own.
std::vector<std::string> WorkerEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.starts_with("CLASH_WORKER_TEST_FAULT=")) continue;
    env.emplace_back(entry);
  }
  return env;
}

// CPU time (user + system, all threads) that process `pid` used so far; nullopt when unknown.
std::optional<double> ProcessCpuSeconds(pid_t pid) {
  const std::string stat = ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"), 4096);
  const std::size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return std::nullopt;
  // After "pid (comm)": field 3 (state) ... field 14 (utime), field 15 (stime), in clock ticks.
  std::vector<std::string_view> fields;
  std::string_view rest = std::string_view(stat).substr(close_paren + 1);
  while (!rest.empty() && fields.size() < 13) {
    const std::size_t begin = rest.find_first_not_of(' ');
    if (begin == std::string_view::npos) break;
    rest.remove_prefix(begin);
    const std::size_t end = std::min(rest.find(' '), rest.size());
    fields.push_back(rest.substr(0, end));
    rest.remove_prefix(end);
  }
  if (fields.size() < 13) return std::nullopt;
  uint64_t utime = 0;
  uint64_t stime = 0;
  const auto parse = [](std::string_view text, uint64_t* out) {
    return std::from_chars(text.data(), text.data() + text.size(), *out).ec == std::errc();
  };
  if (!parse(fields[11], &utime) || !parse(fields[12], &stime)) return std::nullopt;
  const long ticks = sysconf(_SC_CLK_TCK);
  if (ticks <= 0) return std::nullopt;
  return static_cast<double>(utime + stime) / static_cast<double>(ticks);
}

// How long a pre-started worker may take to load OCCT and report ready.
constexpr std::chrono::seconds kPoolStartTimeout{60};
// Pause before the pool tries again after a worker failed to start.
constexpr std::chrono::seconds kPoolRetryPause{1};

// A pre-started worker, idle or handed to one call.
struct PooledWorker {
  pid_t pid = -1;
  int job_fd = -1;  // our end of the job socket (its fd 0)
  int pidfd = -1;   // readable once the worker exited; -1 when pidfd_open is unavailable

  // Closes both descriptors (the worker sees end of file on its job socket).
  void CloseFds() {
    if (job_fd >= 0) close(std::exchange(job_fd, -1));
    if (pidfd >= 0) close(std::exchange(pidfd, -1));
  }
  // True while the worker has not exited.
  bool Alive() const {
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      return poll(&p, 1, 0) == 0;
    }
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           info.si_pid == 0;
  }
};

}  // namespace

// The pool's state; its thread starts every pooled worker (see worker_pool.h).
struct WorkerPool::Impl {
  WorkerPoolOptions options;
  std::vector<std::string> env;

  mutable std::mutex mu;
  mutable std::condition_variable changed;
  std::deque<PooledWorker> idle;
  int in_use = 0;    // workers handed to calls and not yet reaped
  int starting = 0;  // workers being started
  bool stopping = false;
  std::atomic<bool> stop_flag{false};
  std::uint64_t dispatched = 0;
  std::uint64_t started = 0;
  std::uint64_t failures = 0;
  int failures_in_a_row = 0;
  std::thread thread;

  // Starts one worker in pool mode and waits for its ready byte.
  std::optional<PooledWorker> StartOne() {
    int job[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, job) != 0) return std::nullopt;
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) {
      close(job[0]);
      close(job[1]);
      return std::nullopt;
    }
    ChildSetup setup;
    setup.worker = options.worker_path;
    setup.args = {options.worker_path, "--pool"};
    setup.env = env;
    setup.apply_limits = false;
    setup.parent = getpid();
    int error = 0;
    const pid_t pid = Spawn(setup, job[1], ready[1], &error);
    close(job[1]);
    close(ready[1]);
    PooledWorker worker{pid, job[0], -1};
    if (pid < 0) {
      worker.CloseFds();
      close(ready[0]);
      return std::nullopt;
    }
    worker.pidfd = OpenPidFd(pid);
    // Wait for 'R' (end of file: the worker died starting up), watching for the pool's stop.
    const Clock::time_point give_up = Clock::now() + kPoolStartTimeout;
    bool ok = false;
    while (!stop_flag.load() && Clock::now() < give_up) {
      pollfd p{ready[0], POLLIN, 0};
      const int r = poll(&p, 1, 20);
      if (r < 0 && errno != EINTR) break;
      if (r <= 0) continue;
      char byte = 0;
      const ssize_t n = read(ready[0], &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      ok = n == 1 && byte == 'R';
      break;
    }
    close(ready[0]);
    if (!ok) {
      worker.CloseFds();
      KillAndReap(pid);
      return std::nullopt;
    }
    return worker;
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      if (static_cast<int>(idle.size()) + in_use >= options.idle_workers) {
        changed.wait(lock);
        continue;
      }
      ++starting;
      lock.unlock();
      std::optional<PooledWorker> worker = StartOne();
      lock.lock();
      --starting;
      ++started;
      const bool was_broken = failures_in_a_row >= kFailuresToBeBroken;
      if (worker) {
        idle.push_back(*worker);
        failures_in_a_row = 0;
      } else if (!stop_flag.load()) {  // a start-up cut short by the destructor is no failure
        ++failures;
        ++failures_in_a_row;
      }
      const bool broken = failures_in_a_row >= kFailuresToBeBroken;
      changed.notify_all();
      if (broken != was_broken && options.on_can_start_changed) {
        lock.unlock();
        options.on_can_start_changed(!broken);
        lock.lock();
      }
      if (!worker) changed.wait_for(lock, kPoolRetryPause, [&] { return stopping; });
    }
    for (PooledWorker& worker : idle) {
      worker.CloseFds();
      KillAndReap(worker.pid);
    }
    idle.clear();
    changed.notify_all();
    // Calls still using a worker need this thread alive: its exit would fire their death signal.
    changed.wait(lock, [&] { return in_use == 0; });
  }

  // An idle, living worker for one call (counted in in_use until Release), or nullopt.
  std::optional<PooledWorker> Take() {
    std::vector<PooledWorker> dead;
    std::optional<PooledWorker> taken;
    {
      std::lock_guard<std::mutex> lock(mu);
      while (!stopping && !idle.empty()) {
        PooledWorker worker = idle.front();
        idle.pop_front();
        if (worker.Alive()) {
          ++in_use;
          taken = worker;
          break;
        }
        dead.push_back(worker);
      }
    }
    for (PooledWorker& worker : dead) {
      worker.CloseFds();
      KillAndReap(worker.pid);
    }
    if (!dead.empty()) changed.notify_all();
    return taken;
  }

  // Counts a job handed over to a pooled worker.
  void CountDispatched() {
    std::lock_guard<std::mutex> lock(mu);
    ++dispatched;
  }

  // Ends a call's use of a pooled worker (already reaped); the thread replaces it.
  void Release() {
    std::lock_guard<std::mutex> lock(mu);
    --in_use;
    changed.notify_all();
  }
};

namespace internal {
// RunWorker's way into WorkerPool's private state.
struct WorkerPoolAccess {
  using Impl = WorkerPool::Impl;
  static Impl& Of(WorkerPool& pool) { return *pool.impl_; }
};
}  // namespace internal

namespace {

using PoolImpl = internal::WorkerPoolAccess::Impl;

// The worker process one call runs in, and how to account for it.
struct Launched {
  pid_t pid = -1;
  int pidfd = -1;
  rlim_t cpu_limit = 0;      // RLIMIT_CPU soft limit in total seconds of the process
  PoolImpl* pool = nullptr;  // set for a pooled worker until it is released
};

// Hands the job to a worker of `pool`: applies the limits to it and sends the arguments. nullopt
// when no idle worker is ready or handing over failed (the worker is then killed and released).
std::optional<Launched> Dispatch(PoolImpl& pool, const IsolationLimits& limits,
                                 const std::vector<std::string>& job_args, rlim_t cpu_seconds) {
  std::optional<PooledWorker> worker = pool.Take();
  if (!worker) return std::nullopt;
  Launched launched{worker->pid, worker->pidfd, 0, &pool};
  const auto fail = [&]() -> std::optional<Launched> {
    worker->CloseFds();
    KillAndReap(worker->pid);
    pool.Release();
    return std::nullopt;
  };
  // RLIMIT_CPU counts the start-up too: the limit is what it used plus this call's seconds.
  const std::optional<double> used = ProcessCpuSeconds(worker->pid);
  if (!used) return fail();
  launched.cpu_limit = static_cast<rlim_t>(
      std::clamp(std::ceil(*used + static_cast<double>(cpu_seconds)), 1.0, 1e9));
  const rlimit cpu{launched.cpu_limit, launched.cpu_limit + 1};
  const rlimit fsize{static_cast<rlim_t>(limits.max_output_bytes),
                     static_cast<rlim_t>(limits.max_output_bytes)};
  if (prlimit(worker->pid, RLIMIT_CPU, &cpu, nullptr) != 0 ||
      prlimit(worker->pid, RLIMIT_FSIZE, &fsize, nullptr) != 0) {
    return fail();
  }
#if !defined(__SANITIZE_ADDRESS__)
  const rlimit as{static_cast<rlim_t>(limits.address_space_bytes),
                  static_cast<rlim_t>(limits.address_space_bytes)};
  if (prlimit(worker->pid, RLIMIT_AS, &as, nullptr) != 0) return fail();
#endif
  std::string job;
  // A fresh worker inherits the caller's environment; a pooled one gets the test hook per job,
  // first: after the job's "--" it would be read as a path.
  if (const char* fault = std::getenv("CLASH_WORKER_TEST_FAULT"); fault != nullptr) {
    job += absl::StrCat("--test-fault=", fault);
    job += '\0';
  }
  for (const std::string& arg : job_args) {
    job += arg;
    job += '\0';
  }
  for (std::size_t sent = 0; sent < job.size();) {
    const ssize_t n = send(worker->job_fd, job.data() + sent, job.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail();
    sent += static_cast<std::size_t>(n);
  }
  close(std::exchange(worker->job_fd, -1));  // end of file ends the job
  pool.CountDispatched();
  return launched;
}

// How the wait for the worker ended.
enum class Ending { kExited, kWallClock, kCancelled };

// Runs the worker on `path` for a result of `kind` ("mesh" or "assembly") and returns the bytes of
// its result file, or the status its outcome maps to (see ImportIsolated).
absl::StatusOr<std::string> RunWorker(const std::string& path, const TessellationOptions& options,
                                      const IsolationLimits& limits,
                                      const std::atomic<bool>* cancel, std::string_view kind) {
  if (absl::Status valid = ValidateLimits(limits); !valid.ok()) return valid;
  const std::string file_name = fs::path(path).filename().string();

  ChildSetup setup;
  setup.worker = ResolveWorkerPath(limits);
  if (access(setup.worker.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "import worker cannot be started: ", setup.worker, ": ", std::strerror(errno)));
  }
  absl::StatusOr<TempDir> dir = TempDir::Create(limits.temp_dir);
  if (!dir.ok()) return dir.status();
  const std::string output_path = dir->path() + "/result.bin";
  setup.stderr_path = dir->path() + "/stderr.txt";
  setup.cpu_seconds = static_cast<rlim_t>(std::clamp(std::ceil(limits.cpu_seconds), 1.0, 1e9));
  setup.address_space = static_cast<rlim_t>(limits.address_space_bytes);
  setup.max_output = static_cast<rlim_t>(limits.max_output_bytes);
  // "--" ends the flags: a relative path may start with "--" like a flag.
  const std::vector<std::string> job_args = {
      absl::StrCat("--kind=", std::string(kind)),
      "--linear-deflection-mm=" + FormatDouble(options.linear_deflection_mm),
      "--relative-deflection=" + FormatDouble(options.relative_deflection),
      "--angular-deflection-rad=" + FormatDouble(options.angular_deflection_rad),
      absl::StrCat("--max-triangles=", options.max_triangles),
      absl::StrCat("--parallel=", options.parallel ? 1 : 0),
      absl::StrCat("--max-output-bytes=", limits.max_output_bytes),
      "--temp-dir=" + dir->path(),
      "--",
      path,
      output_path};

  // A pre-started worker when the pool has one, else a fresh one.
  std::optional<Launched> launched;
  if (limits.pool != nullptr && limits.pool->worker_path() == setup.worker) {
    launched =
        Dispatch(internal::WorkerPoolAccess::Of(*limits.pool), limits, job_args, setup.cpu_seconds);
  }
  if (!launched) {
    setup.args = {setup.worker};
    setup.args.insert(setup.args.end(), job_args.begin(), job_args.end());
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string_view(*e).starts_with("TMPDIR=")) continue;
      setup.env.emplace_back(*e);
    }
    setup.env.push_back("TMPDIR=" + dir->path());
    setup.parent = getpid();
    int error = 0;
    const pid_t pid = Spawn(setup, -1, -1, &error);
    if (pid < 0) {
      return absl::FailedPreconditionError(
          error < 0 ? absl::StrCat("import worker cannot be started: fork: ", std::strerror(-error))
                    : absl::StrCat("import worker cannot be started: ", setup.worker, ": ",
                                   std::strerror(error)));
    }
    launched = Launched{pid, OpenPidFd(pid), setup.cpu_seconds, nullptr};
  }
  const pid_t pid = launched->pid;

  // The wall clock and the cancel flag count from here: the job is in the worker's hands.
  Ending ending = Ending::kExited;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::min(limits.wall_seconds, 1e9)));
  std::chrono::microseconds pause{500};
  for (;;) {
    siginfo_t info{};
    const int r = waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && info.si_pid == pid) break;  // exited; still a zombie, so its group is ours
    if (r != 0 && errno != EINTR) break;
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      ending = Ending::kCancelled;
      break;
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      ending = Ending::kWallClock;
      break;
    }
    const Clock::duration slice = std::min<Clock::duration>(kMaxPollInterval, deadline - now);
    if (launched->pidfd >= 0) {
      // Wakes as soon as the worker exits; the slice bounds the reaction to cancel.
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
      const timespec timeout{static_cast<time_t>(ns / 1'000'000'000),
                             static_cast<long>(ns % 1'000'000'000)};
      pollfd p{launched->pidfd, POLLIN, 0};
      ppoll(&p, 1, &timeout, nullptr);
    } else {
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, slice));
      pause = std::min<std::chrono::microseconds>(pause * 2, kMaxPollInterval);
    }
  }
  // Kill the whole group (also anything the worker started) before reaping the leader, so the
  // group id cannot have been reused.
  killpg(pid, SIGKILL);
  int wait_status = 0;
  rusage usage{};
  while (wait4(pid, &wait_status, 0, &usage) < 0 && errno == EINTR) {
  }
  if (launched->pidfd >= 0) close(launched->pidfd);
  if (launched->pool != nullptr) launched->pool->Release();

  if (ending == Ending::kCancelled) {
    return absl::CancelledError(absl::StrCat("import of ", file_name, " cancelled"));
  }
  if (ending == Ending::kWallClock) {
    return absl::DeadlineExceededError(absl::StrCat(
        "import of ", file_name, " exceeded the wall-clock limit of ", limits.wall_seconds, " s"));
  }
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const double cpu_used =
        static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
        1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
    if (sig == SIGXCPU ||
        (sig == SIGKILL && cpu_used >= static_cast<double>(launched->cpu_limit))) {
      return absl::DeadlineExceededError(absl::StrCat(
          "import of ", file_name, " exceeded the CPU limit of ", setup.cpu_seconds, " s"));
    }
    if (sig == SIGXFSZ) {
      return absl::ResourceExhaustedError(absl::StrCat("import of ", file_name,
                                                       " exceeded the output limit of ",
                                                       limits.max_output_bytes, " bytes"));
    }
    if (sig == SIGKILL) {
      // Nobody here sent it and the CPU limit was not reached: the kernel's out-of-memory killer.
      return absl::ResourceExhaustedError(absl::StrCat(
          "import worker was killed (signal 9, SIGKILL; out of memory?) reading ", file_name));
    }
    return absl::InvalidArgumentError(absl::StrCat("import worker crashed (signal ", sig, ", ",
                                                   SignalName(sig), ") reading ", file_name));
  }
  const int exit_code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  if (exit_code == internal::kWorkerExitUsage || exit_code == internal::kWorkerExitIoError) {
    return absl::InternalError(absl::StrCat("import worker failed with exit code ", exit_code, ": ",
                                            ReadSmallFile(setup.stderr_path, kStderrQuoteBytes)));
  }
  // 126 and 127: the worker never ran (the dynamic loader could not load it or its shared
  // libraries, or it is not executable): the server's fault, not the file's.
  if (exit_code == 126 || exit_code == 127) {
    return absl::FailedPreconditionError(absl::StrCat(
        "import worker could not run (exit code ", exit_code,
        ": missing shared libraries?): ", ReadSmallFile(setup.stderr_path, kStderrQuoteBytes)));
  }
  if (exit_code != internal::kWorkerExitOk) {
    return absl::InvalidArgumentError(absl::StrCat("import worker exited with code ", exit_code,
                                                   " without a result reading ", file_name));
  }
  return internal::ReadEncodedFile(output_path, limits.max_output_bytes);
}

// Runs the worker and parses its result as a T.
template <typename T>
absl::StatusOr<T> ImportInWorker(const std::string& path, const TessellationOptions& options,
                                 const IsolationLimits& limits, const std::atomic<bool>* cancel,
                                 std::string_view kind) {
  absl::StatusOr<std::string> bytes = RunWorker(path, options, limits, cancel, kind);
  if (!bytes.ok()) return bytes.status();
  return internal::ParseWorkerOutput<T>(*bytes, limits.max_output_bytes);
}

}  // namespace

std::string ResolveWorkerPath(const IsolationLimits& limits) {
  if (!limits.worker_path.empty()) return limits.worker_path;
  if (const char* env = std::getenv(kWorkerPathEnv); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "clash-cad-worker";
  return (self.parent_path() / "clash-cad-worker").string();
}

absl::StatusOr<MeshBuffers> ImportIsolated(const std::string& path,
                                           const TessellationOptions& options,
                                           const IsolationLimits& limits,
                                           const std::atomic<bool>* cancel) {
  return ImportInWorker<MeshBuffers>(path, options, limits, cancel, "mesh");
}

absl::StatusOr<ImportedAssembly> ImportAssemblyIsolated(const std::string& path,
                                                        const TessellationOptions& options,
                                                        const IsolationLimits& limits,
                                                        const std::atomic<bool>* cancel) {
  return ImportInWorker<ImportedAssembly>(path, options, limits, cancel, "assembly");
}

WorkerPool::WorkerPool(WorkerPoolOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.worker_path.empty()) options.worker_path = ResolveWorkerPath(IsolationLimits{});
  impl_->options = std::move(options);
  // One snapshot: the pool's thread never reads environ while another thread may change it.
  impl_->env = WorkerEnvironment();
  impl_->thread = std::thread([impl = impl_.get()] { impl->Loop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->stop_flag = true;
  }
  impl_->changed.notify_all();
  impl_->thread.join();
}

const std::string& WorkerPool::worker_path() const { return impl_->options.worker_path; }

int WorkerPool::idle() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(impl_->idle.size());
}

std::vector<int> WorkerPool::IdlePids() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<int> pids;
  for (const PooledWorker& worker : impl_->idle) pids.push_back(worker.pid);
  return pids;
}

bool WorkerPool::WaitUntilFull(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->changed.wait_for(lock, timeout, [&] {
    return static_cast<int>(impl_->idle.size()) >= impl_->options.idle_workers &&
           impl_->starting == 0;
  });
}

std::uint64_t WorkerPool::jobs_dispatched() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->dispatched;
}

std::uint64_t WorkerPool::workers_started() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->started;
}

std::uint64_t WorkerPool::start_failures() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->failures;
}

}  // namespace clash::cad
