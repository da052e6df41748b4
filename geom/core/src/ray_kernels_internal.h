// The ray kernels: the leaf tests of the portable path (the exact double-precision watertight
// test of ray_internal.h, one triangle at a time, under WalkRayBvh's SSE2 walk), and the AVX2
// path for processors that have it (an 8-lane box test, four triangles at a time). Both give
// the same answers bit for bit: the AVX2 code performs the very operations of IntersectNode and
// IntersectWatertight in the same order (no fused multiply-add), and a lane with a zero edge
// function, which the scalar test recomputes in extended precision, is handed to the scalar
// test.
#pragma once

#include <cstdint>

#include "clash/geom/part.h"
#include "ray_bvh_internal.h"
#include "ray_internal.h"

namespace clash::geom::internal {

/// The closest hit so far of a closest-hit ray query.
struct ClosestHit {
  double t = 0.0;
  uint32_t id = 0;
  bool found = false;
};

/// Which kernels ray queries use.
enum class RayKernel {
  kScalar,  ///< SSE2 walk, one triangle at a time (any x86-64).
  kAvx2,    ///< 8-lane walk, four triangles at a time (processors with AVX2).
};

/// True when the processor has AVX2.
[[nodiscard]] bool Avx2Supported();
/// The kernel ray queries use: kAvx2 when supported, unless set otherwise.
[[nodiscard]] RayKernel ActiveRayKernel();
/// Selects the kernel (kAvx2 falls back to kScalar where unsupported); for tests and
/// benchmarks comparing the two. Not synchronised with queries running at the same time.
void SetRayKernel(RayKernel kernel);

/// Closest hit over triangles first .. first + count - 1 of `part` within
/// [r.t_min, *t_max]: ties go to the smaller triangle id. Lowers *t_max to a hit's t.
void LeafClosestScalar(const Part& part, const PreparedRay& r, uint32_t first, uint32_t count,
                       double* t_max, ClosestHit* best);
/// True when the ray hits a triangle of first .. first + count - 1 within [t_min, t_max].
bool LeafAnyScalar(const Part& part, const PreparedRay& r, uint32_t first, uint32_t count);
/// The closest hit of a ray (part frame) over the part's ray tree, AVX2 throughout: an 8-lane
/// box test (near and far planes of four children at once) and four triangles at a time.
/// Same answer as WalkRayBvh with LeafClosestScalar, bit for bit. Only where Avx2Supported(),
/// rf.usable, the part has a ray tree and r.t_min >= 0.
void ClosestHitAvx2(const Part& part, const PreparedRay& r, const PreparedRayF& rf, double* t_max,
                    ClosestHit* best);
/// Whether the ray hits the part within [r.t_min, r.t_max]; as ClosestHitAvx2.
bool AnyHitAvx2(const Part& part, const PreparedRay& r, const PreparedRayF& rf);

}  // namespace clash::geom::internal
