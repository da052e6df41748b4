// Brute-force references for the accelerated queries: loops over every triangle pair or
// every triangle, using the same exact primitives.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "clash/geom/aabb.h"
#include "clash/geom/part.h"
#include "clash/geom/query.h"
#include "clash/geom/triangle.h"

namespace clash::testing {

/// Triangles of a posed mesh in world coordinates.
inline std::vector<geom::Triangle> WorldTriangles(const geom::TriangleMesh& m,
                                                  const geom::RigidTransform& X_WP) {
  std::vector<geom::Triangle> out(m.num_triangles());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const geom::Triangle t = m.triangle(i);
    out[i] = {X_WP * t.a, X_WP * t.b, X_WP * t.c};
  }
  return out;
}

/// Every intersecting (tri_a, tri_b) pair, in order.
inline std::vector<std::pair<uint32_t, uint32_t>> BruteIntersectingPairs(
    const geom::Part& a, const geom::RigidTransform& X_WA, const geom::Part& b,
    const geom::RigidTransform& X_WB) {
  // Work in a's frame, as the accelerated query does, so both see identical coordinates.
  const geom::RigidTransform X_AB = X_WA.Inverse() * X_WB;
  const auto ta = WorldTriangles(a.mesh(), geom::RigidTransform::Identity());
  const auto tb = WorldTriangles(b.mesh(), X_AB);
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t i = 0; i < ta.size(); ++i) {
    for (uint32_t j = 0; j < tb.size(); ++j) {
      if (geom::TrianglesIntersect(ta[i], tb[j])) out.emplace_back(i, j);
    }
  }
  return out;
}

/// Minimum over all triangle pairs of the triangle distance.
inline double BruteDistance(const geom::Part& a, const geom::RigidTransform& X_WA,
                            const geom::Part& b, const geom::RigidTransform& X_WB) {
  const geom::RigidTransform X_AB = X_WA.Inverse() * X_WB;
  const auto ta = WorldTriangles(a.mesh(), geom::RigidTransform::Identity());
  const auto tb = WorldTriangles(b.mesh(), X_AB);
  double best = std::numeric_limits<double>::infinity();
  for (const auto& x : ta) {
    for (const auto& y : tb) best = std::min(best, geom::DistanceTriangles(x, y).distance);
  }
  return best;
}

/// The nearest triangle to p over all triangles (part frame): (distance, triangle).
inline std::pair<double, uint32_t> BruteClosestPoint(const geom::TriangleMesh& m,
                                                     const geom::Vec3& p) {
  std::pair<double, uint32_t> best{std::numeric_limits<double>::infinity(), 0};
  for (uint32_t i = 0; i < m.num_triangles(); ++i) {
    const double d = (p - geom::ClosestPointOnTriangle(p, m.triangle(i))).norm();
    if (d < best.first) best = {d, i};
  }
  return best;
}

/// Every unordered pair {i, j} (i < j) of boxes that overlap.
inline std::vector<std::pair<std::size_t, std::size_t>> BruteOverlappingPairs(
    const std::vector<geom::Aabb>& boxes) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    for (std::size_t j = i + 1; j < boxes.size(); ++j) {
      if (boxes[i].Overlaps(boxes[j])) out.emplace_back(i, j);
    }
  }
  return out;
}

/// Closest ray hit over all triangles (ray in the part frame): (t, triangle).
inline std::optional<std::pair<double, uint32_t>> BruteRayCast(const geom::TriangleMesh& m,
                                                               const geom::Ray& ray_P) {
  std::optional<std::pair<double, uint32_t>> best;
  for (uint32_t i = 0; i < m.num_triangles(); ++i) {
    auto h = geom::IntersectRayTriangle(ray_P, m.triangle(i));
    if (h && (!best || h->t < best->first)) best = std::make_pair(h->t, i);
  }
  return best;
}

}  // namespace clash::testing

namespace clash::testing {

/// Generalised winding number of a closed mesh about p (solid angles summed; ~1 inside,
/// ~0 outside): an independent inside/outside oracle.
inline double BruteWindingNumber(const geom::TriangleMesh& m, const geom::Vec3& p) {
  double sum = 0.0;
  for (std::size_t i = 0; i < m.num_triangles(); ++i) {
    const geom::Triangle t = m.triangle(i);
    const geom::Vec3 a = t.a - p, b = t.b - p, c = t.c - p;
    const double la = a.norm(), lb = b.norm(), lc = c.norm();
    sum += 2.0 * std::atan2(a.dot(b.cross(c)),
                            la * lb * lc + a.dot(b) * lc + b.dot(c) * la + c.dot(a) * lb);
  }
  return sum / (4.0 * M_PI);
}

}  // namespace clash::testing
