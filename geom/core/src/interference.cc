#include "clash/geom/interference.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "clash/geom/query.h"
#include "interference_internal.h"

namespace clash::geom {
namespace {

// Answers within this fraction of τ of τ are marked uncertain (DESIGN.md §5).
constexpr double kUncertainFraction = 0.25;
// The distance search reaches this far beyond τ, so that the uncertain band above τ is seen.
constexpr double kSearchBeyondContact = 1.0 + kUncertainFraction;
// Barycentric lattice (i, j, k) / kLattice on each crossing triangle, vertices excluded.
constexpr int kLattice = 4;
// Points beside each intersection segment at L/2, L/4, ... while not below τ/2 (a point at
// distance s from the segment is at most s deep, so nearer ones cannot decide the class), and
// at most this many halvings.
constexpr int kMaxHalvings = 20;
// Segments shorter than this fraction of their triangle's longest edge count as points.
constexpr double kPointSegmentRelative = 1e-9;
// Candidates nearer than this fraction of the coordinates' magnitude to the other surface are
// on it: the rounding noise of coincident surfaces is a few ulps (~1e-15) of it, and 1e-14 keeps
// the allowance below any tolerance for meshes tessellated far from their origin (1e-12 was
// 1 mm for a mesh whose coordinates are 5e11 mm, and hid a 0.5 mm depth there).
constexpr double kOnSurfaceRelative = 1e-14;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

using internal::DeepestPoint;
using Candidate = internal::DepthCandidate;

// Distance bounds are sums of rounded distances: DeepestInside grows them by far more than
// their rounding, so that no candidate is skipped, nor searched too narrowly, because of it.
constexpr double kBoundSlack = 1e-9;

// Whether a candidate whose distance to the other surface is at most `bound` cannot be deeper
// than `depth` (DeepestInside skips it without a search).
bool BoundBelow(double bound, double depth) {
  return bound * (1.0 + kBoundSlack) + kBoundSlack < depth;
}

// The size and distance from the origin of a box's coordinates, which their rounding scales
// with.
double CoordinateMagnitude(const Aabb& b) {
  return b.Diagonal() + std::max(b.min.cwiseAbs().maxCoeff(), b.max.cwiseAbs().maxCoeff());
}

// An intersection segment on triangle `tri` of P (P frame), crossing triangle `other`.
struct Crossing {
  uint32_t tri, other;
  Vec3 p0, p1;
};

// Whether inner node n's box may overlap `box` (P frame): exact for an AABB node; an OBB node
// by the sphere about its box (no rotation to apply: the separating-axis test, even on the six
// face axes only, cost more than it saved, and the leaves' vertices are tested anyway), its
// radius |half| grown as OBB nodes are where a bound must hold.
bool InnerNodeMayOverlapBox(const BvhNode& n, const Aabb& box) {
  const Vec3 gap = (n.center - box.Center()).cwiseAbs() - box.HalfExtents();
  if (!n.IsObb()) return (gap - n.half).maxCoeff() <= 0.0;
  const double radius = n.half.norm() + internal::kObbGrowRelative * (n.half.sum() + 1.0);
  return gap.cwiseMax(0.0).squaredNorm() <= radius * radius;
}

}  // namespace

namespace internal {

// Each vertex is looked at once, at its first use (Part::first_uses): on the smallest triangle
// that holds it, in the one leaf that is sure to be reached when the vertex is inside the box
// (its ancestors' boxes hold the vertex, and the node test never culls a box that shares a
// point with `box`). A leaf is not tested itself: its few first-use vertices cost less to test
// than its box. The walk visits leaves in triangle order, so the list comes in the order the
// walk first meets the vertices.
void VerticesInBox(const Part& part, const Aabb& box, std::vector<DepthCandidate>* out) {
  const auto& N = part.nodes();
  const TriangleMesh& m = part.mesh();
  const std::vector<uint8_t>& first_uses = part.first_uses();
  std::vector<uint32_t> stack = {0};
  while (!stack.empty()) {
    const BvhNode& n = N[stack.back()];
    stack.pop_back();
    if (!n.IsLeaf()) {
      if (!InnerNodeMayOverlapBox(n, box)) continue;
      stack.push_back(n.index + 1);
      stack.push_back(n.index);
      continue;
    }
    for (uint32_t tri = n.index; tri < n.index + n.Count(); ++tri) {
      for (uint32_t c = 0, bits = first_uses[tri]; bits != 0; ++c, bits >>= 1) {
        if ((bits & 1u) == 0) continue;
        const Vec3& p = m.vertices()[m.triangles()[tri][c]];
        if (box.Contains(p)) out->push_back({p, tri});
      }
    }
  }
}

}  // namespace internal

namespace {

// The point of the segment [a, b] nearest to p.
Vec3 NearestOnSegment(const Vec3& p, const Vec3& a, const Vec3& b) {
  const Vec3 ab = b - a;
  const double len2 = ab.squaredNorm();
  const double s = len2 > 0.0 ? std::clamp((p - a).dot(ab) / len2, 0.0, 1.0) : 0.0;
  return a + s * ab;
}

// Lattice points of the triangle of `crossings` (all on one triangle of P), vertices excluded,
// on the side of their nearest intersection segment that enters the other part (against the
// outward normal of that segment's crossed triangle, `other_normals[i]` for crossings[i], in
// P's frame). Each segment lies on the other part's surface, so a point's distance to the
// nearest one bounds its distance to that surface; and the straight way from the point to it
// crosses no other segment (that crossing would be nearer), so the point is inside the other
// part only if that side is. Points whose bound cannot exceed `floor` are left out, but
// counted in *made with the others.
void LatticePoints(const Part& part, std::span<const Crossing> crossings,
                   std::span<const Vec3> other_normals, bool both_sides, double floor,
                   std::vector<Candidate>* out, std::size_t* made) {
  const uint32_t tri = crossings.front().tri;
  const Triangle t = part.mesh().triangle(tri);
  for (int i = 0; i <= kLattice; ++i) {
    for (int j = 0; i + j <= kLattice; ++j) {
      const int k = kLattice - i - j;
      if (i == kLattice || j == kLattice || k == kLattice) continue;
      const Vec3 p = (i * t.a + j * t.b + k * t.c) / static_cast<double>(kLattice);
      double bound2 = std::numeric_limits<double>::infinity();
      Vec3 to_nearest = Vec3::Zero();
      std::size_t nearest = 0;
      for (std::size_t x = 0; x < crossings.size(); ++x) {
        const Vec3 d = p - NearestOnSegment(p, crossings[x].p0, crossings[x].p1);
        const double d2 = d.squaredNorm();
        if (d2 < bound2) {
          bound2 = d2;
          to_nearest = d;
          nearest = x;
        }
      }
      const Vec3& n = other_normals[nearest];
      if (!both_sides && n.dot(to_nearest) > 1e-9 * n.norm() * std::sqrt(bound2)) {
        continue;  // outside there
      }
      const double bound = std::sqrt(bound2);
      ++*made;
      if (!BoundBelow(bound, floor)) out->push_back({p, tri, bound});
    }
  }
}

// Points of the crossing's triangle beside its intersection segment, at distances from
// half the triangle's longest edge down to `min_offset`, on the side that enters the other part
// (against `other_normal`, the outward normal of the crossed triangle in P's frame; both sides
// when the triangle is square to it). The other side leaves the other part there: it can only
// be inside it again beyond another crossing of this triangle, whose points come from that
// crossing. Points whose bound cannot exceed `floor` are left out, but counted in *made with
// the others; `rounding` bounds how far the segment may lie off the triangle by rounding.
void PointsBesideCrossing(const Part& part, const Crossing& x, const Vec3& other_normal,
                          double min_offset, bool both_sides, double floor, double rounding,
                          std::vector<Candidate>* out, std::size_t* made) {
  const Triangle t = part.mesh().triangle(x.tri);
  const double longest = std::sqrt(
      std::max({(t.b - t.a).squaredNorm(), (t.c - t.b).squaredNorm(), (t.a - t.c).squaredNorm()}));
  const Vec3 mid = 0.5 * (x.p0 + x.p1);
  Vec3 dirs[3];
  int n_dirs = 0;
  const Vec3 along = x.p1 - x.p0;
  const Vec3 across = t.RawNormal().cross(along);
  if (along.norm() > kPointSegmentRelative * longest && across.norm() > 0.0) {
    dirs[n_dirs++] = across.normalized();
    dirs[n_dirs++] = -across.normalized();
  } else {
    for (int v = 0; v < 3; ++v) {
      const Vec3 to = t[v] - mid;
      if (to.norm() > 0.0) dirs[n_dirs++] = to.normalized();
    }
  }
  const double normal_length = other_normal.norm();
  for (int d = 0; d < n_dirs; ++d) {
    if (!both_sides && other_normal.dot(dirs[d]) > 1e-9 * normal_length) {
      continue;  // leaves the other part
    }
    double s = 0.5 * longest;
    for (int k = 0; k < kMaxHalvings && (k == 0 || s >= min_offset); ++k, s *= 0.5) {
      ++*made;
      // The point is at most s from mid's projection onto the triangle (projecting onto it moves
      // no two points apart), which is within rounding of mid: below the floor, as are the
      // nearer ones, it is only counted.
      if (BoundBelow(s + rounding, floor)) continue;
      // mid lies on the other surface: the candidate is at most its distance from it.
      const Vec3 p = ClosestPointOnTriangle(mid + s * dirs[d], t);
      const double bound = (p - mid).norm();
      if (!BoundBelow(bound, floor)) out->push_back({p, x.tri, bound});
    }
  }
}

// P's vertices inside Q's box (X_PQ: Q's pose in P): candidates that may lie inside Q.
std::vector<Candidate> VertexCandidates(const Part& p, const Part& q, const RigidTransform& X_PQ) {
  std::vector<Candidate> out;
  // Arvo's box is exact up to rounding: grow it by far more than that.
  Aabb box_q = q.bounds().Transformed(X_PQ);
  box_q = box_q.Inflated(1e-9 * CoordinateMagnitude(box_q) + 1e-12);
  internal::VerticesInBox(p, box_q, &out);
  return out;
}

// The lattice and beside points of P's crossings with Q (X_PQ: Q's pose in P), but those whose
// bound cannot exceed `floor` (DeepestInside would skip them); *made counts them all.
// `rounding` bounds the rounding of the crossings' coordinates.
std::vector<Candidate> CrossingCandidates(const Part& p, const Part& q, const RigidTransform& X_PQ,
                                          const std::vector<Crossing>& crossings, double contact,
                                          double floor, double rounding,
                                          const internal::DepthOptions& options,
                                          std::size_t* made) {
  std::vector<Candidate> out;
  *made = 0;
  // Lattice and beside points per crossing, at most (a vertex-like crossing has 3 directions).
  constexpr std::size_t kLatticePoints = (kLattice + 1) * (kLattice + 2) / 2 - 3;
  out.reserve(crossings.size() * (kLatticePoints + 3 * kMaxHalvings));
  // Outward normals of the crossed triangles of Q, in P's frame.
  std::vector<Vec3> other_normals(crossings.size());
  for (std::size_t i = 0; i < crossings.size(); ++i) {
    other_normals[i] = X_PQ.R * q.mesh().triangle(crossings[i].other).RawNormal();
  }
  // Crossings come sorted by triangle: one lattice per run of equal triangles.
  for (std::size_t i = 0, j = 0; i < crossings.size(); i = j) {
    while (j < crossings.size() && crossings[j].tri == crossings[i].tri) ++j;
    LatticePoints(p, std::span(crossings).subspan(i, j - i),
                  std::span<const Vec3>(other_normals).subspan(i, j - i), options.both_sides, floor,
                  &out, made);
  }
  for (std::size_t i = 0; i < crossings.size(); ++i) {
    PointsBesideCrossing(p, crossings[i], other_normals[i], 0.5 * contact, options.both_sides,
                         floor, rounding, &out, made);
  }
  return out;
}

// Keeps `keep` of the candidates by deterministic stride (all when there are no more); sets
// *sampled when some are left out.
void Subsample(std::size_t keep, std::vector<Candidate>* candidates, bool* sampled) {
  const std::size_t n = candidates->size();
  if (n <= keep) return;
  *sampled = true;
  std::vector<Candidate> kept(keep);
  for (std::size_t i = 0; i < keep; ++i) kept[i] = (*candidates)[i * n / keep];
  *candidates = std::move(kept);
}

// Whether x is before y lexicographically (a tie-break that does not depend on argument order).
bool LexLess(const Vec3& x, const Vec3& y) {
  return std::lexicographical_compare(x.data(), x.data() + 3, y.data(), y.data() + 3);
}

bool NearContact(double value, double contact) {
  return std::abs(value - contact) <= kUncertainFraction * contact;
}

}  // namespace

double internal::OnSurfaceDistance(const Part& q, const RigidTransform& X_WP,
                                   const RigidTransform& X_WQ) {
  return kOnSurfaceRelative * (CoordinateMagnitude(q.bounds()) + X_WP.t.norm() + X_WQ.t.norm());
}

// Equal depths go to the lexicographically smallest point (world), so the answer does not
// depend on the order of the candidates. A candidate's closest point on Q is found first: it
// is tested for containment only when it would be chosen.
//
// Pruning. Each candidate's distance to Q's surface has an upper bound: its own (a point beside
// a crossing is at most its distance from the intersection segment away), or, by the triangle
// inequality, the last searched candidate's (the anchor's) distance plus their separation
// (candidates come in runs of near neighbours), and its distance to the anchor's closest
// triangle (a piece of Q's surface; usually much the tighter). A candidate whose bound is below
// the best depth cannot be deeper and is skipped without a search; otherwise the bound limits
// the search. The open ball about the anchor holds no surface, so a candidate in the ball of an
// anchor outside Q is outside too, and skipped.
DeepestPoint internal::DeepestInside(std::span<const DepthCandidate> candidates,
                                     const RigidTransform& X_WP, const Part& q,
                                     const RigidTransform& X_WQ, const DeepestPoint* to_beat,
                                     double floor, double stop_above) {
  DeepestPoint best;
  // The depth a candidate must exceed: the best so far, at least the on-surface distance and
  // `to_beat`'s depth. A candidate as deep as the best (or as `to_beat`, while none is found)
  // wins when lexicographically smaller. Nothing at or below the floor counts.
  double beat = std::max(OnSurfaceDistance(q, X_WP, X_WQ), floor);
  const Vec3* tie_point = nullptr;
  if (to_beat != nullptr && to_beat->found && to_beat->depth > beat) {
    beat = to_beat->depth;
    tie_point = &to_beat->p_WP;
  }
  const RigidTransform X_QP = X_WQ.Inverse() * X_WP;
  bool have_anchor = false;
  bool anchor_outside = false;
  Vec3 anchor = Vec3::Zero();  // Q frame
  double anchor_distance = 0.0;
  uint32_t anchor_triangle = 0;  // the anchor's closest triangle of Q
  // A searched candidate (Q frame) and a point of Q's surface found for it (the closest, or
  // any within the depth to beat): not an outside anchor until the inside test says so.
  auto set_anchor = [&](const Vec3& p_QC, const PointDistanceResult& found) {
    have_anchor = true;
    anchor_outside = false;
    anchor = p_QC;
    anchor_distance = found.distance;
    anchor_triangle = found.triangle;
  };
  for (const Candidate& c : candidates) {
    const Vec3 p_QC = X_QP * c.p_P;
    if (!q.bounds().Contains(p_QC)) continue;
    // A candidate's own bound (beside a crossing) below the depth to beat: skipped at once.
    if (BoundBelow(c.bound, beat)) continue;
    double upper = c.bound;
    if (have_anchor) {
      const double separation = (p_QC - anchor).norm();
      // The open ball about an outside anchor holds no surface: a candidate in it is outside.
      if (anchor_outside && BoundBelow(separation, anchor_distance)) {
        continue;
      }
      upper = std::min(upper, anchor_distance + separation);
      // The anchor's closest triangle is a piece of Q's surface near this candidate too.
      const Vec3 on_anchor_triangle =
          ClosestPointOnTriangle(p_QC, q.mesh().triangle(anchor_triangle));
      upper = std::min(upper, (p_QC - on_anchor_triangle).norm());
    }
    upper = upper * (1.0 + kBoundSlack) + kBoundSlack;
    if (upper < beat) continue;
    // Only a candidate deeper than the depth to beat matters: search within that depth first
    // (cheap, the bound prunes) unless the candidate's bound is nearly as tight, then within
    // its bound, and without one only when rounding left nothing within it.
    if (upper > 2.0 * beat) {
      // Surface strictly nearer than the depth to beat: not deeper. The point found is a piece
      // of Q's surface and its distance an upper bound, so it serves as the next anchor (one
      // whose ball is not known to be empty).
      const PointDistanceResult near = internal::SurfacePointWithin(q, p_QC, beat);
      if (std::isfinite(near.distance)) {
        set_anchor(p_QC, near);
        continue;
      }
    }
    // The closest point within the bound, unless the walk meets surface strictly nearer than
    // the depth to beat first (after a failed search within that depth it cannot): then not
    // deeper, and that point is the next anchor, as above.
    PointDistanceResult d = internal::ClosestPointUnlessWithin(q, p_QC, upper, beat);
    if (d.distance < beat) {
      set_anchor(p_QC, d);
      continue;
    }
    if (!std::isfinite(d.distance)) d = ClosestPoint(q, p_QC);
    set_anchor(p_QC, d);
    const Vec3 p_WC = X_WP * c.p_P;
    const bool deeper =
        d.distance > beat || (d.distance == beat && best.found && LexLess(p_WC, best.p_WP)) ||
        (d.distance == beat && !best.found && tie_point != nullptr && LexLess(p_WC, *tie_point));
    if (!deeper) continue;
    const std::optional<bool> inside = InsideFromClosestFace(q, p_QC, d);
    anchor_outside = inside.has_value() && !*inside;
    if (!(inside ? *inside : ContainsPoint(q, p_QC))) continue;
    best.depth = beat = d.distance;
    best.found = true;
    best.p_WP = p_WC;
    best.p_WQ = X_WQ * d.p_PC;
    best.tri_p = c.tri;
    best.tri_q = d.triangle;
    if (best.depth > stop_above) break;
  }
  return best;
}

const char* ClashClassName(ClashClass cls) {
  switch (cls) {
    case ClashClass::kClear:
      return "clear";
    case ClashClass::kHard:
      return "hard";
    case ClashClass::kContact:
      return "contact";
    case ClashClass::kClearance:
      return "clearance";
    case ClashClass::kContained:
      return "contained";
  }
  return "unknown";
}

PairClassification ClassifyPair(const Part& a, const RigidTransform& X_WA, const Part& b,
                                const RigidTransform& X_WB, const PairTolerances& tol) {
  return internal::ClassifyPairWith(a, X_WA, b, X_WB, tol, {});
}

namespace {

// Whether (b, X_WB) comes before (a, X_WA) in an order that depends only on the posed parts:
// their world boxes, sizes and poses. Equal keys are the same part at the same pose (up to
// parts alike in all of these), where the order does not matter.
bool ComesFirst(const Part& b, const RigidTransform& X_WB, const Part& a,
                const RigidTransform& X_WA) {
  auto key = [](const Part& p, const RigidTransform& X) {
    const Aabb box = p.bounds().Transformed(X);
    std::array<double, 20> k;
    for (int i = 0; i < 3; ++i) {
      k[i] = box.min[i];
      k[3 + i] = box.max[i];
      k[6 + i] = X.t[i];
    }
    k[9] = static_cast<double>(p.mesh().num_triangles());
    k[10] = static_cast<double>(p.mesh().vertices().size());
    for (int i = 0; i < 9; ++i) k[11 + i] = X.R(i / 3, i % 3);
    return k;
  };
  return key(b, X_WB) < key(a, X_WA);
}

// ClassifyPair for the parts in the order given.
PairClassification ClassifyOrdered(const Part& a, const RigidTransform& X_WA, const Part& b,
                                   const RigidTransform& X_WB, const PairTolerances& tol,
                                   const internal::DepthOptions& options);

}  // namespace

PairClassification internal::ClassifyPairWith(const Part& a, const RigidTransform& X_WA,
                                              const Part& b, const RigidTransform& X_WB,
                                              const PairTolerances& tol,
                                              const DepthOptions& options) {
  // The parts in a canonical order, so that swapping them gives the same answer with the
  // witnesses swapped: the crossing pairs collected (up to max_witness_pairs) and the
  // candidates made from them follow the order of the walk.
  if (ComesFirst(b, X_WB, a, X_WA)) {
    PairClassification r = ClassifyOrdered(b, X_WB, a, X_WA, tol, options);
    std::swap(r.p_WA, r.p_WB);
    std::swap(r.tri_a, r.tri_b);
    r.containment = Swapped(r.containment);
    return r;
  }
  return ClassifyOrdered(a, X_WA, b, X_WB, tol, options);
}

namespace {

PairClassification ClassifyAtFirstOrigin(const Part& a, const RigidTransform& X_WA, const Part& b,
                                         const RigidTransform& X_WB, const PairTolerances& tol,
                                         const internal::DepthOptions& options);

// The pair in a world frame moved to a's origin, so that the answer does not depend on where
// the pair sits: the depth search's on-surface distance and the crossings' rounding allowance
// scale with the coordinates involved, and at a world translation of 3e11 mm they already hid
// a depth of 0.5 mm (a HARD clash answered CONTACT). Only b's translation is rounded (to the
// nearest double of the difference, as any relative pose is); the witnesses are moved back.
PairClassification ClassifyOrdered(const Part& a, const RigidTransform& X_WA, const Part& b,
                                   const RigidTransform& X_WB, const PairTolerances& tol,
                                   const internal::DepthOptions& options) {
  const Vec3 origin = X_WA.t;
  RigidTransform X_OA = X_WA, X_OB = X_WB;
  X_OA.t.setZero();
  X_OB.t -= origin;
  PairClassification r = ClassifyAtFirstOrigin(a, X_OA, b, X_OB, tol, options);
  // (Witnesses are set for every class but kClear, and for a kClear pair within the search
  // bound; otherwise they stay at the origin, as ClassifyAtFirstOrigin leaves them. A HARD pair
  // of which no crossing pair was collected, max_witness_pairs 0, has them at a's origin.)
  if (r.cls != ClashClass::kClear || std::isfinite(r.distance_mm)) {
    r.p_WA += origin;
    r.p_WB += origin;
  }
  return r;
}

// ClassifyOrdered with a at the world origin (any world frame: the names say W).
PairClassification ClassifyAtFirstOrigin(const Part& a, const RigidTransform& X_WA, const Part& b,
                                         const RigidTransform& X_WB, const PairTolerances& tol,
                                         const internal::DepthOptions& options) {
  PairClassification r;
  const double contact = std::max(0.0, tol.contact_mm);
  const double clearance = std::max(0.0, tol.clearance_mm);

  // 1. Crossing surfaces: estimate the depth from both sides. For the class only, the first
  // crossing pair tells that they cross; the others are collected only when the vertices do
  // not decide (below).
  const bool class_only = tol.depth_cap_mm != kInfinity;
  IntersectionResult x = FindIntersections(
      a, X_WA, b, X_WB,
      class_only ? std::min<std::size_t>(1, tol.max_witness_pairs) : tol.max_witness_pairs);
  if (!x.pairs.empty() || x.truncated) {
    r.distance_mm = 0.0;
    const RigidTransform X_AW = X_WA.Inverse(), X_BW = X_WB.Inverse();
    const RigidTransform X_BA = X_BW * X_WA, X_AB = X_AW * X_WB;
    const bool a_closed = a.mesh().IsClosed(), b_closed = b.mesh().IsClosed();
    // The deepest candidate of either side (in_a: a point of b inside a). Equal depths are
    // decided by the deepest point's position, which does not depend on the order of the
    // arguments. Each search looks only for a point that beats the deepest so far (the same
    // answer as one search of all candidates: DeepestInside's `to_beat`), so later searches
    // prune against it from their first candidate. The vertices of both sides come first:
    // they are cheap to list (no crossing pairs needed) and a vertex pushed in is the usual
    // deepest point.
    //
    // For the class only, depths below 0.75 τ are not looked for (they decide neither the class
    // nor the uncertain flag), and the search stops at its first point deeper than the limit:
    // when a vertex is, the crossing pairs are not even collected.
    const double floor = class_only ? (1.0 - kUncertainFraction) * contact * (1.0 - 1e-9) : 0.0;
    const double cap = tol.depth_cap_mm > 0.0 ? tol.depth_cap_mm : 0.0;  // NaN: 0
    const double stop =
        class_only ? std::max(kSearchBeyondContact * contact, cap) * (1.0 + 1e-9) : kInfinity;
    DeepestPoint best;
    bool best_in_a = false;
    bool sampled = false;  // the cap on candidates left some out
    auto search = [&](std::span<const Candidate> candidates, bool in_a) {
      const DeepestPoint d =
          in_a ? internal::DeepestInside(candidates, X_WB, a, X_WA, &best, floor, stop)
               : internal::DeepestInside(candidates, X_WA, b, X_WB, &best, floor, stop);
      if (d.found) {
        best = d;
        best_in_a = in_a;
      }
    };
    auto decided = [&] { return best.found && best.depth > stop; };
    // Each side keeps at most max_depth_samples candidates, vertices first.
    const std::size_t samples = tol.max_depth_samples;
    std::size_t vertices_b = 0, vertices_a = 0;  // kept (of b inside a, of a inside b)
    if (a_closed && samples > 0) {
      std::vector<Candidate> v = VertexCandidates(b, a, X_BA);
      Subsample(samples, &v, &sampled);
      vertices_b = v.size();
      search(v, true);
    }
    if (b_closed && samples > 0 && !decided()) {
      std::vector<Candidate> v = VertexCandidates(a, b, X_AB);
      Subsample(samples, &v, &sampled);
      vertices_a = v.size();
      search(v, false);
    }
    if (!decided()) {
      if (class_only) x = FindIntersections(a, X_WA, b, X_WB, tol.max_witness_pairs);
      std::vector<Crossing> on_a, on_b;
      for (const TrianglePairHit& h : x.pairs) {
        on_a.push_back({h.tri_a, h.tri_b, X_AW * h.p0_W, X_AW * h.p1_W});
        on_b.push_back({h.tri_b, h.tri_a, X_BW * h.p0_W, X_BW * h.p1_W});
      }
      // Pairs come in (tri_a, tri_b) order; b's side is put in its own triangle order, so that
      // swapping the arguments makes the same candidates.
      auto by_triangles = [](const Crossing& u, const Crossing& v) {
        return u.tri != v.tri ? u.tri < v.tri : u.other < v.other;
      };
      std::sort(on_b.begin(), on_b.end(), by_triangles);
      // The crossings' coordinates took a way through the world frame: far less than 1e-12 of
      // the magnitudes involved is rounding.
      const double rounding =
          kOnSurfaceRelative * (CoordinateMagnitude(a.bounds()) + CoordinateMagnitude(b.bounds()) +
                                X_WA.t.norm() + X_WB.t.norm());
      // The candidates that can be deeper than the floor, `keep` at most. When they all make
      // more than that, the stride takes its sample from all of them, as the full search does,
      // so that both keep the same points (and the same class).
      auto crossing_candidates = [&](const Part& p, const Part& q, const RigidTransform& X_PQ,
                                     const std::vector<Crossing>& on_p, std::size_t keep) {
        std::size_t made = 0;
        std::vector<Candidate> c =
            CrossingCandidates(p, q, X_PQ, on_p, contact, floor, rounding, options, &made);
        if (made > keep) {
          sampled = true;
          if (keep == 0) return std::vector<Candidate>();
          // Some were left out (never in the full search, whose floor is 0): all of them.
          if (c.size() < made) {
            c = CrossingCandidates(p, q, X_PQ, on_p, contact, 0.0, rounding, options, &made);
          }
        }
        Subsample(keep, &c, &sampled);
        return c;
      };
      if (a_closed && samples > 0) {
        search(crossing_candidates(b, a, X_BA, on_b, samples - vertices_b), true);
      }
      if (b_closed && samples > 0 && !decided()) {
        search(crossing_candidates(a, b, X_AB, on_a, samples - vertices_a), false);
      }
    }
    r.intersecting_pairs = x.pairs.size();
    r.intersections_truncated = x.truncated;
    if (best.found && !best_in_a) {
      r.depth_mm = best.depth;
      r.p_WA = best.p_WP;
      r.p_WB = best.p_WQ;
      r.tri_a = best.tri_p;
      r.tri_b = best.tri_q;
    } else if (best.found) {
      r.depth_mm = best.depth;
      r.p_WA = best.p_WQ;
      r.p_WB = best.p_WP;
      r.tri_a = best.tri_q;
      r.tri_b = best.tri_p;
    } else if (!x.pairs.empty()) {
      r.p_WA = r.p_WB = x.pairs[0].p0_W;
      r.tri_a = x.pairs[0].tri_a;
      r.tri_b = x.pairs[0].tri_b;
    }
    if (!a_closed || !b_closed || tol.max_depth_samples == 0) {
      r.cls = ClashClass::kHard;
      r.uncertain = true;
      r.depth_unknown = true;
    } else {
      r.cls = r.depth_mm > contact ? ClashClass::kHard : ClashClass::kContact;
      // The depth is a lower bound: a HARD answer stands, but a CONTACT found on part of the
      // candidates may hide a deeper point.
      r.uncertain = NearContact(r.depth_mm, contact) || (r.cls == ClashClass::kContact && sampled);
    }
    return r;
  }

  // 2. One part inside the other.
  Vec3 inside_W;  // a vertex of the part inside
  r.containment = FindContainment(a, X_WA, b, X_WB, &inside_W);
  if (r.containment != Containment::kNone) {
    r.cls = ClashClass::kContained;
    const bool a_inside = r.containment == Containment::kAInsideB;
    const Part& inner = a_inside ? a : b;
    if (inner.mesh().shells().size() <= 1) {
      const DistanceResult d = Distance(a, X_WA, b, X_WB);
      r.depth_mm = r.distance_mm = d.distance;
      r.p_WA = d.p_WA;
      r.p_WB = d.p_WB;
      r.tri_a = d.tri_a;
      r.tri_b = d.tri_b;
      return r;
    }
    // One of several solids is inside: the other surface's distance from the vertex of that
    // solid (the nearest surface of the whole part may be a solid outside).
    const Part& outer = a_inside ? b : a;
    const RigidTransform& X_WI = a_inside ? X_WA : X_WB;
    const RigidTransform& X_WO = a_inside ? X_WB : X_WA;
    const PointDistanceResult o = ClosestPoint(outer, X_WO.Inverse() * inside_W);
    const PointDistanceResult on = ClosestPoint(inner, X_WI.Inverse() * inside_W);  // its face
    r.depth_mm = r.distance_mm = o.distance;
    const Vec3 p_WO = X_WO * o.p_PC;
    r.p_WA = a_inside ? inside_W : p_WO;
    r.p_WB = a_inside ? p_WO : inside_W;
    r.tri_a = a_inside ? on.triangle : o.triangle;
    r.tri_b = a_inside ? o.triangle : on.triangle;
    return r;
  }

  // 3. Apart: the distance decides. The walk prunes node pairs whose bound equals its
  // upper bound, so it searches a hair beyond the bound.
  const double bound = std::max(kSearchBeyondContact * contact, clearance);
  const DistanceResult d = Distance(a, X_WA, b, X_WB, bound + 1e-9 * (1.0 + bound));
  if (d.distance <= bound) {
    r.distance_mm = d.distance;
    r.p_WA = d.p_WA;
    r.p_WB = d.p_WB;
    r.tri_a = d.tri_a;
    r.tri_b = d.tri_b;
    r.uncertain = NearContact(d.distance, contact);
  }
  if (r.distance_mm <= contact) {
    r.cls = ClashClass::kContact;
  } else if (r.distance_mm < clearance) {
    r.cls = ClashClass::kClearance;
  } else {
    r.cls = ClashClass::kClear;
  }
  return r;
}

}  // namespace

}  // namespace clash::geom
