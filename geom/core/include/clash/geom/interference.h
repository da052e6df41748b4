// Classifying one pair of posed parts as an interference answer (DESIGN.md §5).
//
// ClassifyPair decides, in this order:
//
//  1. Crossing surfaces (FindIntersections, up to max_witness_pairs triangle pairs). The
//     penetration depth is estimated as the largest distance, to the other part's surface, of
//     a candidate point of one part that lies inside the other (closed) part (ContainsPoint,
//     ClosestPoint). Each such distance is a lower bound of the translational penetration
//     depth (moving the other part by less leaves that point inside), so the estimate never
//     exceeds it (but for rounding, and for a point whose closest triangle is a sliver less
//     than about 6e-6 of its longest edge high, whose distance ClosestPointOnTriangle takes
//     from its edges: up to half that height more). Candidates of part A, symmetric for B:
//       - A's vertices inside B's bounding box (B's box taken into A's frame conservatively,
//         the vertices found through A's hierarchy): a vertex pushed deep into B;
//       - on every triangle of A in the collected pairs, the barycentric lattice
//         (i, j, k) / 4 without the three vertices (12 points): two large coarse triangles
//         crossing, as in two long boxes crossed like a '+' where no vertex of either is
//         inside the other;
//       - for every collected pair, points on A's triangle at distances L/2, L/4, ... (L its
//         longest edge) from the middle of the intersection segment, perpendicular to it in the
//         triangle's plane on both sides (towards the vertices when the segment is a point),
//         down to τ/2 (a point at distance s from the segment is at most s deep, so nearer
//         points cannot decide the class) and at most 20 of them: the neighbourhood of every
//         crossing at every scale from the triangle's size down to τ, however the lattice falls.
//     Candidates within 1e-12 of the coordinates' magnitude of the other surface (the
//     rounding noise of coincident faces) count as on it, not inside.
//     Each side is capped at max_depth_samples candidates by deterministic stride
//     subsampling, vertices first (the crossing points fill what the vertices leave). The
//     vertices of both sides are searched before the crossing points. depth > τ gives kHard,
//     otherwise kContact (surfaces touching or crossing by at most τ, as tessellations of touching
//     B-reps do). When a part is not closed, or max_depth_samples is 0, the depth cannot be
//     estimated reliably: kHard with uncertain = true, and the depth from whichever side has a
//     closed container (0 if none).
//  2. Otherwise FindContainment: one part (or one of its solids) inside the other gives
//     kContained, with depth_mm and distance_mm both the surface distance between them and its
//     closest points; for a part of several solids (TriangleMesh::shells), the distance of
//     the other surface from the vertex of the solid inside that FindContainment tested, and
//     that vertex (the nearest surface of the whole part may be that of a solid outside).
//  3. Otherwise Distance with the search bound max(1.25 τ, clearance): d <= τ is kContact,
//     d < clearance is kClearance, anything else kClear.
//
// The answer is marked uncertain when the deciding value lies within 25 % of τ of τ
// (|depth - τ| <= τ/4 for crossing surfaces, |d - τ| <= τ/4 otherwise): tessellation error
// is of the order of τ, so such answers may flip on the real B-rep. A kContact of crossing
// surfaces is also uncertain when a side's candidates were capped at max_depth_samples: a
// point left out could be deeper than τ.
//
// Limits: the depth is an estimate from samples, never above the true penetration depth but
// possibly below it. Lattice and segment samples come from the collected pairs only: when the
// collection is truncated, crossings beyond max_witness_pairs contribute through vertices alone.
//
// Cost: steps 2 and 3 are the queries of query.h. Step 1 adds, for crossing pairs only, at
// most one ClosestPoint per candidate inside the other part's box, and for a candidate that
// would deepen the estimate one inside test by the pseudo-normal of its closest feature
// (ContainsPoint only when that cannot tell). Candidates that
// cannot be deeper than the best so far are skipped without a search: those whose distance
// bound (a point beside a crossing is at most its distance from the intersection segment
// away; a point near an already searched one at most that one's distance plus their
// separation) is below the best depth, and those in the empty ball about a searched point
// outside the other part. A search stops at the first surface nearer than the best depth (the
// candidate is then not deeper), and looks for the closest point only when there is none.
// The result is the one a search of every candidate gives (tested).
//
// Depth for the class only (PairTolerances::depth_cap_mm finite): a caller that needs the
// class, not the full depth (a plugin dragging a part), lets step 1 look only for candidates
// deeper than 0.75 τ (the others cannot change the class or the uncertain flag; lattice and
// segment points whose bound is below it are not even made, unless a side's points together
// exceed what its vertices leave of max_depth_samples, when the sample is taken as in the full
// search) and stop at its first
// candidate deeper than max(1.25 τ, depth_cap_mm), skipping the searches that remain.
// Its FindIntersections stops at the first crossing pair; the other pairs (up to
// max_witness_pairs) are collected only when no vertex decides, so a class-only answer decided
// by a vertex counts one pair (intersections_truncated when there are more). The class and the
// uncertain flag are those of the full search, and so are the depth and its witnesses when the full
// depth lies within [0.75 τ, max(1.25 τ, depth_cap_mm)]; above, the depth is that of the first
// candidate found deeper than the limit (a lower bound of the full estimate, with valid witnesses);
// below, it is 0 with the witnesses on an intersection segment (tested against the full search).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "clash/geom/part.h"
#include "clash/geom/query.h"
#include "clash/geom/transform.h"

namespace clash::geom {

/// The class of a pair of parts (DESIGN.md §5).
enum class ClashClass : uint8_t {
  kClear,      ///< Farther apart than the clearance and the contact tolerance.
  kHard,       ///< The solids overlap by more than the contact tolerance.
  kContact,    ///< The surfaces touch within the contact tolerance.
  kClearance,  ///< No contact, but closer than the required clearance.
  kContained,  ///< One part lies inside the other without the surfaces crossing.
};

/// Lower-case name of a class ("clear", "hard", "contact", "clearance", "contained").
[[nodiscard]] const char* ClashClassName(ClashClass cls);

/// Tolerances of one pair classification.
struct PairTolerances {
  double contact_mm = 0.0;  ///< τ: surfaces closer than this (or crossing by at most this) touch.
  double clearance_mm =
      0.0;  ///< Required clearance; 0: none. Distances in (τ, clearance) are kClearance.
  std::size_t max_witness_pairs = 64;  ///< Intersecting triangle pairs collected.
  std::size_t max_depth_samples =
      4096;  ///< Cap on candidate points per side for the depth estimate.
  /// +inf (default): the full depth estimate. Finite: the depth only as far as the class needs
  /// and up to this depth (an allowed-interference rule's depth limit); see the top of this
  /// file. Negative or NaN counts as 0.
  double depth_cap_mm = std::numeric_limits<double>::infinity();
};

/// The answer for one pair of parts.
struct PairClassification {
  ClashClass cls = ClashClass::kClear;  ///< The class.
  /// Penetration depth estimate when the surfaces cross or one contains the other (for
  /// kContained: the surface distance); 0 otherwise.
  double depth_mm = 0.0;
  /// Surface distance when the surfaces do not cross (0 when they do); +inf when farther than
  /// the search bound max(1.25 τ, clearance).
  double distance_mm = std::numeric_limits<double>::infinity();
  /// Witness points (world): for crossing surfaces the deepest candidate point and its closest
  /// point on the other surface (a point of an intersection segment on both when no depth was
  /// found); the closest points otherwise (when within the search bound).
  Vec3 p_WA = Vec3::Zero(), p_WB = Vec3::Zero();
  uint32_t tri_a = 0, tri_b = 0;         ///< Triangles of the witnesses (for face ids).
  std::size_t intersecting_pairs = 0;    ///< Intersecting triangle pairs collected.
  bool intersections_truncated = false;  ///< More intersecting pairs exist than collected.
  /// The deciding value lies within 25 % of τ of the threshold τ, the depth could not be
  /// estimated (open mesh), or a kContact depth came from part of the candidates.
  bool uncertain = false;
  /// Crossing surfaces whose depth could not be estimated (a part is open, or
  /// max_depth_samples is 0): depth_mm is only what a closed side gave (0 if none), so it must
  /// not be read as shallow.
  bool depth_unknown = false;
  Containment containment = Containment::kNone;  ///< Which part is inside (kContained only).
};

/// Classifies the pair of posed parts (a at X_WA, b at X_WB); see the top of this file.
/// Swapping a and b gives the same answer, bit for bit, with the witnesses swapped: the parts
/// are taken in an order that depends only on their world boxes, sizes and poses (which part
/// comes first decides which crossing pairs are collected when there are more than
/// max_witness_pairs).
[[nodiscard]] PairClassification ClassifyPair(const Part& a, const RigidTransform& X_WA,
                                              const Part& b, const RigidTransform& X_WB,
                                              const PairTolerances& tol);

}  // namespace clash::geom
