#include "clash/geom/triangle.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "clash/geom/aabb.h"
#include "ray_internal.h"
#include "separation_internal.h"

namespace clash::geom {
namespace {

// Signed plane distances whose magnitude is below this fraction of the triangles' size are
// snapped to zero, so exactly-touching and coplanar inputs are classified consistently
// despite rounding. 1e-12 is ~4500 ulps of double: far above rounding, far below any
// tessellation feature.
constexpr double kPlaneSnapRelative = 1e-12;

// Scale. The triangle tests form products of up to the sixth power of coordinate differences
// (IntersectTriangles' snapped plane distances; the closest points go to the fourth). Unscaled,
// these overflowed for triangles of about 1e55 mm (every pair went down the coplanar path: false
// intersections) and 1e77 mm (distances came out too large), and underflowed below about 1e-50
// mm. So each public test first checks that the largest difference it will form lies in
// [2^-40, 2^40] (about 1e-12 to 1e12 mm), from quantities it computes anyway or in a few
// operations, and otherwise scales its inputs by the power of two that brings the largest
// coordinate magnitude into [1, 2), and its answers back. Scaling by a power of two is exact: the
// answers for inputs scaled by 2^k are the answers scaled by 2^k, bit for bit, as long as neither
// computation over- or underflows. Absolute coordinates enter only multiplied by a difference to
// at most the fourth power (the ends of IntersectTriangles' segments along n1 x n2), which stays
// finite far beyond the 1e150 mm the broad phase accepts.
constexpr double kUnscaledMin = 0x1p-40;
constexpr double kUnscaledMax = 0x1p+40;

// Whether the largest coordinate difference `length` (or its square `length2`) is in range;
// false for NaN.
bool LengthInRange(double length) { return length >= kUnscaledMin && length <= kUnscaledMax; }
bool Length2InRange(double length2) {
  return length2 >= kUnscaledMin * kUnscaledMin && length2 <= kUnscaledMax * kUnscaledMax;
}

double MaxAbs(const Vec3& v) { return v.cwiseAbs().maxCoeff(); }
double MaxAbs(const Triangle& t) { return std::max({MaxAbs(t.a), MaxAbs(t.b), MaxAbs(t.c)}); }

// A power of two `to` bringing max_abs into [1, 2), and its inverse `back` (the exponent is kept
// within +-1023, so both are representable); 1 for zero or non-finite magnitudes.
struct PowerOfTwoScale {
  double to = 1.0, back = 1.0;
};
PowerOfTwoScale ScaleToUnit(double max_abs) {
  if (!(max_abs > 0.0) || !std::isfinite(max_abs)) return {};
  const int e = std::min(-std::ilogb(max_abs), 1023);
  return {std::ldexp(1.0, e), std::ldexp(1.0, -e)};
}

Triangle Scaled(const Triangle& t, double s) { return {s * t.a, s * t.b, s * t.c}; }

double MaxEdgeLengthSquared(const Triangle& t) {
  return std::max(
      {(t.b - t.a).squaredNorm(), (t.c - t.b).squaredNorm(), (t.a - t.c).squaredNorm()});
}

// Distances (scaled by |n|) of t's vertices from the plane through `on` with normal n; those
// with d^2 <= snap2 are snapped to zero.
std::array<double, 3> PlaneDistances(const Triangle& t, const Vec3& n, const Vec3& on,
                                     double snap2) {
  std::array<double, 3> d;
  for (int i = 0; i < 3; ++i) {
    d[i] = n.dot(t[i] - on);
    if (d[i] * d[i] <= snap2) d[i] = 0.0;
  }
  return d;
}

bool AllSameStrictSign(const std::array<double, 3>& d) {
  return (d[0] > 0 && d[1] > 0 && d[2] > 0) || (d[0] < 0 && d[1] < 0 && d[2] < 0);
}

// The points where triangle t meets the plane (given its vertices' signed distances d, not all
// zero and not all of one strict sign), projected on `dir`: the interval [s0, s1] and its ends.
struct PlaneSegment {
  double s0 = std::numeric_limits<double>::infinity();
  double s1 = -std::numeric_limits<double>::infinity();
  Vec3 p0, p1;
  void Add(const Vec3& p, const Vec3& dir) {
    double s = dir.dot(p);
    if (s < s0) {
      s0 = s;
      p0 = p;
    }
    if (s > s1) {
      s1 = s;
      p1 = p;
    }
  }
};

PlaneSegment SegmentOnPlane(const Triangle& t, const std::array<double, 3>& d, const Vec3& dir) {
  PlaneSegment seg;
  for (int i = 0; i < 3; ++i) {
    int j = (i + 1) % 3;
    if (d[i] == 0.0) seg.Add(t[i], dir);
    if ((d[i] < 0 && d[j] > 0) || (d[i] > 0 && d[j] < 0)) {
      double s = d[i] / (d[i] - d[j]);
      seg.Add(t[i] + s * (t[j] - t[i]), dir);
    }
  }
  return seg;
}

// 2D helpers for the coplanar case (coordinates on the two kept axes).
struct P2 {
  double x, y;
};
double Orient(const P2& a, const P2& b, const P2& c) {
  return (b.x - a.x) * (c.y - a.y) - (b.y - a.y) * (c.x - a.x);
}
bool PointInTriangle2(const P2& p, const P2 t[3]) {
  double o0 = Orient(t[0], t[1], p), o1 = Orient(t[1], t[2], p), o2 = Orient(t[2], t[0], p);
  return (o0 >= 0 && o1 >= 0 && o2 >= 0) || (o0 <= 0 && o1 <= 0 && o2 <= 0);
}

// Coplanar triangles: edge crossings and contained vertices are the vertices of the (convex)
// intersection polygon; their centroid is a witness inside it.
TriangleIntersection CoplanarIntersection(const Triangle& t1, const Triangle& t2, const Vec3& n) {
  int drop = 0;
  Vec3 an = n.cwiseAbs();
  if (an.y() > an[drop]) drop = 1;
  if (an.z() > an[drop]) drop = 2;
  const int ix = drop == 0 ? 1 : 0, iy = drop == 2 ? 1 : 2;
  P2 a[3], b[3];
  for (int i = 0; i < 3; ++i) {
    a[i] = {t1[i][ix], t1[i][iy]};
    b[i] = {t2[i][ix], t2[i][iy]};
  }
  Vec3 sum = Vec3::Zero();
  int count = 0;
  auto add = [&](const Vec3& p) {
    sum += p;
    ++count;
  };
  for (int i = 0; i < 3; ++i) {
    if (PointInTriangle2(a[i], b)) add(t1[i]);
    if (PointInTriangle2(b[i], a)) add(t2[i]);
  }
  for (int i = 0; i < 3; ++i) {
    const int i2 = (i + 1) % 3;
    for (int j = 0; j < 3; ++j) {
      const int j2 = (j + 1) % 3;
      double d1 = Orient(b[j], b[j2], a[i]), d2 = Orient(b[j], b[j2], a[i2]);
      double d3 = Orient(a[i], a[i2], b[j]), d4 = Orient(a[i], a[i2], b[j2]);
      // Proper crossings only: an endpoint touching the other edge lies in the other
      // (closed) triangle and was counted above.
      if (((d1 > 0 && d2 < 0) || (d1 < 0 && d2 > 0)) &&
          ((d3 > 0 && d4 < 0) || (d3 < 0 && d4 > 0))) {
        double s = d1 / (d1 - d2);
        add(t1[i] + s * (t1[i2] - t1[i]));
      }
    }
  }
  TriangleIntersection r;
  r.coplanar = true;
  if (count > 0) {
    r.intersects = true;
    r.p0 = r.p1 = sum / count;
  }
  return r;
}

// A triangle of (nearly) zero area, given its normal n and MaxEdgeLengthSquared: its height is at
// most kPlaneSnapRelative of its longest edge, below what the plane tests resolve. Its normal has
// no direction, so it is taken as the segment it spans.
bool IsFlat(const Vec3& n, double max_edge2) {
  return !(n.norm() > kPlaneSnapRelative * max_edge2);
}

// The segment a flat triangle spans: its two vertices farthest apart.
std::pair<Vec3, Vec3> Span(const Triangle& t) {
  int best = 0;
  double best_len2 = -1.0;
  for (int i = 0; i < 3; ++i) {
    const double len2 = (t[(i + 1) % 3] - t[i]).squaredNorm();
    if (len2 > best_len2) {
      best_len2 = len2;
      best = i;
    }
  }
  return {t[best], t[(best + 1) % 3]};
}

// The point of the three edges of t closest to p: the closest point of a flat triangle.
Vec3 ClosestPointOnEdges(const Vec3& p, const Triangle& t) {
  Vec3 best = t.a, q, r;
  double best_d2 = (p - t.a).squaredNorm();
  for (int i = 0; i < 3; ++i) {
    const double d2 = ClosestPointsSegments(p, p, t[i], t[(i + 1) % 3], &q, &r);
    if (d2 < best_d2) {
      best_d2 = d2;
      best = r;
    }
  }
  return best;
}

// ClosestPoint takes a triangle as flat when |ab x ac|^2 (its doubled area, squared) is at most
// this times (|ab|^2 + |ac|^2)^2, which is within a factor 4 of its longest edge to the fourth: a
// height of at most about 6e-6 of its longest edge. Ericson's face case divides by |ab x ac|^2
// formed as differences of products as large as edge^4, so its v and w carry errors of about
// eps / (height / edge)^2: a point on a triangle 1e-9 high came back up to 0.98 of its length
// along it (and a point beside a triangle 1e-15 high 0.2 of its length too far). The closest
// point of the edges is at most the height from the true one. At 1e-11 the worse of the two,
// measured over heights from 1e-2 to 1e-16 of the edge, is about 5e-6 of the longest edge.
constexpr double kSliver = 1e-11;

[[gnu::noinline]] Vec3 ClosestPointRescaled(const Vec3& p, const Triangle& t);

// Ericson's Voronoi-region method. Unguarded, on inputs the caller has brought within range.
// Guarded (ClosestPointOnTriangle), on inputs of any scale: the vertex regions of a and b are
// decided on dot products of two differences, which for differences between about 1e-150 and
// 1e150 mm neither overflow nor round otherwise than at unit scale; before the first product of
// two of them, differences outside the unscaled range go to ClosestPointRescaled. (A point that
// meets the triangle at a or b pays nothing for the check.)
template <bool kGuarded>
[[gnu::always_inline]] inline Vec3 ClosestPoint(const Vec3& p, const Triangle& t) {
  const Vec3 &a = t.a, &b = t.b, &c = t.c;
  Vec3 ab = b - a, ac = c - a, ap = p - a;
  double d1 = ab.dot(ap), d2 = ac.dot(ap);
  if (d1 <= 0 && d2 <= 0) return a;
  Vec3 bp = p - b;
  double d3 = ab.dot(bp), d4 = ac.dot(bp);
  if (d3 >= 0 && d4 <= d3) return b;
  if constexpr (kGuarded) {
    // Every difference formed below is a sum of two of ab, ac, ap.
    if (!Length2InRange((ab.cwiseAbs2() + ac.cwiseAbs2() + ap.cwiseAbs2()).sum())) [[unlikely]] {
      return ClosestPointRescaled(p, t);
    }
  }
  double vc = d1 * d4 - d3 * d2;
  if (vc <= 0 && d1 >= 0 && d3 <= 0) return a + (d1 / (d1 - d3)) * ab;
  Vec3 cp = p - c;
  double d5 = ab.dot(cp), d6 = ac.dot(cp);
  if (d6 >= 0 && d5 <= d6) return c;
  double vb = d5 * d2 - d1 * d6;
  if (vb <= 0 && d2 >= 0 && d6 <= 0) return a + (d2 / (d2 - d6)) * ac;
  double va = d3 * d6 - d5 * d4;
  if (va <= 0 && (d4 - d3) >= 0 && (d5 - d6) >= 0) {
    return b + ((d4 - d3) / ((d4 - d3) + (d5 - d6))) * (c - b);
  }
  double denom = va + vb + vc;
  // A flat or nearly flat triangle (d1 - d3 = |ab|^2 and d2 - d6 = |ac|^2 up to rounding): the
  // closest point of its three edges.
  const double edges2 = (d1 - d3) + (d2 - d6);
  if (!(denom > kSliver * (edges2 * edges2))) return ClosestPointOnEdges(p, t);
  double v = vb / denom, w = vc / denom;
  return a + ab * v + ac * w;
}

[[gnu::always_inline]] inline Vec3 ClosestPointUnscaled(const Vec3& p, const Triangle& t) {
  return ClosestPoint<false>(p, t);
}

// A segment [p, q] against a triangle t of normal n (not flat), touching within sqrt(snap2):
// where it crosses t's plane inside t, or where it comes nearest to t's boundary.
TriangleIntersection SegmentTriangleIntersection(const Vec3& p, const Vec3& q, const Triangle& t,
                                                 const Vec3& n, double snap2) {
  TriangleIntersection r;
  const double snap_n2 = snap2 * n.squaredNorm();
  auto plane_distance = [&](const Vec3& x) {
    const double d = n.dot(x - t.a);
    return d * d <= snap_n2 ? 0.0 : d;
  };
  const std::array<double, 2> d = {plane_distance(p), plane_distance(q)};
  r.coplanar = d[0] == 0 && d[1] == 0;
  if ((d[0] < 0 && d[1] > 0) || (d[0] > 0 && d[1] < 0)) {
    // One crossing of the plane: in t (closed, tested in 2D on n's dominant axes)?
    const Vec3 x = p + (d[0] / (d[0] - d[1])) * (q - p);
    int drop = 0;
    const Vec3 an = n.cwiseAbs();
    if (an.y() > an[drop]) drop = 1;
    if (an.z() > an[drop]) drop = 2;
    const int ix = drop == 0 ? 1 : 0, iy = drop == 2 ? 1 : 2;
    const P2 tri[3] = {{t.a[ix], t.a[iy]}, {t.b[ix], t.b[iy]}, {t.c[ix], t.c[iy]}};
    if (PointInTriangle2({x[ix], x[iy]}, tri)) {
      r.intersects = true;
      r.p0 = r.p1 = x;
      return r;
    }
  }
  // Otherwise they meet only where the segment touches t's boundary, or an end of the segment
  // touches t (the segment lying in the plane, or ending on it).
  double best = std::numeric_limits<double>::infinity();
  Vec3 witness = p, a, b;
  for (int i = 0; i < 3; ++i) {
    const double d2 = ClosestPointsSegments(p, q, t[i], t[(i + 1) % 3], &a, &b);
    if (d2 < best) {
      best = d2;
      witness = b;
    }
  }
  for (const Vec3& e : {p, q}) {
    const Vec3 c = ClosestPointUnscaled(e, t);
    const double d2 = (e - c).squaredNorm();
    if (d2 < best) {
      best = d2;
      witness = c;
    }
  }
  if (best <= snap2) {
    r.intersects = true;
    r.p0 = r.p1 = witness;
  }
  return r;
}

}  // namespace

std::optional<Plane> Plane::Through(const Vec3& a, const Vec3& b, const Vec3& c) {
  Vec3 n = (b - a).cross(c - a);
  double len = n.norm();
  if (!(len > 0.0)) return std::nullopt;
  n /= len;
  return Plane{n, n.dot(a)};
}

std::optional<Vec3> Barycentric(const Triangle& t, const Vec3& p) {
  Vec3 v0 = t.b - t.a, v1 = t.c - t.a, v2 = p - t.a;
  double d00 = v0.dot(v0), d01 = v0.dot(v1), d11 = v1.dot(v1);
  double d20 = v2.dot(v0), d21 = v2.dot(v1);
  double denom = d00 * d11 - d01 * d01;
  if (!(std::abs(denom) > 0.0)) return std::nullopt;
  double v = (d11 * d20 - d01 * d21) / denom;
  double w = (d00 * d21 - d01 * d20) / denom;
  return Vec3(1.0 - v - w, v, w);
}

double SolidAngle(const Vec3& a, const Vec3& b, const Vec3& c) {
  const double la = a.norm(), lb = b.norm(), lc = c.norm();
  const double num = a.dot(b.cross(c));
  const double den = la * lb * lc + a.dot(b) * lc + b.dot(c) * la + c.dot(a) * lb;
  return 2.0 * std::atan2(num, den);
}

namespace {

[[gnu::noinline]] Vec3 ClosestPointRescaled(const Vec3& p, const Triangle& t) {
  const PowerOfTwoScale s = ScaleToUnit(std::max(MaxAbs(t), MaxAbs(p)));
  return s.back * ClosestPointUnscaled(s.to * p, Scaled(t, s.to));
}

}  // namespace

Vec3 ClosestPointOnTriangle(const Vec3& p, const Triangle& t) { return ClosestPoint<true>(p, t); }

double ClosestPointsSegments(const Vec3& p1, const Vec3& q1, const Vec3& p2, const Vec3& q2,
                             Vec3* out_p, Vec3* out_q) {
  Vec3 d1 = q1 - p1, d2 = q2 - p2, r = p1 - p2;
  double a = d1.squaredNorm(), e = d2.squaredNorm(), f = d2.dot(r);
  double s, t;
  if (a <= 0.0 && e <= 0.0) {
    s = t = 0.0;
  } else if (a <= 0.0) {
    s = 0.0;
    t = std::clamp(f / e, 0.0, 1.0);
  } else {
    double c = d1.dot(r);
    if (e <= 0.0) {
      t = 0.0;
      s = std::clamp(-c / a, 0.0, 1.0);
    } else {
      double b = d1.dot(d2);
      double denom = a * e - b * b;
      s = denom > 0.0 ? std::clamp((b * f - c * e) / denom, 0.0, 1.0) : 0.0;
      t = (b * s + f) / e;
      if (t < 0.0) {
        t = 0.0;
        s = std::clamp(-c / a, 0.0, 1.0);
      } else if (t > 1.0) {
        t = 1.0;
        s = std::clamp((b - c) / a, 0.0, 1.0);
      }
    }
  }
  *out_p = p1 + d1 * s;
  *out_q = p2 + d2 * t;
  return (*out_p - *out_q).squaredNorm();
}

std::optional<RayTriangleHit> IntersectRayTriangle(const Ray& ray, const Triangle& tri) {
  internal::PreparedRay r(ray);
  auto hit = internal::IntersectWatertight(r, tri.a, tri.b, tri.c);
  if (!hit) return std::nullopt;
  return RayTriangleHit{hit->t, hit->u, hit->v};
}

namespace {

// IntersectTriangles on inputs the caller has brought within range, given their
// MaxEdgeLengthSquared e1, e2.
[[gnu::always_inline]] inline TriangleIntersection IntersectUnscaled(const Triangle& t1,
                                                                     const Triangle& t2, double e1,
                                                                     double e2) {
  TriangleIntersection r;
  // Snap |d| <= kPlaneSnapRelative * scale * |n|, compared squared (no square roots).
  const double k2 = kPlaneSnapRelative * kPlaneSnapRelative * std::max(e1, e2);
  const Vec3 n1 = t1.RawNormal(), n2 = t2.RawNormal();
  // A zero-area triangle is the segment it spans (the closed triangle's point set). Its zero
  // normal once snapped every distance to its "plane" to 0, so the pair went down the coplanar
  // path and a segment crossing the other's plane outside it was reported intersecting.
  const bool flat1 = IsFlat(n1, e1), flat2 = IsFlat(n2, e2);
  if (flat1 && flat2) {
    const auto [p1, q1] = Span(t1);
    const auto [p2, q2] = Span(t2);
    Vec3 a, b;
    if (ClosestPointsSegments(p1, q1, p2, q2, &a, &b) <= k2) {
      r.intersects = r.coplanar = true;  // two segments that meet lie in one plane
      r.p0 = r.p1 = a;
    }
    return r;
  }
  if (flat1 || flat2) {
    const auto [p, q] = Span(flat1 ? t1 : t2);
    return SegmentTriangleIntersection(p, q, flat1 ? t2 : t1, flat1 ? n2 : n1, k2);
  }
  const std::array<double, 3> du = PlaneDistances(t1, n2, t2.a, k2 * n2.squaredNorm());
  if (AllSameStrictSign(du)) return r;
  const std::array<double, 3> dv = PlaneDistances(t2, n1, t1.a, k2 * n1.squaredNorm());
  if (AllSameStrictSign(dv)) return r;
  const bool coplanar1 = du[0] == 0 && du[1] == 0 && du[2] == 0;
  const bool coplanar2 = dv[0] == 0 && dv[1] == 0 && dv[2] == 0;
  if (coplanar1 || coplanar2) {
    // One within the other's plane (up to the snap): the larger normal is the better plane.
    return CoplanarIntersection(t1, t2, n1.squaredNorm() >= n2.squaredNorm() ? n1 : n2);
  }
  const Vec3 dir = n1.cross(n2);
  const PlaneSegment s1 = SegmentOnPlane(t1, du, dir);
  const PlaneSegment s2 = SegmentOnPlane(t2, dv, dir);
  const double lo = std::max(s1.s0, s2.s0), hi = std::min(s1.s1, s2.s1);
  if (lo > hi) return r;
  r.intersects = true;
  r.p0 = s1.s0 >= s2.s0 ? s1.p0 : s2.p0;
  r.p1 = s1.s1 <= s2.s1 ? s1.p1 : s2.p1;
  return r;
}

TriangleIntersection IntersectUnscaled(const Triangle& t1, const Triangle& t2) {
  return IntersectUnscaled(t1, t2, MaxEdgeLengthSquared(t1), MaxEdgeLengthSquared(t2));
}

[[gnu::noinline]] TriangleIntersection IntersectRescaled(const Triangle& t1, const Triangle& t2) {
  const PowerOfTwoScale s = ScaleToUnit(std::max(MaxAbs(t1), MaxAbs(t2)));
  TriangleIntersection r = IntersectUnscaled(Scaled(t1, s.to), Scaled(t2, s.to));
  r.p0 *= s.back;
  r.p1 *= s.back;
  return r;
}

}  // namespace

TriangleIntersection IntersectTriangles(const Triangle& t1, const Triangle& t2) {
  // Every difference between vertices is at most |t2.a - t1.a| plus two edges.
  const double e1 = MaxEdgeLengthSquared(t1), e2 = MaxEdgeLengthSquared(t2);
  if (Length2InRange(std::max({e1, e2, (t2.a - t1.a).squaredNorm()}))) [[likely]] {
    return IntersectUnscaled(t1, t2, e1, e2);
  }
  return IntersectRescaled(t1, t2);
}

bool TrianglesIntersect(const Triangle& t1, const Triangle& t2) {
  return IntersectTriangles(t1, t2).intersects;
}

namespace {

// Squared gap between the boxes of segments [a0, a1] and [b0, b1].
double SegmentBoxGap2(const Vec3& a0, const Vec3& a1, const Vec3& b0, const Vec3& b1) {
  const Vec3 gap = (b0.cwiseMin(b1) - a0.cwiseMax(a1)).cwiseMax(a0.cwiseMin(a1) - b0.cwiseMax(b1));
  return gap.cwiseMax(0.0).squaredNorm();
}

std::array<Aabb, 2> Boxes(const Triangle& t1, const Triangle& t2) {
  return {Aabb{t1.a.cwiseMin(t1.b).cwiseMin(t1.c), t1.a.cwiseMax(t1.b).cwiseMax(t1.c)},
          Aabb{t2.a.cwiseMin(t2.b).cwiseMin(t2.c), t2.a.cwiseMax(t2.b).cwiseMax(t2.c)}};
}

// DistanceTriangles on inputs the caller has brought within range, with their Boxes.
TriangleDistance DistanceUnscaled(const Triangle& t1, const Triangle& t2, double upper_bound,
                                  const std::array<Aabb, 2>& boxes) {
  TriangleDistance best;
  double best_d2 = std::numeric_limits<double>::infinity();
  const double bound2 = upper_bound * upper_bound;
  const Aabb& box1 = boxes[0];
  const Aabb& box2 = boxes[1];
  Vec3 p, q;
  // Edge pairs first. When the closest points P, Q of two edges have each triangle's third
  // vertex on its own side of the planes through P and Q normal to Q - P, the triangles lie in
  // two half-spaces |Q - P| apart and P, Q are the answer (the early exit of PQP's TriDist,
  // Larsen et al. 1999). Pairs whose boxes are farther apart than the best so far are skipped.
  for (int i = 0; i < 3; ++i) {
    const Vec3 &a0 = t1[i], &a1 = t1[(i + 1) % 3];
    for (int j = 0; j < 3; ++j) {
      const Vec3 &b0 = t2[j], &b1 = t2[(j + 1) % 3];
      if (SegmentBoxGap2(a0, a1, b0, b1) >= std::min(best_d2, bound2)) continue;
      const double d2 = ClosestPointsSegments(a0, a1, b0, b1, &p, &q);
      if (d2 < best_d2) {
        best_d2 = d2;
        best.p1 = p;
        best.p2 = q;
      }
      const Vec3 v = q - p;
      if (v.dot(t1[(i + 2) % 3] - p) <= 0.0 && v.dot(t2[(j + 2) % 3] - q) >= 0.0) {
        best.distance = std::sqrt(d2);
        best.p1 = p;
        best.p2 = q;
        return best;
      }
    }
  }
  // No edge pair is separating: the closest feature pair is a vertex and a face, or the
  // triangles intersect (an edge piercing the other's face is no edge-edge contact).
  const TriangleIntersection x = IntersectUnscaled(t1, t2);
  if (x.intersects) {
    best.distance = 0.0;
    best.p1 = best.p2 = x.p0;
    return best;
  }
  for (int i = 0; i < 3; ++i) {
    if ((t1[i] - box2.ClosestPoint(t1[i])).squaredNorm() < std::min(best_d2, bound2)) {
      q = ClosestPointUnscaled(t1[i], t2);
      const double d2 = (t1[i] - q).squaredNorm();
      if (d2 < best_d2) {
        best_d2 = d2;
        best.p1 = t1[i];
        best.p2 = q;
      }
    }
    if ((t2[i] - box1.ClosestPoint(t2[i])).squaredNorm() < std::min(best_d2, bound2)) {
      p = ClosestPointUnscaled(t2[i], t1);
      const double d2 = (t2[i] - p).squaredNorm();
      if (d2 < best_d2) {
        best_d2 = d2;
        best.p1 = p;
        best.p2 = t2[i];
      }
    }
  }
  best.distance = std::sqrt(best_d2);
  return best;
}

[[gnu::noinline]] TriangleDistance DistanceRescaled(const Triangle& t1, const Triangle& t2,
                                                    double upper_bound) {
  // The bound scales with the inputs (to +inf at worst, which only prunes less).
  const PowerOfTwoScale s = ScaleToUnit(std::max(MaxAbs(t1), MaxAbs(t2)));
  const Triangle u1 = Scaled(t1, s.to), u2 = Scaled(t2, s.to);
  TriangleDistance d = DistanceUnscaled(u1, u2, s.to * upper_bound, Boxes(u1, u2));
  d.distance *= s.back;
  d.p1 *= s.back;
  d.p2 *= s.back;
  return d;
}

}  // namespace

TriangleDistance DistanceTriangles(const Triangle& t1, const Triangle& t2, double upper_bound) {
  // The box of both holds every difference between vertices (the boxes are needed anyway).
  const std::array<Aabb, 2> boxes = Boxes(t1, t2);
  const Vec3 extent = boxes[0].max.cwiseMax(boxes[1].max) - boxes[0].min.cwiseMin(boxes[1].min);
  if (LengthInRange(extent.maxCoeff())) [[likely]] {
    return DistanceUnscaled(t1, t2, upper_bound, boxes);
  }
  return DistanceRescaled(t1, t2, upper_bound);
}

double TriangleSeparationTravel(const Triangle& t1, const Triangle& t2, const Vec3& w,
                                double margin, double target) {
  // Only the axes' directions matter: the edges are scaled by a power of two that brings the
  // largest component to about 1, and each axis likewise, so that no cross product, squared
  // length or projection overflows (unscaled, parts of 1e70 mm gave inf and NaN projections,
  // and a NaN counted as separation: a sweep stepped through a wall). Power-of-two scaling is
  // exact; components that underflow only lose axes, which leaves a true bound.
  const Vec3 raw1[3] = {t1.b - t1.a, t1.c - t1.b, t1.a - t1.c};
  const Vec3 raw2[3] = {t2.b - t2.a, t2.c - t2.b, t2.a - t2.c};
  auto unit_scale = [](double largest) {
    return largest > 0.0 && std::isfinite(largest) ? std::ldexp(1.0, -std::ilogb(largest)) : 1.0;
  };
  double largest = 0.0;
  for (int i = 0; i < 3; ++i) {
    largest = std::max({largest, raw1[i].cwiseAbs().maxCoeff(), raw2[i].cwiseAbs().maxCoeff()});
  }
  const double edge_scale = unit_scale(largest);
  const Vec3 e1[3] = {raw1[0] * edge_scale, raw1[1] * edge_scale, raw1[2] * edge_scale};
  const Vec3 e2[3] = {raw2[0] * edge_scale, raw2[1] * edge_scale, raw2[2] * edge_scale};
  const Vec3 n1 = e1[0].cross(e1[1]), n2 = e2[0].cross(e2[1]);
  internal::TravelWindow window;
  // One axis: both projections as centre and half-length; axes of zero length (degenerate
  // triangles, parallel edges) are skipped. Returns true when the answer is at least `target`.
  auto axis = [&](const Vec3& raw) {
    const double m = raw.cwiseAbs().maxCoeff();
    if (!(m > 0.0) || !std::isfinite(m)) return false;
    const Vec3 L = raw * unit_scale(m);  // largest component in [1, 2)
    const double len2 = L.squaredNorm();
    const double a0 = L.dot(t1.a), a1 = L.dot(t1.b), a2 = L.dot(t1.c);
    const double b0 = L.dot(t2.a), b1 = L.dot(t2.b), b2 = L.dot(t2.c);
    const double lo1 = std::min({a0, a1, a2}), hi1 = std::max({a0, a1, a2});
    const double lo2 = std::min({b0, b1, b2}), hi2 = std::max({b0, b1, b2});
    window.Axis(0.5 * ((lo2 + hi2) - (lo1 + hi1)), 0.5 * ((hi1 - lo1) + (hi2 - lo2)), L.dot(w),
                margin * std::sqrt(len2));
    return window.AtLeast(target);
  };
  if (axis(n1) || axis(n2)) return window.First();
  for (const Vec3& a : e1) {
    for (const Vec3& b : e2) {
      if (axis(a.cross(b))) return window.First();
    }
  }
  for (const Vec3& a : e1) {
    if (axis(n1.cross(a))) return window.First();
  }
  for (const Vec3& b : e2) {
    if (axis(n2.cross(b))) return window.First();
  }
  return window.First();
}

}  // namespace clash::geom
