#include "clash/geom/bvh_build.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <numeric>

namespace clash::geom {
namespace {

// A range of primitive slots to split, with the bounds of its boxes and of its centroids
// (known from the parent's split, so no pass over the range recomputes them).
struct Task {
  uint32_t node;
  uint32_t begin, end;
  int depth;
  Aabb box, cbox;
};

struct Bin {
  Aabb box;
  uint32_t count = 0;
};

constexpr int kMaxBins = 64;

// Half the surface area of a box that holds a point.
inline double HalfAreaOfNonEmpty(const Aabb& b) {
  const Vec3 s = b.Size();
  return s.x() * s.y() + s.y() * s.z() + s.z() * s.x();
}

// Half the surface area of a box, 0 for an empty one.
double HalfArea(const Aabb& b) { return b.IsEmpty() ? 0.0 : HalfAreaOfNonEmpty(b); }

// The bounds of the boxes and of the centroids of prims[begin, end).
void RangeBounds(std::span<const Aabb> boxes, std::span<const Vec3> centroids,
                 const uint32_t* prims, uint32_t begin, uint32_t end, Aabb* box, Aabb* cbox) {
  *box = Aabb{};
  *cbox = Aabb{};
  for (uint32_t i = begin; i < end; ++i) {
    box->Add(boxes[prims[i]]);
    cbox->Add(centroids[prims[i]]);
  }
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

  out.prims.resize(n);
  std::iota(out.prims.begin(), out.prims.end(), 0u);
  out.nodes.reserve(2 * static_cast<std::size_t>(n));
  out.nodes.emplace_back();
  uint32_t* prims = out.prims.data();
  std::vector<Task> stack;
  stack.reserve(2 * static_cast<std::size_t>(options.max_depth) + 2);
  {
    Task root{0, 0, n, 0, {}, {}};
    RangeBounds(boxes, centroids, prims, 0, n, &root.box, &root.cbox);
    stack.push_back(root);
  }
  Bin bin_data[3 * kMaxBins];
  Aabb right_boxes[kMaxBins];
  uint32_t right_count[kMaxBins];

  while (!stack.empty()) {
    const Task task = stack.back();
    stack.pop_back();
    out.nodes[task.node].box = task.box;
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
    const Aabb& cbox = task.cbox;
    const Vec3 cext = cbox.Size();
    int axis = 0;
    if (cext.y() > cext[axis]) axis = 1;
    if (cext.z() > cext[axis]) axis = 2;
    uint32_t mid = task.begin;
    Aabb child_box[2], child_cbox[2];
    bool split_done = false;

    if (cext[axis] > 0 && task.depth + levels_left < options.max_depth) {
      // Binned SAH over all three axes. A centroid's bin on axis k is
      // (c - lo) * (bins / extent), clamped; the partition below uses the same expression.
      Vec3 to_bin = Vec3::Zero();
      for (int k = 0; k < 3; ++k) {
        if (cext[k] > 0) to_bin[k] = bins / cext[k];
      }
      const Vec3 lo = cbox.min;
      const auto bin_of = [&](const Vec3& c, int k) {
        return std::clamp(static_cast<int>((c[k] - lo[k]) * to_bin[k]), 0, bins - 1);
      };
      for (int i = 0; i < 3 * bins; ++i) bin_data[i] = Bin{};
      for (uint32_t i = task.begin; i < task.end; ++i) {
        const uint32_t p = prims[i];
        const Vec3& c = centroids[p];
        const Aabb& b = boxes[p];
        for (int k = 0; k < 3; ++k) {
          Bin& bin = bin_data[k * bins + bin_of(c, k)];
          bin.box.Add(b);
          ++bin.count;
        }
      }
      double best_cost = std::numeric_limits<double>::infinity();
      int best_axis = -1, best_split = -1;
      for (int k = 0; k < 3; ++k) {
        if (!(cext[k] > 0)) continue;
        const Bin* kb = &bin_data[k * bins];
        Aabb acc;
        uint32_t cnt = 0;
        for (int i = bins - 1; i > 0; --i) {
          acc.Add(kb[i].box);
          cnt += kb[i].count;
          right_boxes[i] = acc;
          right_count[i] = cnt;
        }
        acc = Aabb{};
        cnt = 0;
        for (int i = 0; i < bins - 1; ++i) {
          acc.Add(kb[i].box);
          cnt += kb[i].count;
          if (cnt == 0 || right_count[i + 1] == 0) continue;
          // Both sides hold primitives, so neither box is empty (an empty primitive box
          // would give an infinite cost, never chosen).
          const double cost = HalfAreaOfNonEmpty(acc) * cnt +
                              HalfAreaOfNonEmpty(right_boxes[i + 1]) * right_count[i + 1];
          if (cost < best_cost) {
            best_cost = cost;
            best_axis = k;
            best_split = i;
          }
        }
      }
      if (best_axis >= 0) {
        // Partition, gathering each side's centroid bounds; the sides' boxes are their bins'.
        const int k = best_axis;
        uint32_t* first = prims + task.begin;
        uint32_t* last = prims + task.end;
        for (;;) {
          while (first != last && bin_of(centroids[*first], k) <= best_split) {
            child_cbox[0].Add(centroids[*first]);
            ++first;
          }
          while (first != last && bin_of(centroids[*(last - 1)], k) > best_split) {
            --last;
            child_cbox[1].Add(centroids[*last]);
          }
          if (first == last) break;
          --last;
          std::swap(*first, *last);
          child_cbox[0].Add(centroids[*first]);
          child_cbox[1].Add(centroids[*last]);
          ++first;
        }
        mid = static_cast<uint32_t>(first - prims);
        const Bin* kb = &bin_data[k * bins];
        for (int i = 0; i < bins; ++i) child_box[i <= best_split ? 0 : 1].Add(kb[i].box);
        split_done = mid > task.begin && mid < task.end;
      }
    }
    if (!split_done) {
      mid = task.begin + count / 2;
      std::nth_element(
          prims + task.begin, prims + mid, prims + task.end,
          [&](uint32_t a, uint32_t b) { return centroids[a][axis] < centroids[b][axis]; });
      RangeBounds(boxes, centroids, prims, task.begin, mid, &child_box[0], &child_cbox[0]);
      RangeBounds(boxes, centroids, prims, mid, task.end, &child_box[1], &child_cbox[1]);
    }
    // Children are appended; take no reference into `nodes` across the push.
    const uint32_t left = static_cast<uint32_t>(out.nodes.size());
    out.nodes.emplace_back();
    out.nodes.emplace_back();
    out.nodes[task.node].index = left;
    out.nodes[task.node].count = 0;
    stack.push_back({left + 1, mid, task.end, task.depth + 1, child_box[1], child_cbox[1]});
    stack.push_back({left, task.begin, mid, task.depth + 1, child_box[0], child_cbox[0]});
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
