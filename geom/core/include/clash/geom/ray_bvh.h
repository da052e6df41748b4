// A compact 4-wide hierarchy for single rays, built over a part's own binary hierarchy.
//
// Each node holds the boxes of up to four children, quantized to 8 bits per plane on a
// per-node grid (origin + q * scale, scale a power of two), as in the compressed wide BVHs of
// Ylitie, Karras and Laine ("Efficient Incoherent Ray Traversal on GPUs Through Compressed
// Wide BVHs", HPG 2017). Quantization rounds outward and every decoded plane is checked at
// build time with the very arithmetic the traversal uses, so a decoded box always contains the
// double-precision box of its triangles (DESIGN.md §2: rounding may only enlarge a box).
// Coordinates are stored relative to the part's bounds centre, so single precision keeps its
// resolution for parts far from the origin.
//
// The tree is the part's binary hierarchy collapsed greedily (Wald, Benthin, Boulos,
// "Getting Rid of Packets", RT 2008): a node opens its largest-area inner child until it has
// four. Leaves are subtrees of at most `max_leaf_size` triangles and are ranges of the part's
// triangles (its mesh is stored in leaf order), so the structure adds no index array.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "clash/geom/aabb.h"
#include "clash/geom/bvh_build.h"
#include "clash/geom/types.h"

namespace clash::geom {

/// Largest |coordinate - ref| a ray hierarchy is built for (and ray origins may have).
inline constexpr double kRayBvhMaxCoordinate = 1e15;

/// Largest leaf a ray hierarchy may have.
inline constexpr int kMaxRayLeafSize = 16;

/// A 4-wide ray node (64 bytes, one cache line).
struct alignas(64) RayNode {
  float origin[3];     ///< Grid origin per axis (relative to RayBvh::ref()).
  float scale[3];      ///< Grid step per axis (a power of two).
  uint8_t q[3][2][4];  ///< [axis][0 = lower, 1 = upper plane][child] grid coordinates.
  uint32_t child[4];   ///< Child references (see RayBvh::IsLeafRef), kRayEmptyRef if unused.
};
static_assert(sizeof(RayNode) == 64);

/// Reference of an unused child slot.
inline constexpr uint32_t kRayEmptyRef = 0xffffffffu;

/// A 4-wide, quantized, single-precision hierarchy for ray queries on one part.
class RayBvh {
 public:
  /// Collapses a binary topology (leaf ranges: primitive slots, which for a part are its
  /// triangle ids) into ray nodes. `inflate` (part units) is added to every box on top of the
  /// outward rounding; `max_leaf_size` (1..kMaxRayLeafSize) bounds the leaves, which are whole
  /// subtrees of the topology (topology leaves larger than it stay as they are). Builds nothing
  /// (root_ref() == kRayEmptyRef) when a box reaches beyond 1e15 from `ref`.
  [[nodiscard]] static RayBvh Build(const BvhTopology& topo, const Vec3& ref, double inflate,
                                    int max_leaf_size);

  /// Reference to a leaf of `count` (1..16) primitives starting at slot `first`.
  [[nodiscard]] static uint32_t LeafRef(uint32_t first, uint32_t count) {
    return 0x80000000u | ((count - 1) << 27) | first;
  }
  /// True when a child reference is a leaf (false for inner nodes and kRayEmptyRef).
  [[nodiscard]] static bool IsLeafRef(uint32_t ref) {
    return (ref & 0x80000000u) != 0 && ref != kRayEmptyRef;
  }
  /// First slot (triangle id) of a leaf reference.
  [[nodiscard]] static uint32_t LeafFirst(uint32_t ref) { return ref & 0x07ffffffu; }
  /// Primitive count of a leaf reference.
  [[nodiscard]] static uint32_t LeafCount(uint32_t ref) { return ((ref >> 27) & 0xfu) + 1; }

  /// The nodes (nodes()[0] is the root when root_ref() == 0).
  [[nodiscard]] const std::vector<RayNode>& nodes() const { return nodes_; }
  /// The root: inner node 0, a leaf reference (a part with a single leaf), or kRayEmptyRef
  /// when no tree was built (parts extending beyond 1e15 from their centre, where single
  /// precision cannot bound rays: queries then take the double-precision hierarchy).
  [[nodiscard]] uint32_t root_ref() const { return root_; }
  /// Offset subtracted from part coordinates before they are compared with node boxes.
  [[nodiscard]] const Vec3& ref() const { return ref_; }
  /// The decoded box of child i of a node, relative to ref() (exactly what traversal tests).
  [[nodiscard]] static Aabb ChildBox(const RayNode& n, int i);
  /// Number of leaves.
  [[nodiscard]] std::size_t leaves() const { return leaves_; }
  /// Bytes held.
  [[nodiscard]] std::size_t MemoryBytes() const { return nodes_.capacity() * sizeof(RayNode); }

 private:
  std::vector<RayNode> nodes_;
  uint32_t root_ = kRayEmptyRef;
  Vec3 ref_ = Vec3::Zero();
  std::size_t leaves_ = 0;
};

}  // namespace clash::geom
