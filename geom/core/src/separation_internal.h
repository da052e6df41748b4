// The per-axis step of the continuous separating-axis bounds (BoxSeparationTravel,
// TriangleSeparationTravel, FreeTranslation's interval tests): internal to geom/core.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

namespace clash::geom::internal {

// The travels s >= 0 at which two convex sets, the second moving at a constant velocity, may be
// within a margin of each other. Along an axis L (not necessarily unit) their projections have
// centres `s` apart (second minus first) and half-lengths adding up to `radii`, and the offset
// grows by `rate` per unit of travel; while |offset| > radii + margin |L| the sets are farther
// apart than the margin. So a travel at which they are within the margin lies, for every axis,
// in the slab of travels where |s + rate x| <= radii + margin |L|: the window [lo, hi] is the
// intersection of the slabs seen so far. Exact for the margin 0 when the axes include every
// face normal of the sets' Minkowski difference (then the window is the time of contact).
struct TravelWindow {
  double lo = 0.0;
  double hi = std::numeric_limits<double>::infinity();

  void Axis(double s, double radii, double rate, double margin_len) {
    const double reach = radii + margin_len;
    // An overflowed axis (inf or NaN: coordinates too large for the axis' length) says
    // nothing, and leaving it out keeps the window a true bound: it never counts as separation.
    if (!std::isfinite(s) || !std::isfinite(reach) || !std::isfinite(rate)) return;
    if (rate == 0.0) {
      if (!(std::abs(s) <= reach)) lo = std::numeric_limits<double>::infinity();
      return;
    }
    const double x0 = (-reach - s) / rate, x1 = (reach - s) / rate;
    lo = std::max(lo, std::min(x0, x1));
    hi = std::min(hi, std::max(x0, x1));
  }
  // The first travel at which the sets may be within the margin (+inf: never).
  [[nodiscard]] double First() const {
    return lo <= hi ? lo : std::numeric_limits<double>::infinity();
  }
  // Nothing below `target` is possible any more.
  [[nodiscard]] bool AtLeast(double target) const { return !(lo <= hi) || lo >= target; }
};

}  // namespace clash::geom::internal
