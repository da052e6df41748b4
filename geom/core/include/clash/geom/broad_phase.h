// The scene broad phase: a dynamic bounding-volume tree over the world boxes of instances.
//
// After the dynamic trees of Box2D (b2DynamicTree, Erin Catto, zlib licence) and Bullet
// (b3DynamicBvh); the code here is written anew. Leaves hold "fat" boxes: the instance's tight
// world box grown by a margin, so an instance that moves a little stays inside its fat box and
// the tree is not touched. A leaf is inserted next to the sibling that minimises the
// surface-area cost of the tree, found by branch and bound (Bittner, Hapala, Havran, "Fast
// insertion-based optimization of bounding volume hierarchies", CGF 2013; Catto, "Dynamic
// BVH", GDC 2019), and the path to the root is then rebalanced with AVL-style rotations, so
// sequential inserts of boxes on a line do not degrade the tree into a list.
//
// Every query answers over the fat boxes, which contain the tight ones: Query reports every
// proxy whose tight box overlaps the query box (and possibly some whose fat box only does).
// Reading queries (Query, QueryRay, ForEachOverlappingPair) are const and may run from several
// threads at once; Insert, Remove and Move need exclusive access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/functional/function_ref.h"
#include "clash/geom/aabb.h"
#include "clash/geom/ray.h"

namespace clash::geom {

/// Dynamic bounding-volume tree over boxes with user ids (the scene broad phase): incremental
/// insert/remove/move with fattened leaves, so that small moves cost nothing.
class DynamicAabbTree {
 public:
  /// Proxy handle that names no proxy.
  static constexpr int32_t kNullProxy = -1;
  /// Absolute part of a leaf's margin (mm), so that a box of zero size still gets one.
  static constexpr double kMarginFloorMm = 1e-6;

  /// A tree whose leaf boxes are the inserted boxes grown on every side by
  /// `fat_margin_relative` times their diagonal plus kMarginFloorMm (negative values count
  /// as 0).
  explicit DynamicAabbTree(double fat_margin_relative = 0.05);

  /// Largest magnitude (mm) of a fat-box coordinate the tree accepts: the surface area of the
  /// union of any such boxes stays finite, so the insertion costs never become inf - inf.
  static constexpr double kMaxCoordinateMm = 1e150;

  /// True when Insert and Move accept `box`: it is not empty and its fat box has every
  /// coordinate within ±kMaxCoordinateMm (so a NaN or infinite coordinate is refused).
  [[nodiscard]] bool Accepts(const Aabb& box) const;
  /// Inserts a box; returns a proxy handle, stable until Remove. A box that the tree does not
  /// accept (Accepts) is refused: the tree is left unchanged and kNullProxy is returned.
  int32_t Insert(const Aabb& box, uint64_t user_id);
  /// Removes a proxy; its handle may be handed out again by a later Insert. kNullProxy (a
  /// refused Insert) is ignored.
  void Remove(int32_t proxy);
  /// Updates the tight box; reinserts only when it leaves the fat box, or when the fat box has
  /// become much larger than the new box needs (it reaches more than five margins beyond the
  /// box on some side, after the box shrank), so a shrunken instance stops reporting pairs it
  /// cannot touch. Returns true when reinserted (with a fresh fat box). A box that the tree
  /// does not accept (Accepts) is refused: the proxy keeps its boxes and false is returned.
  bool Move(int32_t proxy, const Aabb& box);
  /// The user id given at insertion.
  [[nodiscard]] uint64_t UserId(int32_t proxy) const;
  /// The fat box of a proxy (contains its tight box).
  [[nodiscard]] const Aabb& FatBox(int32_t proxy) const;
  /// The tight box last given to Insert or Move.
  [[nodiscard]] const Aabb& TightBox(int32_t proxy) const;

  /// Calls visit(user_id) for every proxy whose fat box overlaps `box`; visit returns false to
  /// stop (a visit returning void sees every proxy).
  template <class Visit>
  void Query(const Aabb& box, Visit&& visit) const {
    QueryImpl(box, [&visit](uint64_t id) { return Continue(visit, id); });
  }
  /// Calls visit(user_id, t_entry) for every proxy whose fat box the ray crosses within
  /// [t_min, t_max] (ray.h), where t_entry is where the ray enters that box (>= t_min). Boxes
  /// are visited roughly nearest first. visit returns the new t_max (return t_max unchanged to
  /// keep all; a smaller value prunes farther boxes, one below t_min ends the walk); t_max
  /// never grows.
  template <class Visit>
  void QueryRay(const Ray& ray, Visit&& visit) const {
    QueryRayImpl(ray,
                 [&visit](uint64_t id, double t) { return static_cast<double>(visit(id, t)); });
  }
  /// Calls visit(user_a, user_b) once per unordered pair of proxies whose fat boxes overlap,
  /// with user_a <= user_b; a visit returning bool stops the walk by returning false.
  template <class Visit>
  void ForEachOverlappingPair(Visit&& visit) const {
    PairsImpl([&visit](uint64_t a, uint64_t b) { return Continue(visit, a, b); });
  }

  /// Number of proxies.
  [[nodiscard]] std::size_t size() const { return leaf_count_; }
  /// Height of the tree: 0 when empty or for a lone leaf, else 1 + the taller child's height.
  [[nodiscard]] int Height() const;
  /// Checks the tree's invariants (parents enclose children, heights, free list); for tests.
  [[nodiscard]] bool Validate() const;

 private:
  // What the queries read comes first, in one cache line of an aligned node: the box, the
  // children and the user id. The tight box, the parent and the height (insertion, removal,
  // moves) follow in the second.
  struct alignas(64) Node {
    Aabb box;  // fat box of a leaf; union of the children's boxes for an inner node
    int32_t child1 = kNullProxy;
    int32_t child2 = kNullProxy;
    uint64_t user_id = 0;
    Aabb tight;                   // leaves: the box given by the caller
    int32_t parent = kNullProxy;  // next free node while the node is on the free list
    int32_t height = 0;           // 0 for a leaf, -1 while free
    [[nodiscard]] bool IsLeaf() const { return child1 == kNullProxy; }
  };
  static_assert(sizeof(Aabb) == 48 && sizeof(Node) == 128,
                "the query fields fill the first cache line of a node, the rest the second");

  template <class Visit, class... Args>
  static bool Continue(Visit& visit, Args... args) {
    if constexpr (std::is_void_v<std::invoke_result_t<Visit&, Args...>>) {
      visit(args...);
      return true;
    } else {
      return static_cast<bool>(visit(args...));
    }
  }

  void QueryImpl(const Aabb& box, absl::FunctionRef<bool(uint64_t)> visit) const;
  void QueryRayImpl(const Ray& ray, absl::FunctionRef<double(uint64_t, double)> visit) const;
  void PairsImpl(absl::FunctionRef<bool(uint64_t, uint64_t)> visit) const;

  [[nodiscard]] Aabb Fatten(const Aabb& box) const;
  [[nodiscard]] bool IsLiveLeaf(int32_t proxy) const;
  int32_t AllocateNode();
  void FreeNode(int32_t node);
  int32_t FindBestSibling(const Aabb& box);
  void InsertLeaf(int32_t leaf);
  void RemoveLeaf(int32_t leaf);
  void ReplaceChild(int32_t parent, int32_t old_child, int32_t new_child);
  void RefitUpwards(int32_t node);
  int32_t Balance(int32_t node);
  int32_t RotateUp(int32_t node, int32_t up);
  void Refit(int32_t node);

  double fat_margin_relative_;
  std::vector<Node> nodes_;
  int32_t root_ = kNullProxy;
  int32_t free_list_ = kNullProxy;
  std::size_t leaf_count_ = 0;
  struct Candidate {
    double lower_bound;
    double inherited;
    int32_t node;
  };
  std::vector<Candidate> heap_;  // scratch of FindBestSibling
};

}  // namespace clash::geom
