// Footprints about an axis (footprint_internal.h) and FreeScrew (query.h), against sampled
// points, exact distances under random turns and advances, and an all-triangle-pairs oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>

#include "clash/geom/query.h"
#include "footprint_internal.h"
#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using internal::AxisLine;
using internal::Footprint;
using testing::AxisAngle;
using testing::MakeBlob;
using testing::MakeCylinder;
using testing::MakeTube;
using testing::RandomPoint;
using testing::RandomPose;
using testing::RandomRotation;
using testing::SeededRng;
using testing::Uniform;

constexpr double kInf = std::numeric_limits<double>::infinity();

// (distance from the axis, position along it) of a point.
std::pair<double, double> RZ(const Vec3& p, const AxisLine& line) {
  const Vec3 rel = p - line.p;
  const double z = line.a.dot(rel);
  return {(rel - z * line.a).norm(), z};
}

AxisLine RandomLine(std::mt19937& rng) { return {RandomPoint(rng, 3), RandomRotation(rng).col(0)}; }

// Every sampled point of the set lies in the footprint, and the bounds are nearly reached.
template <typename Sample>
void ExpectFootprintHolds(const Footprint& f, const AxisLine& line, Sample&& sample, int n,
                          double r_lo_resolution) {
  double r_min = kInf, r_max = 0, z_min = kInf, z_max = -kInf;
  for (int k = 0; k < n; ++k) {
    const auto [r, z] = RZ(sample(k), line);
    EXPECT_GE(r, f.r_lo - 1e-9);
    EXPECT_LE(r, f.r_hi + 1e-9);
    EXPECT_GE(z, f.z_lo - 1e-9);
    EXPECT_LE(z, f.z_hi + 1e-9);
    r_min = std::min(r_min, r), r_max = std::max(r_max, r);
    z_min = std::min(z_min, z), z_max = std::max(z_max, z);
  }
  // The samples include the corners: r_hi and the z range are reached exactly.
  EXPECT_NEAR(r_max, f.r_hi, 1e-9);
  EXPECT_NEAR(z_min, f.z_lo, 1e-9);
  EXPECT_NEAR(z_max, f.z_hi, 1e-9);
  // r_lo is reached within the samples' spacing when it is exact (triangles).
  if (r_lo_resolution > 0) {
    EXPECT_LE(r_min, f.r_lo + r_lo_resolution);
  }
}

TEST(Footprint, BoxAndTriangleHoldTheirPoints) {
  auto rng = SeededRng(611);
  for (int i = 0; i < 200; ++i) {
    const AxisLine line = RandomLine(rng);
    const Vec3 c = RandomPoint(rng, 6);
    const Mat3 axes = RandomRotation(rng);
    const Vec3 half(Uniform(rng, 0.1, 3), Uniform(rng, 0.1, 3), Uniform(rng, 0.1, 3));
    const Footprint box = internal::BoxFootprint(c, axes, half, line);
    // Corners first, then random points inside.
    ExpectFootprintHolds(
        box, line,
        [&](int k) {
          const Vec3 s = k < 8
                             ? Vec3(k & 1 ? 1 : -1, k & 2 ? 1 : -1, k & 4 ? 1 : -1)
                             : Vec3(Uniform(rng, -1, 1), Uniform(rng, -1, 1), Uniform(rng, -1, 1));
          return Vec3(c + axes * half.cwiseProduct(s));
        },
        400, -1.0);
    const Triangle t{RandomPoint(rng, 5), RandomPoint(rng, 5), RandomPoint(rng, 5)};
    const Footprint tri = internal::TriangleFootprint(t, line);
    constexpr int kGrid = 60;
    ExpectFootprintHolds(
        tri, line,
        [&](int k) {
          if (k < 3) return t[k];
          // A barycentric grid.
          const int u = (k - 3) % (kGrid + 1), v = (k - 3) / (kGrid + 1);
          const double a = double(u) / kGrid, b = double(v) / kGrid;
          if (a + b > 1) return t.a;
          return Vec3(t.a + a * (t.b - t.a) + b * (t.c - t.a));
        },
        3 + (kGrid + 1) * (kGrid + 1),
        std::max({(t.b - t.a).norm(), (t.c - t.b).norm(), (t.a - t.c).norm()}) / kGrid);
  }
  // A triangle the axis pierces is at 0; one beside it at its edge's distance.
  const AxisLine z_axis{Vec3::Zero(), Vec3::UnitZ()};
  EXPECT_EQ(internal::TriangleFootprint({{-1, -1, 0}, {2, -1, 1}, {-1, 2, 2}}, z_axis).r_lo, 0.0);
  EXPECT_NEAR(internal::TriangleFootprint({{3, -1, 0}, {3, 1, 0}, {5, 0, 4}}, z_axis).r_lo, 3.0,
              1e-12);
}

TEST(Footprint, AdvanceIsTheFirstOverlapOfTheShiftedRectangles) {
  const Footprint fixed{2, 4, 0, 1};
  // Apart across the axis by more than the margin: never, whatever the advance.
  EXPECT_EQ(internal::FootprintAdvance({5, 6, -10, -9}, fixed, 0.5), kInf);
  // Overlapping across it, 3 below along it: 3 - margin of advance.
  EXPECT_DOUBLE_EQ(internal::FootprintAdvance({3, 5, -4, -3}, fixed, 0.5), 2.5);
  // Above it, advancing away: never; overlapping now: 0.
  EXPECT_EQ(internal::FootprintAdvance({3, 5, 2, 3}, fixed, 0.5), kInf);
  EXPECT_EQ(internal::FootprintAdvance({3, 5, 0.5, 3}, fixed, 0.5), 0.0);
  // 0.3 apart across the axis: along it within sqrt(0.5^2 - 0.3^2) = 0.4.
  EXPECT_DOUBLE_EQ(internal::FootprintAdvance({4.3, 5, -4, -3}, fixed, 0.5), 2.6);
}

// The moving part a, turned by `angle` about the line and advanced by s along it.
RigidTransform Screwed(const RigidTransform& X_WA, const Vec3& p_W, const Vec3& a_W, double angle,
                       double s) {
  const RigidTransform turn{AxisAngle(angle, a_W), p_W - AxisAngle(angle, a_W) * p_W};
  return RigidTransform::Translation(s * a_W) * turn * X_WA;
}

TEST(FreeScrew, AgreesWithAllPairsAndKeepsTheMarginUnderAnyTurn) {
  auto rng = SeededRng(612);
  constexpr double kMaxAdvance = 15;
  int zero = 0, capped = 0, between = 0;
  const int trials = testing::Trials(40, 24);
  for (int i = 0; i < trials; ++i) {
    // A ring-like blob about the axis and another part beside or along it.
    const auto a = MakeBlob(rng, Uniform(rng, 2, 5), 8, 10, 0.3).Part();
    const auto b = MakeBlob(rng, Uniform(rng, 2, 6), 8, 10, 0.3).Part();
    const RigidTransform X_WA = RandomPose(rng, 5);
    const Vec3 axis_W = RandomRotation(rng).col(0);
    const Vec3 p_W = X_WA * a->bounds().Center() + RandomPoint(rng, 4);
    // b somewhere around the axis, ahead along it or beside it.
    RigidTransform X_WB = RandomPose(rng, 1);
    X_WB.t = p_W + Uniform(rng, -6, 16) * axis_W + RandomRotation(rng).col(1) * Uniform(rng, 0, 14);
    const double margin = i % 2 == 0 ? 0.0 : Uniform(rng, 0.0, 1.0);
    const double got = FreeScrew(*a, X_WA, *b, X_WB, p_W, axis_W, margin, kMaxAdvance);
    // The oracle: every triangle pair's footprints (each part's own frame).
    const RigidTransform X_AW = X_WA.Inverse(), X_BW = X_WB.Inverse();
    const AxisLine in_a{X_AW * p_W, X_AW.R * axis_W}, in_b{X_BW * p_W, X_BW.R * axis_W};
    double expected = kMaxAdvance;
    for (std::size_t p = 0; p < a->mesh().num_triangles(); ++p) {
      const Footprint fa = internal::TriangleFootprint(a->mesh().triangle(p), in_a);
      for (std::size_t q = 0; q < b->mesh().num_triangles(); ++q) {
        expected = std::min(
            expected, internal::FootprintAdvance(
                          fa, internal::TriangleFootprint(b->mesh().triangle(q), in_b), margin));
      }
    }
    ASSERT_NEAR(got, expected, 1e-12 * (1 + expected)) << "trial " << i;
    // Sound: any turn with an advance below the answer keeps the parts more than the margin
    // apart.
    for (int k = 0; k < 12 && got > 0; ++k) {
      const double s = got * Uniform(rng, 0, 1) * (1 - 1e-9);
      const RigidTransform X = Screwed(X_WA, p_W, axis_W, Uniform(rng, -10, 10), s);
      EXPECT_GT(Distance(*a, X, *b, X_WB).distance, margin - 1e-9) << "trial " << i;
    }
    if (got > 0) {
      EXPECT_EQ(FreeScrew(*a, X_WA, *b, X_WB, p_W, axis_W, margin, kMaxAdvance, got), 0.0);
      EXPECT_EQ(FreeScrew(*a, X_WA, *b, X_WB, p_W, axis_W, margin, kMaxAdvance, 0.5 * got), got);
    }
    ++*(got == 0 ? &zero : got == kMaxAdvance ? &capped : &between);
  }
  ::testing::Test::RecordProperty("zero", zero);
  ::testing::Test::RecordProperty("capped", capped);
  ::testing::Test::RecordProperty("between", between);
  EXPECT_GT(zero, trials / 10);
  EXPECT_GT(capped, trials / 10);
  EXPECT_GT(between, trials / 10);
}

TEST(FreeScrew, NutOnABoltItClearsTurnsFreely) {
  // A 64-gon nut (hole radius 4.5) about a 64-gon bolt (radius 4) on their common axis: any
  // turn is free; the advance is free until the nut's face comes within the margin of a plate
  // 10 below it.
  const auto bolt = MakeCylinder(4.0, 40, 64).Part();
  const auto nut = MakeTube(4.5, 8, 6, 64).Part();
  const auto plate = testing::MakeBox(Vec3(30, 30, 2)).Part();
  const RigidTransform X_nut = RigidTransform::Translation(Vec3(0, 0, 13));  // faces at 10, 16
  EXPECT_EQ(FreeScrew(*nut, X_nut, *bolt, RigidTransform::Identity(), Vec3::Zero(), -Vec3::UnitZ(),
                      0.1, 100),
            100.0);
  // The plate (4 thick) with its top face at z = 0.
  const RigidTransform X_plate = RigidTransform::Translation(Vec3(0, 0, -2));
  EXPECT_NEAR(FreeScrew(*nut, X_nut, *plate, X_plate, Vec3::Zero(), -Vec3::UnitZ(), 0.1, 100),
              10 - 0.1, 1e-9);
}

}  // namespace
}  // namespace clash::geom
