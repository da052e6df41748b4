#include "clash/geom/ray.h"

#include "ray_internal.h"

namespace clash::geom {

std::optional<RayInterval> IntersectRayAabb(const Ray& ray, const Aabb& box) {
  if (box.IsEmpty()) return std::nullopt;
  bool zero[3];
  Vec3 inv;
  for (int i = 0; i < 3; ++i) {
    zero[i] = ray.direction[i] == 0.0;
    inv[i] = 1.0 / ray.direction[i];
  }
  double t0 = ray.t_min, t1 = ray.t_max;
  if (!internal::SlabTest(ray.origin, inv, zero, box.min, box.max, &t0, &t1)) {
    return std::nullopt;
  }
  return RayInterval{t0, t1};
}

}  // namespace clash::geom
