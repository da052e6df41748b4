// Rays and the ray-box slab test.
#pragma once

#include <limits>
#include <optional>

#include "clash/geom/aabb.h"
#include "clash/geom/transform.h"
#include "clash/geom/types.h"

namespace clash::geom {

/// A ray origin + t * direction for t in [t_min, t_max]. The direction need not be unit;
/// t is measured in units of |direction|.
struct Ray {
  Vec3 origin = Vec3::Zero();                              ///< Origin.
  Vec3 direction = Vec3::UnitX();                          ///< Direction (non-zero).
  double t_min = 0.0;                                      ///< Start of the valid interval.
  double t_max = std::numeric_limits<double>::infinity();  ///< End of the valid interval.

  /// The point at parameter t.
  [[nodiscard]] Vec3 At(double t) const { return origin + t * direction; }
  /// The same ray expressed in another frame: X_BA maps this ray's frame A to B.
  [[nodiscard]] Ray Transformed(const RigidTransform& X_BA) const {
    return {X_BA * origin, X_BA.R * direction, t_min, t_max};
  }
  /// This ray, given in frame W, expressed in frame P whose pose is X_WP: origin
  /// R^T (origin - t), direction R^T direction (the part-frame ray of the ray queries).
  [[nodiscard]] Ray InFrameOf(const RigidTransform& X_WP) const {
    const Mat3& R = X_WP.R;
    const Vec3 o = origin - X_WP.t;
    Ray out{o, direction, t_min, t_max};
    for (int i = 0; i < 3; ++i) {
      out.origin[i] = R(0, i) * o[0] + R(1, i) * o[1] + R(2, i) * o[2];
      out.direction[i] = R(0, i) * direction[0] + R(1, i) * direction[1] + R(2, i) * direction[2];
    }
    return out;
  }
};

/// Parameter interval [t0, t1] of a ray inside a box.
struct RayInterval {
  double t0;  ///< Entry parameter (>= ray.t_min).
  double t1;  ///< Exit parameter (<= ray.t_max).
};

/// Slab test: the part of [ray.t_min, ray.t_max] inside the closed box, or nullopt.
/// Handles zero direction components (the ray is then inside a slab or misses it) and
/// origins inside the box (t0 = t_min).
[[nodiscard]] std::optional<RayInterval> IntersectRayAabb(const Ray& ray, const Aabb& box);

}  // namespace clash::geom
