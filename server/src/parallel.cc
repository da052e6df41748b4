#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <optional>

namespace clash::server {

struct QueryHelpers::Batch {
  std::size_t n = 0;
  const std::function<void(std::size_t)>* fn = nullptr;  // valid while any item is unclaimed
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};  // an item threw: the rest are claimed but not run
  std::mutex mu;
  std::condition_variable cv;
  std::size_t done = 0;
  std::exception_ptr error;  // the first exception an item threw
};

QueryHelpers::QueryHelpers(int threads, WorkLimiter* limiter) : limiter_(limiter) {
  try {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  } catch (...) {  // the threads already started must be joined, or std::terminate
    Stop();
    throw;
  }
}

QueryHelpers::~QueryHelpers() { Stop(); }

void QueryHelpers::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::size_t QueryHelpers::helped() const {
  std::lock_guard lock(mu_);
  return helped_;
}

std::size_t QueryHelpers::Work(Batch& b, bool helper) {
  std::size_t ran = 0;
  for (;;) {
    if (helper && limiter_ != nullptr && limiter_->waiting() > 0) break;
    const std::size_t i = b.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= b.n) break;
    ++ran;
    if (b.failed.load(std::memory_order_relaxed)) continue;
    try {
      (*b.fn)(i);
    } catch (...) {  // handed to the caller: a helper thread must not end the process
      std::lock_guard lock(b.mu);
      if (!b.error) b.error = std::current_exception();
      b.failed = true;
    }
  }
  if (ran > 0 && helper) {
    std::lock_guard lock(mu_);
    helped_ += ran;
  }
  if (ran > 0) {  // counted before the caller can see the batch done
    std::lock_guard lock(b.mu);
    b.done += ran;
    if (b.done == b.n) b.cv.notify_all();
  }
  return ran;
}

void QueryHelpers::ForEach(std::size_t n, const std::function<void(std::size_t)>& fn) {
  if (n == 0) return;
  auto batch = std::make_shared<Batch>();
  batch->n = n;
  batch->fn = &fn;
  // One helper per thread at most, and none for a single item.
  const std::size_t offers = std::min(threads_.size(), n - 1);
  if (offers > 0) {
    {
      std::lock_guard lock(mu_);
      try {
        for (std::size_t k = 0; k < offers; ++k) queue_.push_back(batch);
      } catch (...) {
        // Offers already queued must find nothing to claim: fn is about to go.
        batch->next = n;
        throw;
      }
    }
    cv_.notify_all();
  }
  Work(*batch, false);
  // Items claimed by helpers are still running: fn and what it refers to live until they end.
  // A helper that starts later finds nothing to claim and never touches fn.
  std::unique_lock lock(batch->mu);
  batch->cv.wait(lock, [&] { return batch->done == batch->n; });
  if (batch->error) std::rethrow_exception(batch->error);
}

void QueryHelpers::Loop() {
  for (;;) {
    std::shared_ptr<Batch> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      batch = std::move(queue_.front());
      queue_.pop_front();
    }
    if (batch->next.load(std::memory_order_relaxed) >= batch->n) continue;  // all claimed
    std::optional<WorkLimiter::Permit> permit;
    if (limiter_ != nullptr) {
      permit = limiter_->TryAcquireSpare();
      if (!permit) continue;  // no idle slot: the caller works alone
    }
    Work(*batch, true);
  }
}

}  // namespace clash::server
