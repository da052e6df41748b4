// Footprints about an axis, for the conservative advancement of turning parts (FreeScrew in
// query.h): internal to geom/core.
//
// A rotation about an axis keeps every point's distance r from the axis and its position z
// along it; an advance along the axis adds to z. Two points are at least
// sqrt((r1 - r2)^2 + (z1 - z2)^2) apart (the difference of their components along the axis and
// of the lengths of their components across it). So two sets whose (r, z) footprints are more
// than a margin apart stay more than the margin apart under any turn of one of them about the
// axis, and only an advance can bring them closer.
#pragma once

#include "clash/geom/triangle.h"
#include "clash/geom/types.h"

namespace clash::geom::internal {

/// A line through p along the unit a (in the frame of whatever is measured against it).
struct AxisLine {
  Vec3 p = Vec3::Zero();
  Vec3 a = Vec3::UnitZ();
};

/// An outer bound of a set's (r, z) footprint about an axis: r_lo <= every distance from the axis
/// <= r_hi, z_lo <= every position along it <= z_hi.
struct Footprint {
  double r_lo = 0.0, r_hi = 0.0, z_lo = 0.0, z_hi = 0.0;
};

/// The footprint of the box centred at c with the given axes (columns) and half extents: z and
/// r_hi exact (the farthest corner), r_lo the largest 2D separating-axis gap of the box's
/// shadow on the plane across the axis (exact when the nearest point is on an edge).
[[nodiscard]] Footprint BoxFootprint(const Vec3& c, const Mat3& axes, const Vec3& half,
                                     const AxisLine& line);

/// The exact footprint of a triangle (r_lo is 0 when the axis pierces it).
[[nodiscard]] Footprint TriangleFootprint(const Triangle& t, const AxisLine& line);

/// The first advance s >= 0 of `moving` along the axis (its footprint shifted by +s in z) at
/// which the footprints may be within `margin` of each other: +inf when never, 0 when now.
[[nodiscard]] double FootprintAdvance(const Footprint& moving, const Footprint& fixed,
                                      double margin);

}  // namespace clash::geom::internal
