#include "health.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "convert.h"
#include "limiter.h"

namespace clash::server {

using grpc::health::v1::HealthCheckResponse;

void HealthService::Set(const std::string& service, bool serving) {
  {
    std::lock_guard lock(mu_);
    serving_[service] = serving;
  }
  changed_.notify_all();
}

void HealthService::Shutdown() {
  {
    std::lock_guard lock(mu_);
    shut_down_ = true;
  }
  changed_.notify_all();
}

HealthService::Status HealthService::StatusOf(const std::string& service) const {
  const auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second && !shut_down_ ? HealthCheckResponse::SERVING
                                   : HealthCheckResponse::NOT_SERVING;
}

grpc::Status HealthService::Check(grpc::ServerContext* ctx,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  return Guarded("grpc.health.v1.Health/Check", [&]() -> grpc::Status {
    if (grpc::Status s = admit_(ctx); !s.ok()) return s;
    std::lock_guard lock(mu_);
    const Status status = StatusOf(request->service());
    if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service");
    }
    response->set_status(status);
    return grpc::Status::OK;
  });
}

grpc::Status HealthService::Watch(grpc::ServerContext* ctx,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::ServerWriter<HealthCheckResponse>* writer) {
  return Guarded("grpc.health.v1.Health/Watch", [&]() -> grpc::Status {
    if (grpc::Status s = admit_(ctx); !s.ok()) return s;
    struct Open {
      std::atomic<int>* watches;
      ~Open() { watches->fetch_sub(1); }
    } open{&watches_};
    if (watches_.fetch_add(1) >= max_watches_) {
      ctx->AddTrailingMetadata(kRetryableMetadata, "1");  // transient, as a full queue is
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("too many health Watch streams open (at most ", max_watches_,
                                       "); try again later, or use Check"));
    }
    std::unique_lock lock(mu_);
    bool first = true;
    Status last = HealthCheckResponse::UNKNOWN;
    while (!ctx->IsCancelled()) {
      const Status now = StatusOf(request->service());
      if (first || now != last) {
        HealthCheckResponse response;
        response.set_status(now);
        lock.unlock();
        const bool written = writer->Write(response);
        lock.lock();
        if (!written) break;
        first = false;
        last = now;
      }
      if (shut_down_) break;  // the stream ends so that shutdown need not wait for it
      changed_.wait_for(lock, std::chrono::milliseconds(200));
    }
    return grpc::Status::OK;
  });
}

}  // namespace clash::server
