// Linux PM QoS: a CPU wake-up latency limit held while clashd serves.
//
// An idle CPU that halts (or, in a virtual machine, exits to the host) takes tens of
// microseconds to wake when a request arrives, and a unary call wakes a thread at least twice
// (the server's on the request, the client's on the answer). While a process holds
// /dev/cpu_dma_latency open with a limit below the idle states' exit latencies, the kernel
// keeps idle CPUs in shallower states, down to polling at 0 µs, so that a call wakes its
// threads at once. The cost is power, and on a virtual machine host CPU time: the idle CPUs
// no longer sleep. The limit lasts until the file is closed or another value is written
// (Documentation/power/pm_qos_interface.rst); CpuLatencyGovernor holds it only while calls come.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace clash::server {

/// The PM QoS device the kernel reads the limits of.
inline constexpr const char* kCpuLatencyDevice = "/dev/cpu_dma_latency";
/// The value that asks for nothing (the kernel's default when nobody holds a limit).
inline constexpr int32_t kNoCpuLatencyLimit = 2'000'000'000;

/// Holds a CPU wake-up latency limit until destroyed (move-only).
class CpuLatencyHold {
 public:
  /// Asks for a wake-up latency of at most `microseconds` (>= 0) through `device`.
  /// PERMISSION_DENIED or NOT_FOUND when it cannot be opened (the device needs root, and in a
  /// container `--device /dev/cpu_dma_latency`), INVALID_ARGUMENT for a negative limit.
  [[nodiscard]] static absl::StatusOr<CpuLatencyHold> Acquire(
      int32_t microseconds, const std::string& device = kCpuLatencyDevice);
  /// Reads the limit in force (the smallest held by any process) from `device`.
  [[nodiscard]] static absl::StatusOr<int32_t> Current(
      const std::string& device = kCpuLatencyDevice);

  CpuLatencyHold(CpuLatencyHold&& other) noexcept;
  CpuLatencyHold& operator=(CpuLatencyHold&& other) noexcept;
  CpuLatencyHold(const CpuLatencyHold&) = delete;
  CpuLatencyHold& operator=(const CpuLatencyHold&) = delete;
  ~CpuLatencyHold();

  /// The limit asked for.
  [[nodiscard]] int32_t microseconds() const { return microseconds_; }
  /// Asks for another limit through the same open device (kNoCpuLatencyLimit: none).
  [[nodiscard]] absl::Status Set(int32_t microseconds);

 private:
  CpuLatencyHold(int fd, int32_t microseconds) : fd_(fd), microseconds_(microseconds) {}
  int fd_ = -1;
  int32_t microseconds_ = 0;
};

/// Holds a limit while calls come and lets it go after `idle` without one, so that the CPUs
/// poll during an interactive session (a plugin dragging a part calls every few tens of
/// milliseconds) and sleep between sessions; the first call of a session pays one wake-up.
/// With `idle` zero the limit is held throughout. Thread-safe; Touch() is two atomic operations
/// and a clock read while the limit is held.
class CpuLatencyGovernor {
 public:
  /// Takes over `hold` (acquired at the limit to keep): with `idle` > 0 it is let go at once,
  /// until the first Touch().
  CpuLatencyGovernor(CpuLatencyHold hold, std::chrono::milliseconds idle);
  ~CpuLatencyGovernor();
  CpuLatencyGovernor(const CpuLatencyGovernor&) = delete;
  CpuLatencyGovernor& operator=(const CpuLatencyGovernor&) = delete;

  /// A call began: holds the limit (again) until `idle` after the last call.
  void Touch();
  /// The limit held now, or -1 while let go.
  [[nodiscard]] int32_t held_microseconds() const;

 private:
  void Run();

  CpuLatencyHold hold_;
  const int32_t limit_;
  const std::chrono::milliseconds idle_;
  std::atomic<bool> engaged_{false};
  std::atomic<int64_t> last_call_ns_{0};  // steady_clock, since its epoch
  std::mutex mu_;                         // over the device's value, engaged_ changes and stop_
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // lets the limit go; only with idle_ > 0
};

}  // namespace clash::server
