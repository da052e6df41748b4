// Per-ray precomputation for the watertight ray-triangle test and the slab test.
#pragma once

#include <cmath>
#include <optional>
#include <utility>

#include "clash/geom/ray.h"
#include "clash/geom/triangle.h"

namespace clash::geom::internal {

/// A ray with the shear constants of Woop et al. and inverse direction precomputed.
struct PreparedRay {
  Vec3 org;
  Vec3 dir;
  Vec3 inv_dir;  // 1/dir (inf for zero components; those axes are handled by `zero`).
  bool zero[3];
  int kx, ky, kz;
  double sx, sy, sz;
  double t_min, t_max;

  explicit PreparedRay(const Ray& r) : org(r.origin), dir(r.direction) {
    t_min = r.t_min;
    t_max = r.t_max;
    for (int i = 0; i < 3; ++i) {
      zero[i] = dir[i] == 0.0;
      inv_dir[i] = 1.0 / dir[i];
    }
    const double ax = std::abs(dir.x()), ay = std::abs(dir.y()), az = std::abs(dir.z());
    kz = ax > ay ? (ax > az ? 0 : 2) : (ay > az ? 1 : 2);
    const int next = kz == 2 ? 0 : kz + 1, after = next == 2 ? 0 : next + 1;
    const bool down = dir[kz] < 0.0;  // swap kx and ky: keep the winding of the sheared triangle
    kx = down ? after : next;
    ky = down ? next : after;
    sx = dir[kx] / dir[kz];
    sy = dir[ky] / dir[kz];
    sz = inv_dir[kz];
  }
};

/// A watertight hit with a flag telling whether the ray passed exactly through an edge or a
/// vertex (a zero barycentric), which a parity count must treat as ambiguous.
struct WatertightHit {
  double t;
  double u, v;
  bool on_edge;
};

/// Woop, Benthin, Wald 2013, double precision; no culling.
inline std::optional<WatertightHit> IntersectWatertight(const PreparedRay& r, const Vec3& a,
                                                        const Vec3& b, const Vec3& c) {
  const Vec3 A = a - r.org, B = b - r.org, C = c - r.org;
  const double ax = A[r.kx] - r.sx * A[r.kz], ay = A[r.ky] - r.sy * A[r.kz];
  const double bx = B[r.kx] - r.sx * B[r.kz], by = B[r.ky] - r.sy * B[r.kz];
  const double cx = C[r.kx] - r.sx * C[r.kz], cy = C[r.ky] - r.sy * C[r.kz];
  double U = cx * by - cy * bx;
  double V = ax * cy - ay * cx;
  double W = bx * ay - by * ax;
  if (U == 0.0 || V == 0.0 || W == 0.0) {
    // Recompute the edge functions in extended precision, as the paper advises.
    U = static_cast<double>(static_cast<long double>(cx) * by - static_cast<long double>(cy) * bx);
    V = static_cast<double>(static_cast<long double>(ax) * cy - static_cast<long double>(ay) * cx);
    W = static_cast<double>(static_cast<long double>(bx) * ay - static_cast<long double>(by) * ax);
  }
  // Non-short-circuit ors: most triangles fail here, and the signs are unpredictable.
  const bool negative = (U < 0.0) | (V < 0.0) | (W < 0.0);
  const bool positive = (U > 0.0) | (V > 0.0) | (W > 0.0);
  if (negative & positive) return std::nullopt;
  const double det = U + V + W;
  if (det == 0.0) return std::nullopt;
  const double az = r.sz * A[r.kz], bz = r.sz * B[r.kz], cz = r.sz * C[r.kz];
  const double T = U * az + V * bz + W * cz;
  const double t = T / det;
  if (!(t >= r.t_min && t <= r.t_max)) return std::nullopt;
  return WatertightHit{t, V / det, W / det, U == 0.0 || V == 0.0 || W == 0.0};
}

/// Slab test of a prepared ray against the box [lo, hi] in the ray's frame, limited to
/// [t0, t1]; on a hit narrows t0/t1. The exit is widened by a few ulps (Ize, "Robust BVH Ray
/// Traversal", JCGT 2013) so rounding never culls a box the ray touches.
inline bool SlabTest(const Vec3& org, const Vec3& inv_dir, const bool zero[3], const Vec3& lo,
                     const Vec3& hi, double* t0, double* t1) {
  constexpr double kWiden = 1.0 + 8.0 * 1.1102230246251565e-16;
  double tn = *t0, tf = *t1;
  for (int i = 0; i < 3; ++i) {
    if (zero[i]) {
      if (org[i] < lo[i] || org[i] > hi[i]) return false;
      continue;
    }
    double ta = (lo[i] - org[i]) * inv_dir[i];
    double tb = (hi[i] - org[i]) * inv_dir[i];
    if (ta > tb) std::swap(ta, tb);
    tb *= kWiden;
    if (ta > tn) tn = ta;
    if (tb < tf) tf = tb;
    if (tn > tf) return false;
  }
  *t0 = tn;
  *t1 = tf;
  return true;
}

}  // namespace clash::geom::internal
