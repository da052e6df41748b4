// Linux PM QoS: a CPU wake-up latency limit held while clashd serves.
//
// An idle CPU that halts (or, in a virtual machine, exits to the host) takes tens of
// microseconds to wake when a request arrives, and a unary call wakes a thread at least twice
// (the server's on the request, the client's on the answer). While a process holds
// /dev/cpu_dma_latency open with a limit below the idle states' exit latencies, the kernel
// keeps idle CPUs in shallower states, down to polling at 0 µs, so that a call wakes its
// threads at once. The cost is power, and on a virtual machine host CPU time: the idle CPUs
// no longer sleep. The limit lasts until the file is closed
// (Documentation/power/pm_qos_interface.rst).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace clash::server {

/// The PM QoS device the kernel reads the limits of.
inline constexpr const char* kCpuLatencyDevice = "/dev/cpu_dma_latency";

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

 private:
  CpuLatencyHold(int fd, int32_t microseconds) : fd_(fd), microseconds_(microseconds) {}
  int fd_ = -1;
  int32_t microseconds_ = 0;
};

}  // namespace clash::server
