// The adaptive AABB/OBB choice of the seed design (DESIGN.md §3, rules S1-S6).
//
// For a set of triangles: the area-weighted mean m and covariance C of their surfaces; the
// unit eigenvectors of C as principal axes; the angle between each principal axis and the
// nearest coordinate axis of the part. If every angle is within `eps`, the triangles are laid
// out on the part's own axes and the tight axis-aligned box is used. Otherwise the box on the
// principal axes (extents by projecting the vertices) is built, and it is kept only when its
// volume is at most `obb_volume_ratio` of the AABB's: an OBB that is not materially tighter
// costs more to test and saves nothing.
//
// Three deliberate refinements of the seed rule:
//  - The AABB is the tight min/max box, not a box centred on the mean: it is never larger.
//  - Eigenvalues that are (nearly) equal leave their eigenvectors undetermined (a cylinder's
//    cross-section, a cube). Only the axes that are determined are compared with the
//    coordinate axes; a repeated pair is aligned when the remaining axis is.
//  - A small angle is not enough for a slender node: a strip 700 times longer than thick,
//    tilted by 1.3 degrees, has an AABB 30 times the volume of its OBB (seen on hammer.iges).
//    The shortcut is taken only when the tilt is predicted to grow the box by less than
//    1 / obb_volume_ratio (PredictedAabbGrowth); otherwise both boxes are compared.
#pragma once

#include <cstdint>
#include <span>

#include "clash/geom/aabb.h"
#include "clash/geom/obb.h"
#include "clash/geom/triangle.h"

namespace clash::geom {

/// How the kind of each node's volume is chosen.
enum class BvMode : uint8_t {
  kAdaptive,  ///< The seed rule above.
  kAabbOnly,  ///< Always the axis-aligned box (for comparison).
  kObbOnly,   ///< Always the principal-axes box (for comparison).
};

/// Settings of the adaptive rule.
struct AdaptiveBvOptions {
  BvMode mode = BvMode::kAdaptive;  ///< Selection mode.
  /// Largest angle (radians) between a principal axis and a coordinate axis for which the AABB
  /// may be taken without fitting an OBB (2 degrees; see PredictedAabbGrowth for the guard
  /// on slender nodes).
  double eps_rad = 0.035;
  /// An OBB replaces the AABB only when vol(OBB) <= ratio * vol(AABB).
  double obb_volume_ratio = 0.8;
  /// Relative tolerance under which two eigenvalues count as equal.
  double eigen_tie_relative = 1e-3;
};

/// Area moments of a set of triangles: sums that add up over disjoint sets, so a node's
/// moments are its children's sum.
struct AreaMoments {
  double area = 0.0;           ///< Total area.
  Vec3 first = Vec3::Zero();   ///< Sum of area * centroid.
  Mat3 second = Mat3::Zero();  ///< Sum of the second moments of each triangle's surface.

  /// Moments of one triangle.
  [[nodiscard]] static AreaMoments Of(const Triangle& t);
  /// Adds another set's moments.
  void Add(const AreaMoments& o) {
    area += o.area;
    first += o.first;
    second += o.second;
  }
  /// Area-weighted mean of the surface.
  [[nodiscard]] Vec3 Mean() const { return first / area; }
  /// Area-weighted covariance of the surface (Gottschalk's formula for triangles).
  [[nodiscard]] Mat3 Covariance() const;
};

/// The principal frame of a covariance: eigenvectors (columns, right-handed, descending
/// eigenvalues) by Eigen's self-adjoint solver.
[[nodiscard]] PrincipalFrame PrincipalAxes(const Vec3& mean, const Mat3& covariance);

/// The largest angle between a determined principal axis and its nearest coordinate axis,
/// with ties handled as described above.
[[nodiscard]] double MisalignmentAngle(const PrincipalFrame& frame, double tie_relative);

/// The chosen volume for a set of points with the given moments.
struct AdaptiveBox {
  Obb box;                 ///< The chosen box (axes == identity for an AABB).
  bool is_obb = false;     ///< Which kind was chosen.
  double aabb_volume = 0;  ///< Volume of the tight AABB (for statistics).
};

/// Extents below this fraction of a box's diagonal count as that much when volumes are
/// compared, so flat boxes compare by area and not by a rounding-sized thickness.
inline constexpr double kVolumePadRelative = 1e-3;

/// Predicted ratio of the AABB's volume to the OBB's for a set with this principal frame:
/// the principal standard-deviation box (extents sqrt(eigenvalue)) against its axis-aligned
/// box. 1 when the axes are the coordinate axes.
[[nodiscard]] double PredictedAabbGrowth(const PrincipalFrame& frame, double pad_relative);

/// True when the rule takes the axis-aligned box without fitting an OBB.
[[nodiscard]] bool TakesAabb(const PrincipalFrame& frame, const AdaptiveBvOptions& options);

/// The rule's last step for a set whose TakesAabb is false: `fitted` (the set's box on its
/// principal axes) unless, in adaptive mode, it is not materially smaller than the set's tight
/// AABB (volume above obb_volume_ratio of the AABB's), in which case the AABB.
[[nodiscard]] AdaptiveBox ChooseFittedBox(const Obb& fitted, const Aabb& aabb,
                                          const AdaptiveBvOptions& options);

}  // namespace clash::geom
