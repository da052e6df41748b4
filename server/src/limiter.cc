#include "limiter.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace clash::server {

WorkLimiter::Permit& WorkLimiter::Permit::operator=(Permit&& o) noexcept {
  if (this != &o) {
    if (owner_ != nullptr) owner_->Release();
    owner_ = o.owner_;
    o.owner_ = nullptr;
  }
  return *this;
}

WorkLimiter::Permit::~Permit() {
  if (owner_ != nullptr) owner_->Release();
}

absl::StatusOr<WorkLimiter::Permit> WorkLimiter::Acquire(
    const std::function<absl::Status()>& stop) {
  std::unique_lock lock(mu_);
  if (running_ < slots_) {
    ++running_;
    return Permit(this);
  }
  if (waiting_ >= queue_) {
    return absl::ResourceExhaustedError(absl::StrCat(name_, " queue full (", running_, " running, ",
                                                     waiting_, " waiting): retry later"));
  }
  ++waiting_;
  while (running_ >= slots_) {
    cv_.wait_for(lock, std::chrono::milliseconds(20));
    if (running_ < slots_) break;
    if (stop) {
      absl::Status st = stop();
      if (!st.ok()) {
        --waiting_;
        return st;
      }
    }
  }
  --waiting_;
  ++running_;
  return Permit(this);
}

std::optional<WorkLimiter::Permit> WorkLimiter::TryAcquire() {
  std::lock_guard lock(mu_);
  if (running_ >= slots_ || waiting_ > 0) return std::nullopt;
  ++running_;
  return Permit(this);
}

void WorkLimiter::Release() {
  {
    std::lock_guard lock(mu_);
    --running_;
  }
  cv_.notify_one();
}

int WorkLimiter::running() const {
  std::lock_guard lock(mu_);
  return running_;
}

int WorkLimiter::waiting() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

}  // namespace clash::server
