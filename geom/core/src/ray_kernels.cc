#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstring>

#include "ray_bvh_internal.h"
#include "ray_kernels_internal.h"

namespace clash::geom::internal {
namespace {

// Functions compiled for AVX2 (without FMA: a fused multiply-add would round differently from
// the scalar test). They are only called after Avx2Supported().
#define CLASH_AVX2 __attribute__((target("avx2")))

std::atomic<bool> g_use_avx2{true};

// A ray hit candidate is better than the best so far: nearer, or as near with a smaller id.
inline bool Better(double t, uint32_t id, const ClosestHit& best) {
  return !best.found || t < best.t || (t == best.t && id < best.id);
}

// The mesh arrays a leaf test reads.
struct LeafArrays {
  const TriangleMesh::Index3* tris;
  const Vec3* v;
  explicit LeafArrays(const Part& part)
      : tris(part.mesh().triangles().data()), v(part.mesh().vertices().data()) {}
};

// Corner `c` of the four triangles `id`, relative to the ray origin, one register per
// coordinate (x, y, z), lane j for triangle id[j].
CLASH_AVX2 inline void LoadCorner(const LeafArrays& m, const uint32_t id[4], int c,
                                  const __m256d org[3], __m256d out[3]) {
  const __m256i xyz = _mm256_setr_epi64x(-1, -1, -1, 0);  // (the 4th double is not read)
  const __m256d p0 = _mm256_maskload_pd(m.v[m.tris[id[0]][c]].data(), xyz);
  const __m256d p1 = _mm256_maskload_pd(m.v[m.tris[id[1]][c]].data(), xyz);
  const __m256d p2 = _mm256_maskload_pd(m.v[m.tris[id[2]][c]].data(), xyz);
  const __m256d p3 = _mm256_maskload_pd(m.v[m.tris[id[3]][c]].data(), xyz);
  const __m256d xz01 = _mm256_unpacklo_pd(p0, p1);  // x0 x1 z0 z1
  const __m256d y01 = _mm256_unpackhi_pd(p0, p1);   // y0 y1 0 0
  const __m256d xz23 = _mm256_unpacklo_pd(p2, p3);  // x2 x3 z2 z3
  const __m256d y23 = _mm256_unpackhi_pd(p2, p3);   // y2 y3 0 0
  out[0] = _mm256_sub_pd(_mm256_permute2f128_pd(xz01, xz23, 0x20), org[0]);
  out[1] = _mm256_sub_pd(_mm256_permute2f128_pd(y01, y23, 0x20), org[1]);
  out[2] = _mm256_sub_pd(_mm256_permute2f128_pd(xz01, xz23, 0x31), org[2]);
}

// Four watertight tests at once (lanes: triangles id[0..3], only the first `n` real). Sets
// *t to the hit parameters and returns the mask of lanes hit within [t_min, t_max]; lanes with
// a zero edge function are left out and returned in *scalar_lanes for the scalar test.
template <int KX, int KY, int KZ>
[[gnu::always_inline]] CLASH_AVX2 inline int Intersect4(const LeafArrays& m, const PreparedRay& r,
                                                        const uint32_t id[4], int n, double t_max,
                                                        double t[4], int* scalar_lanes) {
  const __m256d org[3] = {_mm256_set1_pd(r.org[0]), _mm256_set1_pd(r.org[1]),
                          _mm256_set1_pd(r.org[2])};
  __m256d A[3], B[3], C[3];
  LoadCorner(m, id, 0, org, A);
  LoadCorner(m, id, 1, org, B);
  LoadCorner(m, id, 2, org, C);
  const __m256d sx = _mm256_set1_pd(r.sx), sy = _mm256_set1_pd(r.sy);
  const __m256d ax = _mm256_sub_pd(A[KX], _mm256_mul_pd(sx, A[KZ]));
  const __m256d ay = _mm256_sub_pd(A[KY], _mm256_mul_pd(sy, A[KZ]));
  const __m256d bx = _mm256_sub_pd(B[KX], _mm256_mul_pd(sx, B[KZ]));
  const __m256d by = _mm256_sub_pd(B[KY], _mm256_mul_pd(sy, B[KZ]));
  const __m256d cx = _mm256_sub_pd(C[KX], _mm256_mul_pd(sx, C[KZ]));
  const __m256d cy = _mm256_sub_pd(C[KY], _mm256_mul_pd(sy, C[KZ]));
  const __m256d U = _mm256_sub_pd(_mm256_mul_pd(cx, by), _mm256_mul_pd(cy, bx));
  const __m256d V = _mm256_sub_pd(_mm256_mul_pd(ax, cy), _mm256_mul_pd(ay, cx));
  const __m256d W = _mm256_sub_pd(_mm256_mul_pd(bx, ay), _mm256_mul_pd(by, ax));
  const __m256d zero = _mm256_setzero_pd();
  const int real = (1 << n) - 1;
  const __m256d on_edge = _mm256_or_pd(
      _mm256_or_pd(_mm256_cmp_pd(U, zero, _CMP_EQ_OQ), _mm256_cmp_pd(V, zero, _CMP_EQ_OQ)),
      _mm256_cmp_pd(W, zero, _CMP_EQ_OQ));
  *scalar_lanes = _mm256_movemask_pd(on_edge) & real;
  const __m256d negative = _mm256_or_pd(
      _mm256_or_pd(_mm256_cmp_pd(U, zero, _CMP_LT_OQ), _mm256_cmp_pd(V, zero, _CMP_LT_OQ)),
      _mm256_cmp_pd(W, zero, _CMP_LT_OQ));
  const __m256d positive = _mm256_or_pd(
      _mm256_or_pd(_mm256_cmp_pd(U, zero, _CMP_GT_OQ), _mm256_cmp_pd(V, zero, _CMP_GT_OQ)),
      _mm256_cmp_pd(W, zero, _CMP_GT_OQ));
  int mask = real & ~*scalar_lanes & ~_mm256_movemask_pd(_mm256_and_pd(negative, positive));
  if (mask == 0) return 0;
  const __m256d det = _mm256_add_pd(_mm256_add_pd(U, V), W);
  const __m256d sz = _mm256_set1_pd(r.sz);
  const __m256d az = _mm256_mul_pd(sz, A[KZ]);
  const __m256d bz = _mm256_mul_pd(sz, B[KZ]);
  const __m256d cz = _mm256_mul_pd(sz, C[KZ]);
  const __m256d T = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(U, az), _mm256_mul_pd(V, bz)),
                                  _mm256_mul_pd(W, cz));
  const __m256d tt = _mm256_div_pd(T, det);
  const __m256d in_range = _mm256_and_pd(_mm256_cmp_pd(tt, _mm256_set1_pd(r.t_min), _CMP_GE_OQ),
                                         _mm256_cmp_pd(tt, _mm256_set1_pd(t_max), _CMP_LE_OQ));
  mask &= _mm256_movemask_pd(_mm256_andnot_pd(_mm256_cmp_pd(det, zero, _CMP_EQ_OQ), in_range));
  _mm256_storeu_pd(t, tt);
  return mask;
}

// The triangle ids s .. s + n - 1 (n <= 4), padded with the first.
inline void LoadIds(uint32_t s, int n, uint32_t id[4]) {
  for (int j = 0; j < 4; ++j) id[j] = s + static_cast<uint32_t>(j < n ? j : 0);
}

// Tests triangles first .. first + count - 1 four at a time within [r.t_min, *t_max]; calls
// on_hits(id, t, mask) for each group with hits (mask: the lanes hit, t: their parameters)
// and stops when it returns true. Returns whether it stopped.
template <int KX, int KY, int KZ, typename OnHits>
CLASH_AVX2 bool ForHitGroups(const LeafArrays& m, const PreparedRay& r, uint32_t first,
                             uint32_t count, const double* t_max, OnHits&& on_hits) {
  for (uint32_t s = first; s < first + count; s += 4) {
    const int n = static_cast<int>(std::min<uint32_t>(4, first + count - s));
    uint32_t id[4];
    LoadIds(s, n, id);
    alignas(32) double t[4];
    int scalar_lanes;
    int mask = Intersect4<KX, KY, KZ>(m, r, id, n, *t_max, t, &scalar_lanes);
    while (scalar_lanes != 0) {
      const int j = __builtin_ctz(static_cast<unsigned>(scalar_lanes));
      scalar_lanes &= scalar_lanes - 1;
      PreparedRay rr = r;
      rr.t_max = *t_max;
      const auto& tri = m.tris[id[j]];
      if (auto h = IntersectWatertight(rr, m.v[tri[0]], m.v[tri[1]], m.v[tri[2]])) {
        t[j] = h->t;
        mask |= 1 << j;
      }
    }
    if (mask != 0 && on_hits(id, t, mask)) return true;
  }
  return false;
}

// The single-precision ray of PreparedRayF laid out for an 8-lane box test: per axis, lanes
// 0-3 take the near planes of a node's four children and lanes 4-7 their far planes, whose
// parameters are negated so that one max accumulates both (max(-a, -b) = -min(a, b) exactly).
//
// The widening of IntersectNode (entry lowered, exit raised by kWiden relative) is folded into
// the inverse direction: the near lanes multiply by 1/d shrunk by kWiden, the far lanes by 1/d
// grown by kWiden. That lowers every positive entry parameter and raises every positive exit
// parameter by more than the rounding of the test (3 units of 2^-24 and the float conversion of
// the scaled inverse); a negative parameter moves the other way, which only matters below the
// entry bound: so the ray must have t_min >= 0 (an entry bound >= 0 dominates every negative
// entry; a negative exit means the box lies behind the origin, where its sign is exact because
// the subtraction of floats is).
struct RayLanes8 {
  __m256 o[3];            // origin rounded for the near plane (lanes 0-3), the far (4-7)
  __m256 inv[3];          // 1/d shrunk (lanes 0-3), -1/d grown (4-7)
  __m128i near_first[3];  // byte order putting a node's near planes first
  __m128 tn0;             // entry bound

  CLASH_AVX2 RayLanes8(const PreparedRay& r, const PreparedRayF& rf) {
    assert(r.t_min >= 0.0);
    constexpr double kShrink = 1.0 - PreparedRayF::kWiden, kGrow = 1.0 + PreparedRayF::kWiden;
    for (int a = 0; a < 3; ++a) {
      o[a] = _mm256_insertf128_ps(_mm256_castps128_ps256(rf.o_near[a]), rf.o_far[a], 1);
      const double inv_scaled = r.inv_dir[a] * rf.t_scale;  // exact (+-inf for a zero d)
      inv[a] = _mm256_insertf128_ps(
          _mm256_castps128_ps256(_mm_set1_ps(static_cast<float>(inv_scaled * kShrink))),
          _mm_set1_ps(static_cast<float>(-inv_scaled * kGrow)), 1);
      near_first[a] = rf.near_side[a] == 0
                          ? _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1)
                          : _mm_setr_epi8(4, 5, 6, 7, 0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1, -1);
    }
    tn0 = _mm_set1_ps(rf.Lower(r.t_min));
  }
};

// The box test of IntersectNode (ray_bvh_internal.h) on 8 lanes, with the widening folded into
// the inverse direction (see RayLanes8) and the three axes combined as a tree. Its mask may
// differ from IntersectNode's in the last bits of a box's boundary, never by culling a box the
// ray touches; the leaves decide the answer, so it is the same bit for bit.
//
// A NaN parameter (the origin on the plane of an axis the ray runs parallel to: the ray is in
// that slab) drops out of a max when it is the first operand, and at worst takes a second
// axis's constraint with it, which only lets more boxes through.
CLASH_AVX2 inline int IntersectNode8(const RayNode& n, const RayLanes8& r, float tf, float t[4]) {
  const __m128 sign = _mm_set1_ps(-0.0f);
  __m256 ta[3];
#pragma GCC unroll 3
  for (int a = 0; a < 3; ++a) {
    // Lower planes, then upper planes (8 bytes), near ones first.
    const __m128i bytes = _mm_shuffle_epi8(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(n.q[a][0])), r.near_first[a]);
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
    const __m256 planes = _mm256_add_ps(_mm256_broadcast_ss(&n.origin[a]),
                                        _mm256_mul_ps(q, _mm256_broadcast_ss(&n.scale[a])));
    ta[a] = _mm256_mul_ps(_mm256_sub_ps(planes, r.o[a]), r.inv[a]);
  }
  const __m256 bounds = _mm256_insertf128_ps(_mm256_castps128_ps256(r.tn0), _mm_set1_ps(-tf), 1);
  const __m256 acc = _mm256_max_ps(_mm256_max_ps(ta[0], ta[1]), _mm256_max_ps(ta[2], bounds));
  const __m128 tn = _mm256_castps256_ps128(acc);
  const __m128 tf4 = _mm_xor_ps(_mm256_extractf128_ps(acc, 1), sign);
  const __m128i refs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(n.child));
  const __m128i empty = _mm_cmpeq_epi32(refs, _mm_set1_epi32(-1));
  const __m128 hit = _mm_andnot_ps(_mm_castsi128_ps(empty), _mm_cmple_ps(tn, tf4));
  _mm_store_ps(t, tn);
  return _mm_movemask_ps(hit);
}

// Calls f.template operator()<KX, KY, KZ>() for the ray's axis permutation.
template <typename F>
CLASH_AVX2 auto WithPermutation(const PreparedRay& r, F&& f) {
  // (kx, ky) follow kz cyclically, or swapped when the ray runs down the kz axis.
  const bool swapped = r.kx != (r.kz + 1) % 3;
  switch (r.kz * 2 + (swapped ? 1 : 0)) {
    case 0:
      return f.template operator()<1, 2, 0>();
    case 1:
      return f.template operator()<2, 1, 0>();
    case 2:
      return f.template operator()<2, 0, 1>();
    case 3:
      return f.template operator()<0, 2, 1>();
    case 4:
      return f.template operator()<0, 1, 2>();
    default:
      return f.template operator()<1, 0, 2>();
  }
}

// Walks the part's ray tree with the 8-lane box test and tests the leaves four triangles at a
// time within [r.t_min, *t_max]: on_hits(id, t, mask) as in ForHitGroups (it may lower
// *t_max), true to stop. Returns whether it stopped.
template <typename OnHits>
CLASH_AVX2 bool WalkAvx2(const Part& part, const PreparedRay& r, const PreparedRayF& rf,
                         double* t_max, OnHits&& on_hits) {
  const LeafArrays m(part);
  const RayLanes8 r8(r, rf);
  bool stopped = false;
  WithPermutation(r, [&]<int KX, int KY, int KZ>() CLASH_AVX2 {
    WalkRayNodes(
        part.ray_bvh(), t_max,
        [&](const RayNode& n, float tf, float t[4])
            CLASH_AVX2 { return IntersectNode8(n, r8, tf, t); },
        [&](double t) { return rf.Upper(t); },
        [&](uint32_t first, uint32_t count, double* tm) CLASH_AVX2 {
          stopped = ForHitGroups<KX, KY, KZ>(m, r, first, count, tm, on_hits);
          return stopped;
        });
  });
  return stopped;
}

}  // namespace

bool Avx2Supported() {
  static const bool supported = __builtin_cpu_supports("avx2");
  return supported;
}

RayKernel ActiveRayKernel() {
  return g_use_avx2.load(std::memory_order_relaxed) && Avx2Supported() ? RayKernel::kAvx2
                                                                       : RayKernel::kScalar;
}

void SetRayKernel(RayKernel kernel) {
  g_use_avx2.store(kernel == RayKernel::kAvx2, std::memory_order_relaxed);
}

void LeafClosestScalar(const Part& part, const PreparedRay& r, uint32_t first, uint32_t count,
                       double* t_max, ClosestHit* best) {
  const LeafArrays m(part);
  PreparedRay rr = r;
  for (uint32_t id = first; id < first + count; ++id) {
    const auto& tri = m.tris[id];
    rr.t_max = *t_max;
    auto h = IntersectWatertight(rr, m.v[tri[0]], m.v[tri[1]], m.v[tri[2]]);
    if (h && Better(h->t, id, *best)) {
      *t_max = h->t;
      *best = {h->t, id, true};
    }
  }
}

CLASH_AVX2 void ClosestHitAvx2(const Part& part, const PreparedRay& r, const PreparedRayF& rf,
                               double* t_max, ClosestHit* best) {
  WalkAvx2(part, r, rf, t_max, [&](const uint32_t id[4], const double t[4], int mask) {
    while (mask != 0) {
      const int j = __builtin_ctz(static_cast<unsigned>(mask));
      mask &= mask - 1;
      if (Better(t[j], id[j], *best)) {
        *t_max = t[j];
        *best = {t[j], id[j], true};
      }
    }
    return false;
  });
}

bool LeafAnyScalar(const Part& part, const PreparedRay& r, uint32_t first, uint32_t count) {
  const LeafArrays m(part);
  for (uint32_t id = first; id < first + count; ++id) {
    const auto& tri = m.tris[id];
    if (IntersectWatertight(r, m.v[tri[0]], m.v[tri[1]], m.v[tri[2]])) return true;
  }
  return false;
}

CLASH_AVX2 bool AnyHitAvx2(const Part& part, const PreparedRay& r, const PreparedRayF& rf) {
  double t_max = r.t_max;
  return WalkAvx2(part, r, rf, &t_max, [](const uint32_t*, const double*, int) { return true; });
}

}  // namespace clash::geom::internal
