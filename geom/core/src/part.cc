#include "clash/geom/part.h"

#include <Eigen/Geometry>
#include <algorithm>
#include <cassert>
#include <cmath>

namespace clash::geom {

absl::StatusOr<std::shared_ptr<const Part>> Part::Create(TriangleMesh mesh,
                                                         const PartOptions& options) {
  std::shared_ptr<Part> part(new Part());
  part->mesh_ = std::move(mesh);
  const TriangleMesh& m = part->mesh_;
  const std::size_t n = m.num_triangles();

  std::vector<Aabb> boxes(n);
  std::vector<Vec3> centroids(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Triangle t = m.triangle(i);
    boxes[i] = Aabb::FromPoints(t.a, t.b);
    boxes[i].Add(t.c);
    centroids[i] = t.Centroid();
  }
  BvhBuildOptions bvh_options = options.bvh;
  bvh_options.max_depth = std::clamp(bvh_options.max_depth, 8, 60);
  bvh_options.max_leaf_size = std::clamp(bvh_options.max_leaf_size, 1, kMaxLeafSize);
  BvhTopology topo = BuildBvh(boxes, centroids, bvh_options);
  boxes = {};
  centroids = {};
  // Triangles in leaf order: a leaf's triangles, and mostly their vertices, are contiguous in
  // memory, and a hierarchy slot is a triangle id (no index array between them).
  part->mesh_ = std::move(part->mesh_).Reordered(topo.prims);
  topo.prims = {};

  // Area moments bottom-up (children always follow their parent), taken about the bounds'
  // centre so that parts far from the origin keep their precision.
  const std::size_t count = topo.nodes.size();
  const Vec3 ref = m.bounds().Center();
  std::vector<AreaMoments> moments(count);
  std::vector<uint32_t> range_begin(count), range_end(count);
  for (std::size_t k = count; k-- > 0;) {
    const auto& node = topo.nodes[k];
    if (node.IsLeaf()) {
      range_begin[k] = node.index;
      range_end[k] = node.index + node.count;
      for (uint32_t s = range_begin[k]; s < range_end[k]; ++s) {
        const Triangle t = m.triangle(s);
        moments[k].Add(AreaMoments::Of({t.a - ref, t.b - ref, t.c - ref}));
      }
    } else {
      range_begin[k] = range_begin[node.index];
      range_end[k] = range_end[node.index + 1];
      moments[k] = moments[node.index];
      moments[k].Add(moments[node.index + 1]);
    }
  }

  // Rounding may only make a box larger: grow every box by far more than the rounding of
  // coordinates of this magnitude (~1e-16 relative), far less than any tessellation feature.
  const Aabb& b = m.bounds();
  const double magnitude = std::max(b.min.cwiseAbs().maxCoeff(), b.max.cwiseAbs().maxCoeff());
  const double inflate = 1e-9 * (b.Diagonal() + magnitude) + 1e-12;

  // The mesh numbers its vertices by first use in leaf order, so the vertices first used by
  // triangles [b, e) are the contiguous range [first_new[b], first_new[e]); a node's other
  // vertices are those below first_new[b] that its triangles share with earlier ones. Fitting
  // a box on that set, not on three corners per triangle, projects each vertex about once.
  // A corner is its vertex's first use when the vertex is numbered past every earlier one.
  std::vector<uint32_t> first_new(m.num_triangles() + 1, 0);
  part->first_uses_.assign(m.num_triangles(), 0);
  for (std::size_t s = 0; s < m.num_triangles(); ++s) {
    const auto& t = m.triangles()[s];
    uint32_t next = first_new[s];
    for (int c = 0; c < 3; ++c) {
      assert(t[c] <= next);  // numbered by first use
      if (t[c] == next) {
        part->first_uses_[s] |= static_cast<uint8_t>(1u << c);
        next = t[c] + 1;
      }
    }
    first_new[s + 1] = next;
  }

  part->nodes_.resize(count);
  PartStats& st = part->stats_;
  for (std::size_t k = 0; k < count; ++k) {
    const auto& tn = topo.nodes[k];
    AdaptiveBox chosen;
    Part::NodeRotation rotation;
    chosen.box = Obb::FromAabb(tn.box);
    chosen.aabb_volume = tn.box.Volume();
    if (moments[k].area > 0) {
      PrincipalFrame frame = PrincipalAxes(moments[k].Mean() + ref, moments[k].Covariance());
      // OBB axes are stored as a single-precision quaternion: choose and fit on the axes it
      // gives (PrincipalAxes' are right-handed).
      const Eigen::Quaterniond q(frame.axes);
      rotation = Part::NodeRotation(static_cast<float>(q.w()), static_cast<float>(q.x()),
                                    static_cast<float>(q.y()), static_cast<float>(q.z()));
      frame.axes = Part::AxesOf(rotation);
      if (!TakesAabb(frame, options.bv) &&
          part->rotations_.size() < std::min(options.max_obb_nodes, kMaxObbNodes)) {
        // The node's vertex set, each vertex about once (repeats do not change the box),
        // projected relative to its first triangle's first corner.
        const uint32_t first = range_begin[k], last = range_end[k];
        const auto& vertices = m.vertices();
        ObbOnAxesFit fit(vertices[m.triangles()[first][0]], frame.axes);
        fit.Add(std::span(vertices).subspan(first_new[first], first_new[last] - first_new[first]));
        for (uint32_t s = first; s < last; ++s) {
          for (uint32_t v : m.triangles()[s]) {
            if (v < first_new[first]) fit.Add(vertices[v]);
          }
        }
        chosen = ChooseFittedBox(fit.Box(), tn.box, options.bv);
      }
    }
    BvhNode& out = part->nodes_[k];
    out.center = chosen.box.center;
    out.half = chosen.box.half.array() + inflate;
    out.index = tn.index;
    out.meta = tn.IsLeaf() ? tn.count : 0u;
    if (chosen.is_obb) {
      part->rotations_.push_back(rotation);
      out.meta |= static_cast<uint32_t>(part->rotations_.size()) << 8;
      ++st.obb_nodes;
    } else {
      ++st.aabb_nodes;
    }
    st.aabb_volume_sum += chosen.aabb_volume;
    st.chosen_volume_sum += chosen.box.Volume();
    if (tn.IsLeaf()) ++st.leaves;
  }
  part->rotations_.shrink_to_fit();
  part->ray_bvh_ = RayBvh::Build(topo, ref, inflate, options.ray_leaf_size);
  st.ray_nodes = part->ray_bvh_.nodes().size();
  st.ray_leaves = part->ray_bvh_.leaves();
  st.nodes = count;
  st.depth = topo.depth;
  st.sah_cost = topo.sah_cost;
  st.memory_bytes = m.MemoryBytes() + part->nodes_.capacity() * sizeof(BvhNode) +
                    part->rotations_.capacity() * sizeof(Part::NodeRotation) +
                    part->first_uses_.capacity() + part->ray_bvh_.MemoryBytes();
  return std::shared_ptr<const Part>(std::move(part));
}

}  // namespace clash::geom
