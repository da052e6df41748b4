// PairCache: scenes' caches of classified pairs share one budget of entries; a cache that finds
// it spent empties the idle caches first (least recently used first, skipping those in use),
// then itself, and stores nothing while caches in use hold the budget.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "scene.h"

namespace clash::server {
namespace {

CachedPair Entry(uint64_t version) {
  CachedPair c;
  c.pose_version_a = version;
  return c;
}

TEST(PairCacheTest, ScenesShareOneBudget) {
  auto budget = std::make_shared<PairCacheBudget>(5);
  std::optional<PairCache> a(budget);
  PairCache b(budget);
  for (uint64_t i = 0; i < 3; ++i) a->Put({i, i + 1}, Entry(i));
  for (uint64_t i = 0; i < 2; ++i) b.Put({i, i + 1}, Entry(i));
  EXPECT_EQ(budget->used(), 5u);
  // Replacing an entry takes nothing more.
  a->Put({0, 1}, Entry(7));
  ASSERT_NE(a->Find({0, 1}), nullptr);
  EXPECT_EQ(a->Find({0, 1})->pose_version_a, 7u);
  EXPECT_EQ(budget->used(), 5u);
  // Spent: b empties itself and stores its new entry.
  b.Put({9, 10}, Entry(9));
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(b.Find({0, 1}), nullptr);
  ASSERT_NE(b.Find({9, 10}), nullptr);
  EXPECT_EQ(budget->used(), 4u);
  a->Put({5, 6}, Entry(5));
  EXPECT_EQ(budget->used(), 5u);
  // a holds 4 of 5: b, spent again, empties itself and stores; then a, spent, empties itself.
  b.Put({11, 12}, Entry(11));
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(budget->used(), 5u);
  a->Put({20, 21}, Entry(20));
  EXPECT_EQ(a->size(), 1u);
  EXPECT_EQ(budget->used(), 2u);
  // A cache that goes gives its entries back.
  a.reset();
  EXPECT_EQ(budget->used(), 1u);
  b.Clear();
  EXPECT_EQ(budget->used(), 0u);
}

TEST(PairCacheTest, ABudgetOfNoneStoresNothing) {
  auto budget = std::make_shared<PairCacheBudget>(0);
  PairCache c(budget);
  c.Put({1, 2}, Entry(1));
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.Find({1, 2}), nullptr);
  EXPECT_EQ(budget->used(), 0u);
}

// Caches with a guard (a scene's) may be emptied by others once idle; in use, they are not.
TEST(PairCacheTest, IdleCachesAreEmptiedLeastRecentlyUsedFirst) {
  auto budget = std::make_shared<PairCacheBudget>(6, absl::Seconds(1));
  std::mutex ma, mb, mc;
  PairCache a(budget, &ma), b(budget, &mb), c(budget, &mc);
  for (uint64_t i = 0; i < 2; ++i) b.Put({i, i + 1}, Entry(i));
  absl::SleepFor(absl::Milliseconds(5));
  for (uint64_t i = 0; i < 3; ++i) a.Put({i, i + 1}, Entry(i));
  absl::SleepFor(absl::Milliseconds(5));
  c.Put({0, 1}, Entry(0));
  EXPECT_EQ(budget->used(), 6u);
  // Nobody idle yet: c, spent, empties itself.
  c.Put({1, 2}, Entry(1));
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(b.size(), 2u);
  EXPECT_EQ(budget->used(), 6u);
  // All idle now but c: c empties b (used longest ago), which makes the room it needs, and
  // keeps its own entries.
  absl::SleepFor(absl::Milliseconds(1100));
  c.Put({2, 3}, Entry(2));
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(budget->used(), 5u);
  c.Put({3, 4}, Entry(3));
  EXPECT_EQ(budget->used(), 6u);
  // A cache in use (its guard held, by another thread) is skipped: c empties itself instead.
  {
    std::promise<void> held, done;
    std::thread user([&] {
      std::lock_guard in_use(ma);
      held.set_value();
      done.get_future().wait();
    });
    held.get_future().wait();
    c.Put({4, 5}, Entry(4));
    done.set_value();
    user.join();
  }
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(budget->used(), 4u);
  // A lookup counts as a use: a looked up just now is not idle, b (empty) makes no room, so c
  // fills the budget and then empties itself.
  EXPECT_NE(a.Find({0, 1}), nullptr);
  c.Put({5, 6}, Entry(5));
  c.Put({6, 7}, Entry(6));
  EXPECT_EQ(budget->used(), 6u);
  c.Put({7, 8}, Entry(7));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(c.size(), 1u);
  // Once a is idle again, it goes.
  absl::SleepFor(absl::Milliseconds(1100));
  c.Put({8, 9}, Entry(8));
  c.Put({9, 10}, Entry(9));
  c.Put({10, 11}, Entry(10));
  c.Put({11, 12}, Entry(11));
  c.Put({12, 13}, Entry(12));
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(c.size(), 6u);
  EXPECT_EQ(budget->used(), 6u);
}

}  // namespace
}  // namespace clash::server
