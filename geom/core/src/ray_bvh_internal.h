// SSE2 traversal of a RayBvh: four child boxes per step, nearest child first, an explicit
// stack. The box test is conservative in single precision (see PreparedRayF).
#pragma once

#include <emmintrin.h>

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "clash/geom/ray_bvh.h"
#include "ray_internal.h"

namespace clash::geom::internal {

/// The 4 decoded planes (one per child) of a node on `axis`, side 0 (lower) or 1 (upper).
/// q * scale is exact (8-bit integer times a power of two), so the one rounding is the sum:
/// the build checks the result of this very function against the box it must contain.
inline __m128 DecodePlanes(const RayNode& n, int axis, int side) {
  int32_t bytes;
  std::memcpy(&bytes, n.q[axis][side], 4);
  const __m128i zero = _mm_setzero_si128();
  const __m128i q32 = _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(bytes), zero), zero);
  return _mm_add_ps(_mm_set1_ps(n.origin[axis]),
                    _mm_mul_ps(_mm_cvtepi32_ps(q32), _mm_set1_ps(n.scale[axis])));
}

/// Float rounding toward -inf of a double (beyond the float range: FLT_MAX or -inf; NaN: -inf).
/// Without branches in the common case: whether rounding to nearest went up depends on the
/// data, and a mispredicted branch costs more than the selects.
inline float RoundDown(double x) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (!(std::abs(x) <= kMax)) [[unlikely]] {
    return x > 0 ? std::numeric_limits<float>::max() : -std::numeric_limits<float>::infinity();
  }
  const float f = static_cast<float>(x);  // to nearest
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  // The float just below f: +0 steps like -0, to the smallest negative subnormal; a negative
  // float grows in magnitude (bits + 1), a positive one shrinks (bits - 1).
  const uint32_t from = bits | (static_cast<uint32_t>(bits == 0) << 31);
  const uint32_t below = from - 1u + 2u * (from >> 31);
  const uint32_t up = static_cast<uint32_t>(static_cast<double>(f) > x);  // f rounded up
  const uint32_t out_bits = (below & (0u - up)) | (bits & (up - 1u));
  float out;
  std::memcpy(&out, &out_bits, 4);
  return out;
}
/// Float rounding toward +inf of a double (beyond the float range: -FLT_MAX or +inf).
inline float RoundUp(double x) { return -RoundDown(-x); }

/// A float not above x, for x in [-inf, FLT_MAX]: x lowered by 2^-22 of its magnitude and
/// 2^-140 before rounding to nearest, more than that rounding can give back (half a unit in
/// the last place: at most 2^-24 of the magnitude, or 2^-150 among the subnormals; the double
/// subtraction rounds by 2^-53). At most four units below RoundDown's answer for |x| >= 2^-116
/// (nearer zero, about 2^-140 below x), in a fifth of its operations: for the per-ray bounds
/// of the box test, which only get looser (never cull more).
inline float FloatBelow(double x) {
  return static_cast<float>(x - (std::abs(x) * 0x1p-22 + 0x1p-140));
}
/// A float not below x, for x in [-FLT_MAX, +inf] (FloatBelow's margin added).
inline float FloatAbove(double x) { return -FloatBelow(-x); }

/// A ray prepared for the single-precision box test, in units t' = t * t_scale (t_scale a
/// power of two making the largest direction component lie in [1, 2)).
///
/// Why the test never culls a box the ray touches: per axis the entry plane's parameter is
/// computed from an origin rounded so that it can only decrease, the exit plane's from one
/// rounded so that it can only increase (FloatAbove, FloatBelow); what remains is the rounding of
/// the subtraction, of the product and of 1/d (3 units of 2^-24 in all), and the entry is lowered
/// and the exit raised by kWiden (about 17 units) relative. A zero direction component gives an
/// infinite inverse: the plane parameters are then +-inf, or NaN when the origin lies on the plane,
/// which the min/max operand order ignores (the ray is then inside that slab). Rays this
/// cannot bound (a direction component below 1e-20 of the largest, coordinates beyond 1e15)
/// are not `usable` and take the double-precision path.
struct PreparedRayF {
  static constexpr float kWiden = 1e-6f;
  __m128 o_near[3], o_far[3], inv[3];
  int near_side[3];
  double t_scale = 1.0;
  bool usable = false;

  PreparedRayF(const PreparedRay& r, const Vec3& ref) {
    const double dmax =
        std::max(std::abs(r.dir.x()), std::max(std::abs(r.dir.y()), std::abs(r.dir.z())));
    // t_scale = 2^floor(log2(dmax)): the exponent bits of dmax (normal, finite dmax only).
    uint64_t bits;
    std::memcpy(&bits, &dmax, 8);
    bits &= 0x7ff0000000000000ull;
    if (bits == 0 || bits == 0x7ff0000000000000ull) return;  // zero, subnormal, inf or NaN
    std::memcpy(&t_scale, &bits, 8);
    // 1 / t_scale, also a power of two (exact), unless it would be subnormal.
    const uint64_t exponent = bits >> 52;
    if (exponent >= 2046) return;
    const uint64_t inv_bits = (2046 - exponent) << 52;
    double inv_t_scale;
    std::memcpy(&inv_t_scale, &inv_bits, 8);
    for (int a = 0; a < 3; ++a) {
      const double o = r.org[a] - ref[a];
      if (!(std::abs(o) <= kRayBvhMaxCoordinate)) return;
      const double d = r.dir[a] * inv_t_scale;  // exact: scaling by a power of two
      if (d != 0.0 && std::abs(d) < 1e-20) return;
      const bool negative = std::signbit(d);
      near_side[a] = negative ? 1 : 0;
      // Entry: d >= 0 enters at the lower plane, (lo - o) / d must not grow: o rounded up.
      const float up = FloatAbove(o), down = FloatBelow(o);
      o_near[a] = _mm_set1_ps(negative ? down : up);
      o_far[a] = _mm_set1_ps(negative ? up : down);
      // 1/d = t_scale * (1/dir): exact scaling of r.inv_dir by a power of two (+-inf for +-0).
      inv[a] = _mm_set1_ps(static_cast<float>(r.inv_dir[a] * t_scale));
    }
    usable = true;
  }
  /// A ray parameter t as a lower / upper bound in scaled single precision.
  [[nodiscard]] float Lower(double t) const { return RoundDown(t * t_scale); }
  /// (Clamped at -FLT_MAX, FloatAbove's domain; a NaN t gives NaN, which passes no box, as a
  /// NaN t_max lets no hit through either.)
  [[nodiscard]] float Upper(double t) const {
    return FloatAbove(std::max(t * t_scale, -static_cast<double>(FLT_MAX)));
  }
};

/// Entry parameters (t') of the four children of n and the mask of the children the ray
/// touches within [tn0, tf0] (conservatively).
inline int IntersectNode(const RayNode& n, const PreparedRayF& r, __m128 tn0, __m128 tf0,
                         __m128* out_tn) {
  __m128 tn = tn0, tf = tf0;
  for (int a = 0; a < 3; ++a) {
    const __m128 pn = DecodePlanes(n, a, r.near_side[a]);
    const __m128 pf = DecodePlanes(n, a, 1 - r.near_side[a]);
    const __m128 ta = _mm_mul_ps(_mm_sub_ps(pn, r.o_near[a]), r.inv[a]);
    const __m128 tb = _mm_mul_ps(_mm_sub_ps(pf, r.o_far[a]), r.inv[a]);
    tn = _mm_max_ps(ta, tn);  // NaN in ta: keeps tn
    tf = _mm_min_ps(tb, tf);
  }
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  const __m128 widen = _mm_set1_ps(PreparedRayF::kWiden);
  tn = _mm_sub_ps(tn, _mm_mul_ps(_mm_and_ps(tn, abs_mask), widen));
  tf = _mm_add_ps(tf, _mm_mul_ps(_mm_and_ps(tf, abs_mask), widen));
  const __m128i refs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(n.child));
  const __m128i empty = _mm_cmpeq_epi32(refs, _mm_set1_epi32(-1));
  const __m128 hit = _mm_andnot_ps(_mm_castsi128_ps(empty), _mm_cmple_ps(tn, tf));
  *out_tn = tn;
  return _mm_movemask_ps(hit);
}

/// Walks the leaves of `bvh` that a ray may hit, nearest box first, with the box test
/// `node_test(node, tf, t)`: it returns the mask of the children of `node` the ray may enter
/// before tf (scaled units, see PreparedRayF) and stores their entry parameters in t[4].
/// `leaf(first, count, &t_max)` tests triangles first .. first + count - 1, may lower t_max
/// (original ray units) and returns true to stop; `upper(t)` converts t_max to scaled units,
/// rounding up. Nodes entered beyond t_max are skipped. Always inlined, so that a caller
/// compiled for another instruction set gets the walk, and can inline its callbacks, in its
/// own code.
template <typename NodeTest, typename Upper, typename LeafFn>
[[gnu::always_inline]] inline void WalkRayNodes(const RayBvh& bvh, double* t_max,
                                                NodeTest&& node_test, Upper&& upper,
                                                LeafFn&& leaf) {
  const uint32_t root = bvh.root_ref();
  if (root == kRayEmptyRef) return;
  if (RayBvh::IsLeafRef(root)) {
    leaf(RayBvh::LeafFirst(root), RayBvh::LeafCount(root), t_max);
    return;
  }
  // Each step pops one entry and pushes at most three; depth is bounded by the binary
  // hierarchy's (<= 60 levels), so 3 * 60 + 1 entries suffice.
  constexpr int kStack = 192;
  struct Entry {
    uint32_t ref;
    float t;
  } stack[kStack];
  const RayNode* nodes = bvh.nodes().data();
  float tf_scalar = upper(*t_max);
  int sp = 0;
  uint32_t cur = 0;  // the root, an inner node
  for (;;) {
    if (RayBvh::IsLeafRef(cur)) {
      if (leaf(RayBvh::LeafFirst(cur), RayBvh::LeafCount(cur), t_max)) return;
      tf_scalar = upper(*t_max);
    } else {
      const RayNode& n = nodes[cur];
      alignas(16) float t[4];
      int mask = node_test(n, tf_scalar, t);
      if (mask != 0) {
        const int i0 = __builtin_ctz(static_cast<unsigned>(mask));
        mask &= mask - 1;
        if (mask == 0) {  // one child: descend
          cur = n.child[i0];
          continue;
        }
        const int i1 = __builtin_ctz(static_cast<unsigned>(mask));
        mask &= mask - 1;
        if (mask == 0) {  // two children: descend into the nearer, push the other
          assert(sp < kStack);
          const bool first0 = t[i0] <= t[i1];
          stack[sp++] = first0 ? Entry{n.child[i1], t[i1]} : Entry{n.child[i0], t[i0]};
          cur = first0 ? n.child[i0] : n.child[i1];
          continue;
        }
        // Three or four: push all, farthest first (insertion sort in place on the stack),
        // then pop the nearest below.
        assert(sp + 4 <= kStack);
        const int base = sp;
        stack[sp++] = {n.child[i0], t[i0]};
        int rest = mask | (1 << i1);
        while (rest) {
          const int i = __builtin_ctz(static_cast<unsigned>(rest));
          rest &= rest - 1;
          const Entry c{n.child[i], t[i]};
          int j = sp++;
          while (j > base && stack[j - 1].t < c.t) {
            stack[j] = stack[j - 1];
            --j;
          }
          stack[j] = c;
        }
      }
    }
    // Pop the nearest entry not beyond the closest hit so far.
    for (;;) {
      if (sp == 0) return;
      const Entry e = stack[--sp];
      if (e.t <= tf_scalar) {
        cur = e.ref;
        break;
      }
    }
  }
}

/// Walks the leaves of `bvh` that a ray may hit, nearest box first (SSE2 box test).
/// `leaf(first, count, &t_max)` tests triangles first .. first + count - 1, may lower t_max
/// (original ray units) and returns true to stop. Nodes entered beyond t_max are skipped.
template <typename LeafFn>
void WalkRayBvh(const RayBvh& bvh, const PreparedRayF& r, double t_min, double* t_max,
                LeafFn&& leaf) {
  const __m128 tn0 = _mm_set1_ps(r.Lower(t_min));
  WalkRayNodes(
      bvh, t_max,
      [&](const RayNode& n, float tf, float t[4]) {
        __m128 tn;
        const int mask = IntersectNode(n, r, tn0, _mm_set1_ps(tf), &tn);
        _mm_store_ps(t, tn);
        return mask;
      },
      [&](double t) { return r.Upper(t); }, leaf);
}

}  // namespace clash::geom::internal
