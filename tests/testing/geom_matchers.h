// Assertions on geometry values shared by the geometry tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "clash/geom/transform.h"

namespace clash::testing {

/// Expects the poses to agree: every rotation entry and the translation within `tol`.
inline void ExpectPoseNear(const geom::RigidTransform& got, const geom::RigidTransform& want,
                           double tol, const std::string& what = "") {
  EXPECT_LE((got.R - want.R).cwiseAbs().maxCoeff(), tol) << what;
  EXPECT_LE((got.t - want.t).norm(), tol) << what;
}

}  // namespace clash::testing
