// Internals of ClassifyPair (interference.h), exposed for their tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "clash/geom/interference.h"
#include "clash/geom/part.h"
#include "clash/geom/query.h"
#include "clash/geom/transform.h"

namespace clash::geom::internal {

/// Growth of an OBB node's box, relative to its size (times the sum of its half extents + 1),
/// where a bound must hold whatever the box holds (motion bounds, vertices in a box): a margin
/// far above the rounding of projections on its axes (orthonormal to double rounding,
/// Part::AxesOf; when they were single-precision matrices, to ~1e-7).
inline constexpr double kObbGrowRelative = 1e-6;

/// A point on the surface of part P (P frame) with a triangle holding it, and an upper bound of
/// its distance to the other part's surface (+inf when none is known).
struct DepthCandidate {
  Vec3 p_P;                                                ///< The point (P frame).
  uint32_t tri;                                            ///< A triangle of P holding it.
  double bound = std::numeric_limits<double>::infinity();  ///< >= its distance to Q's surface.
};

/// The deepest candidate of part P inside part Q.
struct DeepestPoint {
  double depth = 0.0;             ///< Its distance to Q's surface (0 when none is inside).
  bool found = false;             ///< Some candidate lies inside Q.
  Vec3 p_WP = Vec3::Zero();       ///< The candidate (world).
  Vec3 p_WQ = Vec3::Zero();       ///< Its closest point on Q's surface (world).
  uint32_t tri_p = 0, tri_q = 0;  ///< Their triangles.
};

/// Distance from Q's surface within which a point counts as on it, not inside: 1e-14 of the
/// magnitude of the coordinates involved (Q's size and place, P's place), far above the
/// rounding noise of coincident surfaces and far below any tolerance.
[[nodiscard]] double OnSurfaceDistance(const Part& q, const RigidTransform& X_WP,
                                       const RigidTransform& X_WQ);

/// The deepest of `candidates` (P posed at X_WP) inside the closed part q (at X_WQ): the
/// largest distance to q's surface, above OnSurfaceDistance, among the candidates inside q
/// (ClosestPoint, InsideFromClosestFace, else ContainsPoint). Equal depths go to the
/// lexicographically smallest point (world). Candidates' bounds, and those their searched
/// neighbours give, only prune candidates that cannot be the answer: the result is the one an
/// unbounded search of every candidate gives.
///
/// With `to_beat` (found), only a point that beats it counts, by the same order (deeper, or as
/// deep and lexicographically smaller): the result is the unbounded search's when that beats
/// `to_beat`, and not found otherwise. ClassifyPair searches the vertices of each side, then
/// the crossing points of each side, each search passing the deepest point found so far, so
/// that it prunes against it from the start.
///
/// `floor` > 0: only candidates deeper than it count (the result is the unbounded search's when
/// that is deeper than the floor, and not found otherwise). `stop_above` finite: the search
/// stops at its first point deeper than it and returns that point.
[[nodiscard]] DeepestPoint DeepestInside(
    std::span<const DepthCandidate> candidates, const RigidTransform& X_WP, const Part& q,
    const RigidTransform& X_WQ, const DeepestPoint* to_beat = nullptr, double floor = 0.0,
    double stop_above = std::numeric_limits<double>::infinity());

/// How ClassifyPair's depth estimate picks its candidate points.
struct DepthOptions {
  /// Points beside intersection segments and lattice points of crossing triangles on both
  /// sides of the segments, not only on the side that enters the other part: more points, the
  /// same depths (what the tests check).
  bool both_sides = false;
};

/// Appends the part's vertices inside `box` (part frame), each once, with the smallest
/// triangle id that holds it, in the order a depth-first walk of the hierarchy first meets
/// them (leaf order: neighbours come in runs, which DeepestInside's bounds use).
void VerticesInBox(const Part& part, const Aabb& box, std::vector<DepthCandidate>* out);

/// ClassifyPair with the given depth options (ClassifyPair uses the defaults).
[[nodiscard]] PairClassification ClassifyPairWith(const Part& a, const RigidTransform& X_WA,
                                                  const Part& b, const RigidTransform& X_WB,
                                                  const PairTolerances& tol,
                                                  const DepthOptions& options);

/// Some point of the part's surface strictly nearer than `radius` to p_PQ (part frame), not
/// necessarily the closest: the first such triangle a nearest-first descent meets (distance
/// +inf when there is none). Tells that a point is not deeper than a given depth for less than
/// ClosestPoint costs.
[[nodiscard]] PointDistanceResult SurfacePointWithin(const Part& part, const Vec3& p_PQ,
                                                     double radius);

/// ClosestPoint(part, p_PQ, upper_bound), unless its walk meets a triangle strictly nearer than
/// `stop_below` first: then that triangle and its distance (below stop_below, not necessarily
/// the smallest). Tells in one walk that a point is not deeper than a given depth, or else its
/// closest point: what a point whose bound is near that depth needs (ClosestPoint is this with
/// stop_below 0).
[[nodiscard]] PointDistanceResult ClosestPointUnlessWithin(const Part& part, const Vec3& p_PQ,
                                                           double upper_bound, double stop_below);

}  // namespace clash::geom::internal
