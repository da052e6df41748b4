// QueryHelpers: every item runs once, helpers join only on idle slots, and leave when a query
// waits for one. Waits are on conditions with a generous timeout that only a bug reaches.
#include "parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "limiter.h"

namespace clash::server {
namespace {

constexpr auto kBugTimeout = std::chrono::seconds(20);

// Waits until pred() holds; false after kBugTimeout.
template <class Pred>
bool WaitFor(Pred&& pred) {
  const auto end = std::chrono::steady_clock::now() + kBugTimeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// A query limiter whose first slot the test holds, as the running query's own.
struct RunningQuery {
  RunningQuery(int slots, int queue) : limiter("test", slots, queue), own(*limiter.Acquire({})) {}
  WorkLimiter limiter;
  WorkLimiter::Permit own;
};

TEST(QueryHelpers, RunsEveryItemOnceAndOnlyThenReturns) {
  QueryHelpers helpers(3, nullptr);
  for (std::size_t n : {0u, 1u, 2u, 7u, 1000u}) {
    std::vector<std::atomic<int>> runs(n);
    std::atomic<std::size_t> finished{0};
    helpers.ForEach(n, [&](std::size_t i) {
      runs[i].fetch_add(1);
      finished.fetch_add(1);
    });
    EXPECT_EQ(finished.load(), n);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << "n " << n << " i " << i;
  }
}

// Each thread's first item waits until both the caller and a helper have started one: a
// helper must join while the caller is busy (whichever of them claims item 0).
TEST(QueryHelpers, HelpersJoinWhileTheCallerWorks) {
  RunningQuery running(2, 4);
  WorkLimiter& limiter = running.limiter;
  QueryHelpers helpers(1, &limiter);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> caller_started{false}, helper_started{false};
  std::mutex mu;
  std::set<std::thread::id> threads;
  helpers.ForEach(50, [&](std::size_t) {
    bool first;
    {
      std::lock_guard lock(mu);
      first = threads.insert(std::this_thread::get_id()).second;
    }
    (std::this_thread::get_id() == caller ? caller_started : helper_started) = true;
    if (first) {
      EXPECT_TRUE(WaitFor([&] { return caller_started.load() && helper_started.load(); }))
          << "the caller and a helper did not both work";
    }
  });
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_GT(helpers.helped(), 0u);
  // The helper gives its slot back once its last item has returned.
  EXPECT_TRUE(WaitFor([&] { return limiter.spare_in_use() == 0; }));
  EXPECT_EQ(limiter.running(), 1);
}

// A slot lent to a helper never turns a query away: with no queue at all, a query arriving
// while the helper holds the spare slot waits for it (the helper leaves) instead of getting
// RESOURCE_EXHAUSTED; the gauges count queries and helpers apart.
TEST(QueryHelpers, ASpareSlotIsAPlaceToWait) {
  RunningQuery running(2, 0);
  WorkLimiter& limiter = running.limiter;
  std::optional<WorkLimiter::Permit> spare = limiter.TryAcquireSpare();
  ASSERT_TRUE(spare.has_value());
  EXPECT_EQ(limiter.running(), 1);
  EXPECT_EQ(limiter.spare_in_use(), 1);
  std::atomic<bool> admitted{false};
  std::thread query([&] {
    auto p = limiter.Acquire({});
    admitted = p.ok();
  });
  ASSERT_TRUE(WaitFor([&] { return limiter.waiting() == 1; }));
  // One waiter per spare slot: a third caller finds the queue full.
  EXPECT_FALSE(limiter.Acquire({}).ok());
  spare.reset();  // what a helper does when it sees someone waiting
  query.join();
  EXPECT_TRUE(admitted);
  EXPECT_EQ(limiter.running(), 1);  // the query has finished
  EXPECT_EQ(limiter.spare_in_use(), 0);
}

// Every slot busy: helpers stay away and the caller runs every item.
TEST(QueryHelpers, NoIdleSlotMeansNoHelp) {
  RunningQuery running(1, 4);
  WorkLimiter& limiter = running.limiter;
  QueryHelpers helpers(2, &limiter);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  for (int round = 0; round < 20; ++round) {
    helpers.ForEach(20, [&](std::size_t) {
      if (std::this_thread::get_id() != caller) ++elsewhere;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  }
  EXPECT_EQ(elsewhere.load(), 0);
  EXPECT_EQ(helpers.helped(), 0u);
  EXPECT_FALSE(limiter.TryAcquireSpare().has_value());
}

// A query that waits for a slot gets the helper's: the helper leaves after its item, and the
// caller finishes the batch alone.
TEST(QueryHelpers, AHelperLeavesWhenAQueryWaits) {
  RunningQuery running(2, 4);
  WorkLimiter& limiter = running.limiter;
  QueryHelpers helpers(1, &limiter);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> waiter_has_slot{false};
  std::optional<std::thread> waiter;
  std::atomic<int> on_helper{0};
  helpers.ForEach(30, [&](std::size_t i) {
    if (std::this_thread::get_id() != caller) {
      // The helper's first item: another query arrives and waits for a slot meanwhile.
      if (on_helper.fetch_add(1) == 0) {
        waiter.emplace([&] {
          auto p = limiter.Acquire({});
          waiter_has_slot = p.ok();
        });
        EXPECT_TRUE(WaitFor([&] { return limiter.waiting() == 1; }));
      }
      return;
    }
    if (i == 0) {
      EXPECT_TRUE(WaitFor([&] { return waiter_has_slot.load(); })) << "the helper kept its slot";
    }
  });
  ASSERT_TRUE(waiter.has_value());
  waiter->join();
  EXPECT_TRUE(waiter_has_slot);
  EXPECT_EQ(on_helper.load(), 1);
  EXPECT_EQ(helpers.helped(), 1u);
}

// An exception thrown by an item on a helper reaches the caller, not std::terminate; the items
// not yet started when it was thrown are skipped, none runs twice, and the helpers serve later
// batches. The caller's first item waits until the helper has claimed every other item, so
// with the skipping broken the helper would start all of them.
TEST(QueryHelpers, AnExceptionOnAHelperReachesTheCaller) {
  QueryHelpers helpers(1, nullptr);
  const std::thread::id caller = std::this_thread::get_id();
  constexpr std::size_t kItems = 100;
  std::atomic<bool> thrown{false};
  std::atomic<bool> caller_started{false};
  std::vector<std::atomic<int>> started(kItems);
  auto item = [&](std::size_t i) {
    ++started[i];
    if (std::this_thread::get_id() != caller) {
      if (!thrown.exchange(true)) throw std::runtime_error("item failed");
    } else if (!caller_started.exchange(true)) {
      // The helper counts its items when it has claimed them all (helped() > 0).
      EXPECT_TRUE(WaitFor([&] { return helpers.helped() > 0; }));
    }
  };
  EXPECT_THROW(helpers.ForEach(kItems, item), std::runtime_error);
  EXPECT_TRUE(thrown);
  int total = 0;
  for (std::size_t i = 0; i < kItems; ++i) {
    EXPECT_LE(started[i].load(), 1) << "item " << i;
    total += started[i].load();
  }
  // The throwing item, and the caller's first item unless the helper threw before the caller
  // claimed one.
  EXPECT_EQ(total, caller_started ? 2 : 1);
  // The helpers still work afterwards.
  std::atomic<int> after{0};
  helpers.ForEach(10, [&](std::size_t) { ++after; });
  EXPECT_EQ(after.load(), 10);
}

}  // namespace
}  // namespace clash::server
