#include "clash/geom/bvh_build.h"

#include <emmintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace clash::geom {
namespace {

// The split search works on single-precision copies of the boxes and centroids, taken
// relative to the centre of all boxes (so a part far from the origin keeps its relative
// precision), four lanes per point (x, y, z, unused). Single precision only steers the SAH
// choice: node boxes are computed exactly, in double precision, once the tree is built. Where
// it cannot tell centroids apart (a cluster finer than ~1e-7 of the whole set) or its areas
// overflow (extents beyond ~1e19), the range gets no SAH split and is split at the median.
struct alignas(16) BoxF {
  __m128 lo, hi;
};
struct alignas(16) PointF {
  __m128 p;
};

// A range of primitive slots to split, with the bounds of its centroids (single precision;
// known from the parent's partition, so no pass over the range recomputes them).
struct alignas(16) Task {
  __m128 clo, chi;
  uint32_t node;
  uint32_t begin, end;
  int depth;
};

struct alignas(16) Bin {
  BoxF box;
  uint32_t count;
};

constexpr int kMaxBins = 64;
static_assert(kMaxBins <= 256, "a primitive keeps its bin on each axis in 8 bits");

inline BoxF EmptyBoxF() {
  return {_mm_set1_ps(std::numeric_limits<float>::infinity()),
          _mm_set1_ps(-std::numeric_limits<float>::infinity())};
}
inline void AddBox(BoxF& to, const BoxF& b) {
  to.lo = _mm_min_ps(to.lo, b.lo);
  to.hi = _mm_max_ps(to.hi, b.hi);
}
inline void AddPoint(BoxF& to, __m128 p) {
  to.lo = _mm_min_ps(to.lo, p);
  to.hi = _mm_max_ps(to.hi, p);
}
// Half the surface area of a box (lane 3 ignored), a negative size (an empty or inverted
// box) counting as 0, so such a primitive box never makes a cost negative.
inline float HalfAreaF(const BoxF& b) {
  const __m128 s = _mm_max_ps(_mm_sub_ps(b.hi, b.lo), _mm_setzero_ps());
  const __m128 p = _mm_mul_ps(s, _mm_shuffle_ps(s, s, _MM_SHUFFLE(3, 0, 2, 1)));  // xy yz zx
  const __m128 xy_yz = _mm_add_ss(p, _mm_shuffle_ps(p, p, _MM_SHUFFLE(1, 1, 1, 1)));
  return _mm_cvtss_f32(_mm_add_ss(xy_yz, _mm_movehl_ps(p, p)));
}

// Half the surface area of a box, 0 for an empty one.
double HalfArea(const Aabb& b) {
  if (b.IsEmpty()) return 0.0;
  const Vec3 s = b.Size();
  return s.x() * s.y() + s.y() * s.z() + s.z() * s.x();
}

inline __m128 ToFloat(const Vec3& v, const Vec3& origin) {
  return _mm_setr_ps(static_cast<float>(v.x() - origin.x()), static_cast<float>(v.y() - origin.y()),
                     static_cast<float>(v.z() - origin.z()), 0.0f);
}

}  // namespace

BvhTopology BuildBvh(std::span<const Aabb> boxes, std::span<const Vec3> centroids,
                     const BvhBuildOptions& options) {
  assert(boxes.size() == centroids.size());
  BvhTopology out;
  const uint32_t n = static_cast<uint32_t>(boxes.size());
  if (n == 0) return out;
  const uint32_t max_leaf = static_cast<uint32_t>(std::clamp(options.max_leaf_size, 1, 255));
  const int bins = std::clamp(options.bins, 2, kMaxBins);

  Aabb all;
  for (const Aabb& b : boxes) all.Add(b);
  const Vec3 origin = all.IsEmpty() ? Vec3::Zero() : all.Center();
  std::vector<BoxF> fbox(n);
  std::vector<PointF> fcen(n);
  BoxF root_c = EmptyBoxF();
  for (uint32_t i = 0; i < n; ++i) {
    fbox[i] = {ToFloat(boxes[i].min, origin), ToFloat(boxes[i].max, origin)};
    fcen[i].p = ToFloat(centroids[i], origin);
    AddPoint(root_c, fcen[i].p);
  }

  out.prims.resize(n);
  std::iota(out.prims.begin(), out.prims.end(), 0u);
  out.nodes.reserve(2 * static_cast<std::size_t>(n));
  out.nodes.emplace_back();
  uint32_t* prims = out.prims.data();
  std::vector<Task> stack;
  stack.reserve(static_cast<std::size_t>(std::max(options.max_depth, 0)) + 2);
  stack.push_back({root_c.lo, root_c.hi, 0, 0, n, 0});
  Bin bin_data[3 * kMaxBins];  // axis k's bins from k * kMaxBins
  Bin empty_bins[kMaxBins];    // copied over each axis's bins (a block copy: cheaper than a loop)
  for (Bin& b : empty_bins) b = {EmptyBoxF(), 0};
  // Each primitive's bins on the three axes (8 bits each) in the range being split.
  std::vector<uint32_t> prim_bins(n);
  float right_area[kMaxBins];
  uint32_t right_count[kMaxBins];
  const __m128 zero = _mm_setzero_ps();
  const __m128 last_bin = _mm_set1_ps(static_cast<float>(bins - 1));

  while (!stack.empty()) {
    const Task task = stack.back();
    stack.pop_back();
    out.depth = std::max(out.depth, task.depth);
    const uint32_t count = task.end - task.begin;
    if (count <= max_leaf) {
      out.nodes[task.node].index = task.begin;
      out.nodes[task.node].count = count;
      continue;
    }

    // Near the depth cap, median splits guarantee the rest of the tree fits under it.
    const int levels_left =
        static_cast<int>(std::ceil(std::log2(static_cast<double>(count) / max_leaf))) + 1;
    alignas(16) float cext[4];
    _mm_store_ps(cext, _mm_sub_ps(task.chi, task.clo));
    int axis = 0;
    if (cext[1] > cext[axis]) axis = 1;
    if (cext[2] > cext[axis]) axis = 2;
    uint32_t mid = task.begin;
    BoxF child_c[2] = {EmptyBoxF(), EmptyBoxF()};
    bool split_done = false;

    if (cext[axis] > 0 && task.depth + levels_left < options.max_depth) {
      // Binned SAH over all three axes. A centroid's bins are (c - lo) * (bins / extent),
      // clamped to [0, bins - 1] (0 on an axis without extent); the partition below reads
      // the bins kept here.
      alignas(16) float to_bin_f[4] = {0, 0, 0, 0};
      for (int k = 0; k < 3; ++k) {
        if (cext[k] > 0) to_bin_f[k] = static_cast<float>(bins) / cext[k];
      }
      const __m128 to_bin = _mm_load_ps(to_bin_f), lo = task.clo;
      const auto bins_of = [&](__m128 c) {
        const __m128 f = _mm_mul_ps(_mm_sub_ps(c, lo), to_bin);
        // max(NaN, 0) is 0: a NaN lane falls in bin 0.
        return _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps(f, zero), last_bin));
      };
      for (int k = 0; k < 3; ++k) {
        std::memcpy(&bin_data[k * kMaxBins], empty_bins,
                    sizeof(Bin) * static_cast<std::size_t>(bins));
      }
      for (uint32_t i = task.begin; i < task.end; ++i) {
        const uint32_t p = prims[i];
        const __m128i bi = bins_of(fcen[p].p);
        const int bx = _mm_cvtsi128_si32(bi);
        const int by = _mm_cvtsi128_si32(_mm_shuffle_epi32(bi, _MM_SHUFFLE(1, 1, 1, 1)));
        const int bz = _mm_cvtsi128_si32(_mm_shuffle_epi32(bi, _MM_SHUFFLE(2, 2, 2, 2)));
        // Kept for the partition, which then need not bin the centroid again.
        prim_bins[p] = static_cast<uint32_t>(bx) | static_cast<uint32_t>(by) << 8 |
                       static_cast<uint32_t>(bz) << 16;
        const BoxF& b = fbox[p];
        Bin& x = bin_data[bx];
        Bin& y = bin_data[kMaxBins + by];
        Bin& z = bin_data[2 * kMaxBins + bz];
        AddBox(x.box, b);
        AddBox(y.box, b);
        AddBox(z.box, b);
        ++x.count;
        ++y.count;
        ++z.count;
      }
      float best_cost = std::numeric_limits<float>::infinity();
      int best_axis = -1, best_split = -1;
      for (int k = 0; k < 3; ++k) {
        if (!(cext[k] > 0)) continue;
        const Bin* kb = &bin_data[k * kMaxBins];
        // Right of each split: the area and count of bins i .. bins - 1.
        BoxF acc = EmptyBoxF();
        uint32_t cnt = 0;
        float area = 0.0f;
        for (int i = bins - 1; i > 0; --i) {
          if (kb[i].count != 0) {
            AddBox(acc, kb[i].box);
            cnt += kb[i].count;
            area = HalfAreaF(acc);
          }
          right_area[i] = area;
          right_count[i] = cnt;
        }
        // A split after an empty bin repeats the split before it (same sides, same cost, and
        // the first of equal costs wins): only splits after a non-empty bin are costed.
        acc = EmptyBoxF();
        cnt = 0;
        for (int i = 0; i < bins - 1; ++i) {
          if (kb[i].count == 0) continue;
          AddBox(acc, kb[i].box);
          cnt += kb[i].count;
          if (right_count[i + 1] == 0) break;  // so are all further right
          const float cost = HalfAreaF(acc) * static_cast<float>(cnt) +
                             right_area[i + 1] * static_cast<float>(right_count[i + 1]);
          if (cost < best_cost) {
            best_cost = cost;
            best_axis = k;
            best_split = i;
          }
        }
      }
      if (best_axis >= 0) {
        // Partition, gathering each side's centroid bounds.
        const int shift = 8 * best_axis;
        const uint32_t split = static_cast<uint32_t>(best_split);
        const auto left_side = [&](uint32_t p) { return (prim_bins[p] >> shift & 0xffu) <= split; };
        uint32_t* first = prims + task.begin;
        uint32_t* last = prims + task.end;
        for (;;) {
          while (first != last && left_side(*first)) {
            AddPoint(child_c[0], fcen[*first].p);
            ++first;
          }
          while (first != last && !left_side(*(last - 1))) {
            --last;
            AddPoint(child_c[1], fcen[*last].p);
          }
          if (first == last) break;
          --last;
          std::swap(*first, *last);
          AddPoint(child_c[0], fcen[*first].p);
          AddPoint(child_c[1], fcen[*last].p);
          ++first;
        }
        mid = static_cast<uint32_t>(first - prims);
        split_done = mid > task.begin && mid < task.end;
      }
    }
    if (!split_done) {
      mid = task.begin + count / 2;
      std::nth_element(
          prims + task.begin, prims + mid, prims + task.end,
          [&](uint32_t a, uint32_t b) { return centroids[a][axis] < centroids[b][axis]; });
      child_c[0] = child_c[1] = EmptyBoxF();
      for (uint32_t i = task.begin; i < task.end; ++i) {
        AddPoint(child_c[i < mid ? 0 : 1], fcen[prims[i]].p);
      }
    }
    // Children are appended; take no reference into `nodes` across the push.
    const uint32_t left = static_cast<uint32_t>(out.nodes.size());
    out.nodes.emplace_back();
    out.nodes.emplace_back();
    out.nodes[task.node].index = left;
    out.nodes[task.node].count = 0;
    stack.push_back({child_c[1].lo, child_c[1].hi, left + 1, mid, task.end, task.depth + 1});
    stack.push_back({child_c[0].lo, child_c[0].hi, left, task.begin, mid, task.depth + 1});
  }

  // Exact boxes bottom-up (children always follow their parent): each primitive's box is
  // read once.
  for (std::size_t k = out.nodes.size(); k-- > 0;) {
    BvhTopology::Node& node = out.nodes[k];
    Aabb box;
    if (node.IsLeaf()) {
      for (uint32_t i = node.index; i < node.index + node.count; ++i) box.Add(boxes[prims[i]]);
    } else {
      box = out.nodes[node.index].box;
      box.Add(out.nodes[node.index + 1].box);
    }
    node.box = box;
  }

  // SAH cost relative to the root (traversal cost per inner node, intersection per primitive).
  const double root_area = HalfArea(out.nodes[0].box);
  if (root_area > 0) {
    double cost = 0.0;
    for (const auto& node : out.nodes) {
      double a = HalfArea(node.box) / root_area;
      cost +=
          node.IsLeaf() ? a * node.count * options.intersection_cost : a * options.traversal_cost;
    }
    out.sah_cost = cost;
  }
  return out;
}

}  // namespace clash::geom
