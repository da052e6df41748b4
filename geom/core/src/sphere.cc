#include "clash/geom/sphere.h"

#include <algorithm>
#include <cmath>

namespace clash::geom {
namespace {

// Rounding in the centre update can leave a point a few ulps outside; grow by this much.
constexpr double kRelativeSlack = 1e-12;

}  // namespace

Sphere BoundingSphereCentroid(std::span<const Vec3> points) {
  if (points.empty()) return {};
  Vec3 c = Vec3::Zero();
  for (const Vec3& p : points) c += p;
  c /= static_cast<double>(points.size());
  double r2 = 0.0;
  for (const Vec3& p : points) r2 = std::max(r2, (p - c).squaredNorm());
  double r = std::sqrt(r2);
  return {c, r * (1.0 + kRelativeSlack)};
}

Sphere BoundingSphereRitter(std::span<const Vec3> points) {
  if (points.empty()) return {};
  // Extreme points along each axis; start from the most separated pair.
  std::size_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  for (std::size_t i = 1; i < points.size(); ++i) {
    for (int k = 0; k < 3; ++k) {
      if (points[i][k] < points[lo[k]][k]) lo[k] = i;
      if (points[i][k] > points[hi[k]][k]) hi[k] = i;
    }
  }
  int best = 0;
  double best_d2 = -1.0;
  for (int k = 0; k < 3; ++k) {
    double d2 = (points[hi[k]] - points[lo[k]]).squaredNorm();
    if (d2 > best_d2) {
      best_d2 = d2;
      best = k;
    }
  }
  Vec3 c = 0.5 * (points[lo[best]] + points[hi[best]]);
  double r = 0.5 * std::sqrt(best_d2);
  for (const Vec3& p : points) {
    double d = (p - c).norm();
    if (d > r) {
      double new_r = 0.5 * (r + d);
      c += ((new_r - r) / d) * (p - c);
      r = new_r;
    }
  }
  // Absorb rounding of the incremental updates.
  double r2 = r * r;
  for (const Vec3& p : points) r2 = std::max(r2, (p - c).squaredNorm());
  return {c, std::sqrt(r2) * (1.0 + kRelativeSlack)};
}

}  // namespace clash::geom
