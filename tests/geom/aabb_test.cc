#include "clash/geom/aabb.h"

#include <gtest/gtest.h>

#include <limits>

#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using testing::RandomPoint;
using testing::RandomPose;
using testing::SeededRng;

TEST(Aabb, DefaultIsEmptyAndAddGrows) {
  Aabb b;
  EXPECT_TRUE(b.IsEmpty());
  EXPECT_EQ(b.Volume(), 0.0);
  EXPECT_EQ(b.Diagonal(), 0.0);
  b.Add(Vec3(1, 2, 3));
  EXPECT_FALSE(b.IsEmpty());
  EXPECT_EQ(b.Volume(), 0.0);
  b.Add(Vec3(-1, 0, 5));
  EXPECT_EQ(b.min, Vec3(-1, 0, 3));
  EXPECT_EQ(b.max, Vec3(1, 2, 5));
  EXPECT_EQ(b.Center(), Vec3(0, 1, 4));
  EXPECT_EQ(b.Size(), Vec3(2, 2, 2));
  EXPECT_DOUBLE_EQ(b.Volume(), 8.0);
  EXPECT_DOUBLE_EQ(b.SurfaceArea(), 24.0);
  Aabb other = Aabb::FromPoints(Vec3(5, 5, 5), Vec3(4, 4, 4));
  b.Add(other);
  EXPECT_EQ(b.max, Vec3(5, 5, 5));
  EXPECT_TRUE(b.Contains(other));
  EXPECT_TRUE(b.Contains(Aabb{}));
}

TEST(Aabb, CornersContainsAndClosestPoint) {
  Aabb b = Aabb::FromCenterHalf(Vec3(1, 1, 1), Vec3(1, 2, 3));
  auto corners = b.Corners();
  EXPECT_EQ(corners[0], b.min);
  EXPECT_EQ(corners[7], b.max);
  EXPECT_EQ(corners[5], Vec3(2, -1, 4));
  for (const Vec3& c : corners) EXPECT_TRUE(b.Contains(c));
  EXPECT_FALSE(b.Contains(Vec3(2.0001, 0, 0)));
  EXPECT_EQ(b.ClosestPoint(Vec3(5, 0, 0)), Vec3(2, 0, 0));
  EXPECT_EQ(b.ClosestPoint(Vec3(1, 1, 1)), Vec3(1, 1, 1));
  EXPECT_DOUBLE_EQ(b.Distance(Vec3(5, 7, 1)), 5.0);  // (3, 4, 0)
}

TEST(Aabb, OverlapIsClosedAndDistanceIsExact) {
  Aabb a = Aabb::FromPoints(Vec3(0, 0, 0), Vec3(1, 1, 1));
  Aabb touching = Aabb::FromPoints(Vec3(1, 0, 0), Vec3(2, 1, 1));
  Aabb apart = Aabb::FromPoints(Vec3(4, 5, 0), Vec3(5, 6, 1));
  EXPECT_TRUE(a.Overlaps(touching));
  EXPECT_EQ(a.Distance(touching), 0.0);
  EXPECT_FALSE(a.Overlaps(apart));
  EXPECT_DOUBLE_EQ(a.Distance(apart), 5.0);  // gaps (3, 4, 0)
}

// Arvo's box of a transformed box equals the bounds of the 8 transformed corners.
TEST(Aabb, TransformedMatchesTransformedCorners) {
  auto rng = SeededRng(11);
  for (int trial = 0; trial < 200; ++trial) {
    Aabb b = Aabb::FromPoints(RandomPoint(rng, 10), RandomPoint(rng, 10));
    RigidTransform X = RandomPose(rng, 50);
    Aabb expected;
    for (const Vec3& c : b.Corners()) expected.Add(X * c);
    Aabb got = b.Transformed(X);
    // Tolerance: a few ulps of coordinates of magnitude ~100.
    EXPECT_LT((got.min - expected.min).cwiseAbs().maxCoeff(), 1e-12);
    EXPECT_LT((got.max - expected.max).cwiseAbs().maxCoeff(), 1e-12);
  }
  EXPECT_TRUE(Aabb{}.Transformed(RigidTransform::Identity()).IsEmpty());
}

// Rounding may only enlarge a box (DESIGN.md §2): the box of a transformed box holds every
// transformed corner as computed in extended precision (64-bit mantissa, far finer than the
// double rounding it checks), for boxes near the origin and far from it, rotated and not.
TEST(Aabb, TransformedRoundsOutward) {
  auto rng = SeededRng(13);
  int outside_unrounded = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const double reach = trial % 3 == 0 ? 1e6 : trial % 3 == 1 ? 1.0 : 1e-3;
    const Vec3 c = RandomPoint(rng, reach);
    const Aabb b =
        Aabb::FromPoints(c + RandomPoint(rng, reach * 1e-3), c + RandomPoint(rng, reach * 1e-3));
    RigidTransform X = RandomPose(rng, reach);
    if (trial % 2 == 0) X.R = Mat3::Identity();
    const Aabb got = b.Transformed(X);
    // Arvo's box as it was, without the outward rounding: the test below must catch it.
    const Vec3 c0 = X * b.Center(), h0 = X.R.cwiseAbs() * b.HalfExtents();
    for (const Vec3& corner : b.Corners()) {
      bool unrounded_holds = true;
      for (int i = 0; i < 3; ++i) {
        long double x = X.t[i];
        for (int j = 0; j < 3; ++j) {
          x += static_cast<long double>(X.R(i, j)) * static_cast<long double>(corner[j]);
        }
        ASSERT_GE(x, static_cast<long double>(got.min[i])) << "trial " << trial << " axis " << i;
        ASSERT_LE(x, static_cast<long double>(got.max[i])) << "trial " << trial << " axis " << i;
        unrounded_holds = unrounded_holds && x >= static_cast<long double>(c0[i] - h0[i]) &&
                          x <= static_cast<long double>(c0[i] + h0[i]);
      }
      outside_unrounded += !unrounded_holds;
    }
    // And not by more than a few units in the last place of the coordinates.
    const double coords =
        X.t.cwiseAbs().maxCoeff() + (b.max.cwiseAbs().cwiseMax(b.min.cwiseAbs())).maxCoeff();
    EXPECT_LE((c0 - h0 - got.min).maxCoeff(),
              128 * std::numeric_limits<double>::epsilon() * coords);
    EXPECT_LE((got.max - c0 - h0).maxCoeff(),
              128 * std::numeric_limits<double>::epsilon() * coords);
  }
  // The seeded inputs do reach the rounding the slack is for.
  EXPECT_GT(outside_unrounded, 0);
}

TEST(RigidTransform, InverseAndComposition) {
  auto rng = SeededRng(12);
  RigidTransform X_WA = RandomPose(rng, 10), X_WB = RandomPose(rng, 10);
  RigidTransform X_AB = X_WA.Inverse() * X_WB;
  Vec3 p_BQ = RandomPoint(rng, 5);
  EXPECT_LT((X_WA * (X_AB * p_BQ) - X_WB * p_BQ).norm(), 1e-12);
  EXPECT_LT(((X_WA * X_WA.Inverse()).R - Mat3::Identity()).norm(), 1e-12);
  EXPECT_TRUE(X_WA.IsValid());
  EXPECT_TRUE(RigidTransform::Identity().HasIdentityRotation());
  EXPECT_FALSE(X_WA.HasIdentityRotation());
  RigidTransform bad = X_WA;
  bad.t.x() = std::nan("");
  EXPECT_FALSE(bad.IsValid());
  bad = X_WA;
  bad.R *= 2.0;
  EXPECT_FALSE(bad.IsValid());
}

}  // namespace
}  // namespace clash::geom
