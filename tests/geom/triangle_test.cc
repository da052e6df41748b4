#include "clash/geom/triangle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using testing::RandomPoint;
using testing::SeededRng;
using testing::Trials;
using testing::Uniform;

Triangle RandomTriangle(std::mt19937& rng, double r, const Vec3& c = Vec3::Zero()) {
  return {RandomPoint(rng, r, c), RandomPoint(rng, r, c), RandomPoint(rng, r, c)};
}

constexpr double kInf = std::numeric_limits<double>::infinity();

bool SegmentHitsTriangle(const Vec3& p, const Vec3& q, const Triangle& t) {
  return IntersectRayTriangle(Ray{p, q - p, 0.0, 1.0}, t).has_value();
}

// Independent oracle for non-coplanar triangles: they meet iff an edge of one crosses the other.
bool IntersectByEdges(const Triangle& x, const Triangle& y) {
  for (int i = 0; i < 3; ++i) {
    if (SegmentHitsTriangle(x[i], x[(i + 1) % 3], y)) return true;
    if (SegmentHitsTriangle(y[i], y[(i + 1) % 3], x)) return true;
  }
  return false;
}

double DistanceToTriangle(const Vec3& p, const Triangle& t) {
  return (p - ClosestPointOnTriangle(p, t)).norm();
}

TEST(Plane, ThroughAndSignedDistance) {
  auto p = Plane::Through(Vec3(0, 0, 1), Vec3(1, 0, 1), Vec3(0, 1, 1));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->normal, Vec3(0, 0, 1));
  EXPECT_DOUBLE_EQ(p->SignedDistance(Vec3(5, 5, 3)), 2.0);
  EXPECT_DOUBLE_EQ(p->SignedDistance(Vec3(5, 5, -1)), -2.0);
  EXPECT_FALSE(Plane::Through(Vec3(0, 0, 0), Vec3(1, 1, 1), Vec3(2, 2, 2)).has_value());
}

TEST(Triangle, BarycentricRoundTrip) {
  auto rng = SeededRng(41);
  for (int i = 0; i < 100; ++i) {
    Triangle t = RandomTriangle(rng, 5);
    Vec3 w(Uniform(rng, 0, 1), Uniform(rng, 0, 1), Uniform(rng, 0, 1));
    w /= w.sum();
    Vec3 p = w[0] * t.a + w[1] * t.b + w[2] * t.c;
    auto bc = Barycentric(t, p);
    ASSERT_TRUE(bc.has_value());
    EXPECT_LT((*bc - w).norm(), 1e-8);
  }
  EXPECT_FALSE(Barycentric({Vec3(0, 0, 0), Vec3(1, 0, 0), Vec3(2, 0, 0)}, Vec3(1, 1, 0)));
}

TEST(Triangle, ClosestPointBeatsSampling) {
  auto rng = SeededRng(42);
  for (int i = 0; i < 200; ++i) {
    Triangle t = RandomTriangle(rng, 3);
    Vec3 p = RandomPoint(rng, 6);
    Vec3 c = ClosestPointOnTriangle(p, t);
    double d = (p - c).norm();
    // c lies on the triangle.
    auto bc = Barycentric(t, c);
    ASSERT_TRUE(bc.has_value());
    EXPECT_GE(bc->minCoeff(), -1e-9);
    // No sample of the triangle is closer.
    const int n = 40;
    for (int u = 0; u <= n; ++u) {
      for (int v = 0; u + v <= n; ++v) {
        Vec3 s = t.a + (t.b - t.a) * (double(u) / n) + (t.c - t.a) * (double(v) / n);
        EXPECT_GE((p - s).norm(), d - 1e-12);
      }
    }
  }
}

// The distance from p to the nearest of t's edges.
double DistanceToEdges(const Vec3& p, const Triangle& t) {
  double best = kInf;
  Vec3 on_p, on_edge;
  for (int i = 0; i < 3; ++i) {
    best = std::min(best,
                    std::sqrt(ClosestPointsSegments(p, p, t[i], t[(i + 1) % 3], &on_p, &on_edge)));
  }
  return best;
}

// A nearly flat triangle that rounding leaves with a small positive area (heights from 1e-2 to
// 3e-16 of its length, random orientation and vertex order): the closest point to a point on it,
// above it or beside it lies on the triangle, and is at most 1e-5 of the length farther than a
// known point of the triangle. Ericson's face case divided rounding by the tiny area: a point on
// a triangle 1e-9 high came back 0.98 of its length away along it.
TEST(Triangle, ClosestPointOnANearlyFlatTriangle) {
  auto rng = SeededRng(51);
  // Of the length: twice the ~5e-6 that the flat-triangle fallback and the face case each stay
  // within at the threshold between them (triangle.cc, kSliver).
  constexpr double kTolerance = 1e-5;
  const int trials = Trials(300);
  double worst = 0.0;
  for (int k = 0; k < 28; ++k) {
    const double height = std::pow(10.0, -2.0 - 0.5 * k);
    for (int i = 0; i < trials; ++i) {
      const Vec3 a = RandomPoint(rng, 1), b = RandomPoint(rng, 1);
      const double len = (b - a).norm();
      const Vec3 side = (b - a).cross(RandomPoint(rng, 1)).normalized();
      const Vec3 up = (b - a).cross(side).normalized();
      const Vec3 c = a + Uniform(rng, 0, 1) * (b - a) + height * len * side;
      const Triangle t = i % 3 == 0   ? Triangle{a, b, c}
                         : i % 3 == 1 ? Triangle{b, c, a}
                                      : Triangle{c, a, b};
      double u = Uniform(rng, 0, 1), v = Uniform(rng, 0, 1);
      if (u + v > 1) u = 1 - u, v = 1 - v;
      const Vec3 on = a + u * (b - a) + v * (c - a);  // on the triangle (up to rounding)
      const int mode = (i / 3) % 3;                   // on it, above it, or anywhere near
      const Vec3 p = mode == 0   ? on
                     : mode == 1 ? on + Uniform(rng, -len, len) * up
                                 : on + len * RandomPoint(rng, 1);
      const Vec3 q = ClosestPointOnTriangle(p, t);
      SCOPED_TRACE(::testing::Message() << "height " << height << " trial " << i);
      EXPECT_LE((p - q).norm(), (p - on).norm() + kTolerance * len);
      // Every point of the triangle is within its height of an edge.
      EXPECT_LE(DistanceToEdges(q, t), height * len + 1e-15);
      worst = std::max(worst, ((p - q).norm() - (p - on).norm()) / len);
    }
  }
  ::testing::Test::RecordProperty("worst", (::testing::Message() << worst).GetString());
}

TEST(Triangle, SegmentClosestPoints) {
  Vec3 p, q;
  // Skew perpendicular segments one unit apart.
  double d2 =
      ClosestPointsSegments(Vec3(-1, 0, 0), Vec3(1, 0, 0), Vec3(0, -1, 1), Vec3(0, 1, 1), &p, &q);
  EXPECT_DOUBLE_EQ(d2, 1.0);
  EXPECT_LT((p - Vec3(0, 0, 0)).norm(), 1e-15);
  EXPECT_LT((q - Vec3(0, 0, 1)).norm(), 1e-15);
  // Parallel segments, end to end.
  d2 = ClosestPointsSegments(Vec3(0, 0, 0), Vec3(1, 0, 0), Vec3(3, 0, 0), Vec3(4, 0, 0), &p, &q);
  EXPECT_DOUBLE_EQ(d2, 4.0);
  // Degenerate (points).
  d2 = ClosestPointsSegments(Vec3(0, 0, 0), Vec3(0, 0, 0), Vec3(0, 3, 4), Vec3(0, 3, 4), &p, &q);
  EXPECT_DOUBLE_EQ(d2, 25.0);
}

TEST(RayTriangle, HitsWhereBarycentricSaysAndMissesOutside) {
  Triangle t{Vec3(0, 0, 0), Vec3(2, 0, 0), Vec3(0, 2, 0)};
  auto h = IntersectRayTriangle({Vec3(0.5, 0.5, 3), Vec3(0, 0, -1)}, t);
  ASSERT_TRUE(h.has_value());
  EXPECT_DOUBLE_EQ(h->t, 3.0);
  EXPECT_DOUBLE_EQ(h->u, 0.25);
  EXPECT_DOUBLE_EQ(h->v, 0.25);
  // Back side is hit too (no culling).
  EXPECT_TRUE(IntersectRayTriangle({Vec3(0.5, 0.5, -3), Vec3(0, 0, 1)}, t).has_value());
  EXPECT_FALSE(IntersectRayTriangle({Vec3(1.5, 1.5, 3), Vec3(0, 0, -1)}, t).has_value());
  EXPECT_FALSE(IntersectRayTriangle({Vec3(0.5, 0.5, 3), Vec3(0, 0, -1), 0.0, 2.9}, t).has_value());
  EXPECT_FALSE(IntersectRayTriangle({Vec3(0.5, 0.5, 3), Vec3(0, 0, 1)}, t).has_value());
}

// Rays through the shared diagonal of a quad (exactly representable points) hit at least one
// of its two triangles: no ray slips through a closed mesh.
TEST(RayTriangle, WatertightOnSharedEdges) {
  auto rng = SeededRng(43);
  for (int i = 0; i < 500; ++i) {
    Vec3 a = RandomPoint(rng, 5), b = RandomPoint(rng, 5), c = RandomPoint(rng, 5),
         d = RandomPoint(rng, 5);
    double s = Uniform(rng, 0, 1);
    Vec3 target = a + s * (c - a);
    Vec3 origin = target + RandomPoint(rng, 10);
    // The ray must cross the fold, not graze it: b and d on opposite sides of the plane
    // through the edge and the ray (reflect d when they are not).
    Vec3 n = (c - a).cross(target - origin).normalized();
    if (n.dot(b - a) * n.dot(d - a) > 0) d -= 2.0 * n.dot(d - a) * n;
    Triangle t1{a, b, c}, t2{a, c, d};
    Ray ray{origin, target - origin, 0.0, 2.0};
    bool h1 = IntersectRayTriangle(ray, t1).has_value();
    bool h2 = IntersectRayTriangle(ray, t2).has_value();
    EXPECT_TRUE(h1 || h2) << "trial " << i;
  }
}

TEST(TriangleTriangle, AgreesWithEdgeCrossingOracle) {
  auto rng = SeededRng(44);
  int hits = 0;
  const int trials = 20000;
  for (int i = 0; i < trials; ++i) {
    Triangle x = RandomTriangle(rng, 1), y = RandomTriangle(rng, 1, RandomPoint(rng, 0.25));
    bool expected = IntersectByEdges(x, y);
    TriangleIntersection r = IntersectTriangles(x, y);
    ASSERT_EQ(r.intersects, expected) << "trial " << i;
    EXPECT_EQ(TrianglesIntersect(x, y), expected);
    if (expected) {
      ++hits;
      // The witness segment lies on both triangles.
      for (const Vec3& p : {r.p0, r.p1}) {
        EXPECT_LT(DistanceToTriangle(p, x), 1e-9);
        EXPECT_LT(DistanceToTriangle(p, y), 1e-9);
      }
    }
  }
  EXPECT_GT(hits, trials / 5);
  EXPECT_LT(hits, trials * 4 / 5);
}

// A zero-area (collinear) triangle meets another exactly when the segment it spans does: the
// watertight segment-triangle test is the oracle, on random segments in general position
// (neither in the plane nor touching an edge). Either order, and the witness on both.
TEST(TriangleTriangle, AFlatTriangleIsTheSegmentItSpans) {
  auto rng = SeededRng(48);
  int hits = 0;
  const int trials = 5000;
  for (int i = 0; i < trials; ++i) {
    const Triangle y = RandomTriangle(rng, 1);
    const Vec3 p = RandomPoint(rng, 1), q = RandomPoint(rng, 1);
    const Triangle x{p, q, p + Uniform(rng, 0.0, 1.0) * (q - p)};  // collinear: area 0
    const bool expected = SegmentHitsTriangle(p, q, y);
    const TriangleIntersection r = IntersectTriangles(x, y);
    ASSERT_EQ(r.intersects, expected) << "trial " << i;
    EXPECT_EQ(IntersectTriangles(y, x).intersects, expected) << "trial " << i;
    EXPECT_EQ(DistanceTriangles(x, y).distance == 0.0, expected) << "trial " << i;
    if (expected) {
      ++hits;
      EXPECT_FALSE(r.coplanar);
      Vec3 on_pq, unused;
      EXPECT_LT(std::sqrt(ClosestPointsSegments(r.p0, r.p0, p, q, &unused, &on_pq)), 1e-9);
      EXPECT_LT(DistanceToTriangle(r.p0, y), 1e-9);
    }
  }
  EXPECT_GT(hits, trials / 20);
  EXPECT_LT(hits, trials * 4 / 5);
}

struct DegenerateCase {
  const char* name;
  Triangle x, y;
  bool intersects;
  bool coplanar;
};

TEST(TriangleTriangle, DegenerateTable) {
  const Vec3 o(0, 0, 0), ex(1, 0, 0), ey(0, 1, 0), ez(0, 0, 1);
  const Vec3 far(1e6, -1e6, 1e6);
  const DegenerateCase cases[] = {
      {"shared vertex", {o, ex, ey}, {o, -ex + ez, -ey + ez}, true, false},
      {"shared edge, folded", {o, ex, ey}, {o, ex, ez}, true, false},
      {"shared edge, coplanar", {o, ex, ey}, {o, ex, -ey}, true, true},
      {"vertex on face",
       {o, 2 * ex, 2 * ey},
       {Vec3(0.5, 0.5, 0), Vec3(0.5, 0.5, 1), Vec3(1, 0.5, 1)},
       true,
       false},
      {"edge crossing face interior",
       {o, 2 * ex, 2 * ey},
       {Vec3(0.5, 0.5, -1), Vec3(0.5, 0.5, 1), Vec3(3, 3, 0)},
       true,
       false},
      {"coplanar overlap",
       {o, 2 * ex, 2 * ey},
       {Vec3(0.5, 0.5, 0), Vec3(3, 0.5, 0), Vec3(0.5, 3, 0)},
       true,
       true},
      {"coplanar contained",
       {o, 4 * ex, 4 * ey},
       {Vec3(0.5, 0.5, 0), Vec3(1, 0.5, 0), Vec3(0.5, 1, 0)},
       true,
       true},
      {"coplanar disjoint",
       {o, ex, ey},
       {Vec3(2, 2, 0), Vec3(3, 2, 0), Vec3(2, 3, 0)},
       false,
       true},
      {"coplanar vertex on edge",
       {o, 2 * ex, 2 * ey},
       {Vec3(1, 1, 0), Vec3(3, 3, 0), Vec3(3, 1, 0)},
       true,
       true},
      {"parallel planes", {o, ex, ey}, {ez, ex + ez, ey + ez}, false, false},
      {"near miss above",
       {o, ex, ey},
       {Vec3(0.2, 0.2, 1e-9), Vec3(0.2, 0.2, 1), Vec3(0.4, 0.2, 1)},
       false,
       false},
      {"far shared vertex",
       {far, far + ex, far + ey},
       {far, far - ex + ez, far - ey + ez},
       true,
       false},
      {"far shared edge", {far, far + ex, far + ey}, {far, far + ex, far + ez}, true, false},
      {"far near miss",
       {far, far + ex, far + ey},
       {far + Vec3(0.2, 0.2, 1e-6), far + Vec3(0.2, 0.2, 1), far + Vec3(0.4, 0.2, 1)},
       false,
       false},
      // Zero-area triangles are the segments (or points) they span. Their zero normal once
      // made every pair "coplanar": a segment crossing the plane outside the triangle, or one
      // in the plane beside it, was reported intersecting.
      {"segment crossing the plane outside",
       {Vec3(0.2, 0.2, -1), Vec3(2.2, 2.2, 1), Vec3(4.2, 4.2, 3)},
       {o, ex, ey},
       false,
       false},
      {"segment piercing the face",
       {Vec3(0.2, 0.3, -1), Vec3(0.2, 0.3, 1), Vec3(0.2, 0.3, 3)},
       {o, ex, ey},
       true,
       false},
      {"segment through an edge",
       {Vec3(0.5, 0, -1), Vec3(0.5, 0, 2), Vec3(0.5, 0, 1)},
       {o, ex, ey},
       true,
       false},
      {"segment in the plane, inside",
       {Vec3(0.1, 0.1, 0), Vec3(0.3, 0.3, 0), Vec3(0.2, 0.2, 0)},
       {o, ex, ey},
       true,
       true},
      {"segment in the plane, across an edge",
       {Vec3(0.2, 0.2, 0), Vec3(2, 2, 0), Vec3(1, 1, 0)},
       {o, ex, ey},
       true,
       true},
      {"segment in the plane, beside",
       {Vec3(2, 2, 0), Vec3(4, 4, 0), Vec3(3, 3, 0)},
       {o, ex, ey},
       false,
       true},
      {"point on the face",
       {Vec3(0.2, 0.2, 0), Vec3(0.2, 0.2, 0), Vec3(0.2, 0.2, 0)},
       {o, ex, ey},
       true,
       true},
      {"point above the face",
       {Vec3(0.2, 0.2, 1), Vec3(0.2, 0.2, 1), Vec3(0.2, 0.2, 1)},
       {o, ex, ey},
       false,
       false},
      {"crossing segments",
       {o, Vec3(1, 1, 0), Vec3(2, 2, 0)},
       {Vec3(0, 2, 0), Vec3(0.5, 1.5, 0), Vec3(2, 0, 0)},
       true,
       true},
      {"skew segments",
       {o, Vec3(1, 1, 0), Vec3(2, 2, 0)},
       {Vec3(0, 2, 1), Vec3(0.5, 1.5, 1), Vec3(2, 0, 1)},
       false,
       false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    TriangleIntersection r = IntersectTriangles(c.x, c.y);
    EXPECT_EQ(r.intersects, c.intersects);
    if (c.intersects) {
      EXPECT_EQ(r.coplanar, c.coplanar);
    }
    // Symmetric.
    EXPECT_EQ(IntersectTriangles(c.y, c.x).intersects, c.intersects);
    TriangleDistance d = DistanceTriangles(c.x, c.y);
    if (c.intersects) {
      EXPECT_EQ(d.distance, 0.0);
    } else {
      EXPECT_GT(d.distance, 0.0);
    }
  }
}

TEST(TriangleTriangle, DistanceBeatsSamplingAndWitnessesAreConsistent) {
  auto rng = SeededRng(45);
  int separated = 0;
  for (int i = 0; i < 300; ++i) {
    Triangle x = RandomTriangle(rng, 1), y = RandomTriangle(rng, 1, RandomPoint(rng, 2.5));
    TriangleDistance d = DistanceTriangles(x, y);
    EXPECT_NEAR((d.p1 - d.p2).norm(), d.distance, 1e-12);
    EXPECT_LT(DistanceToTriangle(d.p1, x), 1e-9);
    EXPECT_LT(DistanceToTriangle(d.p2, y), 1e-9);
    if (d.distance == 0.0) {
      EXPECT_TRUE(TrianglesIntersect(x, y));
      continue;
    }
    ++separated;
    // Sampled points of x to the exact closest point of y can never beat the answer, and the
    // finest samples come within the sampling resolution of it.
    double sampled = 1e300;
    const int n = 30;
    for (int u = 0; u <= n; ++u) {
      for (int v = 0; u + v <= n; ++v) {
        Vec3 s = x.a + (x.b - x.a) * (double(u) / n) + (x.c - x.a) * (double(v) / n);
        sampled = std::min(sampled, DistanceToTriangle(s, y));
      }
    }
    EXPECT_GE(sampled, d.distance - 1e-12);
    EXPECT_LE(sampled, d.distance + 2.0 * 2.0 * std::sqrt(3.0) / n);
    // With an upper bound above the answer the result is exact; below it, at least the bound.
    EXPECT_EQ(DistanceTriangles(x, y, d.distance * 1.01).distance, d.distance);
    EXPECT_GE(DistanceTriangles(x, y, d.distance * 0.99).distance, d.distance * 0.99);
    // Swapping the triangles swaps the witnesses (random triangles have one closest pair).
    TriangleDistance e = DistanceTriangles(y, x);
    EXPECT_NEAR(e.distance, d.distance, 1e-12);
    EXPECT_LT((e.p1 - d.p2).norm(), 1e-9);
    EXPECT_LT((e.p2 - d.p1).norm(), 1e-9);
  }
  EXPECT_GT(separated, 100);
}

Triangle Moved(const Triangle& t, const Vec3& d) { return {t.a + d, t.b + d, t.c + d}; }

TEST(TriangleTriangle, SeparationTravelKeepsTheMarginAndIsExactAtMarginZero) {
  auto rng = SeededRng(46);
  int zero = 0, never = 0, finite = 0;
  const int trials = 600;
  for (int i = 0; i < trials; ++i) {
    const Triangle x = RandomTriangle(rng, 1),
                   y = RandomTriangle(rng, 1, RandomPoint(rng, i % 5 == 0 ? 0.5 : 2.5));
    // y moves roughly towards x (unit: travel is distance); some pass it by.
    const Vec3 w = (x.Centroid() - y.Centroid() + RandomPoint(rng, 1.5)).normalized();
    const double margin = i % 2 ? 0.0 : Uniform(rng, 0.0, 0.3);
    const double s = TriangleSeparationTravel(x, y, w, margin);
    ASSERT_GE(s, 0.0);
    if (s == 0.0) {
      ++zero;
      continue;
    }
    // Sound: over the travels below s, y moved along w stays more than the margin away.
    const double top = std::isfinite(s) ? s : 10.0;
    for (int k = 0; k < 40; ++k) {
      const double travel = top * k / 40.0;
      EXPECT_GT(DistanceTriangles(x, Moved(y, travel * w)).distance, margin - 1e-9)
          << "trial " << i << " travel " << travel << " of " << s;
    }
    if (!std::isfinite(s)) {
      ++never;
      continue;
    }
    ++finite;
    // Exact at margin 0 (the axes hold every face normal of the Minkowski difference of two
    // triangles in general position): they touch at s. With a margin, within it at s.
    const double at = DistanceTriangles(x, Moved(y, s * w)).distance;
    if (margin == 0.0) {
      EXPECT_LT(at, 1e-9) << "trial " << i;
    } else {
      EXPECT_GE(at, margin - 1e-9) << "trial " << i;
    }
    // The early exit: asked to stop at a target, the answer is at least the target.
    EXPECT_GE(TriangleSeparationTravel(x, y, w, margin, 0.5 * s), 0.5 * s);
    EXPECT_EQ(TriangleSeparationTravel(x, y, w, margin, 2.0 * s), s);
  }
  // Hit-rate window: touching now, never, and later all occur in quantity.
  ::testing::Test::RecordProperty("zero", zero);
  ::testing::Test::RecordProperty("never", never);
  ::testing::Test::RecordProperty("finite", finite);
  EXPECT_GT(zero, trials / 20);
  EXPECT_GT(never, trials / 10);
  EXPECT_GT(finite, trials / 4);
}

// The separating axes are scaled before projecting: parts of 1e70 mm and more once gave inf
// and NaN squared lengths and projections, and a NaN on an axis across the motion counted as
// "separated forever" (a sweep stepped through a wall). The travel to a plane 2S ahead is 2S
// at every scale, and within a margin m, 2S - m.
TEST(TriangleTriangle, SeparationTravelAtHugeScales) {
  for (double S : {1.0, 1e50, 1e70, 1e80, 1e120, 1e150}) {
    SCOPED_TRACE(::testing::Message() << "S " << S);
    const Triangle wall{Vec3(2 * S, -S, -S), Vec3(2 * S, S, -S), Vec3(2 * S, 0, S)};
    const Triangle mover{Vec3(0, -S / 2, -S / 2), Vec3(0, S / 2, -S / 2), Vec3(0, 0, S / 2)};
    EXPECT_NEAR(TriangleSeparationTravel(wall, mover, Vec3::UnitX(), 0.0), 2 * S, 1e-12 * S);
    EXPECT_NEAR(TriangleSeparationTravel(wall, mover, Vec3::UnitX(), S / 10), 1.9 * S, 1e-12 * S);
    // Moving along the wall it never comes near; moving away, never either.
    EXPECT_EQ(TriangleSeparationTravel(wall, mover, Vec3::UnitY(), 0.0), kInf);
    EXPECT_EQ(TriangleSeparationTravel(wall, mover, -Vec3::UnitX(), 0.0), kInf);
  }
}

// Scaling both triangles, the motion's travel and the margin by a power of two scales the
// travel by it exactly (the axes are scaled by powers of two, which is exact), up to scales
// where the unscaled axes overflowed.
TEST(TriangleTriangle, SeparationTravelScalesExactly) {
  auto rng = SeededRng(47);
  int finite = 0;
  for (int i = 0; i < 200; ++i) {
    const Triangle x = RandomTriangle(rng, 1), y = RandomTriangle(rng, 1, RandomPoint(rng, 2.5));
    const Vec3 w = (x.Centroid() - y.Centroid() + RandomPoint(rng, 1.0)).normalized();
    const double margin = i % 2 ? 0.0 : Uniform(rng, 0.0, 0.3);
    const double s = TriangleSeparationTravel(x, y, w, margin);
    finite += std::isfinite(s) && s > 0.0;
    for (int e : {-300, -100, 100, 250, 300}) {
      const double k = std::ldexp(1.0, e);
      const Triangle kx{k * x.a, k * x.b, k * x.c}, ky{k * y.a, k * y.b, k * y.c};
      EXPECT_EQ(TriangleSeparationTravel(kx, ky, w, k * margin), k * s)
          << "trial " << i << " scale 2^" << e;
    }
  }
  EXPECT_GT(finite, 40);
}

Triangle Scaled(const Triangle& t, double k) { return {k * t.a, k * t.b, k * t.c}; }

// Scaling the inputs by a power of two scales every answer by it exactly, from 2^-400 (~4e-121)
// to 2^498 (~8e149) mm. Unscaled, plane distances overflowed for triangles of about 1e55 mm
// (every pair went down the coplanar path: false intersections), closest points for 1e77 mm
// (distances too large, and not conservative for sweeps), and tiny triangles underflowed.
TEST(TriangleTriangle, AnswersScaleExactlyWithPowersOfTwo) {
  auto rng = SeededRng(49);
  int hits = 0;
  const int trials = Trials(400);
  for (int i = 0; i < trials; ++i) {
    const Triangle x = RandomTriangle(rng, 1), y = RandomTriangle(rng, 1, RandomPoint(rng, 0.25));
    const Vec3 p = RandomPoint(rng, 2);
    const TriangleIntersection r = IntersectTriangles(x, y);
    const TriangleDistance d = DistanceTriangles(x, y);
    const Vec3 c = ClosestPointOnTriangle(p, x);
    hits += r.intersects;
    for (int e : {-400, -200, -100, 20, 100, 200, 330, 498}) {
      SCOPED_TRACE(::testing::Message() << "trial " << i << " scale 2^" << e);
      const double k = std::ldexp(1.0, e);
      const Triangle kx = Scaled(x, k), ky = Scaled(y, k);
      const TriangleIntersection kr = IntersectTriangles(kx, ky);
      ASSERT_EQ(kr.intersects, r.intersects);
      EXPECT_EQ(kr.coplanar, r.coplanar);
      EXPECT_EQ(kr.p0, k * r.p0);
      EXPECT_EQ(kr.p1, k * r.p1);
      const TriangleDistance kd = DistanceTriangles(kx, ky);
      EXPECT_EQ(kd.distance, k * d.distance);
      EXPECT_EQ(kd.p1, k * d.p1);
      EXPECT_EQ(kd.p2, k * d.p2);
      // An upper bound scales with them.
      EXPECT_EQ(DistanceTriangles(kx, ky, k * (d.distance + 0.25)).distance, kd.distance);
      EXPECT_EQ(ClosestPointOnTriangle(k * p, kx), k * c);
    }
  }
  // Hit-rate window (22-30 % meet): both outcomes occur in quantity.
  ::testing::Test::RecordProperty("hits", hits);
  EXPECT_GT(hits, trials / 10);
  EXPECT_LT(hits, trials * 4 / 5);
}

// Brute force: the smallest distance between points sampled on the two triangles (n steps along
// two edges of each), computed with hypot so that nothing over- or underflows at any scale. It is
// at least the true distance and at most (L1 + L2) / n more, L the triangles' longest edges.
double SampledDistance(const Triangle& x, const Triangle& y, int n) {
  std::vector<Vec3> sx, sy;
  for (int u = 0; u <= n; ++u) {
    for (int v = 0; u + v <= n; ++v) {
      const double fu = static_cast<double>(u) / n, fv = static_cast<double>(v) / n;
      sx.push_back(x.a + fu * (x.b - x.a) + fv * (x.c - x.a));
      sy.push_back(y.a + fu * (y.b - y.a) + fv * (y.c - y.a));
    }
  }
  double best = kInf;
  for (const Vec3& a : sx) {
    for (const Vec3& b : sy) {
      best = std::min(best, std::hypot(a.x() - b.x(), a.y() - b.y(), a.z() - b.z()));
    }
  }
  return best;
}

double LongestEdge(const Triangle& t) {
  return std::max({(t.b - t.a).norm(), (t.c - t.b).norm(), (t.a - t.c).norm()});
}

// The same random configurations at decimal scales from 1e-30 to 1e150 mm (rounded, so not
// exactly the same triangles): the same yes/no as at scale 1, the distance S times the distance
// at scale 1 up to rounding, never above the sampled distance by more than rounding, and within
// the sampling's resolution of it.
TEST(TriangleTriangle, DecimalScalesAgreeWithScaleOneAndWithBruteForce) {
  auto rng = SeededRng(50);
  // Relative rounding of the answers: coordinates rounded at scale S and the tests' own
  // rounding are ~1e-16 relative, far below this.
  constexpr double kRelative = 1e-12;
  constexpr int kSteps = 16;
  int hits = 0;
  const int trials = Trials(120);
  for (int i = 0; i < trials; ++i) {
    const Triangle x = RandomTriangle(rng, 1), y = RandomTriangle(rng, 1, RandomPoint(rng, 0.25));
    const bool hit = IntersectTriangles(x, y).intersects;
    const double d = DistanceTriangles(x, y).distance;
    hits += hit;
    for (double S : {1.0, 1e-30, 1e30, 1e60, 1e100, 1e150}) {
      SCOPED_TRACE(::testing::Message() << "trial " << i << " scale " << S);
      const Triangle sx = Scaled(x, S), sy = Scaled(y, S);
      EXPECT_EQ(IntersectTriangles(sx, sy).intersects, hit);
      const double sd = DistanceTriangles(sx, sy).distance;
      EXPECT_EQ(sd == 0.0, hit);
      EXPECT_NEAR(sd, S * d, kRelative * S);
      const double sampled = SampledDistance(sx, sy, kSteps);
      EXPECT_LE(sd, sampled * (1 + kRelative));
      EXPECT_GE(sd, sampled - (LongestEdge(sx) + LongestEdge(sy)) / kSteps);
    }
  }
  // Hit-rate window (22-30 % meet): both outcomes occur in quantity.
  ::testing::Test::RecordProperty("hits", hits);
  EXPECT_GT(hits, trials / 10);
  EXPECT_LT(hits, trials * 4 / 5);
}

}  // namespace
}  // namespace clash::geom
