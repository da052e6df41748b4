#include "limiter.h"

#include <chrono>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace clash::server {

namespace {
constexpr char kTransientPayload[] = "type.clash.dev/transient";
}  // namespace

absl::Status Transient(absl::Status status) {
  status.SetPayload(kTransientPayload, absl::Cord("1"));
  return status;
}

bool IsTransient(const absl::Status& status) {
  return status.GetPayload(kTransientPayload).has_value();
}

WorkLimiter::Permit& WorkLimiter::Permit::operator=(Permit&& o) noexcept {
  if (this != &o) {
    if (owner_ != nullptr) owner_->Release(spare_);
    owner_ = o.owner_;
    spare_ = o.spare_;
    o.owner_ = nullptr;
  }
  return *this;
}

WorkLimiter::Permit::~Permit() {
  if (owner_ != nullptr) owner_->Release(spare_);
}

absl::StatusOr<WorkLimiter::Permit> WorkLimiter::Acquire(
    const std::function<absl::Status()>& stop) {
  std::unique_lock lock(mu_);
  if (running_ < slots_) {
    ++running_;
    return Permit(this);
  }
  if (waiting_ >= queue_ + spare_) {
    return Transient(absl::ResourceExhaustedError(
        absl::StrCat(name_, " queue full (", running_ - spare_, " running, ", waiting_,
                     " waiting): retry later")));
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

std::optional<WorkLimiter::Permit> WorkLimiter::TryAcquireSpare() {
  std::lock_guard lock(mu_);
  if (running_ >= slots_ || waiting_ > 0) return std::nullopt;
  ++running_;
  ++spare_;
  return Permit(this, true);
}

void WorkLimiter::Release(bool spare) {
  {
    std::lock_guard lock(mu_);
    --running_;
    if (spare) --spare_;
  }
  cv_.notify_one();
}

int WorkLimiter::running() const {
  std::lock_guard lock(mu_);
  return running_ - spare_;
}

int WorkLimiter::spare_in_use() const {
  std::lock_guard lock(mu_);
  return spare_;
}

int WorkLimiter::waiting() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

}  // namespace clash::server
