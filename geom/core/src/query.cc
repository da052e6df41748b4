#include "clash/geom/query.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "footprint_internal.h"
#include "interference_internal.h"
#include "ray_bvh_internal.h"
#include "ray_internal.h"
#include "ray_kernels_internal.h"
#include "separation_internal.h"

namespace clash::geom {
namespace {

// Hierarchies are at most 60 levels deep (Part::Create clamps the builder). A walk step pops
// one pair and pushes at most two (overlap walk: one side opened) or four (distance walk: both
// sides opened, one level down each), so stacks never exceed 2 * 60 + 1 and 3 * 60 + 1 pairs.
constexpr int kPairStack = 192;
constexpr std::size_t kBestFirstPending = 1024;
constexpr int kNodeStack = 64;
// Added to |R| in the separating-axis test so that near-parallel edge pairs, whose cross
// product is nearly zero, cannot produce a false separation from rounding.
constexpr double kSatEpsilon = 1e-12;
using internal::kObbGrowRelative;

// The pose of part b's frame in part a's frame, shared by every node test of one query.
struct PairFrame {
  const Part& a;
  const Part& b;
  RigidTransform X_AB;
  Mat3 abs_R_AB;  // |R_AB| + eps: the SAT's absolute rotation for every AABB-AABB node pair
  bool identity;

  PairFrame(const Part& pa, const RigidTransform& X_WA, const Part& pb, const RigidTransform& X_WB)
      : a(pa), b(pb), X_AB(X_WA.Inverse() * X_WB) {
    identity = X_AB.HasIdentityRotation();
    abs_R_AB = X_AB.R.cwiseAbs().array() + kSatEpsilon;
  }

  // Box b relative to box a: R (b's axes in a's box frame) and t (b's centre there).
  void Relative(const BvhNode& na, const BvhNode& nb, Mat3* R, Vec3* t) const {
    const Vec3 c = (identity ? nb.center : X_AB.R * nb.center) + X_AB.t - na.center;
    if (!na.IsObb() && !nb.IsObb()) {
      *R = X_AB.R;
      *t = c;
      return;
    }
    if (!na.IsObb()) {  // only b is oriented
      *R = X_AB.R * b.NodeAxes(nb);
      *t = c;
      return;
    }
    const Mat3 Rat = a.NodeAxes(na).transpose();
    *R = nb.IsObb() ? Mat3(Rat * (X_AB.R * b.NodeAxes(nb))) : Mat3(Rat * X_AB.R);
    *t = Rat * c;
  }

  // The centre of a node of b in a's frame.
  [[nodiscard]] Vec3 CenterInA(const BvhNode& nb) const {
    return (identity ? nb.center : Vec3(X_AB.R * nb.center)) + X_AB.t;
  }

  bool Overlap(const BvhNode& na, const BvhNode& nb) const {
    if (identity && !na.IsObb() && !nb.IsObb()) {
      // Fast path: translation-only pose, both boxes axis-aligned: interval tests.
      const Vec3 c = nb.center + X_AB.t - na.center;
      return std::abs(c.x()) <= na.half.x() + nb.half.x() &&
             std::abs(c.y()) <= na.half.y() + nb.half.y() &&
             std::abs(c.z()) <= na.half.z() + nb.half.z();
    }
    if (!na.IsObb() && !nb.IsObb()) {
      const Vec3 c = X_AB.R * nb.center + X_AB.t - na.center;
      return BoxesOverlapAbs(na.half, nb.half, X_AB.R, abs_R_AB, c);
    }
    Mat3 R;
    Vec3 t;
    Relative(na, nb, &R, &t);
    return BoxesOverlap(na.half, nb.half, R, t, kSatEpsilon);
  }

  // Lower bound of the distance between two node boxes; tries harder when the cheap bound is
  // below `target` (the pair would otherwise be opened).
  double LowerBound(const BvhNode& na, const BvhNode& nb, double target) const {
    if (identity && !na.IsObb() && !nb.IsObb()) {
      const Vec3 c = nb.center + X_AB.t - na.center;
      return (c.cwiseAbs() - na.half - nb.half).cwiseMax(0.0).norm();
    }
    Mat3 R;
    Vec3 t;
    Relative(na, nb, &R, &t);
    return BoxDistanceLowerBound(na.half, nb.half, R, t, target);
  }

  // Lower bound of the travel of box b along w_A (a's frame, per mm) before it comes within
  // `margin` of box a (BoxSeparationTravel; interval tests on the fast path).
  double SeparationTravel(const BvhNode& na, const BvhNode& nb, const Vec3& w_A, double margin,
                          double target) const {
    if (identity && !na.IsObb() && !nb.IsObb()) {
      const Vec3 c = nb.center + X_AB.t - na.center;
      internal::TravelWindow window;
      for (int i = 0; i < 3; ++i) window.Axis(c[i], na.half[i] + nb.half[i], w_A[i], margin);
      return window.First();
    }
    Mat3 R;
    Vec3 t;
    Relative(na, nb, &R, &t);
    const Vec3 w = na.IsObb() ? Vec3(a.NodeAxes(na).transpose() * w_A) : w_A;
    // OBB boxes are grown by far more than the rounding of the projected radii can hide
    // (kObbGrowRelative).
    return BoxSeparationTravel(GrownIfObb(na), GrownIfObb(nb), R, t, w, margin, target);
  }

  static Vec3 GrownIfObb(const BvhNode& n) {
    return n.IsObb() ? Vec3(n.half.array() + kObbGrowRelative * (n.half.sum() + 1.0)) : n.half;
  }

  // Triangle j of b in a's frame.
  Triangle TriangleB(uint32_t j) const {
    const Triangle t = b.mesh().triangle(j);
    return {X_AB * t.a, X_AB * t.b, X_AB * t.c};
  }
};

// Descend into the larger box unless it is a leaf.
bool DescendA(const BvhNode& na, const BvhNode& nb) {
  if (nb.IsLeaf()) return true;
  if (na.IsLeaf()) return false;
  return na.half.squaredNorm() >= nb.half.squaredNorm();
}

// Whether the centre of `other` tells which of two children to visit first: when `other` is
// not more than twice as large as the larger child (half-diagonals). A larger node's centre
// says little about where it meets them: on the pushed-in motor x hammer pairs the ordering
// took 57 % more instructions than none (87.7 k against 55.7 k per Distance call), and 46.7 k
// with this test, which keeps its gains elsewhere.
bool CentreOrders(const BvhNode& c0, const BvhNode& c1, const BvhNode& other) {
  return other.half.squaredNorm() < 4.0 * std::max(c0.half.squaredNorm(), c1.half.squaredNorm());
}

// Visits every pair of overlapping leaves; `leaf(na, nb)` returns true to stop. With
// kNearestFirst, of two overlapping children the one whose centre lies nearer the other node's
// is visited first (for walks that stop at their first find) when that centre tells
// (CentreOrders); else the first child first.
template <bool kNearestFirst = false, typename LeafFn>
void ForOverlappingLeaves(const PairFrame& f, LeafFn&& leaf) {
  const auto& A = f.a.nodes();
  const auto& B = f.b.nodes();
  if (!f.Overlap(A[0], B[0])) return;
  uint32_t stack[kPairStack][2];
  int sp = 0;
  stack[sp][0] = 0;
  stack[sp++][1] = 0;
  while (sp > 0) {
    --sp;
    const uint32_t ia = stack[sp][0], ib = stack[sp][1];
    const BvhNode& na = A[ia];
    const BvhNode& nb = B[ib];
    if (na.IsLeaf() && nb.IsLeaf()) {
      if (leaf(na, nb)) return;
      continue;
    }
    auto push = [&](uint32_t ja, uint32_t jb) {
      assert(sp < kPairStack);
      stack[sp][0] = ja;
      stack[sp++][1] = jb;
    };
    if (DescendA(na, nb)) {
      const bool o1 = f.Overlap(A[na.index + 1], nb), o0 = f.Overlap(A[na.index], nb);
      if constexpr (kNearestFirst) {
        if (o0 && o1 && CentreOrders(A[na.index], A[na.index + 1], nb)) {
          const Vec3 c = f.CenterInA(nb);
          const bool far0 =
              (A[na.index].center - c).squaredNorm() > (A[na.index + 1].center - c).squaredNorm();
          push(na.index + (far0 ? 0 : 1), ib);
          push(na.index + (far0 ? 1 : 0), ib);
          continue;
        }
      }
      if (o1) push(na.index + 1, ib);
      if (o0) push(na.index, ib);
    } else {
      const bool o1 = f.Overlap(na, B[nb.index + 1]), o0 = f.Overlap(na, B[nb.index]);
      if constexpr (kNearestFirst) {
        if (o0 && o1 && CentreOrders(B[nb.index], B[nb.index + 1], na)) {
          const bool far0 = (f.CenterInA(B[nb.index]) - na.center).squaredNorm() >
                            (f.CenterInA(B[nb.index + 1]) - na.center).squaredNorm();
          push(ia, nb.index + (far0 ? 0 : 1));
          push(ia, nb.index + (far0 ? 1 : 0));
          continue;
        }
      }
      if (o1) push(ia, nb.index + 1);
      if (o0) push(ia, nb.index);
    }
  }
}

// The triangles of a leaf of b, moved into a's frame, with their bounds.
struct LeafTriangles {
  Triangle tri[kMaxLeafSize];
  Aabb box[kMaxLeafSize];
  uint32_t id[kMaxLeafSize];
  uint32_t n = 0;
  LeafTriangles(const PairFrame& f, const BvhNode& nb) {
    n = nb.Count();
    for (uint32_t k = 0; k < n; ++k) {
      id[k] = nb.index + k;
      tri[k] = f.TriangleB(id[k]);
      box[k] = TriangleBounds(tri[k]);
    }
  }
  // The triangle's box grown by 1e-9 of its size: two triangles whose boxes are apart by less
  // than 1e-12 of their size may still touch by IntersectTriangles' snap of plane distances,
  // and the pre-filter must leave such pairs to it (as the brute force over all pairs does).
  static Aabb TriangleBounds(const Triangle& t) {
    const Vec3 lo = t.a.cwiseMin(t.b).cwiseMin(t.c), hi = t.a.cwiseMax(t.b).cwiseMax(t.c);
    const double grow = 1e-9 * (hi - lo).sum();
    return {lo.array() - grow, hi.array() + grow};
  }
};

}  // namespace

namespace {

// Calls hit(ia, jb, x) for each crossing triangle pair of two leaves, testing the triangles'
// boxes first; hit returns true to stop. Returns true when stopped.
template <typename HitFn>
bool ForCrossingTriangles(const PairFrame& f, const BvhNode& na, const BvhNode& nb, HitFn&& hit) {
  const LeafTriangles lb(f, nb);
  for (uint32_t i = 0; i < na.Count(); ++i) {
    const uint32_t ia = na.index + i;
    const Triangle ta = f.a.mesh().triangle(ia);
    const Aabb box_a = LeafTriangles::TriangleBounds(ta);
    for (uint32_t j = 0; j < lb.n; ++j) {
      if (!box_a.Overlaps(lb.box[j])) continue;
      const TriangleIntersection x = IntersectTriangles(ta, lb.tri[j]);
      if (x.intersects && hit(ia, lb.id[j], x)) return true;
    }
  }
  return false;
}

// The first crossing triangle pair the early-exit overlap walk meets: its triangles and one end
// of its intersection segment (a's frame).
struct Crossing {
  uint32_t tri_a, tri_b;
  Vec3 p_A;
};
std::optional<Crossing> FirstCrossing(const PairFrame& f) {
  std::optional<Crossing> first;
  ForOverlappingLeaves<true>(f, [&](const BvhNode& na, const BvhNode& nb) {
    return ForCrossingTriangles(f, na, nb,
                                [&](uint32_t ia, uint32_t jb, const TriangleIntersection& x) {
                                  first = Crossing{ia, jb, x.p0};
                                  return true;
                                });
  });
  return first;
}

}  // namespace

bool SurfacesIntersect(const Part& a, const RigidTransform& X_WA, const Part& b,
                       const RigidTransform& X_WB) {
  return FirstCrossing(PairFrame(a, X_WA, b, X_WB)).has_value();
}

IntersectionResult FindIntersections(const Part& a, const RigidTransform& X_WA, const Part& b,
                                     const RigidTransform& X_WB, std::size_t max_pairs) {
  IntersectionResult r;
  if (max_pairs == 0) {
    r.truncated = SurfacesIntersect(a, X_WA, b, X_WB);
    return r;
  }
  const PairFrame f(a, X_WA, b, X_WB);
  ForOverlappingLeaves(f, [&](const BvhNode& na, const BvhNode& nb) {
    return ForCrossingTriangles(f, na, nb,
                                [&](uint32_t ia, uint32_t jb, const TriangleIntersection& x) {
                                  if (r.pairs.size() == max_pairs) {
                                    r.truncated = true;
                                    return true;
                                  }
                                  r.pairs.push_back({ia, jb, X_WA * x.p0, X_WA * x.p1});
                                  return false;
                                });
  });
  std::sort(r.pairs.begin(), r.pairs.end(), [](const TrianglePairHit& x, const TrianglePairHit& y) {
    return x.tri_a != y.tri_a ? x.tri_a < y.tri_a : x.tri_b < y.tri_b;
  });
  return r;
}

namespace {

struct NodeInterval {
  bool hit;
  double t0;
};

// Entry parameter of a prepared ray (part frame) into a node box, limited to [t0, t1].
NodeInterval EnterNode(const Part& part, const BvhNode& n, const internal::PreparedRay& r,
                       double t_max) {
  double t0 = r.t_min, t1 = t_max;
  if (!n.IsObb()) {
    bool ok = internal::SlabTest(r.org, r.inv_dir, r.zero, n.center - n.half, n.center + n.half,
                                 &t0, &t1);
    return {ok, t0};
  }
  const Mat3 R = part.NodeAxes(n);
  const Vec3 o = R.transpose() * (r.org - n.center);
  const Vec3 d = R.transpose() * r.dir;
  bool zero[3];
  Vec3 inv;
  for (int i = 0; i < 3; ++i) {
    zero[i] = d[i] == 0.0;
    inv[i] = 1.0 / d[i];
  }
  bool ok = internal::SlabTest(o, inv, zero, -n.half, n.half, &t0, &t1);
  return {ok, t0};
}

// Walks the nodes a ray enters, nearest first. `leaf(node, &t_max)` may shrink t_max and
// returns true to stop.
template <typename LeafFn>
void WalkRay(const Part& part, const internal::PreparedRay& r, double* t_max, LeafFn&& leaf) {
  const auto& N = part.nodes();
  NodeInterval root = EnterNode(part, N[0], r, *t_max);
  if (!root.hit) return;
  struct Entry {
    uint32_t node;
    double t0;
  } stack[kNodeStack];
  int sp = 0;
  stack[sp++] = {0, root.t0};
  while (sp > 0) {
    const Entry e = stack[--sp];
    if (e.t0 > *t_max) continue;
    const BvhNode& n = N[e.node];
    if (n.IsLeaf()) {
      if (leaf(n, t_max)) return;
      continue;
    }
    const NodeInterval c0 = EnterNode(part, N[n.index], r, *t_max);
    const NodeInterval c1 = EnterNode(part, N[n.index + 1], r, *t_max);
    if (c0.hit && c1.hit) {
      const bool first0 = c0.t0 <= c1.t0;
      assert(sp + 2 <= kNodeStack);
      stack[sp++] = first0 ? Entry{n.index + 1, c1.t0} : Entry{n.index, c0.t0};
      stack[sp++] = first0 ? Entry{n.index, c0.t0} : Entry{n.index + 1, c1.t0};
    } else if (c0.hit) {
      stack[sp++] = {n.index, c0.t0};
    } else if (c1.hit) {
      stack[sp++] = {n.index + 1, c1.t0};
    }
  }
}

}  // namespace

namespace {

// True when the part's single-precision ray tree exists and can bound the ray.
bool TakesRayTree(const Part& part, const internal::PreparedRayF& rf) {
  return rf.usable && part.ray_bvh().root_ref() != kRayEmptyRef;
}

// Walks the leaves a prepared ray (part frame) enters, nearest first: the single-precision ray
// hierarchy when `rf` can bound the ray, else the double-precision one (rays with a near-zero
// direction component, parts reaching beyond the float range). `leaf(first, count, &t_max)`
// gets a range of triangles, may shrink t_max, and returns true to stop.
template <typename LeafFn>
void WalkRayLeaves(const Part& part, const internal::PreparedRay& r,
                   const internal::PreparedRayF& rf, double* t_max, LeafFn&& leaf) {
  if (TakesRayTree(part, rf)) {
    internal::WalkRayBvh(part.ray_bvh(), rf, r.t_min, t_max, leaf);
  } else {
    WalkRay(part, r, t_max,
            [&](const BvhNode& n, double* tm) { return leaf(n.index, n.Count(), tm); });
  }
}

// True when the AVX2 kernels take a ray: they are selected (the processor has them), the ray
// tree can bound the ray and the ray starts at t_min >= 0 (what their box test assumes; a ray
// reaching behind its origin takes the SSE2 walk).
bool TakesAvx2(const Part& part, const internal::PreparedRay& r, const internal::PreparedRayF& rf) {
  return r.t_min >= 0.0 && TakesRayTree(part, rf) &&
         internal::ActiveRayKernel() == internal::RayKernel::kAvx2;
}

}  // namespace

std::optional<RayHit> CastRay(const Part& part, const RigidTransform& X_WP, const Ray& ray_W) {
  const internal::PreparedRay r(ray_W.InFrameOf(X_WP));
  const internal::PreparedRayF rf(r, part.ray_bvh().ref());
  double t_max = r.t_max;
  internal::ClosestHit best;
  if (TakesAvx2(part, r, rf)) {
    internal::ClosestHitAvx2(part, r, rf, &t_max, &best);
  } else {
    WalkRayLeaves(part, r, rf, &t_max, [&](uint32_t first, uint32_t count, double* tm) {
      internal::LeafClosestScalar(part, r, first, count, tm, &best);
      return false;
    });
  }
  if (!best.found) return std::nullopt;
  RayHit hit{best.t, best.id, part.mesh().tags()[best.id], ray_W.At(best.t), Vec3::Zero()};
  hit.normal_W = X_WP.R * part.mesh().triangle(best.id).RawNormal().normalized();
  return hit;
}

bool RayHitsAny(const Part& part, const RigidTransform& X_WP, const Ray& ray_W) {
  const internal::PreparedRay r(ray_W.InFrameOf(X_WP));
  const internal::PreparedRayF rf(r, part.ray_bvh().ref());
  if (TakesAvx2(part, r, rf)) return internal::AnyHitAvx2(part, r, rf);
  double t_max = r.t_max;
  bool hit = false;
  WalkRayLeaves(part, r, rf, &t_max, [&](uint32_t first, uint32_t count, double*) {
    hit = internal::LeafAnyScalar(part, r, first, count);
    return hit;
  });
  return hit;
}

namespace {

// Directions with no rational relation to the coordinate axes, so a ray from a vertex of an
// axis-aligned model rarely passes exactly through an edge.
const Vec3 kParityDirections[] = {
    Vec3(0.7548776662466927, 0.5698402909980532, 0.3247179572447460).normalized(),
    Vec3(-0.3090169943749474, 0.9510565162951535, 0.4142135623730950).normalized(),
    Vec3(0.2360679774997897, -0.6180339887498949, 0.7434735291010330).normalized(),
    Vec3(-0.5772156649015329, -0.2614972128476428, -0.7853981633974483).normalized(),
    Vec3(0.9189385332046727, -0.1892940158709516, -0.3465735902799727).normalized(),
};

// Generalised winding number (solid angles, Van Oosterom and Strackee 1983): a slow, exact
// fallback when every parity ray grazes an edge.
double WindingNumber(const TriangleMesh& m, const Vec3& p) {
  double sum = 0.0;
  for (const auto& t : m.triangles()) {
    sum += SolidAngle(m.vertices()[t[0]] - p, m.vertices()[t[1]] - p, m.vertices()[t[2]] - p);
  }
  return sum / (4.0 * M_PI);
}

}  // namespace

bool ContainsPoint(const Part& part, const Vec3& p_PQ) {
  if (!part.mesh().IsClosed() || !part.bounds().Contains(p_PQ)) return false;
  int votes_in = 0, votes = 0;
  for (const Vec3& dir : kParityDirections) {
    Ray ray{p_PQ, dir, 0.0, std::numeric_limits<double>::infinity()};
    const internal::PreparedRay r(ray);
    double t_max = r.t_max;
    int crossings = 0;
    bool ambiguous = false;
    WalkRay(part, r, &t_max, [&](const BvhNode& n, double*) {
      for (uint32_t k = 0; k < n.Count(); ++k) {
        const auto& t = part.mesh().triangles()[n.index + k];
        const auto& v = part.mesh().vertices();
        auto h = internal::IntersectWatertight(r, v[t[0]], v[t[1]], v[t[2]]);
        if (!h) continue;
        if (h->on_edge || h->t == 0.0) {
          ambiguous = true;
          return true;
        }
        ++crossings;
      }
      return false;
    });
    if (ambiguous) continue;
    ++votes;
    votes_in += crossings & 1;
    if (votes == 3) break;
  }
  if (votes == 0) return WindingNumber(part.mesh(), p_PQ) > 0.5;
  return 2 * votes_in > votes;
}

namespace {

// A gap measured along OBB node axes is shrunk by far more than the rounding of its projections
// (a margin kept from when the axes were orthonormal only to ~1e-7; Part::AxesOf).
constexpr double kObbGapShrink = 1.0 - 1e-6;

// Lower bound of the squared distance from p (part frame) to anything inside node n's box.
double NodeGap2(const Part& part, const BvhNode& n, const Vec3& p) {
  if (!n.IsObb()) return ((p - n.center).cwiseAbs() - n.half).cwiseMax(0.0).squaredNorm();
  const Vec3 q = part.NodeAxes(n).transpose() * (p - n.center);
  return (q.cwiseAbs() - n.half).cwiseMax(0.0).squaredNorm() * (kObbGapShrink * kObbGapShrink);
}

// Squared gaps are compared with the squared best distance grown by this much, so that rounding
// of the squares never prunes a node holding a triangle at exactly the best distance (the
// leaves then decide on the distances themselves).
constexpr double kSquaredPruneSlack = 1.0 + 1e-12;

}  // namespace

namespace {

// Nearest-first walk of the leaves whose box comes within sqrt(*prune2) of p (part frame),
// pruned on squared gaps (no square root per node); *prune2 may shrink as the leaves are
// visited. `leaf(n)` returns true to stop.
template <typename LeafFn>
void ForLeavesNear(const Part& part, const Vec3& p, const double* prune2, LeafFn&& leaf) {
  const auto& N = part.nodes();
  struct Entry {
    uint32_t node;
    double gap2;
  } stack[kNodeStack];
  int sp = 0;
  const double root_gap2 = NodeGap2(part, N[0], p);
  if (root_gap2 > *prune2) return;
  stack[sp++] = {0, root_gap2};
  while (sp > 0) {
    const Entry e = stack[--sp];
    if (e.gap2 > *prune2) continue;
    const BvhNode& n = N[e.node];
    if (n.IsLeaf()) {
      if (leaf(n)) return;
      continue;
    }
    // Nearer child on top of the stack.
    Entry c0{n.index, NodeGap2(part, N[n.index], p)};
    Entry c1{n.index + 1, NodeGap2(part, N[n.index + 1], p)};
    if (c1.gap2 < c0.gap2) std::swap(c0, c1);
    assert(sp + 2 <= kNodeStack);
    if (c1.gap2 <= *prune2) stack[sp++] = c1;
    if (c0.gap2 <= *prune2) stack[sp++] = c0;
  }
}

}  // namespace

PointDistanceResult ClosestPoint(const Part& part, const Vec3& p_PQ, double upper_bound) {
  return internal::ClosestPointUnlessWithin(part, p_PQ, upper_bound, 0.0);
}

PointDistanceResult internal::ClosestPointUnlessWithin(const Part& part, const Vec3& p_PQ,
                                                       double upper_bound, double stop_below) {
  PointDistanceResult r;
  if (!(upper_bound >= 0.0)) return r;
  double best = upper_bound;
  bool found = false;
  // Until a triangle is found the bound is inclusive (a triangle exactly at upper_bound
  // counts); afterwards only strictly nearer ones can improve. Nodes are pruned on squared
  // gaps with a little slack; the leaves decide exactly.
  double prune2 = best * best * kSquaredPruneSlack;
  ForLeavesNear(part, p_PQ, &prune2, [&](const BvhNode& n) {
    for (uint32_t k = 0; k < n.Count(); ++k) {
      const uint32_t id = n.index + k;
      const Vec3 c = ClosestPointOnTriangle(p_PQ, part.mesh().triangle(id));
      const double d2 = (p_PQ - c).squaredNorm();
      if (d2 > prune2) continue;
      const double d = std::sqrt(d2);
      if (found ? d < best : d <= best) {
        best = d;
        prune2 = d2 * kSquaredPruneSlack;
        found = true;
        r.p_PC = c;
        r.triangle = id;
        if (d < stop_below) return true;  // (every triangle that near improves on the best)
      }
    }
    return false;
  });
  if (found) r.distance = best;
  return r;
}

PointDistanceResult internal::SurfacePointWithin(const Part& part, const Vec3& p_PQ,
                                                 double radius) {
  PointDistanceResult r;
  if (!(radius > 0.0)) return r;
  // Nodes are pruned with ClosestPoint's slack; triangles count only when strictly nearer.
  const double prune2 = radius * radius * kSquaredPruneSlack;
  ForLeavesNear(part, p_PQ, &prune2, [&](const BvhNode& n) {
    for (uint32_t k = 0; k < n.Count(); ++k) {
      const uint32_t id = n.index + k;
      const Vec3 c = ClosestPointOnTriangle(p_PQ, part.mesh().triangle(id));
      const double d = (p_PQ - c).norm();
      if (d < radius) {
        r = {d, c, id};
        return true;
      }
    }
    return false;
  });
  return r;
}

namespace {

// Pseudo-normals shorter than this (relative to the sum of their unit terms' weights) have no
// reliable direction: two faces folded flat onto each other, a needle-like vertex.
constexpr double kMinPseudoNormal = 1e-6;
// Vertices with more faces than this (a cone's apex of a fine tessellation) go to the rays.
constexpr std::size_t kMaxFanTriangles = 256;

// The triangles of `part` that hold vertex `v` (and vertex `w` too, unless w == v) among those
// in leaves within `radius` of p (part frame), at most `max` of them; false when more.
bool TrianglesAt(const Part& part, const Vec3& p, double radius, uint32_t v, uint32_t w,
                 std::size_t max, absl::InlinedVector<uint32_t, 16>* out) {
  const double prune2 = radius * radius * kSquaredPruneSlack;
  bool fits = true;
  ForLeavesNear(part, p, &prune2, [&](const BvhNode& n) {
    for (uint32_t k = 0; k < n.Count(); ++k) {
      const auto& t = part.mesh().triangles()[n.index + k];
      const bool has_v = t[0] == v || t[1] == v || t[2] == v;
      const bool has_w = t[0] == w || t[1] == w || t[2] == w;
      if (!has_v || !has_w) continue;
      if (out->size() == max) {
        fits = false;
        return true;
      }
      out->push_back(n.index + k);
    }
    return false;
  });
  return fits;
}

// Angle-weighted normal of the triangles `fan` about vertex v, or nullopt unless they form one
// closed fan (each edge out of v used once each way, one cycle through all of them): at a
// pinched vertex the pseudo-normal does not tell the side. Also nullopt when the weighted
// normals nearly cancel (a needle-like vertex): the sum's direction is then rounding.
std::optional<Vec3> VertexPseudoNormal(const TriangleMesh& m, uint32_t v,
                                       std::span<const uint32_t> fan) {
  absl::InlinedVector<std::pair<uint32_t, uint32_t>, 16> next;  // (a, b): triangle v -> a -> b
  Vec3 sum = Vec3::Zero();
  double weights = 0.0;
  for (uint32_t tri : fan) {
    const auto& t = m.triangles()[tri];
    const int i = t[0] == v ? 0 : t[1] == v ? 1 : 2;
    const uint32_t a = t[(i + 1) % 3], b = t[(i + 2) % 3];
    next.push_back({a, b});
    const Vec3 e1 = m.vertices()[a] - m.vertices()[v], e2 = m.vertices()[b] - m.vertices()[v];
    const Vec3 cross = e1.cross(e2);
    const double len = cross.norm();
    if (!(len > 0.0)) return std::nullopt;
    const double angle = std::atan2(len, e1.dot(e2));
    sum += angle * (cross / len);
    weights += angle;
  }
  if (!(sum.norm() > kMinPseudoNormal * weights)) return std::nullopt;
  // Follow a -> b from the first triangle: one cycle through every triangle of the fan.
  uint32_t at = next.front().first;
  for (std::size_t step = 0; step < next.size(); ++step) {
    auto it = std::find_if(next.begin(), next.end(), [&](const auto& e) { return e.first == at; });
    if (it == next.end()) return std::nullopt;
    at = it->second;
    if (at == next.front().first && step + 1 != next.size()) return std::nullopt;
  }
  if (at != next.front().first) return std::nullopt;
  return sum;
}

}  // namespace

// For a closed oriented (manifold-edged) mesh, p lies outside exactly when (p - c) points along
// the angle-weighted pseudo-normal of the feature holding its closest point c: the face normal,
// the sum of the two face normals at an edge, the angle-weighted sum at a vertex (Bærentzen and
// Aanæs, IEEE TVCG 2005). The sign is used only when it is clear (|cos| >= 1e-3); a closest
// point near an edge but inside a face gets the edge's normal, which gives the same sign.
std::optional<bool> InsideFromClosestFace(const Part& q, const Vec3& p,
                                          const PointDistanceResult& d) {
  constexpr double kInteriorMargin = 1e-6;  // barycentric coordinates this far from an edge
  constexpr double kClearCosine = 1e-3;
  const TriangleMesh& m = q.mesh();
  const auto& t = m.triangles()[d.triangle];
  const Triangle tri = m.triangle(d.triangle);
  const std::optional<Vec3> bary = Barycentric(tri, d.p_PC);
  if (!bary || !(d.distance > 0.0) || !m.IsClosed()) return std::nullopt;
  const Vec3 to_p = p - d.p_PC;
  auto side = [&](const Vec3& normal) -> std::optional<bool> {
    const double s = to_p.dot(normal);
    if (!(std::abs(s) > kClearCosine * to_p.norm() * normal.norm())) return std::nullopt;
    return s < 0.0;
  };
  int near_edge = -1;  // the vertex opposite the edge the closest point lies on
  int near_edges = 0;
  for (int i = 0; i < 3; ++i) {
    if (!((*bary)[i] > kInteriorMargin)) {
      near_edge = i;
      ++near_edges;
    }
  }
  if (near_edges == 0) {
    // p - closest is along the normal when the closest point is inside the face; anything
    // else is rounding trouble, left to the rays.
    const double s = to_p.dot(tri.RawNormal().normalized());
    if (!(std::abs(s) >= 0.999 * d.distance)) return std::nullopt;
    return s < 0.0;
  }
  // The triangles sharing the feature are within the closest distance of p (up to rounding).
  const double longest =
      std::sqrt(std::max({(tri.b - tri.a).squaredNorm(), (tri.c - tri.b).squaredNorm(),
                          (tri.a - tri.c).squaredNorm()}));
  const double radius = d.distance * (1.0 + 1e-6) + 1e-9 * longest;
  for (int i = 0; i < 3; ++i) {
    if (d.p_PC != tri[i]) continue;
    absl::InlinedVector<uint32_t, 16> fan;
    if (!TrianglesAt(q, p, radius, t[i], t[i], kMaxFanTriangles, &fan)) return std::nullopt;
    const std::optional<Vec3> normal = VertexPseudoNormal(m, t[i], fan);
    return normal ? side(*normal) : std::nullopt;
  }
  if (near_edges != 1) return std::nullopt;
  const uint32_t a = t[(near_edge + 1) % 3], b = t[(near_edge + 2) % 3];
  absl::InlinedVector<uint32_t, 16> pair;
  if (!TrianglesAt(q, p, radius, a, b, 2, &pair) || pair.size() != 2) return std::nullopt;
  const Vec3 normal =
      m.triangle(pair[0]).RawNormal().normalized() + m.triangle(pair[1]).RawNormal().normalized();
  if (!(normal.norm() > 2.0 * kMinPseudoNormal)) return std::nullopt;  // folded flat
  return side(normal);
}

namespace {

// A vertex (inner's frame) of a shell of `inner` that lies inside `outer` (X_IO: outer's pose
// in inner's frame), for surfaces that do not cross: such a shell lies wholly inside or wholly
// outside, so one vertex decides, and only shells whose bounds fit in outer's bounds are
// tested.
std::optional<Vec3> ShellInside(const Part& inner, const Part& outer, const RigidTransform& X_IO) {
  const Aabb outer_box = outer.bounds().Transformed(X_IO);
  const RigidTransform X_OI = X_IO.Inverse();
  const TriangleMesh& m = inner.mesh();
  if (m.shells().empty()) {
    // An open mesh has no shells (TriangleMesh::shells): it is taken as one piece, decided by
    // its first vertex (a piece of it outside, another inside, is missed).
    if (m.vertices().empty() || !outer_box.Contains(m.bounds())) return std::nullopt;
    const Vec3& v = m.vertices().front();
    if (ContainsPoint(outer, X_OI * v)) return v;
    return std::nullopt;
  }
  for (const MeshShell& s : m.shells()) {
    const Vec3& v = m.vertices()[s.vertex];
    if (outer_box.Contains(s.bounds) && ContainsPoint(outer, X_OI * v)) return v;
  }
  return std::nullopt;
}

}  // namespace

Containment FindContainment(const Part& a, const RigidTransform& X_WA, const Part& b,
                            const RigidTransform& X_WB, Vec3* p_W) {
  // Only a closed part has an inside; the part inside it may be open (a sheet, or a solid whose
  // tessellation has gaps): its surface, apart from the container's, lies wholly inside or
  // wholly outside, so one vertex decides as for a closed one.
  const RigidTransform X_AB = X_WA.Inverse() * X_WB;
  if (b.mesh().IsClosed()) {
    if (const std::optional<Vec3> v = ShellInside(a, b, X_AB)) {
      if (p_W != nullptr) *p_W = X_WA * *v;
      return Containment::kAInsideB;
    }
  }
  if (!a.mesh().IsClosed()) return Containment::kNone;
  if (const std::optional<Vec3> v = ShellInside(b, a, X_AB.Inverse())) {
    if (p_W != nullptr) *p_W = X_WB * *v;
    return Containment::kBInsideA;
  }
  return Containment::kNone;
}

namespace {

// Which pair a walk by lower bounds takes next.
enum class WalkOrder {
  // The pair of least bound of all pending ones (a binary heap): only pairs whose bound is
  // below the final answer are opened, the fewest any walk with these bounds can open. For
  // queries that need the least value (distance, travel).
  kBestFirst,
  // Depth first, the nearer children first: reaches a leaf soonest. For yes/no queries that
  // stop at the first leaf within a fixed bound.
  kDepthFirst,
};

// Walk by a lower bound of some quantity (a distance, a travel) that the leaves compute
// exactly: pairs whose bound(na, nb, target) is not below `*best` are pruned. `leaf(na, nb)`
// updates *best; returns true to stop.
template <typename BoundFn, typename LeafFn>
void ForLeavesBelow(const PairFrame& f, const double* best, bool inclusive, WalkOrder order,
                    BoundFn&& bound, LeafFn&& leaf) {
  const auto& A = f.a.nodes();
  const auto& B = f.b.nodes();
  auto pruned = [&](double lb) { return inclusive ? lb > *best : lb >= *best; };
  struct Entry {
    uint32_t ia, ib;
    double lb;
  };
  // Pending pairs: a min-heap on lb (best first) or a stack (depth first). A depth-first walk
  // pops one pair and pushes at most three, so its stack stays within 3 * 60 + 1 entries. A
  // best-first heap has no such bound: when it fills the inline capacity, many pairs lie at
  // nearly the same bound (surfaces that follow each other, a peg in its hole), where best
  // first opens hardly fewer pairs than depth first while the heap costs a logarithm per step;
  // the walk then goes on depth first from the pending pairs sorted farthest first.
  absl::InlinedVector<Entry, kPairStack> pending;
  bool best_first = order == WalkOrder::kBestFirst;
  auto later = [](const Entry& x, const Entry& y) { return x.lb > y.lb; };
  auto push = [&](const Entry& x) {
    pending.push_back(x);
    if (!best_first) return;
    std::push_heap(pending.begin(), pending.end(), later);
    if (pending.size() == kBestFirstPending) {
      std::sort_heap(pending.begin(), pending.end(), later);  // farthest first
      best_first = false;
    }
  };
  Entry e{0, 0, bound(A[0], B[0], *best)};
  for (;;) {
    if (pruned(e.lb)) {
      // Best first, e is never farther than a pending pair: all of them are pruned too.
      if (best_first) return;
    } else if (A[e.ia].IsLeaf() && B[e.ib].IsLeaf()) {
      if (leaf(A[e.ia], B[e.ib])) return;
    } else {
      const BvhNode& na = A[e.ia];
      const BvhNode& nb = B[e.ib];
      // Open both sides when neither is a leaf (fewer intermediate pairs to bound), else the
      // inner one.
      Entry c[4];
      int n = 0;
      if (!na.IsLeaf() && !nb.IsLeaf()) {
        for (uint32_t ca = na.index; ca <= na.index + 1; ++ca) {
          for (uint32_t cb = nb.index; cb <= nb.index + 1; ++cb) {
            c[n++] = {ca, cb, bound(A[ca], B[cb], *best)};
          }
        }
      } else if (nb.IsLeaf()) {
        c[n++] = {na.index, e.ib, bound(A[na.index], nb, *best)};
        c[n++] = {na.index + 1, e.ib, bound(A[na.index + 1], nb, *best)};
      } else {
        c[n++] = {e.ia, nb.index, bound(na, B[nb.index], *best)};
        c[n++] = {e.ia, nb.index + 1, bound(na, B[nb.index + 1], *best)};
      }
      // Farthest first (insertion sort, <= 4 entries); the nearest child is taken next without
      // a push and a pop when it is not farther than every pending pair (always, depth first).
      for (int k = 1; k < n; ++k) {
        for (int m = k; m > 0 && c[m - 1].lb < c[m].lb; --m) std::swap(c[m - 1], c[m]);
      }
      for (int k = 0; k + 1 < n; ++k) {
        if (!pruned(c[k].lb)) push(c[k]);
      }
      const Entry& nearest = c[n - 1];
      if (!pruned(nearest.lb)) {
        if (!best_first || pending.empty() || nearest.lb <= pending.front().lb) {
          e = nearest;
          continue;
        }
        push(nearest);
      }
    }
    if (pending.empty()) return;
    if (best_first) std::pop_heap(pending.begin(), pending.end(), later);
    e = pending.back();
    pending.pop_back();
  }
}

// Distance walk: ForLeavesBelow with the node boxes' distance bound.
template <typename LeafFn>
void ForCloseLeaves(const PairFrame& f, const double* best, bool inclusive, WalkOrder order,
                    LeafFn&& leaf) {
  ForLeavesBelow(
      f, best, inclusive, order,
      [&f](const BvhNode& na, const BvhNode& nb, double target) {
        return f.LowerBound(na, nb, target);
      },
      leaf);
}

}  // namespace

namespace {

// Signed distances of t's vertices from the plane of p (unit normal): when all lie on one side,
// the nearest of them bounds the triangles' distance from below.
double OneSidedGap(const Triangle& p, const Triangle& t) {
  const Vec3 n = p.RawNormal();
  const double len = n.norm();
  if (!(len > 0.0)) return 0.0;
  const double s0 = n.dot(t.a - p.a), s1 = n.dot(t.b - p.a), s2 = n.dot(t.c - p.a);
  if (s0 > 0 && s1 > 0 && s2 > 0) return std::min({s0, s1, s2}) / len;
  if (s0 < 0 && s1 < 0 && s2 < 0) return -std::max({s0, s1, s2}) / len;
  return 0.0;
}

// A lower bound of the distance between two triangles from each one's plane: tight for faces
// that face each other, as the near triangles of two parts pulled apart mostly do. Shrunk by
// far more than its rounding, so that it never prunes a pair that could tie the best.
double PlaneGap(const Triangle& x, const Triangle& y) {
  return std::max(OneSidedGap(x, y), OneSidedGap(y, x)) * (1.0 - 1e-12);
}

}  // namespace

DistanceResult Distance(const Part& a, const RigidTransform& X_WA, const Part& b,
                        const RigidTransform& X_WB, double upper_bound) {
  // A NaN bound would fail every comparison below (no crossing check, no pruning, no answer):
  // it counts as no bound at all.
  if (std::isnan(upper_bound)) upper_bound = std::numeric_limits<double>::infinity();
  const PairFrame f(a, X_WA, b, X_WB);
  DistanceResult r;
  // Crossing surfaces are at distance 0: the early-exit overlap walk finds a witness far
  // sooner than a best-first distance walk through the overlapping boxes.
  // It stops at the first crossing pair, whose segment's end is the witness.
  if (upper_bound >= 0.0) {
    if (const std::optional<Crossing> x = FirstCrossing(f)) {
      r.distance = 0.0;
      r.p_WA = r.p_WB = X_WA * x->p_A;
      r.tri_a = x->tri_a;
      r.tri_b = x->tri_b;
      return r;
    }
  }
  double best = upper_bound;
  Vec3 pa, pb;
  bool found = false;
  ForCloseLeaves(f, &best, false, WalkOrder::kBestFirst, [&](const BvhNode& na, const BvhNode& nb) {
    const LeafTriangles lb(f, nb);
    // Triangle pairs nearest-box first, so the bound tightens early and prunes the rest.
    struct Candidate {
      double gap;
      uint32_t i, j;
    } cand[kMaxLeafSize * kMaxLeafSize];
    Triangle ta[kMaxLeafSize];
    uint32_t n = 0;
    for (uint32_t i = 0; i < na.Count(); ++i) {
      ta[i] = a.mesh().triangle(na.index + i);
      const Aabb box_a = LeafTriangles::TriangleBounds(ta[i]);
      for (uint32_t j = 0; j < lb.n; ++j) {
        const double gap = box_a.Distance(lb.box[j]);
        if (gap < best || (!found && gap <= best)) cand[n++] = {gap, i, j};
      }
    }
    std::sort(cand, cand + n, [](const Candidate& x, const Candidate& y) { return x.gap < y.gap; });
    for (uint32_t k = 0; k < n; ++k) {
      const Candidate& c = cand[k];
      if (found && c.gap >= best) break;
      if (found && PlaneGap(ta[c.i], lb.tri[c.j]) >= best) continue;
      const TriangleDistance d =
          DistanceTriangles(ta[c.i], lb.tri[c.j], found ? best : upper_bound);
      if (d.distance < best || (!found && d.distance <= best)) {
        best = d.distance;
        found = true;
        pa = d.p1;
        pb = d.p2;
        r.tri_a = na.index + c.i;
        r.tri_b = lb.id[c.j];
        if (best == 0.0) return true;
      }
    }
    return false;
  });
  if (found) {
    r.distance = best;
    r.p_WA = X_WA * pa;
    r.p_WB = X_WA * pb;
  }
  return r;
}

bool WithinDistance(const Part& a, const RigidTransform& X_WA, const Part& b,
                    const RigidTransform& X_WB, double d) {
  // A NaN distance would fail every pruning test and visit every triangle pair: it counts as
  // +inf (true at the first pair), as Distance's NaN bound does.
  if (std::isnan(d)) d = std::numeric_limits<double>::infinity();
  const PairFrame f(a, X_WA, b, X_WB);
  bool within = false;
  const double bound = d;
  ForCloseLeaves(f, &bound, true, WalkOrder::kDepthFirst,
                 [&](const BvhNode& na, const BvhNode& nb) {
                   const LeafTriangles lb(f, nb);
                   for (uint32_t i = 0; i < na.Count(); ++i) {
                     const Triangle ta = a.mesh().triangle(na.index + i);
                     const Aabb box_a = LeafTriangles::TriangleBounds(ta);
                     for (uint32_t j = 0; j < lb.n; ++j) {
                       if (box_a.Distance(lb.box[j]) > d) continue;
                       if (DistanceTriangles(ta, lb.tri[j]).distance <= d) {
                         within = true;
                         return true;
                       }
                     }
                   }
                   return false;
                 });
  return within;
}

double FreeTranslation(const Part& a, const RigidTransform& X_WA, const Part& b,
                       const RigidTransform& X_WB, const Vec3& u_W, double margin_mm,
                       double max_travel_mm, double min_travel_mm) {
  if (!(max_travel_mm > 0.0) || !(max_travel_mm > min_travel_mm)) return 0.0;
  const PairFrame f(a, X_WA, b, X_WB);
  // a moving by s u is b moving by -s u in a's frame.
  const Vec3 w_A = -(X_WA.R.transpose() * u_W);
  double best = max_travel_mm;
  ForLeavesBelow(
      f, &best, false, WalkOrder::kBestFirst,
      [&](const BvhNode& na, const BvhNode& nb, double target) {
        return f.SeparationTravel(na, nb, w_A, margin_mm, target);
      },
      [&](const BvhNode& na, const BvhNode& nb) {
        const LeafTriangles lb(f, nb);
        for (uint32_t i = 0; i < na.Count(); ++i) {
          const Triangle ta = a.mesh().triangle(na.index + i);
          for (uint32_t j = 0; j < lb.n; ++j) {
            best = std::min(best, TriangleSeparationTravel(ta, lb.tri[j], w_A, margin_mm, best));
            if (best <= min_travel_mm) return true;
          }
        }
        return false;
      });
  return best <= min_travel_mm ? 0.0 : best;
}

namespace {

// A node's footprint about the axis (in the part's frame). An OBB node's footprint is grown by
// far more than the rounding of projections on its axes can hide (kObbGrowRelative).
internal::Footprint NodeFootprint(const Part& part, const BvhNode& n,
                                  const internal::AxisLine& line) {
  internal::Footprint f = internal::BoxFootprint(n.center, part.NodeAxes(n), n.half, line);
  if (n.IsObb()) {
    const double grow = kObbGrowRelative * (n.half.sum() + 1.0);
    f.r_lo = std::max(f.r_lo - grow, 0.0);
    f.r_hi += grow;
    f.z_lo -= grow;
    f.z_hi += grow;
  }
  return f;
}

}  // namespace

double FreeScrew(const Part& a, const RigidTransform& X_WA, const Part& b,
                 const RigidTransform& X_WB, const Vec3& axis_point_W, const Vec3& axis_W,
                 double margin_mm, double max_advance_mm, double min_advance_mm) {
  if (!(max_advance_mm > 0.0) || !(max_advance_mm > min_advance_mm)) return 0.0;
  const RigidTransform X_AW = X_WA.Inverse(), X_BW = X_WB.Inverse();
  const internal::AxisLine in_a{X_AW * axis_point_W, X_AW.R * axis_W};
  const internal::AxisLine in_b{X_BW * axis_point_W, X_BW.R * axis_W};
  const PairFrame f(a, X_WA, b, X_WB);
  double best = max_advance_mm;
  ForLeavesBelow(
      f, &best, false, WalkOrder::kBestFirst,
      [&](const BvhNode& na, const BvhNode& nb, double) {
        return internal::FootprintAdvance(NodeFootprint(a, na, in_a), NodeFootprint(b, nb, in_b),
                                          margin_mm);
      },
      [&](const BvhNode& na, const BvhNode& nb) {
        internal::Footprint fb[kMaxLeafSize];
        for (uint32_t j = 0; j < nb.Count(); ++j) {
          fb[j] = internal::TriangleFootprint(b.mesh().triangle(nb.index + j), in_b);
        }
        for (uint32_t i = 0; i < na.Count(); ++i) {
          const internal::Footprint fa =
              internal::TriangleFootprint(a.mesh().triangle(na.index + i), in_a);
          for (uint32_t j = 0; j < nb.Count(); ++j) {
            best = std::min(best, internal::FootprintAdvance(fa, fb[j], margin_mm));
            if (best <= min_advance_mm) return true;
          }
        }
        return false;
      });
  return best <= min_advance_mm ? 0.0 : best;
}

}  // namespace clash::geom
