#include "clash/geom/bvh_build.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <numeric>

namespace clash::geom {
namespace {

struct Task {
  uint32_t node;
  uint32_t begin, end;
  int depth;
};

struct Bin {
  Aabb box;
  uint32_t count = 0;
};

constexpr int kMaxBins = 64;

double HalfArea(const Aabb& b) {
  if (b.IsEmpty()) return 0.0;
  Vec3 s = b.Size();
  return s.x() * s.y() + s.y() * s.z() + s.z() * s.x();
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
  std::vector<Task> stack;
  stack.push_back({0, 0, n, 0});
  std::vector<Bin> bin_data(3 * bins);
  std::vector<Aabb> right_boxes(bins);
  uint32_t right_count[kMaxBins];
  uint32_t* prims = out.prims.data();

  while (!stack.empty()) {
    const Task task = stack.back();
    stack.pop_back();
    Aabb box, cbox;
    for (uint32_t i = task.begin; i < task.end; ++i) {
      box.Add(boxes[prims[i]]);
      cbox.Add(centroids[prims[i]]);
    }
    out.nodes[task.node].box = box;
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
    const Vec3 cext = cbox.Size();
    int axis = 0;
    if (cext.y() > cext[axis]) axis = 1;
    if (cext.z() > cext[axis]) axis = 2;
    uint32_t mid = task.begin + count / 2;
    bool split_done = false;

    if (cext[axis] > 0 && task.depth + levels_left < options.max_depth) {
      // Binned SAH over all three axes.
      for (Bin& b : bin_data) b = Bin{};
      for (uint32_t i = task.begin; i < task.end; ++i) {
        const Vec3& c = centroids[prims[i]];
        for (int k = 0; k < 3; ++k) {
          if (!(cext[k] > 0)) continue;
          int bi = std::clamp(static_cast<int>((c[k] - cbox.min[k]) / cext[k] * bins), 0, bins - 1);
          Bin& b = bin_data[k * bins + bi];
          b.box.Add(boxes[prims[i]]);
          ++b.count;
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
          double cost = HalfArea(acc) * cnt + HalfArea(right_boxes[i + 1]) * right_count[i + 1];
          if (cost < best_cost) {
            best_cost = cost;
            best_axis = k;
            best_split = i;
          }
        }
      }
      if (best_axis >= 0) {
        const int k = best_axis;
        const double lo = cbox.min[k], ext = cext[k];
        uint32_t* m = std::partition(prims + task.begin, prims + task.end, [&](uint32_t p) {
          int bi = static_cast<int>((centroids[p][k] - lo) / ext * bins);
          return std::clamp(bi, 0, bins - 1) <= best_split;
        });
        mid = static_cast<uint32_t>(m - prims);
        split_done = mid > task.begin && mid < task.end;
      }
    }
    if (!split_done) {
      mid = task.begin + count / 2;
      std::nth_element(
          prims + task.begin, prims + mid, prims + task.end,
          [&](uint32_t a, uint32_t b) { return centroids[a][axis] < centroids[b][axis]; });
    }
    // Children are appended; take no reference into `nodes` across the push.
    const uint32_t left = static_cast<uint32_t>(out.nodes.size());
    out.nodes.emplace_back();
    out.nodes.emplace_back();
    out.nodes[task.node].index = left;
    out.nodes[task.node].count = 0;
    stack.push_back({left + 1, mid, task.end, task.depth + 1});
    stack.push_back({left, task.begin, mid, task.depth + 1});
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
