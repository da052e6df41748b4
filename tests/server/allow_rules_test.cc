// AllowRules: the indexed search for the rule of a clash answers as the plain scan of every
// rule in request order (the brute-force oracle), on seeded random rules and clashes.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "query_engine.h"

namespace clash::server {
namespace {

constexpr uint64_t kInstances = 120;

absl::flat_hash_set<uint64_t> RandomSet(std::mt19937_64& rng) {
  absl::flat_hash_set<uint64_t> ids;
  const int n = std::uniform_int_distribution<int>(1, 12)(rng);
  for (int i = 0; i < n; ++i)
    ids.insert(std::uniform_int_distribution<uint64_t>(1, kInstances)(rng));
  return ids;
}

AllowRule RandomRule(std::mt19937_64& rng, int index) {
  std::bernoulli_distribution rare(0.12);
  AllowRule r;
  r.name = "r" + std::to_string(index);
  r.a_all = rare(rng);
  if (!r.a_all) r.a = RandomSet(rng);
  r.pairs_within_a = std::bernoulli_distribution(0.35)(rng);
  if (!r.pairs_within_a) {
    r.b_all = rare(rng);
    if (!r.b_all) r.b = RandomSet(rng);
  }
  for (int c : {v1::HARD, v1::CONTACT, v1::CLEARANCE, v1::CONTAINED}) {
    if (std::bernoulli_distribution(0.3)(rng)) r.classes.insert(c);
  }
  r.max_depth_mm = std::vector<double>{0, 0.5, 2}[std::uniform_int_distribution<int>(0, 2)(rng)];
  return r;
}

const AllowRule* Scan(const std::vector<AllowRule>& rules, uint64_t x, uint64_t y,
                      v1::ClashClass cls, double depth) {
  for (const AllowRule& r : rules) {
    if (r.Covers(x, y, cls, depth)) return &r;
  }
  return nullptr;
}

const AllowRule* ScanPair(const std::vector<AllowRule>& rules, uint64_t x, uint64_t y) {
  for (const AllowRule& r : rules) {
    if (r.CoversPair(x, y)) return &r;
  }
  return nullptr;
}

TEST(AllowRulesTest, TheIndexFindsTheFirstCoveringRuleAsAScanOfEveryRule) {
  std::mt19937_64 rng(20261129);
  const v1::ClashClass classes[] = {v1::HARD, v1::CONTACT, v1::CLEARANCE, v1::CONTAINED};
  int covered = 0, pair_covered = 0, clashes = 0;
  for (int round = 0; round < 60; ++round) {
    AllowRules rules;
    const int n = std::uniform_int_distribution<int>(0, 30)(rng);
    for (int i = 0; i < n; ++i) rules.Add(RandomRule(rng, i));
    ASSERT_EQ(rules.rules().size(), static_cast<std::size_t>(n));
    for (int q = 0; q < 400; ++q, ++clashes) {
      std::uniform_int_distribution<uint64_t> id(1, kInstances + 5);  // some named by no rule
      const uint64_t x = id(rng);
      const uint64_t y = q % 50 == 0 ? x : id(rng);
      const v1::ClashClass cls = classes[std::uniform_int_distribution<int>(0, 3)(rng)];
      const double depth = std::uniform_real_distribution<double>(0, 3)(rng);
      const AllowRule* want = Scan(rules.rules(), x, y, cls, depth);
      ASSERT_EQ(rules.FirstCovering(x, y, cls, depth), want)
          << "round " << round << " pair " << x << "," << y;
      ASSERT_EQ(rules.FirstCovering(y, x, cls, depth), Scan(rules.rules(), y, x, cls, depth));
      const AllowRule* want_pair = ScanPair(rules.rules(), x, y);
      ASSERT_EQ(rules.FirstCoveringPair(x, y), want_pair);
      covered += want != nullptr;
      pair_covered += want_pair != nullptr;
    }
  }
  // Neither answer is (nearly) always the same, so the comparison means something.
  EXPECT_GT(covered, clashes / 10);
  EXPECT_LT(covered, clashes * 9 / 10);
  EXPECT_GT(pair_covered, covered);
  EXPECT_LT(pair_covered, clashes * 19 / 20);
}

}  // namespace
}  // namespace clash::server
