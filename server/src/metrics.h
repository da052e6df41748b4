// Prometheus metrics in the text exposition format (version 0.0.4), served over plain HTTP by a
// minimal responder (GET /metrics only). Debian 12 packages no Prometheus client for C++.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace clash::server {

class Metrics {
 public:
  /// Counts one finished RPC and adds its latency to the method's histogram.
  void RecordRpc(std::string_view method, std::string_view code, double seconds);
  /// A gauge read when metrics are rendered.
  void AddGauge(std::string name, std::string help, std::function<double()> read);
  /// A counter (a value that only grows from the start; by convention its name ends in
  /// "_total") read when metrics are rendered.
  void AddCounter(std::string name, std::string help, std::function<double()> read);
  /// All metrics, Prometheus text format.
  [[nodiscard]] std::string Render() const;

  /// Histogram bucket upper bounds in seconds.
  static const std::vector<double>& Buckets();

 private:
  struct Histogram {
    std::vector<uint64_t> counts;  // per bucket (not cumulative)
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> requests_;  // (method, code)
  std::map<std::string, Histogram> latency_;
  struct Gauge {
    std::string name;
    std::string help;
    std::function<double()> read;
    const char* type = "gauge";  // or "counter"
  };
  std::vector<Gauge> gauges_;
};

/// Serves GET /metrics on a TCP address until destroyed.
class MetricsHttpServer {
 public:
  /// Listens on "host:port" (port 0 picks a free one). INVALID_ARGUMENT for a bad address,
  /// UNAVAILABLE when it cannot bind.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, const Metrics* metrics);
  ~MetricsHttpServer();
  [[nodiscard]] int port() const { return port_; }

 private:
  MetricsHttpServer(int fd, int port, const Metrics* metrics);
  void Loop();

  int fd_;
  int port_;
  const Metrics* metrics_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace clash::server
