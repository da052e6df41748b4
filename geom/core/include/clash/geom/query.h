// Queries between posed parts and between rays and parts. Every query uses one relative pose
// per pair; meshes and hierarchies are never re-transformed.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "clash/geom/part.h"
#include "clash/geom/ray.h"
#include "clash/geom/transform.h"

namespace clash::geom {

/// True when the surfaces of the two posed parts share a point (early exit on the first
/// intersecting triangle pair). Does not detect containment: see FindContainment.
[[nodiscard]] bool SurfacesIntersect(const Part& a, const RigidTransform& X_WA, const Part& b,
                                     const RigidTransform& X_WB);

/// One pair of intersecting triangles with the intersection segment in world coordinates.
struct TrianglePairHit {
  uint32_t tri_a = 0;        ///< Triangle of part a.
  uint32_t tri_b = 0;        ///< Triangle of part b.
  Vec3 p0_W = Vec3::Zero();  ///< Intersection segment start (world).
  Vec3 p1_W = Vec3::Zero();  ///< Intersection segment end (world).
};

/// All intersecting triangle pairs, up to a limit.
struct IntersectionResult {
  std::vector<TrianglePairHit> pairs;  ///< Ordered by (tri_a, tri_b).
  bool truncated = false;              ///< More pairs exist than max_pairs.
};

/// Collects up to `max_pairs` intersecting triangle pairs.
[[nodiscard]] IntersectionResult FindIntersections(const Part& a, const RigidTransform& X_WA,
                                                   const Part& b, const RigidTransform& X_WB,
                                                   std::size_t max_pairs = 1000);

/// Where one part lies inside the other, closed, part.
enum class Containment : uint8_t {
  kNone,      ///< Neither is inside the other (or the one around is open, or the surfaces cross).
  kAInsideB,  ///< Part a (or one of its solids) lies inside part b.
  kBInsideA,  ///< Part b (or one of its solids) lies inside part a.
};

/// The same containment seen with the parts swapped (a inside b becomes b inside a).
[[nodiscard]] constexpr Containment Swapped(Containment c) {
  return c == Containment::kAInsideB   ? Containment::kBInsideA
         : c == Containment::kBInsideA ? Containment::kAInsideB
                                       : c;
}

/// For two parts whose surfaces do not cross: whether one lies inside the other (the one
/// around must be closed; the one inside may be open, such as a sheet or a solid whose
/// tessellation has gaps). A part made of several solids (TriangleMesh::shells)
/// counts as inside when any of them is: one vertex of each shell whose bounds fit in the
/// other part's bounds is tested against the other solid. `p_W`, when given, receives that
/// vertex (world) of the part inside.
[[nodiscard]] Containment FindContainment(const Part& a, const RigidTransform& X_WA, const Part& b,
                                          const RigidTransform& X_WB, Vec3* p_W = nullptr);

/// True when point p_PQ (part frame) lies inside the closed part (ray parity with several
/// directions, retried when a ray grazes an edge or vertex). False for open meshes.
[[nodiscard]] bool ContainsPoint(const Part& part, const Vec3& p_PQ);

/// Minimum distance between the surfaces of two posed parts, with witness points.
struct DistanceResult {
  double distance = std::numeric_limits<double>::infinity();  ///< Surface distance (0: touch).
  Vec3 p_WA = Vec3::Zero();                                   ///< Closest point on a (world).
  Vec3 p_WB = Vec3::Zero();                                   ///< Closest point on b (world).
  uint32_t tri_a = 0;                                         ///< Triangle of a holding p_WA.
  uint32_t tri_b = 0;                                         ///< Triangle of b holding p_WB.
};

/// Minimum surface distance. Only pairs closer than `upper_bound` are sure to be measured (the
/// walk prunes node pairs not nearer than it, so a pair at exactly the bound may be left out;
/// callers that need it inclusive ask a hair beyond it): when nothing is closer, distance stays
/// +inf. A NaN upper_bound counts as +inf (no bound).
[[nodiscard]] DistanceResult Distance(const Part& a, const RigidTransform& X_WA, const Part& b,
                                      const RigidTransform& X_WB,
                                      double upper_bound = std::numeric_limits<double>::infinity());

/// True when some points of the two surfaces are within distance d (early exit). A NaN d
/// counts as +inf, as Distance's NaN bound does: true (at the first pair of leaves visited),
/// so that an undefined clearance is reported violated rather than passed.
[[nodiscard]] bool WithinDistance(const Part& a, const RigidTransform& X_WA, const Part& b,
                                  const RigidTransform& X_WB, double d);

/// Conservative advancement for a translation (sweep.h): how far part a can be translated
/// from X_WA along the unit world direction u_W, b staying at X_WB, while their surfaces stay
/// more than `margin_mm` apart. Returns s in [0, max_travel_mm] such that for every travel in
/// [0, s) the distance exceeds margin_mm: the minimum over all triangle pairs of
/// TriangleSeparationTravel (b's triangles in a's frame, margin_mm), capped at max_travel_mm,
/// found by a best-first walk pruned with BoxSeparationTravel of the node boxes. 0 when the
/// surfaces are within margin_mm already (or may be, by every separating axis tried), and as
/// soon as the bound is found not above `min_travel_mm` (a caller with a step that long
/// already does not need it): the walk then stops early.
///
/// Unlike a distance step (d - margin, whatever the direction), the bound is directional, like
/// the motion bounds projected on closest-point directions of Tang, Kim and Manocha ("C2A:
/// Controlled conservative advancement for continuous collision detection of polygonal
/// models", ICRA 2009), here along separating axes: a peg sliding along a hole it clears moves
/// freely however small the clearance, as no axis separating the side walls is closing.
[[nodiscard]] double FreeTranslation(const Part& a, const RigidTransform& X_WA, const Part& b,
                                     const RigidTransform& X_WB, const Vec3& u_W, double margin_mm,
                                     double max_travel_mm, double min_travel_mm = 0.0);

/// Conservative advancement for a turn about a fixed axis with an advance along it (rotation
/// and screw motions, sweep.h): part a, from X_WA, turns by any angle about the world line
/// through axis_point_W along the unit axis_W and advances along axis_W; b stays at X_WB.
/// Returns an advance s in [0, max_advance_mm] such that for every advance in [0, s), with any
/// turn, the surfaces stay more than `margin_mm` apart; max_advance_mm when that holds
/// throughout (in particular, any return above 0 means the parts stay apart under a pure turn).
///
/// A turn keeps each point's distance from the axis and its position along it, and two points
/// are at least as far apart as those differ: so parts whose (distance, position) footprints
/// are more than the margin apart cannot come closer by turning, and only the advance can bring
/// them together. The bound is the minimum over triangle pairs of the advance at which their
/// footprints could come within the margin, found by a walk pruned with the node boxes'
/// footprints. A nut turning on a bolt it clears, or an arm turning beside obstacles outside
/// its swept ring, is free at once, where the distance step moves it by the clearance.
/// `min_advance_mm` stops the walk early as in FreeTranslation (0 is then returned).
[[nodiscard]] double FreeScrew(const Part& a, const RigidTransform& X_WA, const Part& b,
                               const RigidTransform& X_WB, const Vec3& axis_point_W,
                               const Vec3& axis_W, double margin_mm, double max_advance_mm,
                               double min_advance_mm = 0.0);

/// The closest point of a part's surface to a point.
struct PointDistanceResult {
  double distance =
      std::numeric_limits<double>::infinity();  ///< +inf when nothing within upper_bound.
  Vec3 p_PC = Vec3::Zero();                     ///< Closest point (part frame).
  uint32_t triangle = 0;                        ///< Triangle holding p_PC.
};

/// Closest point on the part's surface to p_PQ (part frame); triangles farther than
/// upper_bound are ignored. A nearest-first descent of the hierarchy that skips nodes whose box
/// is not nearer than the best triangle so far; exact (the minimum over all triangles).
[[nodiscard]] PointDistanceResult ClosestPoint(
    const Part& part, const Vec3& p_PQ,
    double upper_bound = std::numeric_limits<double>::infinity());

/// Whether p_PQ (part frame) lies inside the closed part, decided from `closest`, its
/// ClosestPoint: p is outside exactly when p - closest points along the angle-weighted
/// pseudo-normal of the feature holding the closest point (Bærentzen and Aanæs 2005): the
/// face's normal, at an edge the sum of its two faces' normals, at a vertex the sum of its
/// faces' normals weighted by their angles there (the faces are found by a search within the
/// closest distance). nullopt when p is on the surface, at a vertex whose faces do not form one
/// fan (a pinched vertex) or number more than 256, when the pseudo-normal nearly vanishes (two
/// faces folded flat, a needle-like vertex), when the sign is not clear (|cos| <= 1e-3), or for
/// rounding trouble: then ContainsPoint decides.
[[nodiscard]] std::optional<bool> InsideFromClosestFace(const Part& part, const Vec3& p_PQ,
                                                        const PointDistanceResult& closest);

/// The closest hit of a ray on a posed part.
struct RayHit {
  double t = 0.0;                ///< Ray parameter of the hit.
  uint32_t triangle = 0;         ///< Triangle index.
  uint32_t tag = 0;              ///< Triangle tag (B-rep face id).
  Vec3 p_W = Vec3::Zero();       ///< Hit point (world).
  Vec3 normal_W = Vec3::Zero();  ///< Unit geometric normal of the triangle as stored (world).
};

/// Closest hit of ray_W (world) on the posed part within the ray's [t_min, t_max].
[[nodiscard]] std::optional<RayHit> CastRay(const Part& part, const RigidTransform& X_WP,
                                            const Ray& ray_W);

/// True when the ray hits the part anywhere within [t_min, t_max] (early exit).
[[nodiscard]] bool RayHitsAny(const Part& part, const RigidTransform& X_WP, const Ray& ray_W);

}  // namespace clash::geom
