// Brute-force references for the accelerated queries: loops over every triangle pair or
// every triangle, using the same exact primitives.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
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

/// One vertex of each edge-connected piece of the mesh's surface (triangles joined through
/// shared edges, by union-find; pieces meeting at a vertex only stay apart): one per solid of a
/// part of several closed solids. Independent of TriangleMesh::shells.
inline std::vector<uint32_t> BruteShellVertices(const geom::TriangleMesh& m) {
  std::vector<uint32_t> parent(m.num_triangles());
  std::iota(parent.begin(), parent.end(), 0u);
  auto root = [&](uint32_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> first_with_edge;
  for (uint32_t i = 0; i < m.num_triangles(); ++i) {
    const auto& t = m.triangles()[i];
    for (int k = 0; k < 3; ++k) {
      const uint32_t u = t[k], v = t[(k + 1) % 3];
      const auto [it, fresh] = first_with_edge.try_emplace({std::min(u, v), std::max(u, v)}, i);
      if (!fresh) parent[root(i)] = root(it->second);
    }
  }
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < m.num_triangles(); ++i) {
    if (root(i) == i) out.push_back(m.triangles()[i][0]);
  }
  return out;
}

/// The winding number about `outer` (posed at X_WO) of one vertex of each shell of `inner`
/// (posed at X_WI), shells as BruteShellVertices gives them. For closed parts whose surfaces
/// do not cross, each shell lies wholly inside (~1) or wholly outside (~0) the other part.
inline std::vector<double> BruteShellWindings(const geom::Part& inner,
                                              const geom::RigidTransform& X_WI,
                                              const geom::Part& outer,
                                              const geom::RigidTransform& X_WO) {
  const geom::RigidTransform X_OI = X_WO.Inverse() * X_WI;
  std::vector<double> out;
  for (uint32_t v : BruteShellVertices(inner.mesh())) {
    out.push_back(BruteWindingNumber(outer.mesh(), X_OI * inner.mesh().vertices()[v]));
  }
  return out;
}

/// How far part a must be translated along +u_W or -u_W (u_W a unit world direction) for the
/// projections of the two posed parts' vertices on u_W to stop overlapping (0 when they do not
/// overlap). Solids whose projections on a line are apart do not overlap, so this bounds their
/// translational penetration depth from above.
inline double BruteSeparatingTravel(const geom::Part& a, const geom::RigidTransform& X_WA,
                                    const geom::Part& b, const geom::RigidTransform& X_WB,
                                    const geom::Vec3& u_W) {
  auto range = [&](const geom::Part& p, const geom::RigidTransform& X_WP) {
    const geom::Vec3 u_P = X_WP.R.transpose() * u_W;
    const double offset = u_W.dot(X_WP.t);
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const geom::Vec3& v : p.mesh().vertices()) {
      lo = std::min(lo, v.dot(u_P) + offset);
      hi = std::max(hi, v.dot(u_P) + offset);
    }
    return std::make_pair(lo, hi);
  };
  const auto [a_lo, a_hi] = range(a, X_WA);
  const auto [b_lo, b_hi] = range(b, X_WB);
  return std::max(0.0, std::min(a_hi - b_lo, b_hi - a_lo));
}

}  // namespace clash::testing
