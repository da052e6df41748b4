#include "clash/geom/ray_bvh.h"

#include <algorithm>
#include <cmath>

#include "ray_bvh_internal.h"

namespace clash::geom {
namespace {

// Smallest grid step: keeps q * scale in the normal range (exact products).
constexpr float kMinScale = 0x1p-100f;

struct FloatBox {
  float lo[3], hi[3];
};

// Quantizes the child boxes into n (n.child must be set). Every decoded plane is checked with
// DecodePlanes, the traversal's own arithmetic: lower planes may only go down, upper planes
// only up.
void Quantize(const FloatBox* boxes, int count, RayNode* n) {
  for (int a = 0; a < 3; ++a) {
    float lo = std::numeric_limits<float>::infinity();
    float hi = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < count; ++i) {
      lo = std::min(lo, boxes[i].lo[a]);
      hi = std::max(hi, boxes[i].hi[a]);
    }
    n->origin[a] = lo;
    const double extent = static_cast<double>(hi) - static_cast<double>(lo);
    int e = 0;
    std::frexp(extent / 254.0, &e);  // extent / 254 < 2^e
    float scale = std::max(kMinScale, std::ldexp(1.0f, e));
    for (;;) {
      n->scale[a] = scale;
      bool ok = true;
      for (int i = 0; i < 4; ++i) {
        if (i >= count) {
          n->q[a][0][i] = 0;
          n->q[a][1][i] = 0;
          continue;
        }
        const double flo = std::floor((boxes[i].lo[a] - static_cast<double>(lo)) / scale);
        const double fhi = std::ceil((boxes[i].hi[a] - static_cast<double>(lo)) / scale);
        n->q[a][0][i] = static_cast<uint8_t>(std::clamp(flo, 0.0, 255.0));
        n->q[a][1][i] = static_cast<uint8_t>(std::clamp(fhi, 0.0, 255.0));
      }
      // Fix the rounding of origin + q * scale, one step at a time.
      for (int i = 0; i < count && ok; ++i) {
        for (;;) {
          alignas(16) float p[4];
          _mm_store_ps(p, internal::DecodePlanes(*n, a, 0));
          if (p[i] <= boxes[i].lo[a]) break;
          if (n->q[a][0][i] == 0) break;  // decodes to origin == lo: cannot happen
          --n->q[a][0][i];
        }
        for (;;) {
          alignas(16) float p[4];
          _mm_store_ps(p, internal::DecodePlanes(*n, a, 1));
          if (p[i] >= boxes[i].hi[a]) break;
          if (n->q[a][1][i] == 255) {
            ok = false;
            break;
          }
          ++n->q[a][1][i];
        }
      }
      if (ok) break;
      scale *= 2.0f;
    }
  }
}

struct Builder {
  const BvhTopology& topo;
  Vec3 ref;
  double inflate;
  uint32_t max_leaf;
  std::vector<uint32_t> begin, end;  // primitive range of each topology node
  std::vector<RayNode> nodes;
  std::size_t leaves = 0;

  bool IsRayLeaf(uint32_t k) const {
    return topo.nodes[k].IsLeaf() || end[k] - begin[k] <= max_leaf;
  }

  FloatBox BoxOf(uint32_t k) const {
    const Aabb& b = topo.nodes[k].box;
    FloatBox f;
    for (int a = 0; a < 3; ++a) {
      f.lo[a] = internal::RoundDown(b.min[a] - ref[a] - inflate);
      f.hi[a] = internal::RoundUp(b.max[a] - ref[a] + inflate);
    }
    return f;
  }

  uint32_t Ref(uint32_t k) {
    if (!IsRayLeaf(k)) return Emit(k);
    ++leaves;
    return RayBvh::LeafRef(begin[k], end[k] - begin[k]);
  }

  // Emits the ray node standing for inner topology node k; returns its index.
  uint32_t Emit(uint32_t k) {
    uint32_t kids[4] = {topo.nodes[k].index, topo.nodes[k].index + 1, 0, 0};
    int count = 2;
    while (count < 4) {
      int best = -1;
      double best_area = -1.0;
      for (int i = 0; i < count; ++i) {
        if (IsRayLeaf(kids[i])) continue;
        const double area = topo.nodes[kids[i]].box.SurfaceArea();
        if (area > best_area) best_area = area, best = i;
      }
      if (best < 0) break;
      const uint32_t open = kids[best];
      kids[best] = topo.nodes[open].index;
      kids[count++] = topo.nodes[open].index + 1;
    }
    const uint32_t self = static_cast<uint32_t>(nodes.size());
    nodes.emplace_back();
    FloatBox boxes[4];
    uint32_t refs[4] = {kRayEmptyRef, kRayEmptyRef, kRayEmptyRef, kRayEmptyRef};
    for (int i = 0; i < count; ++i) {
      boxes[i] = BoxOf(kids[i]);
      refs[i] = Ref(kids[i]);  // may grow `nodes`: no reference into it is held here
    }
    RayNode& n = nodes[self];
    for (int i = 0; i < 4; ++i) n.child[i] = refs[i];
    Quantize(boxes, count, &n);
    return self;
  }
};

}  // namespace

RayBvh RayBvh::Build(const BvhTopology& topo, const Vec3& ref, double inflate, int max_leaf_size) {
  RayBvh out;
  out.ref_ = ref;
  const std::size_t count = topo.nodes.size();
  if (count == 0) return out;
  const Aabb& root = topo.nodes[0].box;
  if (!((root.min - ref).cwiseAbs().maxCoeff() + inflate <= kRayBvhMaxCoordinate &&
        (root.max - ref).cwiseAbs().maxCoeff() + inflate <= kRayBvhMaxCoordinate)) {
    return out;  // beyond what single precision bounds: CastRay takes the double tree
  }
  Builder b{
      topo, ref, inflate, static_cast<uint32_t>(std::clamp(max_leaf_size, 1, kMaxRayLeafSize)),
      {},   {},  {},      0};
  b.begin.resize(count);
  b.end.resize(count);
  for (std::size_t k = count; k-- > 0;) {  // children always follow their parent
    const auto& node = topo.nodes[k];
    if (node.IsLeaf()) {
      b.begin[k] = node.index;
      b.end[k] = node.index + node.count;
    } else {
      b.begin[k] = b.begin[node.index];
      b.end[k] = b.end[node.index + 1];
    }
  }
  // Topology leaves hold at most kMaxLeafSize (16) primitives, which a leaf reference encodes.
  if (b.IsRayLeaf(0)) {
    out.root_ = LeafRef(b.begin[0], b.end[0] - b.begin[0]);
    out.leaves_ = 1;
    return out;
  }
  b.nodes.reserve(count / 4 + 1);
  out.root_ = b.Emit(0);
  b.nodes.shrink_to_fit();
  out.nodes_ = std::move(b.nodes);
  out.leaves_ = b.leaves;
  return out;
}

Aabb RayBvh::ChildBox(const RayNode& n, int i) {
  Aabb box;
  for (int a = 0; a < 3; ++a) {
    alignas(16) float lo[4], hi[4];
    _mm_store_ps(lo, internal::DecodePlanes(n, a, 0));
    _mm_store_ps(hi, internal::DecodePlanes(n, a, 1));
    box.min[a] = static_cast<double>(lo[i]);
    box.max[a] = static_cast<double>(hi[i]);
  }
  return box;
}

}  // namespace clash::geom
