// ImportIsolated and ImportAssemblyIsolated: run clash-cad-worker under rlimits in its own process
// group and temp folder, poll it against the wall clock and the cancel flag, map every outcome to
// one status, and parse the result file. Both share RunWorker; only the parsed payload differs.
#include "clash/cad/isolated_import.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>  // mkdtemp
#include <string.h>  // sigabbrev_np
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

// Reads at most `max_bytes` of a small file; empty when it cannot be read.
std::string ReadSmallFile(const std::string& path, std::size_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text(max_bytes, '\0');
  const ssize_t n = read(fd, text.data(), text.size());
  close(fd);
  text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return text;
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
  std::string stderr_path;
  rlim_t cpu_seconds = 0;
  rlim_t address_space = 0;
  rlim_t max_output = 0;
  pid_t parent = 0;  // the caller, whose death must take the worker with it
};

[[noreturn]] void ExecChild(const ChildSetup& setup, char* const* argv, char* const* envp,
                            int error_pipe) {
  setpgid(0, 0);
  // A caller killed with SIGKILL cannot kill its worker: the kernel does, as the forking thread
  // (which waits for the worker) dies. If the caller died before this line, exit now.
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
  // SIGXCPU at the soft limit, SIGKILL one second later if the worker survives it.
  const rlimit cpu{setup.cpu_seconds, setup.cpu_seconds + 1};
  setrlimit(RLIMIT_CPU, &cpu);
  const rlimit fsize{setup.max_output, setup.max_output};
  setrlimit(RLIMIT_FSIZE, &fsize);
#if !defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer reserves terabytes of shadow address space and cannot start under RLIMIT_AS.
  const rlimit as{setup.address_space, setup.address_space};
  setrlimit(RLIMIT_AS, &as);
#endif
  int error_fd = fcntl(error_pipe, F_DUPFD, 3);  // >= 3, so the dup2s below cannot clobber it
  const int in = open("/dev/null", O_RDONLY);
  const int out = open("/dev/null", O_WRONLY);
  const int err = open(setup.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (error_fd < 0 || in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
      dup2(err, 2) < 0 || (error_fd != 3 && dup2(error_fd, 3) < 0)) {
    const int e = errno;
    if (error_fd >= 0) (void)!write(error_fd, &e, sizeof(e));
    _exit(127);
  }
  error_fd = 3;
  fcntl(error_fd, F_SETFD, FD_CLOEXEC);
  close_range(4, ~0u, 0);  // no descriptor of the caller leaks into the worker
  execve(setup.worker.c_str(), argv, envp);
  const int e = errno;
  (void)!write(error_fd, &e, sizeof(e));
  _exit(127);
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
  setup.args = {setup.worker,
                absl::StrCat("--kind=", std::string(kind)),
                "--linear-deflection-mm=" + FormatDouble(options.linear_deflection_mm),
                "--relative-deflection=" + FormatDouble(options.relative_deflection),
                "--angular-deflection-rad=" + FormatDouble(options.angular_deflection_rad),
                absl::StrCat("--max-triangles=", options.max_triangles),
                absl::StrCat("--parallel=", options.parallel ? 1 : 0),
                absl::StrCat("--max-output-bytes=", limits.max_output_bytes),
                path,
                output_path};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).starts_with("TMPDIR=")) continue;
    setup.env.emplace_back(*e);
  }
  setup.env.push_back("TMPDIR=" + dir->path());
  std::vector<char*> argv;
  for (std::string& a : setup.args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : setup.env) envp.push_back(e.data());
  envp.push_back(nullptr);

  setup.parent = getpid();
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid == 0) ExecChild(setup, argv.data(), envp.data(), pipe_fds[1]);
  const int fork_error = errno;
  close(pipe_fds[1]);
  if (pid < 0) {
    close(pipe_fds[0]);
    return absl::FailedPreconditionError(
        absl::StrCat("import worker cannot be started: fork: ", std::strerror(fork_error)));
  }
  setpgid(pid, pid);  // also in the child: whichever runs first, killpg works from here on

  // The pipe closes on a successful execve, or carries the child's errno.
  int exec_error = 0;
  ssize_t n = 0;
  do {
    n = read(pipe_fds[0], &exec_error, sizeof(exec_error));
  } while (n < 0 && errno == EINTR);
  close(pipe_fds[0]);

  Ending ending = Ending::kExited;
  if (n <= 0) {
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
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
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

  if (n > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "import worker cannot be started: ", setup.worker, ": ", std::strerror(exec_error)));
  }
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
    if (sig == SIGXCPU || (sig == SIGKILL && cpu_used >= static_cast<double>(setup.cpu_seconds))) {
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

}  // namespace clash::cad
