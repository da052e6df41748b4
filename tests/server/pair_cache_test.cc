// PairCache: scenes' caches of classified pairs share one budget of entries; a cache that finds
// it spent empties itself first, and stores nothing while other caches hold the budget.
#include <gtest/gtest.h>

#include <memory>
#include <optional>

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

}  // namespace
}  // namespace clash::server
