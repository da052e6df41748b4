// Helper threads that let one query use query slots nobody else wants (DESIGN.md §8: queries
// run on a bounded pool). A query that classifies many pairs hands them out one at a time;
// the calling thread works through them itself, and each helper that finds a free slot of the
// query limiter when it starts joins in, so queries and helpers together never run on more
// slots than the limiter has. A helper leaves, giving its slot back, as soon as a query waits
// for one: that query waits at most for the helper's current item (one pair, 16 rays).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "limiter.h"

namespace clash::server {

class QueryHelpers {
 public:
  /// `threads` helper threads (0: none; every call then runs on the caller). `limiter` (may be
  /// null: no limit but the threads) must outlive this object.
  QueryHelpers(int threads, WorkLimiter* limiter);
  /// Joins the threads; helpers still queued leave without working.
  ~QueryHelpers();
  QueryHelpers(const QueryHelpers&) = delete;
  QueryHelpers& operator=(const QueryHelpers&) = delete;

  /// Calls fn(i) once for every i in [0, n), on this thread and on helpers that find a free
  /// slot, and returns when every call has returned. Items are claimed one at a time in
  /// increasing order. fn must be safe to call concurrently for different i. When a call
  /// throws, the items not yet started are skipped and the first exception is rethrown here,
  /// on the calling thread, once every started call has returned.
  void ForEach(std::size_t n, const std::function<void(std::size_t)>& fn);

  /// Items (pairs, chunks of rays) that helpers, not the calling threads, have run since
  /// construction.
  [[nodiscard]] std::size_t helped() const;

 private:
  struct Batch;
  void Loop();
  void Stop();  // ends and joins the threads
  // Claims and runs items of `b` until none is left (or, for a helper, someone waits for a
  // slot); returns how many it ran.
  std::size_t Work(Batch& b, bool helper);

  WorkLimiter* limiter_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Batch>> queue_;
  bool stopping_ = false;
  std::size_t helped_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace clash::server
