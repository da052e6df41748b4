#include "clash/geom/obb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "clash/geom/triangle.h"
#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using testing::MakeBox;
using testing::RandomPoint;
using testing::RandomRotation;
using testing::SeededRng;
using testing::Uniform;

std::vector<Triangle> BoxTriangles(const Obb& b) {
  auto raw = MakeBox(b.half);
  std::vector<Triangle> out;
  for (const auto& t : raw.t) {
    auto w = [&](uint32_t i) { return Vec3(b.center + b.axes * raw.v[i]); };
    out.push_back({w(t[0]), w(t[1]), w(t[2])});
  }
  return out;
}

// Oracle for two solid convex boxes: they overlap iff their surfaces intersect or one
// contains the other's centre.
bool OverlapByTriangles(const Obb& a, const Obb& b) {
  if (a.Contains(b.center) || b.Contains(a.center)) return true;
  for (const Triangle& x : BoxTriangles(a)) {
    for (const Triangle& y : BoxTriangles(b)) {
      if (TrianglesIntersect(x, y)) return true;
    }
  }
  return false;
}

double DistanceByTriangles(const Obb& a, const Obb& b) {
  double best = 1e300;
  for (const Triangle& x : BoxTriangles(a)) {
    for (const Triangle& y : BoxTriangles(b))
      best = std::min(best, DistanceTriangles(x, y).distance);
  }
  return best;
}

Obb RandomObb(std::mt19937& rng) {
  return {RandomPoint(rng, 2.2), RandomRotation(rng),
          Vec3(Uniform(rng, 0.1, 2), Uniform(rng, 0.1, 2), Uniform(rng, 0.1, 2))};
}

TEST(Obb, SeparatingAxisAgreesWithTriangleOracle) {
  auto rng = SeededRng(31);
  int overlaps = 0;
  const int trials = 3000;
  for (int i = 0; i < trials; ++i) {
    Obb a = RandomObb(rng), b = RandomObb(rng);
    bool expected = OverlapByTriangles(a, b);
    EXPECT_EQ(Overlaps(a, b), expected) << "trial " << i;
    overlaps += expected;
  }
  // Hit-rate window: the generator must produce both outcomes in quantity.
  EXPECT_GT(overlaps, trials * 3 / 10);
  EXPECT_LT(overlaps, trials * 7 / 10);
}

TEST(Obb, EdgeEdgeAxisSeparatesCrossedBars) {
  // Two long bars crossed at right angles, one above the other: only an edge-edge axis
  // separates them when they are rotated 45 degrees about the vertical.
  Obb a{Vec3(0, 0, 0), testing::AxisAngle(M_PI / 4, Vec3::UnitZ()), Vec3(5, 0.5, 0.5)};
  Obb b{Vec3(0, 0, 1.05), testing::AxisAngle(-M_PI / 4, Vec3::UnitZ()), Vec3(5, 0.5, 0.5)};
  EXPECT_FALSE(Overlaps(a, b));
  b.center.z() = 0.95;
  EXPECT_TRUE(Overlaps(a, b));
  // Parallel boxes touching face to face count as overlapping (closed boxes).
  Obb c{Vec3(2, 0, 0), Mat3::Identity(), Vec3(1, 1, 1)},
      d{Vec3(0, 0, 0), Mat3::Identity(), Vec3(1, 1, 1)};
  EXPECT_TRUE(Overlaps(c, d));
}

TEST(Obb, DistanceLowerBoundNeverExceedsTrueDistance) {
  auto rng = SeededRng(32);
  int separated = 0, tighter = 0;
  for (int i = 0; i < testing::Trials(500, 100); ++i) {
    Obb a = RandomObb(rng), b = RandomObb(rng);
    b.center *= 2.0;
    Mat3 R = a.axes.transpose() * b.axes;
    Vec3 t = a.axes.transpose() * (b.center - a.center);
    double lb = BoxDistanceLowerBound(a.half, b.half, R, t);
    if (OverlapByTriangles(a, b)) {
      EXPECT_EQ(lb, 0.0);
      continue;
    }
    ++separated;
    double d = DistanceByTriangles(a, b);
    EXPECT_LE(lb, d + 1e-12);
    // With the edge-edge axes too (asked for by a high target): tighter, still a lower bound.
    double lb_edges = BoxDistanceLowerBound(a.half, b.half, R, t, 1e300);
    EXPECT_GE(lb_edges, lb);
    EXPECT_LE(lb_edges, d + 1e-12);
    tighter += lb_edges > lb;
  }
  EXPECT_GT(separated, testing::Trials(500, 100) / 5);
  EXPECT_GT(tighter, 0);  // the edge axes do improve some bounds
  // Exact for axis-aligned boxes.
  EXPECT_DOUBLE_EQ(
      BoxDistanceLowerBound(Vec3(1, 1, 1), Vec3(1, 1, 1), Mat3::Identity(), Vec3(5, 6, 0)),
      5.0);  // gaps (3, 4, 0)
}

TEST(Obb, SeparationTravelKeepsTheMarginAndIsExactForAlignedBoxes) {
  auto rng = SeededRng(33);
  int zero = 0, never = 0, finite = 0;
  const int trials = testing::Trials(300, 60);
  for (int i = 0; i < trials; ++i) {
    Obb a = RandomObb(rng), b = RandomObb(rng);
    if (i % 4 == 0) a.axes = b.axes = Mat3::Identity();
    b.center *= 2.0;
    // b moves roughly towards a (unit: travel is distance); some pass it by.
    const Vec3 u = (a.center - b.center + RandomPoint(rng, 3.0)).normalized();
    const double margin = i % 3 == 0 ? 0.0 : Uniform(rng, 0.0, 0.5);
    const Mat3 R = a.axes.transpose() * b.axes;
    const Vec3 t = a.axes.transpose() * (b.center - a.center);
    const Vec3 w = a.axes.transpose() * u;
    const double s = BoxSeparationTravel(a.half, b.half, R, t, w, margin);
    ASSERT_GE(s, 0.0);
    if (s == 0.0) {
      ++zero;
      continue;
    }
    const double top = std::isfinite(s) ? s : 20.0;
    for (int k = 0; k < 16; ++k) {
      Obb moved = b;
      moved.center += top * k / 16.0 * u;
      EXPECT_FALSE(OverlapByTriangles(a, moved)) << "trial " << i;
      EXPECT_GT(DistanceByTriangles(a, moved), margin - 1e-9) << "trial " << i << " k " << k;
    }
    if (!std::isfinite(s)) {
      ++never;
      continue;
    }
    ++finite;
    Obb at = b;
    at.center += s * u;
    if (margin == 0.0 && R.isIdentity()) {
      EXPECT_LT(DistanceByTriangles(a, at), 1e-9) << "trial " << i;  // exact: touching at s
    }
    EXPECT_GE(BoxSeparationTravel(a.half, b.half, R, t, w, margin, 0.5 * s), 0.5 * s);
    EXPECT_EQ(BoxSeparationTravel(a.half, b.half, R, t, w, margin, 2.0 * s), s);
  }
  ::testing::Test::RecordProperty("zero", zero);
  ::testing::Test::RecordProperty("never", never);
  ::testing::Test::RecordProperty("finite", finite);
  EXPECT_GT(zero, trials / 20);
  EXPECT_GT(never, trials / 10);
  EXPECT_GT(finite, trials / 4);
}

TEST(Obb, FitOnAxesContainsPoints) {
  auto rng = SeededRng(33);
  std::vector<Vec3> pts;
  for (int i = 0; i < 300; ++i) pts.push_back(RandomPoint(rng, 4, Vec3(10, -3, 2)));
  Mat3 axes = RandomRotation(rng);
  Obb b = FitObbOnAxes(pts, axes);
  for (const Vec3& p : pts) EXPECT_TRUE(b.Contains(p, 1e-12));
  // Tight: some point touches each face pair.
  for (int k = 0; k < 3; ++k) {
    double mx = 0;
    for (const Vec3& p : pts) mx = std::max(mx, std::abs(axes.col(k).dot(p - b.center)));
    EXPECT_NEAR(mx, b.half[k], 1e-12);
  }
  Aabb bounds = b.Bounds();
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(bounds.Inflated(1e-12).Contains(b.Corner(i)));
}

// ObbOnAxesFit gives FitObbOnAxes's box to the bit for the same points in any order and with
// repeats, given the same reference point (FitObbOnAxes's is its first point).
TEST(Obb, FitOneAtATimeIsTheSameToTheBit) {
  auto rng = SeededRng(34);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<Vec3> pts;
    for (int i = 0; i < 50; ++i) pts.push_back(RandomPoint(rng, 4, RandomPoint(rng, 1e6)));
    const Mat3 axes = RandomRotation(rng);
    const Obb want = FitObbOnAxes(pts, axes);
    ObbOnAxesFit fit(pts[0], axes);
    std::vector<Vec3> shuffled = pts;
    for (int i = 0; i < 30; ++i) {
      shuffled.push_back(pts[static_cast<std::size_t>(Uniform(rng, 0, 49.99))]);
    }
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    fit.Add(shuffled);
    const Obb got = fit.Box();
    EXPECT_TRUE(got.center == want.center && got.half == want.half && got.axes == want.axes)
        << "trial " << trial;
  }
}

}  // namespace
}  // namespace clash::geom
