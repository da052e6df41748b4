// Selectors and allowed-interference rules against brute-force oracles on seeded random input:
// SelectInstances' range lookup of prefixes in the ordered paths against the definition (the path,
// or the path continuing with '/'), and AllowRules' indexed search against a scan of every rule in
// request order.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "query_engine.h"
#include "testing/random_geometry.h"

namespace clash::server {
namespace {

constexpr uint64_t kInstances = 120;

// Paths of up to four segments drawn from a few names (some empty, so "//" and a trailing "/"
// occur), and prefixes drawn the same way: many share leading characters without a '/' after,
// and "a.b" and "a0" sort just before and after "a/" (the ends of the range a prefix looks up).
std::string RandomPath(std::mt19937_64& rng) {
  static const char* const kNames[] = {"a", "ab", "b", "", "a.b", "a0"};
  std::string path;
  const int n = std::uniform_int_distribution<int>(1, 4)(rng);
  for (int i = 0; i < n; ++i) {
    if (i > 0) path += '/';
    path += kNames[std::uniform_int_distribution<int>(0, 5)(rng)];
  }
  return path;
}

TEST(SelectInstancesTest, PathPrefixesChooseAsTheirDefinition) {
  std::mt19937_64 rng(1129);
  const auto part = std::make_shared<PartEntry>();
  part->geom = testing::MakeBox(geom::Vec3(1, 1, 1)).Part();
  int chosen_some = 0, not_found = 0;
  for (int round = 0; round < 20; ++round) {
    Scene scene("s");
    std::set<std::string> used;
    for (int i = 0; i < 60; ++i) {
      const std::string path = RandomPath(rng);
      if (!used.insert(path).second) continue;
      InstanceRec rec;
      rec.id = scene.next_instance_id++;
      rec.part = part;
      rec.path = path;
      scene.Add(std::move(rec));
    }
    for (auto& [id, rec] : scene.instances) {
      if (std::bernoulli_distribution(0.1)(rng)) scene.SetEnabled(rec, false);
    }
    for (int q = 0; q < 50; ++q) {
      v1::InstanceSelector selector;
      std::set<uint64_t> want;
      bool missing = false;
      const int n = std::uniform_int_distribution<int>(1, 3)(rng);
      for (int k = 0; k < n; ++k) {
        const std::string prefix = RandomPath(rng);
        selector.add_path_prefixes(prefix);
        if (k == 0) selector.add_path_prefixes(prefix);  // a repeat changes nothing
        bool any = false;
        for (const auto& [id, rec] : scene.instances) {
          if (rec.path == prefix || absl::StartsWith(rec.path, prefix + "/")) {
            any = true;
            if (rec.enabled) want.insert(id);
          }
        }
        missing |= !any;
      }
      const auto got = SelectInstances(scene, selector);
      if (missing) {
        EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << selector.DebugString();
        ++not_found;
        continue;
      }
      ASSERT_TRUE(got.ok()) << got.status() << selector.DebugString();
      std::vector<uint64_t> ids;
      for (const InstanceRec* rec : *got) ids.push_back(rec->id);
      EXPECT_EQ(ids, std::vector<uint64_t>(want.begin(), want.end())) << selector.DebugString();
      chosen_some += !ids.empty();
    }
  }
  // Both outcomes occur often, so the comparison means something.
  EXPECT_GT(chosen_some, 200);
  EXPECT_GT(not_found, 100);
}

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
