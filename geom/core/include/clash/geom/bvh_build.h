// A generic top-down BVH builder (binned SAH) over primitive boxes and centroids. It serves
// the triangles of a part and the instances of a scene alike.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "clash/geom/aabb.h"
#include "clash/geom/types.h"

namespace clash::geom {

/// Builder settings.
struct BvhBuildOptions {
  int max_leaf_size = 4;           ///< Leaves hold at most this many primitives (1..255).
  int bins = 16;                   ///< SAH bins per axis.
  double traversal_cost = 1.0;     ///< SAH cost of visiting a node.
  double intersection_cost = 1.0;  ///< SAH cost of one primitive test.
  int max_depth = 48;              ///< Deeper ranges are split at the median (bounds the stacks).
};

/// A built hierarchy's topology: node boxes are axis-aligned (in the primitives' frame).
struct BvhTopology {
  /// One node. Inner nodes have count == 0 and children `index` and `index + 1`; leaves hold
  /// primitives prims[index .. index + count).
  struct Node {
    Aabb box;            ///< Bounds of everything below.
    uint32_t index = 0;  ///< First child, or first primitive slot.
    uint32_t count = 0;  ///< Primitive count (0 for inner nodes).
    /// True for a leaf.
    [[nodiscard]] bool IsLeaf() const { return count > 0; }
  };
  std::vector<Node> nodes;      ///< nodes[0] is the root (empty when there are no primitives).
  std::vector<uint32_t> prims;  ///< Primitive ids in leaf order.
  int depth = 0;                ///< Levels below the root (a lone root has depth 0).
  double sah_cost = 0.0;        ///< SAH cost of the tree relative to the root's area.
};

/// Builds a BVH over n primitives given their boxes and centroids (same length).
[[nodiscard]] BvhTopology BuildBvh(std::span<const Aabb> boxes, std::span<const Vec3> centroids,
                                   const BvhBuildOptions& options = {});

}  // namespace clash::geom
