// Planes and triangles: distances, closest points, intersection tests.
#pragma once

#include <limits>
#include <optional>

#include "clash/geom/ray.h"
#include "clash/geom/types.h"

namespace clash::geom {

/// The plane n . x = d with unit normal n.
struct Plane {
  Vec3 normal = Vec3::UnitZ();  ///< Unit normal.
  double offset = 0.0;          ///< d in n . x = d.

  /// The plane through three points (normal by the right-hand rule); nullopt if degenerate.
  [[nodiscard]] static std::optional<Plane> Through(const Vec3& a, const Vec3& b, const Vec3& c);
  /// Signed distance of p (positive on the normal's side).
  [[nodiscard]] double SignedDistance(const Vec3& p) const { return normal.dot(p) - offset; }
};

/// A triangle (a, b, c), counter-clockwise seen from its front.
struct Triangle {
  Vec3 a, b, c;  ///< Vertices.

  /// Non-normalised normal (b - a) x (c - a), |n| = 2 * area.
  [[nodiscard]] Vec3 RawNormal() const { return (b - a).cross(c - a); }
  /// Area.
  [[nodiscard]] double Area() const { return 0.5 * RawNormal().norm(); }
  /// Centroid.
  [[nodiscard]] Vec3 Centroid() const { return (a + b + c) / 3.0; }
  /// Vertex i (0, 1, 2).
  [[nodiscard]] const Vec3& operator[](int i) const { return i == 0 ? a : (i == 1 ? b : c); }
};

/// Barycentric coordinates (u, v, w) of p's projection onto the triangle's plane, with
/// p = u a + v b + w c; nullopt for a degenerate triangle.
[[nodiscard]] std::optional<Vec3> Barycentric(const Triangle& t, const Vec3& p);

/// The point of the closed triangle closest to p (Voronoi-region method, Ericson,
/// "Real-Time Collision Detection", 5.1.5). Scale-free: inputs scaled by a power of two give the
/// point scaled by it, exactly (tested from 1e-120 mm to the broad phase's 1e150 mm; inputs
/// outside about 1e-12 to 1e12 mm are rescaled by a power of two inside). A nearly flat triangle
/// (height below about 6e-6 of its longest edge) is taken as its three edges: the point is then
/// within that height of the true one, as the face formula's rounding would not be.
[[nodiscard]] Vec3 ClosestPointOnTriangle(const Vec3& p, const Triangle& t);

/// The signed solid angle (steradians, in [-2π, 2π]) of the triangle (a, b, c), given relative
/// to the viewpoint, by Van Oosterom and Strackee's formula: positive when the viewpoint sees
/// the triangle's back (it lies behind the face, as for a point inside a closed surface whose
/// normals face out). A sum over a closed surface is 4π times its winding number.
[[nodiscard]] double SolidAngle(const Vec3& a, const Vec3& b, const Vec3& c);

/// Closest points of segments [p0, p1] and [q0, q1] (Ericson 5.1.9). Returns the squared distance.
double ClosestPointsSegments(const Vec3& p0, const Vec3& p1, const Vec3& q0, const Vec3& q1,
                             Vec3* out_p, Vec3* out_q);

/// A ray-triangle hit.
struct RayTriangleHit {
  double t;     ///< Ray parameter.
  double u, v;  ///< Barycentric weights of b and c (the hit is (1-u-v) a + u b + v c).
};

/// Watertight ray-triangle test (Woop, Benthin, Wald, "Watertight Ray/Triangle Intersection",
/// JCGT 2013): a ray through a shared edge or vertex of a closed mesh hits at least one of the
/// triangles there. Both sides are hit (no culling). Returns a hit with t in [t_min, t_max].
[[nodiscard]] std::optional<RayTriangleHit> IntersectRayTriangle(const Ray& ray,
                                                                 const Triangle& tri);

/// Result of a triangle-triangle intersection test.
struct TriangleIntersection {
  bool intersects = false;  ///< The closed triangles share at least one point.
  bool coplanar = false;    ///< The triangles lie in one plane.
  Vec3 p0 = Vec3::Zero();   ///< Intersection segment start (a witness point when intersecting).
  Vec3 p1 = Vec3::Zero();   ///< Intersection segment end (== p0 for a single point).
};

/// Triangle-triangle intersection after Möller ("A Fast Triangle-Triangle Intersection Test",
/// JGT 1997), with the coplanar case handled in 2D. Touching (a shared vertex, an edge lying
/// on the other triangle) counts as intersecting. A zero-area triangle (height at most 1e-12 of
/// its longest edge) is the segment it spans, tested as such. Returns the intersection segment
/// (a single witness point when a triangle is flat or they are coplanar). Scale-free as
/// ClosestPointOnTriangle: inputs scaled by a power of two give the same answer, the segment
/// scaled by it.
[[nodiscard]] TriangleIntersection IntersectTriangles(const Triangle& t1, const Triangle& t2);

/// Fast boolean form of IntersectTriangles.
[[nodiscard]] bool TrianglesIntersect(const Triangle& t1, const Triangle& t2);

/// Closest points between two triangles.
struct TriangleDistance {
  double distance = 0.0;   ///< Euclidean distance (0 when they intersect).
  Vec3 p1 = Vec3::Zero();  ///< Closest point on the first triangle.
  Vec3 p2 = Vec3::Zero();  ///< Closest point on the second triangle.
};

/// Distance between two closed triangles: 0 with a common point when they intersect, otherwise
/// the minimum over the 9 edge-edge and 6 vertex-triangle pairs (which is exact for
/// disjoint triangles). Feature pairs whose bounding boxes are at least `upper_bound` apart
/// are skipped: when the distance is not below `upper_bound` the result is only known to be
/// at least `upper_bound` (and may be +inf). Scale-free as ClosestPointOnTriangle: inputs and
/// bound scaled by a power of two give the answer scaled by it.
[[nodiscard]] TriangleDistance DistanceTriangles(
    const Triangle& t1, const Triangle& t2,
    double upper_bound = std::numeric_limits<double>::infinity());

/// Continuous separating-axis bound for a translation: triangle t2 moves by s·w (per mm of
/// travel s >= 0) relative to t1. Returns a lower bound of the first travel at which the
/// triangles may be within `margin` of each other, from the window of travels that every axis
/// allows (as BoxSeparationTravel) over n1, n2, the nine edge-edge cross products and the six
/// in-plane edge normals: 0 when they may be within the margin now, +inf when never. Every
/// axis gives a true bound; for the margin 0 and triangles in general position it is the exact
/// travel to first contact (the axes include every face normal of the Minkowski difference).
/// Stops as soon as the answer is known to be at least `target`.
[[nodiscard]] double TriangleSeparationTravel(
    const Triangle& t1, const Triangle& t2, const Vec3& w, double margin,
    double target = std::numeric_limits<double>::infinity());

}  // namespace clash::geom
