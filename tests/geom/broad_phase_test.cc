#include "clash/geom/broad_phase.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "testing/brute_force.h"
#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using testing::BruteOverlappingPairs;
using testing::RandomPoint;
using testing::SeededRng;
using testing::Uniform;

// A random box in [-100, 100]^3 with half extents up to `half`; one in ten is flat (a zero
// extent), as the world box of a sheet part can be.
Aabb RandomBox(std::mt19937& rng, double half) {
  Vec3 h(Uniform(rng, 0.2, half), Uniform(rng, 0.2, half), Uniform(rng, 0.2, half));
  if (Uniform(rng, 0, 1) < 0.1) h[static_cast<int>(Uniform(rng, 0, 3))] = 0.0;
  return Aabb::FromCenterHalf(RandomPoint(rng, 100), h);
}

Ray RandomRay(std::mt19937& rng) {
  Ray ray{RandomPoint(rng, 150), RandomPoint(rng, 60) - RandomPoint(rng, 150), 0.0,
          std::numeric_limits<double>::infinity()};
  const double u = Uniform(rng, 0, 1);
  if (u < 0.2) ray.direction[static_cast<int>(Uniform(rng, 0, 3))] = 0.0;  // axis-parallel slab
  if (u > 0.7) ray.t_max = Uniform(rng, 0.2, 1.5);
  if (ray.direction.norm() == 0.0) ray.direction = Vec3::UnitX();
  return ray;
}

// A uniform index below n (n > 0).
std::size_t Pick(std::mt19937& rng, std::size_t n) {
  return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
}

struct Live {
  int32_t proxy;
  uint64_t id;
  Aabb tight;
};

// Query, QueryRay and ForEachOverlappingPair against loops over every live proxy: exactly the
// proxies (and pairs) whose fat boxes qualify, each once, and among them all whose tight
// boxes do.
class TreeOracle {
 public:
  TreeOracle(const DynamicAabbTree& tree, const std::vector<Live>& live) : t_(tree), l_(live) {}

  // Returns the number of proxies found.
  std::size_t CheckQuery(const Aabb& q) const {
    std::multiset<uint64_t> got, fat;
    t_.Query(q, [&](uint64_t id) {
      got.insert(id);
      return true;
    });
    for (const Live& l : l_) {
      if (t_.FatBox(l.proxy).Overlaps(q)) fat.insert(l.id);
      if (l.tight.Overlaps(q)) {
        EXPECT_EQ(got.count(l.id), 1u) << "tight box missed: " << l.id;
      }
    }
    EXPECT_EQ(got, fat);
    return got.size();
  }

  // Returns the number of proxies found.
  std::size_t CheckRay(const Ray& ray) const {
    std::map<uint64_t, double> got, fat;
    int calls = 0;
    t_.QueryRay(ray, [&](uint64_t id, double t) {
      got[id] = t;
      ++calls;
      return ray.t_max;
    });
    EXPECT_EQ(calls, static_cast<int>(got.size()));
    double nearest = std::numeric_limits<double>::infinity();
    for (const Live& l : l_) {
      if (auto iv = IntersectRayAabb(ray, t_.FatBox(l.proxy))) {
        fat[l.id] = iv->t0;
        nearest = std::min(nearest, iv->t0);
      }
      if (IntersectRayAabb(ray, l.tight)) {
        EXPECT_EQ(got.count(l.id), 1u) << "tight box missed: " << l.id;
      }
    }
    EXPECT_EQ(got, fat);
    // Closest box only: the visit shrinks t_max to the nearest entry so far.
    double best = std::numeric_limits<double>::infinity();
    t_.QueryRay(ray, [&](uint64_t, double t) {
      best = std::min(best, t);
      return best;
    });
    EXPECT_EQ(best, nearest);
    return got.size();
  }

  // Returns the number of pairs found.
  std::size_t CheckPairs() const {
    std::vector<std::pair<uint64_t, uint64_t>> got;
    t_.ForEachOverlappingPair([&](uint64_t a, uint64_t b) { got.emplace_back(a, b); });
    for (const auto& [a, b] : got) EXPECT_LT(a, b);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end()) << "a pair reported twice";
    std::vector<Aabb> fat_boxes, tight_boxes;
    for (const Live& l : l_) {
      fat_boxes.push_back(t_.FatBox(l.proxy));
      tight_boxes.push_back(l.tight);
    }
    auto as_ids = [&](const std::vector<std::pair<std::size_t, std::size_t>>& pairs) {
      std::vector<std::pair<uint64_t, uint64_t>> ids;
      for (const auto& [i, j] : pairs) {
        ids.emplace_back(std::min(l_[i].id, l_[j].id), std::max(l_[i].id, l_[j].id));
      }
      std::sort(ids.begin(), ids.end());
      return ids;
    };
    EXPECT_EQ(got, as_ids(BruteOverlappingPairs(fat_boxes)));
    const auto tight = as_ids(BruteOverlappingPairs(tight_boxes));
    EXPECT_TRUE(std::includes(got.begin(), got.end(), tight.begin(), tight.end()));
    return got.size();
  }

 private:
  const DynamicAabbTree& t_;
  const std::vector<Live>& l_;
};

TEST(DynamicAabbTree, RandomOperationsAgreeWithBruteForce) {
  auto rng = SeededRng(201);
  DynamicAabbTree tree;
  std::vector<Live> live;
  uint64_t next_id = 1000;
  const int ops = testing::Trials(6000, 1500);
  int queries = 0, query_hits = 0, rays = 0, ray_hits = 0, small_moves = 0, small_kept = 0;
  std::size_t pairs = 0;
  for (int op = 0; op < ops; ++op) {
    const double u = Uniform(rng, 0, 1);
    if (live.empty() || (u < 0.4 && live.size() < 400)) {
      const Aabb box = RandomBox(rng, 8);
      const uint64_t id = next_id++;
      const int32_t proxy = tree.Insert(box, id);
      live.push_back({proxy, id, box});
      EXPECT_EQ(tree.UserId(proxy), id);
      EXPECT_TRUE(tree.FatBox(proxy).Contains(box));
    } else if (u < 0.55) {
      const std::size_t k = Pick(rng, live.size());
      tree.Remove(live[k].proxy);
      live.erase(live.begin() + static_cast<long>(k));
    } else {
      Live& l = live[Pick(rng, live.size())];
      const Aabb old_fat = tree.FatBox(l.proxy);
      const bool small = u < 0.9;
      Aabb box = l.tight;
      if (small) {  // a nudge by up to 3 % of the box's diagonal per axis
        const Vec3 d = RandomPoint(rng, 0.03 * box.Diagonal());
        box = {box.min + d, box.max + d};
      } else {
        box = RandomBox(rng, 8);
      }
      const bool moved = tree.Move(l.proxy, box);
      l.tight = box;
      EXPECT_TRUE(tree.FatBox(l.proxy).Contains(box));
      EXPECT_EQ(tree.TightBox(l.proxy).min, box.min);
      if (!old_fat.Contains(box)) {
        EXPECT_TRUE(moved);
      }
      if (!moved) {
        EXPECT_EQ(tree.FatBox(l.proxy).min, old_fat.min);
      }
      if (small) {
        ++small_moves;
        small_kept += !moved;
      }
    }
    ASSERT_TRUE(tree.Validate()) << "op " << op;
    ASSERT_EQ(tree.size(), live.size());
    const TreeOracle oracle(tree, live);
    if (op % 10 == 0) {
      ++queries;
      query_hits += oracle.CheckQuery(RandomBox(rng, 30)) > 0;
      ++rays;
      ray_hits += oracle.CheckRay(RandomRay(rng)) > 0;
    }
    if (op % 150 == 0) pairs += oracle.CheckPairs();
    if (::testing::Test::HasFailure()) FAIL() << "op " << op;
  }
  // The generators must keep the checks meaningful: some queries find nothing, many find
  // something (fewer while the tree is still filling up), and small moves mostly stay inside
  // their fat boxes.
  EXPECT_GT(query_hits, queries / 3);
  EXPECT_LT(query_hits, queries);
  EXPECT_GT(ray_hits, rays / 10);
  EXPECT_LT(ray_hits, rays * 9 / 10);
  EXPECT_GT(pairs, 0u);
  EXPECT_GT(small_kept, small_moves / 2);
  EXPECT_LT(small_kept, small_moves);
  EXPECT_LE(tree.Height(), 2.5 * std::log2(static_cast<double>(live.size())) + 4);
}

// The classic degenerate input of an incremental tree: boxes inserted in order along a line.
TEST(DynamicAabbTree, SequentialInsertsOnALineStayShallow) {
  for (const Vec3& step : {Vec3(2, 0, 0), Vec3(1, 1, 1), Vec3(0, 0, -0.5)}) {
    SCOPED_TRACE(::testing::Message() << "step " << step.transpose());
    DynamicAabbTree tree;
    constexpr int kBoxes = 4096;
    std::vector<int32_t> proxies;
    for (int i = 0; i < kBoxes; ++i) {
      proxies.push_back(tree.Insert(Aabb::FromCenterHalf(i * step, Vec3(0.4, 0.4, 0.4)), i));
    }
    ASSERT_TRUE(tree.Validate());
    RecordProperty("height", tree.Height());
    EXPECT_LE(tree.Height(), 2.5 * std::log2(kBoxes) + 4);
    // Fat boxes of 0.8 mm cubes overlap their neighbours only at the 0.5 mm step.
    std::size_t pairs = 0;
    tree.ForEachOverlappingPair([&](uint64_t a, uint64_t b) {
      pairs += b == a + 1;
      return b == a + 1;
    });
    EXPECT_EQ(pairs, step.norm() < 1 ? kBoxes - 1u : 0u);
    // Removing every other box, in order, keeps it shallow too.
    for (int i = 0; i < kBoxes; i += 2) tree.Remove(proxies[i]);
    ASSERT_TRUE(tree.Validate());
    EXPECT_EQ(tree.size(), static_cast<std::size_t>(kBoxes / 2));
    EXPECT_LE(tree.Height(), 2.5 * std::log2(kBoxes / 2) + 4);
    // The boxes left are at least 1 mm apart.
    pairs = 0;
    tree.ForEachOverlappingPair([&](uint64_t, uint64_t) { ++pairs; });
    EXPECT_EQ(pairs, 0u);
  }
}

TEST(DynamicAabbTree, SmallMovesCostNothingAndShrinkingRefits) {
  auto rng = SeededRng(202);
  DynamicAabbTree tree(0.05);
  std::vector<std::pair<int32_t, Aabb>> boxes;
  for (int i = 0; i < 200; ++i) {
    const Aabb b = RandomBox(rng, 5);
    boxes.emplace_back(tree.Insert(b, i), b);
  }
  ASSERT_TRUE(tree.Validate());
  // A move by 1 % of the diagonal stays well inside the 5 % margin.
  for (auto& [proxy, b] : boxes) {
    const Aabb fat = tree.FatBox(proxy);
    const Vec3 d = 0.01 * b.Diagonal() * Vec3(1, -1, 0.5).normalized();
    EXPECT_FALSE(tree.Move(proxy, {b.min + d, b.max + d}));
    EXPECT_EQ(tree.FatBox(proxy).max, fat.max);
  }
  ASSERT_TRUE(tree.Validate());
  // Leaving the fat box, or shrinking to a tenth in place, reinserts with a fresh fat box.
  const auto& [p0, b0] = boxes[0];
  const Vec3 far(b0.Diagonal(), 0, 0);
  EXPECT_TRUE(tree.Move(p0, {b0.min + far, b0.max + far}));
  const auto& [p1, b1] = boxes[1];
  const Aabb small = Aabb::FromCenterHalf(b1.Center(), 0.1 * b1.HalfExtents());
  EXPECT_TRUE(tree.Move(p1, small));
  EXPECT_TRUE(b1.Contains(tree.FatBox(p1)));
  ASSERT_TRUE(tree.Validate());
}

TEST(DynamicAabbTree, EmptySingleStopAndReuse) {
  DynamicAabbTree tree;
  EXPECT_EQ(tree.size(), 0u);
  EXPECT_EQ(tree.Height(), 0);
  EXPECT_TRUE(tree.Validate());
  int calls = 0;
  const Aabb everything = Aabb::FromCenterHalf(Vec3::Zero(), Vec3::Constant(1e9));
  tree.Query(everything, [&](uint64_t) { return ++calls > 0; });
  tree.QueryRay(Ray{}, [&](uint64_t, double t) { return ++calls + t; });
  tree.ForEachOverlappingPair([&](uint64_t, uint64_t) { ++calls; });
  EXPECT_EQ(calls, 0);

  const int32_t a = tree.Insert(Aabb::FromCenterHalf(Vec3::Zero(), Vec3(1, 1, 1)), 7);
  EXPECT_EQ(tree.Height(), 0);
  tree.ForEachOverlappingPair([&](uint64_t, uint64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  for (int i = 0; i < 9; ++i)
    tree.Insert(Aabb::FromCenterHalf(Vec3(0.1 * i, 0, 0), Vec3(1, 1, 1)), i);
  ASSERT_TRUE(tree.Validate());
  // A visit returning false stops the walk; one returning a t_max below t_min too.
  tree.Query(everything, [&](uint64_t) { return ++calls < 3; });
  EXPECT_EQ(calls, 3);
  calls = 0;
  tree.QueryRay(Ray{Vec3(-10, 0, 0), Vec3::UnitX()}, [&](uint64_t, double) {
    ++calls;
    return -1.0;
  });
  EXPECT_EQ(calls, 1);
  calls = 0;
  tree.ForEachOverlappingPair([&](uint64_t, uint64_t) { return ++calls < 5; });
  EXPECT_EQ(calls, 5);
  calls = 0;
  tree.ForEachOverlappingPair([&](uint64_t, uint64_t) { ++calls; });
  EXPECT_EQ(calls, 45);  // ten mutually overlapping boxes
  // A removed proxy's handle is handed out again.
  tree.Remove(a);
  EXPECT_EQ(tree.size(), 9u);
  const int32_t b = tree.Insert(Aabb::FromCenterHalf(Vec3(5, 5, 5), Vec3(1, 1, 1)), 99);
  EXPECT_EQ(b, a);
  EXPECT_EQ(tree.UserId(b), 99u);
  EXPECT_TRUE(tree.Validate());
}

// Boxes with a NaN or infinite coordinate, empty boxes, and boxes whose fat box lies beyond
// kMaxCoordinateMm (where surface areas overflow) are refused: Insert returns kNullProxy, Move
// keeps the proxy's boxes, and the tree stays valid and answers as before. Removing kNullProxy
// does nothing, so a caller may remove what it "inserted" either way.
TEST(DynamicAabbTree, RefusesBoxesItCannotHold) {
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  DynamicAabbTree tree;
  std::vector<int32_t> proxies;
  for (int i = 0; i < 8; ++i) {
    proxies.push_back(tree.Insert(Aabb::FromCenterHalf(Vec3(3.0 * i, 0, 0), Vec3(1, 1, 1)), i));
  }
  const Aabb unit = Aabb::FromCenterHalf(Vec3::Zero(), Vec3(1, 1, 1));
  const double huge = 2 * DynamicAabbTree::kMaxCoordinateMm;
  const Aabb bad[] = {
      {Vec3(0, kNan, 0), Vec3(1, 1, 1)},
      {Vec3(-1, -1, -1), Vec3(1, 1, kNan)},
      {Vec3(-kInf, 0, 0), Vec3(1, 1, 1)},
      {Vec3(0, 0, 0), Vec3(kInf, 1, 1)},
      Aabb{},                                                 // empty
      {Vec3(1, 0, 0), Vec3(0, 1, 1)},                         // min > max
      Aabb::FromCenterHalf(Vec3(huge, 0, 0), Vec3(1, 1, 1)),  // finite, but too far out
      {Vec3(-1e300, 0, 0), Vec3(1e300, 1, 1)},                // finite, but too large
  };
  EXPECT_TRUE(tree.Accepts(unit));
  const Aabb fat3 = tree.FatBox(proxies[3]);
  const Aabb tight3 = tree.TightBox(proxies[3]);
  for (const Aabb& b : bad) {
    SCOPED_TRACE(::testing::Message() << b.min.transpose() << " / " << b.max.transpose());
    EXPECT_FALSE(tree.Accepts(b));
    EXPECT_EQ(tree.Insert(b, 100), DynamicAabbTree::kNullProxy);
    EXPECT_EQ(tree.size(), 8u);
    EXPECT_FALSE(tree.Move(proxies[3], b));
    EXPECT_EQ(tree.FatBox(proxies[3]).min, fat3.min);
    EXPECT_EQ(tree.FatBox(proxies[3]).max, fat3.max);
    EXPECT_EQ(tree.TightBox(proxies[3]).min, tight3.min);
    EXPECT_EQ(tree.TightBox(proxies[3]).max, tight3.max);
    ASSERT_TRUE(tree.Validate());
  }
  // Queries answer as before: every proxy, each once, and the pairs of neighbours only.
  std::multiset<uint64_t> seen;
  tree.Query(Aabb::FromCenterHalf(Vec3(10, 0, 0), Vec3(20, 5, 5)),
             [&](uint64_t id) { seen.insert(id); });
  EXPECT_EQ(seen, (std::multiset<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  int pairs = 0;
  tree.ForEachOverlappingPair([&](uint64_t, uint64_t) { ++pairs; });
  EXPECT_EQ(pairs, 0);  // 3 apart, boxes of half-width 1 (fat margins ~0.17)
  // A good box still moves the proxy.
  EXPECT_TRUE(tree.Move(proxies[3], {unit.min + Vec3(100, 0, 0), unit.max + Vec3(100, 0, 0)}));
  // Removing kNullProxy (what a refused Insert returned) is a no-op.
  tree.Remove(DynamicAabbTree::kNullProxy);
  EXPECT_EQ(tree.size(), 8u);
  EXPECT_TRUE(tree.Validate());
}

}  // namespace
}  // namespace clash::geom
