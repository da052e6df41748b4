// Admission control: a bounded number of running jobs and a bounded wait queue. Past both,
// callers get RESOURCE_EXHAUSTED at once (RELIABILITY.md, requirement 9).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"

namespace clash::server {

/// Trailing metadata key marking a RESOURCE_EXHAUSTED answer as transient (value "1"): a full
/// queue, or a tenant's concurrency or rate limit, which a later try may pass. Clients retry
/// RESOURCE_EXHAUSTED only with it: the other causes (sizes, triangle and instance limits, the
/// storage quota) do not change by retrying.
inline constexpr char kRetryableMetadata[] = "clash-retryable";

/// `status` marked as transient (see kRetryableMetadata).
[[nodiscard]] absl::Status Transient(absl::Status status);
/// Whether `status` was marked by Transient.
[[nodiscard]] bool IsTransient(const absl::Status& status);

class WorkLimiter {
 public:
  /// Releases its slot when destroyed.
  class Permit {
   public:
    Permit() = default;
    explicit Permit(WorkLimiter* owner, bool spare = false) : owner_(owner), spare_(spare) {}
    Permit(Permit&& o) noexcept : owner_(o.owner_), spare_(o.spare_) { o.owner_ = nullptr; }
    Permit& operator=(Permit&& o) noexcept;
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;
    ~Permit();

   private:
    WorkLimiter* owner_ = nullptr;
    bool spare_ = false;  // from TryAcquireSpare
  };

  WorkLimiter(std::string name, int slots, int queue)
      : name_(std::move(name)), slots_(slots), queue_(queue) {}

  /// A slot, waiting in the queue while `stop` stays OK. RESOURCE_EXHAUSTED when every slot is
  /// busy and the queue is full; `stop`'s status when it fires while waiting. Slots go to
  /// waiters first come, first served: a caller that finds others waiting queues behind them
  /// even when a slot has just freed (else a steady stream of newcomers could keep a waiter
  /// out until its deadline). A slot lent to a
  /// helper (TryAcquireSpare) is a place to wait beyond the queue: its helper gives it back as
  /// soon as someone waits, so it never turns a caller away.
  [[nodiscard]] absl::StatusOr<Permit> Acquire(const std::function<absl::Status()>& stop);

  /// A slot when one is free and nobody waits for one; nullopt otherwise (never waits): for
  /// background work that should not queue before callers.
  [[nodiscard]] std::optional<Permit> TryAcquire();

  /// A spare slot for a helper of a running query (QueryHelpers): when one is free and nobody
  /// waits for one; nullopt otherwise (never waits). Its holder must give it back soon after
  /// waiting() turns positive.
  [[nodiscard]] std::optional<Permit> TryAcquireSpare();

  /// Slots held by callers of Acquire (not by helpers).
  [[nodiscard]] int running() const;
  /// Slots lent to helpers.
  [[nodiscard]] int spare_in_use() const;
  [[nodiscard]] int waiting() const;
  [[nodiscard]] int slots() const { return slots_; }
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  void Release(bool spare);

  std::string name_;
  int slots_;
  int queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0;  // every held slot, spare ones included
  int spare_ = 0;    // held by helpers
  // Tickets of the callers waiting, in arrival order: only the first may take a free slot.
  std::set<uint64_t> waiting_;
  uint64_t next_ticket_ = 0;
};

}  // namespace clash::server
