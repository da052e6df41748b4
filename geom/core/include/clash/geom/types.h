// Basic value types of the geometry core.
#pragma once

#include <Eigen/Core>
#include <Eigen/Geometry>

namespace clash::geom {

/// A 3-vector of doubles (lengths in millimetres).
using Vec3 = Eigen::Vector3d;
/// A 3x3 matrix of doubles.
using Mat3 = Eigen::Matrix3d;

}  // namespace clash::geom
