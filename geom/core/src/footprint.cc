#include <algorithm>
#include <cmath>
#include <limits>

#include "footprint_internal.h"
#include "separation_internal.h"

namespace clash::geom::internal {
namespace {

// The component of v across the unit a.
Vec3 Across(const Vec3& v, const Vec3& a) { return v - a.dot(v) * a; }

// Distance from the origin to the segment [p, q] (both across the axis).
double OriginToSegment(const Vec3& p, const Vec3& q) {
  const Vec3 d = q - p;
  const double len2 = d.squaredNorm();
  const double s = len2 > 0.0 ? std::clamp(-p.dot(d) / len2, 0.0, 1.0) : 0.0;
  return (p + s * d).norm();
}

}  // namespace

Footprint BoxFootprint(const Vec3& c, const Mat3& axes, const Vec3& half, const AxisLine& line) {
  const Vec3& a = line.a;
  const Vec3 rel = c - line.p;
  Footprint f;
  const double zc = a.dot(rel);
  const double zr = half[0] * std::abs(a.dot(axes.col(0))) +
                    half[1] * std::abs(a.dot(axes.col(1))) + half[2] * std::abs(a.dot(axes.col(2)));
  f.z_lo = zc - zr;
  f.z_hi = zc + zr;
  // The box's shadow across the axis: centre q and the three half-axis generators g_i.
  const Vec3 q = Across(rel, a);
  const Vec3 g[3] = {Across(half[0] * axes.col(0), a), Across(half[1] * axes.col(1), a),
                     Across(half[2] * axes.col(2), a)};
  double r2 = 0.0;
  for (int k = 0; k < 8; ++k) {
    const Vec3 corner =
        q + ((k & 1) ? g[0] : -g[0]) + ((k & 2) ? g[1] : -g[1]) + ((k & 4) ? g[2] : -g[2]);
    r2 = std::max(r2, corner.squaredNorm());
  }
  f.r_hi = std::sqrt(r2);
  // r_lo: along the radial direction and the shadow's edge normals a x g_i, the distance of
  // the shadow's centre minus its support (a lower bound of the origin's distance to it).
  double lo = 0.0;
  auto gap = [&](const Vec3& n) {
    const double len = n.norm();
    if (!(len > 0.0)) return;
    const double support = std::abs(g[0].dot(n)) + std::abs(g[1].dot(n)) + std::abs(g[2].dot(n));
    lo = std::max(lo, (std::abs(q.dot(n)) - support) / len);
  };
  gap(q);
  for (const Vec3& gi : g) gap(a.cross(gi));
  f.r_lo = lo;
  return f;
}

Footprint TriangleFootprint(const Triangle& t, const AxisLine& line) {
  const Vec3& a = line.a;
  Footprint f;
  const double z0 = a.dot(t.a - line.p), z1 = a.dot(t.b - line.p), z2 = a.dot(t.c - line.p);
  f.z_lo = std::min({z0, z1, z2});
  f.z_hi = std::max({z0, z1, z2});
  const Vec3 q[3] = {Across(t.a - line.p, a), Across(t.b - line.p, a), Across(t.c - line.p, a)};
  f.r_hi = std::sqrt(std::max({q[0].squaredNorm(), q[1].squaredNorm(), q[2].squaredNorm()}));
  // The axis pierces the triangle when the origin lies in its shadow (the three signed areas
  // about the axis do not differ in sign); otherwise the nearest point is on an edge.
  const double s0 = a.dot(q[0].cross(q[1])), s1 = a.dot(q[1].cross(q[2])),
               s2 = a.dot(q[2].cross(q[0]));
  const bool pierced = (s0 >= 0 && s1 >= 0 && s2 >= 0) || (s0 <= 0 && s1 <= 0 && s2 <= 0);
  f.r_lo = pierced ? 0.0
                   : std::min({OriginToSegment(q[0], q[1]), OriginToSegment(q[1], q[2]),
                               OriginToSegment(q[2], q[0])});
  return f;
}

double FootprintAdvance(const Footprint& moving, const Footprint& fixed, double margin) {
  // Across the axis nothing changes: apart by more than the margin there, never within it.
  const double gap_r = std::max(moving.r_lo - fixed.r_hi, fixed.r_lo - moving.r_hi);
  if (gap_r > margin) return std::numeric_limits<double>::infinity();
  // Along it, within the margin needs the z gap within sqrt(margin^2 - gap_r^2).
  const double gap_r_pos = std::max(gap_r, 0.0);
  TravelWindow window;
  window.Axis(0.5 * ((moving.z_lo + moving.z_hi) - (fixed.z_lo + fixed.z_hi)),
              0.5 * ((moving.z_hi - moving.z_lo) + (fixed.z_hi - fixed.z_lo)), 1.0,
              std::sqrt(std::max(margin * margin - gap_r_pos * gap_r_pos, 0.0)));
  return window.First();
}

}  // namespace clash::geom::internal
