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
  if (running_ < slots_ && waiting_.empty()) {
    ++running_;
    return Permit(this);
  }
  const int waiting = static_cast<int>(waiting_.size());
  if (waiting >= queue_ + spare_) {
    return Transient(absl::ResourceExhaustedError(absl::StrCat(name_, " queue full (",
                                                               running_ - spare_, " running, ",
                                                               waiting, " waiting): retry later")));
  }
  const uint64_t ticket = next_ticket_++;
  waiting_.insert(ticket);
  const auto my_turn = [&] { return running_ < slots_ && *waiting_.begin() == ticket; };
  while (!my_turn()) {
    cv_.wait_for(lock, std::chrono::milliseconds(20));
    if (my_turn()) break;
    if (stop) {
      absl::Status st = stop();
      if (!st.ok()) {
        waiting_.erase(ticket);
        cv_.notify_all();  // the next in line may be first now
        return st;
      }
    }
  }
  waiting_.erase(ticket);
  ++running_;
  if (running_ < slots_ && !waiting_.empty()) cv_.notify_all();  // a slot is left for the next
  return Permit(this);
}

std::optional<WorkLimiter::Permit> WorkLimiter::TryAcquire() {
  std::lock_guard lock(mu_);
  if (running_ >= slots_ || !waiting_.empty()) return std::nullopt;
  ++running_;
  return Permit(this);
}

std::optional<WorkLimiter::Permit> WorkLimiter::TryAcquireSpare() {
  std::lock_guard lock(mu_);
  if (running_ >= slots_ || !waiting_.empty()) return std::nullopt;
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
  // Every waiter checks whether it is first in line (the queue is short, bounded by --queue).
  cv_.notify_all();
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
  return static_cast<int>(waiting_.size());
}

}  // namespace clash::server
