#include "clash/geom/broad_phase.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <utility>

#include "absl/container/fixed_array.h"
#include "absl/container/inlined_vector.h"
#include "ray_internal.h"

namespace clash::geom {
namespace {

// Traversal stacks hold at most height + 1 nodes (one pending sibling per level); the
// rotations keep the height near log2(n), so 64 entries stay inline for any realistic scene
// and taller trees get their stack on the heap instead of failing.
constexpr int kInlineStack = 64;

// A box's fat box is the box grown by this many margins; a move that leaves more slack than
// kSlackMargins margins on some side reinserts the proxy with a fresh fat box.
constexpr double kSlackMargins = 4.0;

Aabb Union(const Aabb& a, const Aabb& b) { return {a.min.cwiseMin(b.min), a.max.cwiseMax(b.max)}; }

}  // namespace

DynamicAabbTree::DynamicAabbTree(double fat_margin_relative)
    : fat_margin_relative_(fat_margin_relative > 0.0 ? fat_margin_relative : 0.0) {}

Aabb DynamicAabbTree::Fatten(const Aabb& box) const {
  // Subtracting a non-negative margin can only lower a bound (rounding is monotone), so the
  // fat box always contains the tight one.
  return box.Inflated(fat_margin_relative_ * box.Diagonal() + kMarginFloorMm);
}

bool DynamicAabbTree::IsLiveLeaf(int32_t proxy) const {
  return proxy >= 0 && static_cast<std::size_t>(proxy) < nodes_.size() && nodes_[proxy].height == 0;
}

int32_t DynamicAabbTree::AllocateNode() {
  int32_t n;
  if (free_list_ == kNullProxy) {
    n = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  } else {
    n = free_list_;
    free_list_ = nodes_[n].parent;
    nodes_[n] = Node{};
  }
  return n;
}

void DynamicAabbTree::FreeNode(int32_t node) {
  nodes_[node] = Node{};
  nodes_[node].height = -1;
  nodes_[node].parent = free_list_;
  free_list_ = node;
}

bool DynamicAabbTree::Accepts(const Aabb& box) const {
  if (box.IsEmpty()) return false;
  // Written so that a NaN coordinate fails the test. The tight box is inside the fat one.
  const Aabb fat = Fatten(box);
  return (fat.min.array() >= -kMaxCoordinateMm).all() &&
         (fat.max.array() <= kMaxCoordinateMm).all();
}

int32_t DynamicAabbTree::Insert(const Aabb& box, uint64_t user_id) {
  if (!Accepts(box)) return kNullProxy;
  const int32_t leaf = AllocateNode();
  Node& n = nodes_[leaf];
  n.box = Fatten(box);
  n.tight = box;
  n.user_id = user_id;
  n.height = 0;
  InsertLeaf(leaf);
  ++leaf_count_;
  return leaf;
}

void DynamicAabbTree::Remove(int32_t proxy) {
  if (proxy == kNullProxy) return;
  assert(IsLiveLeaf(proxy));
  RemoveLeaf(proxy);
  FreeNode(proxy);
  --leaf_count_;
}

bool DynamicAabbTree::Move(int32_t proxy, const Aabb& box) {
  assert(IsLiveLeaf(proxy));
  if (!Accepts(box)) return false;
  Node& n = nodes_[proxy];
  n.tight = box;
  if (n.box.Contains(box)) {
    const double margin = fat_margin_relative_ * box.Diagonal() + kMarginFloorMm;
    if (box.Inflated((1.0 + kSlackMargins) * margin).Contains(n.box)) return false;
  }
  RemoveLeaf(proxy);
  nodes_[proxy].box = Fatten(box);
  InsertLeaf(proxy);
  return true;
}

uint64_t DynamicAabbTree::UserId(int32_t proxy) const {
  assert(IsLiveLeaf(proxy));
  return nodes_[proxy].user_id;
}

const Aabb& DynamicAabbTree::FatBox(int32_t proxy) const {
  assert(IsLiveLeaf(proxy));
  return nodes_[proxy].box;
}

const Aabb& DynamicAabbTree::TightBox(int32_t proxy) const {
  assert(IsLiveLeaf(proxy));
  return nodes_[proxy].tight;
}

int DynamicAabbTree::Height() const { return root_ == kNullProxy ? 0 : nodes_[root_].height; }

// Branch and bound over the tree for the sibling S that minimises the surface-area cost of
// inserting the leaf L next to it: SA(S u L) for the new parent plus the growth
// SA(P u L) - SA(P) of every ancestor P of S. Below a node X no sibling can cost less than
// SA(L) plus the growth of X and of its ancestors, which prunes the search.
int32_t DynamicAabbTree::FindBestSibling(const Aabb& box) {
  const double leaf_area = box.SurfaceArea();
  int32_t best = root_;
  double best_cost = Union(nodes_[root_].box, box).SurfaceArea();
  // Min-heap on the lower bound; ties broken by node index so the result is deterministic.
  auto later = [](const Candidate& x, const Candidate& y) {
    return x.lower_bound != y.lower_bound ? x.lower_bound > y.lower_bound : x.node > y.node;
  };
  heap_.clear();
  heap_.push_back({leaf_area, 0.0, root_});
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const Candidate c = heap_.back();
    heap_.pop_back();
    if (c.lower_bound >= best_cost) break;
    const Node& x = nodes_[c.node];
    const double union_area = Union(x.box, box).SurfaceArea();
    const double cost = union_area + c.inherited;
    if (cost < best_cost) {
      best_cost = cost;
      best = c.node;
    }
    if (x.IsLeaf()) continue;
    const double inherited = c.inherited + (union_area - x.box.SurfaceArea());
    const double bound = leaf_area + inherited;
    if (bound >= best_cost) continue;
    for (int32_t child : {x.child1, x.child2}) {
      heap_.push_back({bound, inherited, child});
      std::push_heap(heap_.begin(), heap_.end(), later);
    }
  }
  return best;
}

void DynamicAabbTree::InsertLeaf(int32_t leaf) {
  nodes_[leaf].parent = kNullProxy;
  if (root_ == kNullProxy) {
    root_ = leaf;
    return;
  }
  const int32_t sibling = FindBestSibling(nodes_[leaf].box);
  const int32_t old_parent = nodes_[sibling].parent;
  const int32_t parent = AllocateNode();  // may reallocate nodes_: no references held across
  nodes_[parent].child1 = sibling;
  nodes_[parent].child2 = leaf;
  Refit(parent);
  ReplaceChild(old_parent, sibling, parent);
  nodes_[sibling].parent = parent;
  nodes_[leaf].parent = parent;
  RefitUpwards(parent);
}

void DynamicAabbTree::RemoveLeaf(int32_t leaf) {
  if (leaf == root_) {
    root_ = kNullProxy;
    return;
  }
  const int32_t parent = nodes_[leaf].parent;
  const int32_t grand = nodes_[parent].parent;
  const int32_t sibling =
      nodes_[parent].child1 == leaf ? nodes_[parent].child2 : nodes_[parent].child1;
  ReplaceChild(grand, parent, sibling);
  FreeNode(parent);
  nodes_[leaf].parent = kNullProxy;
  RefitUpwards(grand);
}

void DynamicAabbTree::ReplaceChild(int32_t parent, int32_t old_child, int32_t new_child) {
  nodes_[new_child].parent = parent;
  if (parent == kNullProxy) {
    root_ = new_child;
    return;
  }
  Node& p = nodes_[parent];
  (p.child1 == old_child ? p.child1 : p.child2) = new_child;
}

void DynamicAabbTree::Refit(int32_t node) {
  Node& n = nodes_[node];
  const Node& c1 = nodes_[n.child1];
  const Node& c2 = nodes_[n.child2];
  n.box = Union(c1.box, c2.box);
  n.height = 1 + std::max(c1.height, c2.height);
}

void DynamicAabbTree::RefitUpwards(int32_t node) {
  while (node != kNullProxy) {
    node = Balance(node);
    Refit(node);
    node = nodes_[node].parent;
  }
}

// AVL-style balance: when one child is more than one level taller than the other, the taller
// child takes the node's place.
int32_t DynamicAabbTree::Balance(int32_t node) {
  const Node& n = nodes_[node];
  if (n.IsLeaf()) return node;
  const int balance = nodes_[n.child2].height - nodes_[n.child1].height;
  if (balance > 1) return RotateUp(node, n.child2);
  if (balance < -1) return RotateUp(node, n.child1);
  return node;
}

// Rotation: `up` (a child of `node`) takes node's place; node becomes up's child and gets the
// shorter of up's children in up's old slot. With equal heights the grandchild that gives node
// the smaller box moves down.
int32_t DynamicAabbTree::RotateUp(int32_t node, int32_t up) {
  const int32_t f = nodes_[up].child1, g = nodes_[up].child2;
  const int32_t other = nodes_[node].child1 == up ? nodes_[node].child2 : nodes_[node].child1;
  int32_t down;
  if (nodes_[f].height != nodes_[g].height) {
    down = nodes_[f].height < nodes_[g].height ? f : g;
  } else {
    const Aabb& o = nodes_[other].box;
    down = Union(o, nodes_[f].box).SurfaceArea() <= Union(o, nodes_[g].box).SurfaceArea() ? f : g;
  }
  const int32_t keep = down == f ? g : f;

  ReplaceChild(nodes_[node].parent, node, up);
  Node& n = nodes_[node];
  (n.child1 == up ? n.child1 : n.child2) = down;
  n.parent = up;
  nodes_[down].parent = node;
  nodes_[up].child1 = node;
  nodes_[up].child2 = keep;
  Refit(node);
  Refit(up);
  return up;
}

void DynamicAabbTree::QueryImpl(const Aabb& box, absl::FunctionRef<bool(uint64_t)> visit) const {
  if (root_ == kNullProxy) return;
  absl::FixedArray<int32_t, kInlineStack> stack(static_cast<std::size_t>(Height()) + 2);
  std::size_t sp = 0;
  stack[sp++] = root_;
  while (sp > 0) {
    const Node& n = nodes_[stack[--sp]];
    if (!n.box.Overlaps(box)) continue;
    if (n.IsLeaf()) {
      if (!visit(n.user_id)) return;
    } else {
      assert(sp + 2 <= stack.size());
      stack[sp++] = n.child2;
      stack[sp++] = n.child1;
    }
  }
}

void DynamicAabbTree::QueryRayImpl(const Ray& ray,
                                   absl::FunctionRef<double(uint64_t, double)> visit) const {
  if (root_ == kNullProxy) return;
  bool zero[3];
  Vec3 inv;
  for (int i = 0; i < 3; ++i) {
    zero[i] = ray.direction[i] == 0.0;
    inv[i] = 1.0 / ray.direction[i];
  }
  double t_max = ray.t_max;
  // Entry parameter of the ray into a node's box within [t_min, t_max], or nothing.
  auto enter = [&](int32_t node, double* t0) {
    const Aabb& b = nodes_[node].box;
    double t1 = t_max;
    *t0 = ray.t_min;
    return internal::SlabTest(ray.origin, inv, zero, b.min, b.max, t0, &t1);
  };
  struct Entry {
    int32_t node;
    double t0;
  };
  absl::FixedArray<Entry, kInlineStack> stack(static_cast<std::size_t>(Height()) + 2);
  std::size_t sp = 0;
  double t_root;
  if (!enter(root_, &t_root)) return;
  stack[sp++] = {root_, t_root};
  while (sp > 0) {
    const Entry e = stack[--sp];
    if (e.t0 > t_max) continue;
    const Node& n = nodes_[e.node];
    if (n.IsLeaf()) {
      t_max = std::min(t_max, visit(n.user_id, e.t0));
      if (t_max < ray.t_min) return;
      continue;
    }
    double t1, t2;
    const bool hit1 = enter(n.child1, &t1);
    const bool hit2 = enter(n.child2, &t2);
    assert(sp + 2 <= stack.size());
    if (hit1 && hit2) {  // the nearer child on top
      const bool first1 = t1 <= t2;
      stack[sp++] = first1 ? Entry{n.child2, t2} : Entry{n.child1, t1};
      stack[sp++] = first1 ? Entry{n.child1, t1} : Entry{n.child2, t2};
    } else if (hit1) {
      stack[sp++] = {n.child1, t1};
    } else if (hit2) {
      stack[sp++] = {n.child2, t2};
    }
  }
}

// The tree against itself (as Bullet's btDbvt::collideTT does): a node paired with itself
// yields its children's self pairs and their cross pair; two different nodes, whose subtrees
// are disjoint, are opened on the larger side while their boxes overlap. Every unordered pair
// of leaves is met exactly once.
void DynamicAabbTree::PairsImpl(absl::FunctionRef<bool(uint64_t, uint64_t)> visit) const {
  if (root_ == kNullProxy) return;
  absl::InlinedVector<std::pair<int32_t, int32_t>, kInlineStack> stack;
  stack.emplace_back(root_, root_);
  while (!stack.empty()) {
    const auto [x, y] = stack.back();
    stack.pop_back();
    const Node& nx = nodes_[x];
    const Node& ny = nodes_[y];
    if (x == y) {
      if (nx.IsLeaf()) continue;
      if (nodes_[nx.child1].box.Overlaps(nodes_[nx.child2].box)) {
        stack.emplace_back(nx.child1, nx.child2);
      }
      stack.emplace_back(nx.child2, nx.child2);
      stack.emplace_back(nx.child1, nx.child1);
      continue;
    }
    if (nx.IsLeaf() && ny.IsLeaf()) {
      if (!visit(std::min(nx.user_id, ny.user_id), std::max(nx.user_id, ny.user_id))) return;
      continue;
    }
    const bool open_x =
        ny.IsLeaf() || (!nx.IsLeaf() && nx.box.SurfaceArea() >= ny.box.SurfaceArea());
    const Node& open = open_x ? nx : ny;
    const Node& keep = open_x ? ny : nx;
    const int32_t keep_id = open_x ? y : x;
    for (int32_t c : {open.child2, open.child1}) {
      if (nodes_[c].box.Overlaps(keep.box)) stack.emplace_back(c, keep_id);
    }
  }
}

bool DynamicAabbTree::Validate() const {
  const std::size_t n = nodes_.size();
  std::vector<char> seen(n, 0);
  auto fresh = [&](int32_t i) {
    if (i < 0 || static_cast<std::size_t>(i) >= n || seen[i]) return false;
    seen[i] = 1;
    return true;
  };
  // Reachable nodes in pre-order: checked in reverse so children come before their parents.
  std::vector<int32_t> order;
  if (root_ != kNullProxy) {
    if (!fresh(root_) || nodes_[root_].parent != kNullProxy) return false;
    order.push_back(root_);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const int32_t i = order[k];
      const Node& node = nodes_[i];
      if (node.IsLeaf()) {
        if (node.child2 != kNullProxy) return false;
        continue;
      }
      for (int32_t c : {node.child1, node.child2}) {
        if (!fresh(c) || nodes_[c].parent != i) return false;
        order.push_back(c);
      }
    }
  }
  std::size_t leaves = 0;
  for (std::size_t k = order.size(); k-- > 0;) {
    const Node& node = nodes_[order[k]];
    if (node.IsLeaf()) {
      if (node.height != 0 || node.tight.IsEmpty() || !node.box.Contains(node.tight)) return false;
      ++leaves;
      continue;
    }
    const Node& c1 = nodes_[node.child1];
    const Node& c2 = nodes_[node.child2];
    const Aabb u = Union(c1.box, c2.box);
    if (node.height != 1 + std::max(c1.height, c2.height)) return false;
    if (node.box.min != u.min || node.box.max != u.max) return false;
  }
  if (leaves != leaf_count_) return false;
  std::size_t free = 0;
  for (int32_t i = free_list_; i != kNullProxy; i = nodes_[i].parent) {
    if (!fresh(i) || nodes_[i].height != -1) return false;
    ++free;
  }
  return order.size() + free == n;
}

}  // namespace clash::geom
