// grpc.health.v1.Health, served by clashd itself (instead of gRPC's built-in service) so that
// health calls can be authenticated like every other call when the deployment asks for it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"

namespace clash::server {

class HealthService final : public grpc::health::v1::Health::Service {
 public:
  /// Watch streams open at once, at most (each holds one of the server's threads for as long
  /// as its client keeps it open, and health calls need no token by default).
  static constexpr int kDefaultMaxWatches = 16;

  /// `admit` runs first on every call; a non-OK status is the call's answer. Beyond
  /// `max_watches` open Watch streams, a new one is RESOURCE_EXHAUSTED.
  explicit HealthService(std::function<grpc::Status(grpc::ServerContext*)> admit,
                         int max_watches = kDefaultMaxWatches)
      : admit_(std::move(admit)), max_watches_(max_watches) {}

  /// Sets the status of a service ("" is the whole server).
  void Set(const std::string& service, bool serving);
  /// Every service NOT_SERVING from now on; Watch streams send that and end.
  void Shutdown();

  /// Check and Watch: an exception (of `admit` too) is answered as every other RPC's is
  /// (Guarded, convert.h), never as gRPC's UNKNOWN.
  grpc::Status Check(grpc::ServerContext* ctx, const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* ctx, const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

 private:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  Status StatusOf(const std::string& service) const;  // hold mu_

  std::function<grpc::Status(grpc::ServerContext*)> admit_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, bool> serving_;
  bool shut_down_ = false;
  const int max_watches_;
  std::atomic<int> watches_{0};  // open Watch streams
};

}  // namespace clash::server
