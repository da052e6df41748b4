// Bounding spheres: the centroid method and Ritter's method.
#pragma once

#include <span>

#include "clash/geom/types.h"

namespace clash::geom {

/// A sphere (centre, radius). A negative radius means empty.
struct Sphere {
  Vec3 center = Vec3::Zero();  ///< Centre.
  double radius = -1.0;        ///< Radius; < 0 when empty.

  /// True when p lies in the closed ball.
  [[nodiscard]] bool Contains(const Vec3& p, double tol = 0.0) const {
    return (p - center).norm() <= radius + tol;
  }
  /// True when the closed balls share a point.
  [[nodiscard]] bool Overlaps(const Sphere& o) const {
    double r = radius + o.radius;
    return radius >= 0 && o.radius >= 0 && (center - o.center).squaredNorm() <= r * r;
  }
};

/// The sphere about the centroid of the points with radius to the farthest point.
[[nodiscard]] Sphere BoundingSphereCentroid(std::span<const Vec3> points);

/// Ritter's sphere (J. Ritter, "An efficient bounding sphere", Graphics Gems, 1990): start from
/// the most separated pair of the x/y/z extreme points, then grow to include each outlier.
[[nodiscard]] Sphere BoundingSphereRitter(std::span<const Vec3> points);

}  // namespace clash::geom
