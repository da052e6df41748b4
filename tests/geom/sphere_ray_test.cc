#include <gtest/gtest.h>

#include <vector>

#include "clash/geom/ray.h"
#include "clash/geom/sphere.h"
#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using testing::RandomPoint;
using testing::SeededRng;
using testing::Uniform;

TEST(Sphere, BothMethodsContainEveryPoint) {
  auto rng = SeededRng(21);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<Vec3> pts;
    Vec3 c = RandomPoint(rng, 100);
    const int n = 1 + trial * 7;
    for (int i = 0; i < n; ++i) pts.push_back(RandomPoint(rng, Uniform(rng, 0.1, 20), c));
    Sphere s1 = BoundingSphereCentroid(pts), s2 = BoundingSphereRitter(pts);
    for (const Vec3& p : pts) {
      EXPECT_TRUE(s1.Contains(p));
      EXPECT_TRUE(s2.Contains(p));
    }
    // The centroid sphere is centred on the mean of the points and reaches just the farthest
    // one (its rounding slack is 1e-12 relative; 1e-9 leaves room for the mean's rounding).
    Vec3 mean = Vec3::Zero();
    for (const Vec3& p : pts) mean += p;
    mean /= static_cast<double>(n);
    double farthest = 0;
    for (const Vec3& p : pts) farthest = std::max(farthest, (p - mean).norm());
    EXPECT_LT((s1.center - mean).norm(), 1e-9 * (1 + mean.norm()));
    EXPECT_LE(s1.radius, farthest * (1 + 1e-9) + 1e-9);
    double max_pair = 0;
    for (const Vec3& p : pts) {
      for (const Vec3& q : pts) max_pair = std::max(max_pair, (p - q).norm());
    }
    // Any enclosing sphere has radius >= half the diameter; Ritter is within ~20% of optimal,
    // and the optimum is at most diameter / sqrt(3) (Jung's theorem).
    EXPECT_GE(s2.radius, 0.5 * max_pair - 1e-9);
    EXPECT_LE(s2.radius, 1.25 * max_pair / std::sqrt(3.0) + 1e-9);
  }
  EXPECT_LT(BoundingSphereRitter({}).radius, 0);
}

TEST(Sphere, RitterIsTightForPointsOnASphere) {
  auto rng = SeededRng(22);
  std::vector<Vec3> pts;
  for (int i = 0; i < 2000; ++i) pts.push_back(3.0 * RandomPoint(rng, 1).normalized());
  Sphere s = BoundingSphereRitter(pts);
  EXPECT_LT(s.radius, 3.0 * 1.1);
  Sphere a{Vec3(0, 0, 0), 1}, b{Vec3(2, 0, 0), 1}, c{Vec3(2.01, 0, 0), 1};
  EXPECT_TRUE(a.Overlaps(b));
  EXPECT_FALSE(a.Overlaps(c));
}

// A world ray expressed in a part's frame maps back onto itself: the same points at the same
// parameters, and it agrees with the general frame change.
TEST(Ray, InFrameOfIsTheInverseTransform) {
  auto rng = SeededRng(52);
  for (int i = 0; i < 500; ++i) {
    const RigidTransform X_WP{testing::RandomRotation(rng), RandomPoint(rng, i % 2 ? 1e6 : 10)};
    const Ray ray_W{RandomPoint(rng, 100) + X_WP.t, RandomPoint(rng, 3), Uniform(rng, -1, 0),
                    Uniform(rng, 1, 2)};
    const Ray ray_P = ray_W.InFrameOf(X_WP);
    EXPECT_EQ(ray_P.t_min, ray_W.t_min);
    EXPECT_EQ(ray_P.t_max, ray_W.t_max);
    const Ray general = ray_W.Transformed(X_WP.Inverse());
    const double scale = 1e-12 * (1 + X_WP.t.norm());
    EXPECT_LT((ray_P.origin - general.origin).norm(), scale);
    EXPECT_LT((ray_P.direction - general.direction).norm(), 1e-12);
    for (double t : {0.0, 0.5, 1.5}) {
      EXPECT_LT((X_WP * ray_P.At(t) - ray_W.At(t)).norm(), scale) << i;
    }
  }
}

TEST(RaySlab, HandlesZeroComponentsAndInsideOrigins) {
  Aabb box = Aabb::FromPoints(Vec3(-1, -1, -1), Vec3(1, 1, 1));
  // Along x only, passing through the box.
  auto h = IntersectRayAabb({Vec3(-5, 0.5, 0.5), Vec3(1, 0, 0)}, box);
  ASSERT_TRUE(h.has_value());
  EXPECT_DOUBLE_EQ(h->t0, 4.0);
  EXPECT_NEAR(h->t1, 6.0, 1e-12);
  // Parallel to x, outside the y slab.
  EXPECT_FALSE(IntersectRayAabb({Vec3(-5, 1.5, 0), Vec3(1, 0, 0)}, box).has_value());
  // Parallel, exactly on the face plane: the closed box is touched.
  EXPECT_TRUE(IntersectRayAabb({Vec3(-5, 1.0, 0), Vec3(1, 0, 0)}, box).has_value());
  // Origin inside: entry is t_min.
  h = IntersectRayAabb({Vec3(0, 0, 0), Vec3(0, 0, -2)}, box);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->t0, 0.0);
  EXPECT_NEAR(h->t1, 0.5, 1e-12);
  // Pointing away.
  EXPECT_FALSE(IntersectRayAabb({Vec3(3, 0, 0), Vec3(1, 0, 0)}, box).has_value());
  // Limited t_max stops short.
  EXPECT_FALSE(IntersectRayAabb({Vec3(-5, 0, 0), Vec3(1, 0, 0), 0.0, 3.9}, box).has_value());
}

// Oracle: points sampled along the ray are inside the box exactly within [t0, t1].
TEST(RaySlab, AgreesWithSampling) {
  auto rng = SeededRng(23);
  int hits = 0;
  const int trials = 2000;
  for (int trial = 0; trial < trials; ++trial) {
    Aabb box = Aabb::FromPoints(RandomPoint(rng, 3), RandomPoint(rng, 3));
    // Half the rays aim at a point near the box so both outcomes occur often.
    Vec3 origin = RandomPoint(rng, 6);
    Vec3 dir = trial % 2 ? RandomPoint(rng, 1) : RandomPoint(rng, 2, box.Center()) - origin;
    if (trial % 5 == 0) dir[trial % 3] = 0.0;  // zero components
    if (dir.norm() < 1e-3) continue;
    Ray ray{origin, dir, 0.0, 20.0};
    auto h = IntersectRayAabb(ray, box);
    const int samples = 400;
    for (int s = 0; s <= samples; ++s) {
      double t = ray.t_max * s / samples;
      bool inside = box.Inflated(-1e-9).Contains(ray.At(t));
      if (inside) {
        ASSERT_TRUE(h.has_value());
        EXPECT_GE(t, h->t0 - 1e-9);
        EXPECT_LE(t, h->t1 + 1e-9);
      }
    }
    if (h) {
      ++hits;
      EXPECT_TRUE(box.Inflated(1e-9).Contains(ray.At(h->t0)));
      EXPECT_TRUE(box.Inflated(1e-9).Contains(ray.At(h->t1)));
    }
  }
  // The generator must exercise both outcomes.
  EXPECT_GT(hits, trials / 10);
  EXPECT_LT(hits, trials * 9 / 10);
}

}  // namespace
}  // namespace clash::geom
