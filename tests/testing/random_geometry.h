// Seeded random inputs and meshes with known truth for the geometry tests.
#pragma once

#include <gtest/gtest.h>

#include <Eigen/Geometry>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "clash/geom/mesh.h"
#include "clash/geom/motion.h"
#include "clash/geom/part.h"
#include "clash/geom/transform.h"

namespace clash::testing {

using geom::Mat3;
using geom::RigidTransform;
using geom::TriangleMesh;
using geom::Vec3;

/// A generator seeded from a constant that the test log shows.
inline std::mt19937 SeededRng(uint32_t seed) {
  ::testing::Test::RecordProperty("seed", static_cast<int>(seed));
  return std::mt19937(seed);
}

/// Number of random trials to run: `n` scaled by the environment variable CLASH_TEST_SCALE
/// (default 1; the sanitizer build uses 0.1), never fewer than `at_least`. The trials are a
/// prefix of the same seeded sequence, so a smaller scale runs a subset of the same cases.
inline int Trials(int n, int at_least = 8) {
  const char* env = std::getenv("CLASH_TEST_SCALE");
  const double scale = env ? std::atof(env) : 1.0;
  return std::max(at_least, static_cast<int>(n * (scale > 0 ? scale : 1.0)));
}

/// Uniform double in [lo, hi).
inline double Uniform(std::mt19937& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

/// Uniform point in the cube [-r, r]^3 (+ centre).
inline Vec3 RandomPoint(std::mt19937& rng, double r, const Vec3& centre = Vec3::Zero()) {
  return centre + Vec3(Uniform(rng, -r, r), Uniform(rng, -r, r), Uniform(rng, -r, r));
}

/// A uniformly distributed rotation (random unit quaternion).
inline Mat3 RandomRotation(std::mt19937& rng) {
  std::normal_distribution<double> g;
  Eigen::Quaterniond q(g(rng), g(rng), g(rng), g(rng));
  return q.normalized().toRotationMatrix();
}

/// Rotation by `angle` about `axis`.
inline Mat3 AxisAngle(double angle, const Vec3& axis) {
  return Eigen::AngleAxisd(angle, axis.normalized()).toRotationMatrix();
}

/// A random rigid pose with translation in [-r, r]^3.
inline RigidTransform RandomPose(std::mt19937& rng, double r) {
  return {RandomRotation(rng), RandomPoint(rng, r)};
}

/// A random valid motion of the given kind for parts near the origin: start pose within 20 mm,
/// linear distance up to 80 mm, rotation angle up to 7 rad, screw angle up to 13 rad with a
/// pitch up to 10 mm either way, 2 to 5 keyframes at random parameters.
inline geom::Motion RandomMotion(std::mt19937& rng, geom::MotionKind kind) {
  using geom::Motion;
  const RigidTransform X0 = RandomPose(rng, 20);
  const Vec3 axis = RandomRotation(rng).col(0);
  const Vec3 c = RandomPoint(rng, 20);
  absl::StatusOr<Motion> m = absl::InternalError("unknown kind");
  switch (kind) {
    case geom::MotionKind::kLinear:
      m = Motion::Linear(X0, axis, Uniform(rng, 0, 80));
      break;
    case geom::MotionKind::kRotation:
      m = Motion::Rotation(X0, c, axis, Uniform(rng, -7, 7));
      break;
    case geom::MotionKind::kScrew:
      m = Motion::Screw(X0, c, axis, Uniform(rng, -13, 13), Uniform(rng, -10, 10));
      break;
    case geom::MotionKind::kKeyframes: {
      std::vector<geom::Keyframe> keys = {{0.0, X0}};
      const int n = std::uniform_int_distribution<int>(1, 4)(rng);
      for (int i = 1; i < n; ++i) keys.push_back({Uniform(rng, 0.05, 0.95), RandomPose(rng, 20)});
      std::sort(keys.begin() + 1, keys.end(),
                [](const geom::Keyframe& a, const geom::Keyframe& b) { return a.t < b.t; });
      keys.push_back({1.0, RandomPose(rng, 20)});
      m = Motion::Keyframes(keys);  // two equal random parameters would fail: not drawn
      break;
    }
  }
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : *Motion::Linear(X0, Vec3::UnitX(), 0.0);
}

/// Raw triangles before validation.
struct RawMesh {
  std::vector<Vec3> v;
  std::vector<TriangleMesh::Index3> t;

  /// The same triangles with every vertex moved by X.
  RawMesh Transformed(const RigidTransform& X) const {
    RawMesh m = *this;
    for (Vec3& p : m.v) p = X * p;
    return m;
  }
  /// The same triangles, each wound the other way (a closed surface turned inside out).
  RawMesh Reversed() const {
    RawMesh m = *this;
    for (auto& f : m.t) std::swap(f[1], f[2]);
    return m;
  }
  /// These triangles and those of `other` as one mesh (a part of several solids).
  RawMesh Plus(const RawMesh& other) const {
    RawMesh m = *this;
    const auto base = static_cast<uint32_t>(m.v.size());
    m.v.insert(m.v.end(), other.v.begin(), other.v.end());
    for (TriangleMesh::Index3 f : other.t) m.t.push_back({f[0] + base, f[1] + base, f[2] + base});
    return m;
  }
  /// Validates into a TriangleMesh (fails the test on error).
  TriangleMesh Build(const geom::MeshOptions& options = {}) const {
    auto m = TriangleMesh::Create(v, t, {}, options);
    EXPECT_TRUE(m.ok()) << m.status();
    return *std::move(m);
  }
  /// Builds a part (fails the test on error).
  std::shared_ptr<const geom::Part> Part(const geom::PartOptions& options = {}) const {
    auto p = geom::Part::Create(Build(), options);
    EXPECT_TRUE(p.ok()) << p.status();
    return *std::move(p);
  }
};

/// A closed box [-h, h] (12 triangles, outward normals) centred at c.
inline RawMesh MakeBox(const Vec3& h, const Vec3& c = Vec3::Zero()) {
  RawMesh m;
  for (int i = 0; i < 8; ++i) {
    m.v.push_back(
        c + Vec3((i & 1) ? h.x() : -h.x(), (i & 2) ? h.y() : -h.y(), (i & 4) ? h.z() : -h.z()));
  }
  m.t = {{0, 2, 1}, {1, 2, 3}, {4, 5, 6}, {5, 7, 6}, {0, 1, 4}, {1, 5, 4},
         {2, 6, 3}, {3, 6, 7}, {0, 4, 2}, {2, 4, 6}, {1, 3, 5}, {3, 7, 5}};
  return m;
}

/// A closed box [-h, h] as a tessellator closing a T-junction gives it: the -z face's triangle
/// {0, 2, 1} split at the midpoint M of its edge 0-1 (vertex 8) into {0, 2, M} and {M, 2, 1},
/// and the T-junction against the -y face's edge 0-1 closed by the zero-area triangle
/// {0, M, 1} (the last one). Watertight: every edge has one use each way.
inline RawMesh MakeBoxWithSliver(const Vec3& h) {
  RawMesh m = MakeBox(h);
  const uint32_t mid = static_cast<uint32_t>(m.v.size());
  m.v.push_back(0.5 * (m.v[0] + m.v[1]));
  std::vector<TriangleMesh::Index3> t;
  for (const TriangleMesh::Index3& f : m.t) {
    if (f == TriangleMesh::Index3{0, 2, 1}) {
      t.push_back({0, 2, mid});
      t.push_back({mid, 2, 1});
    } else {
      t.push_back(f);
    }
  }
  t.push_back({0, mid, 1});
  m.t = std::move(t);
  return m;
}

/// A box subdivided into n x n quads per face (closed, 12 n^2 triangles).
inline RawMesh MakeSubdividedBox(const Vec3& h, int n) {
  RawMesh m;
  // Each face: a grid on the face, indices shared inside a face; faces are welded later.
  for (int axis = 0; axis < 3; ++axis) {
    for (int side = -1; side <= 1; side += 2) {
      const int u = (axis + 1) % 3, w = (axis + 2) % 3;
      const uint32_t base = static_cast<uint32_t>(m.v.size());
      for (int i = 0; i <= n; ++i) {
        for (int j = 0; j <= n; ++j) {
          Vec3 p;
          p[axis] = side * h[axis];
          p[u] = -h[u] + 2.0 * h[u] * i / n;
          p[w] = -h[w] + 2.0 * h[w] * j / n;
          m.v.push_back(p);
        }
      }
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
          uint32_t a = base + i * (n + 1) + j, b = a + (n + 1), c = b + 1, d = a + 1;
          // (u, w, axis) is right-handed: u x w = +axis, so (a, b, c) faces +axis.
          if (side > 0) {
            m.t.push_back({a, b, c});
            m.t.push_back({a, c, d});
          } else {
            m.t.push_back({a, c, b});
            m.t.push_back({a, d, c});
          }
        }
      }
    }
  }
  return m;
}

/// A closed cylinder of radius r and height h along z, centred at the origin.
inline RawMesh MakeCylinder(double r, double h, int segments) {
  RawMesh m;
  const uint32_t n = static_cast<uint32_t>(segments);
  for (uint32_t i = 0; i < n; ++i) {
    double a = 2.0 * M_PI * i / n;
    m.v.push_back({r * std::cos(a), r * std::sin(a), -h / 2});
    m.v.push_back({r * std::cos(a), r * std::sin(a), h / 2});
  }
  const uint32_t bottom = static_cast<uint32_t>(m.v.size());
  m.v.push_back({0, 0, -h / 2});
  m.v.push_back({0, 0, h / 2});
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t j = (i + 1) % n;
    m.t.push_back({2 * i, 2 * j, 2 * j + 1});
    m.t.push_back({2 * i, 2 * j + 1, 2 * i + 1});
    m.t.push_back({bottom, 2 * j, 2 * i});
    m.t.push_back({bottom + 1, 2 * i + 1, 2 * j + 1});
  }
  return m;
}

/// A closed tube along z, centred at the origin: a prism of `segments` sides with vertices on
/// radius r_out and a coaxial hole with vertices on radius r_in (genus one, outward normals).
inline RawMesh MakeTube(double r_in, double r_out, double h, int segments) {
  RawMesh m;
  const uint32_t n = static_cast<uint32_t>(segments);
  // Vertex 4i + k: k = 0 inner bottom, 1 inner top, 2 outer bottom, 3 outer top.
  for (uint32_t i = 0; i < n; ++i) {
    const double a = 2.0 * M_PI * i / n, c = std::cos(a), s = std::sin(a);
    for (double r : {r_in, r_out}) {
      m.v.push_back({r * c, r * s, -h / 2});
      m.v.push_back({r * c, r * s, h / 2});
    }
  }
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t j = (i + 1) % n;
    const uint32_t ib = 4 * i, it = ib + 1, ob = ib + 2, ot = ib + 3;
    const uint32_t jb = 4 * j, jt = jb + 1, pb = jb + 2, pt = jb + 3;
    m.t.push_back({ob, pb, pt});  // outer wall, facing away from the axis
    m.t.push_back({ob, pt, ot});
    m.t.push_back({ib, jt, jb});  // hole wall, facing the axis
    m.t.push_back({ib, it, jt});
    m.t.push_back({it, ot, pt});  // top, facing +z
    m.t.push_back({it, pt, jt});
    m.t.push_back({ib, pb, ob});  // bottom, facing -z
    m.t.push_back({ib, jb, pb});
  }
  return m;
}

/// A closed solid made of the filled cells of a grid: cell (i, j, k) spans [xs[i], xs[i+1]] x
/// [ys[j], ys[j+1]] x [zs[k], zs[k+1]] (each list increasing) and is solid when filled(i, j, k).
/// Every face between a solid cell and an empty one (or the outside) becomes two triangles
/// facing out of the solid, on shared grid vertices. Solid cells must not meet along an edge
/// only (the mesh would not be manifold there). E.g. a plate with a square hole, or a block
/// with a blind hole.
template <class Filled>
inline RawMesh MakeCellSolid(const std::vector<double>& xs, const std::vector<double>& ys,
                             const std::vector<double>& zs, Filled filled) {
  RawMesh m;
  const int n[3] = {static_cast<int>(xs.size()), static_cast<int>(ys.size()),
                    static_cast<int>(zs.size())};
  for (int i = 0; i < n[0]; ++i) {
    for (int j = 0; j < n[1]; ++j) {
      for (int k = 0; k < n[2]; ++k) m.v.push_back({xs[i], ys[j], zs[k]});
    }
  }
  auto vid = [&](const std::array<int, 3>& g) {
    return static_cast<uint32_t>((g[0] * n[1] + g[1]) * n[2] + g[2]);
  };
  auto solid = [&](const std::array<int, 3>& c) {
    for (int a = 0; a < 3; ++a) {
      if (c[a] < 0 || c[a] + 1 >= n[a]) return false;
    }
    return static_cast<bool>(filled(c[0], c[1], c[2]));
  };
  for (int i = 0; i + 1 < n[0]; ++i) {
    for (int j = 0; j + 1 < n[1]; ++j) {
      for (int k = 0; k + 1 < n[2]; ++k) {
        const std::array<int, 3> c = {i, j, k};
        if (!solid(c)) continue;
        for (int a = 0; a < 3; ++a) {
          for (int side = 0; side < 2; ++side) {
            std::array<int, 3> nb = c;
            nb[a] += side ? 1 : -1;
            if (solid(nb)) continue;
            // Corners on the face plane, counter-clockwise about +a in (u, w) (u x w = a).
            const int u = (a + 1) % 3, w = (a + 2) % 3;
            std::array<int, 3> g00 = c;
            g00[a] = c[a] + side;
            std::array<int, 3> g10 = g00, g11 = g00, g01 = g00;
            ++g10[u];
            ++g11[u];
            ++g11[w];
            ++g01[w];
            if (side) {
              m.t.push_back({vid(g00), vid(g10), vid(g11)});
              m.t.push_back({vid(g00), vid(g11), vid(g01)});
            } else {
              m.t.push_back({vid(g00), vid(g11), vid(g10)});
              m.t.push_back({vid(g00), vid(g01), vid(g11)});
            }
          }
        }
      }
    }
  }
  return m;
}

/// A closed star-shaped blob: a UV sphere of radius r whose vertices are pushed radially by
/// up to `roughness * r` (closed and outward-oriented by construction).
inline RawMesh MakeBlob(std::mt19937& rng, double r, int rings, int sectors, double roughness) {
  RawMesh m;
  m.v.push_back({0, 0, r * (1 + Uniform(rng, -roughness, roughness))});
  for (int i = 1; i < rings; ++i) {
    double phi = M_PI * i / rings;
    for (int j = 0; j < sectors; ++j) {
      double th = 2.0 * M_PI * j / sectors;
      double rr = r * (1 + Uniform(rng, -roughness, roughness));
      m.v.push_back({rr * std::sin(phi) * std::cos(th), rr * std::sin(phi) * std::sin(th),
                     rr * std::cos(phi)});
    }
  }
  m.v.push_back({0, 0, -r * (1 + Uniform(rng, -roughness, roughness))});
  const uint32_t s = static_cast<uint32_t>(sectors);
  const uint32_t south = static_cast<uint32_t>(m.v.size() - 1);
  auto ring = [&](int i, uint32_t j) { return 1 + (i - 1) * s + (j % s); };
  for (uint32_t j = 0; j < s; ++j) m.t.push_back({0, ring(1, j), ring(1, j + 1)});
  for (int i = 1; i < rings - 1; ++i) {
    for (uint32_t j = 0; j < s; ++j) {
      m.t.push_back({ring(i, j), ring(i + 1, j), ring(i + 1, j + 1)});
      m.t.push_back({ring(i, j), ring(i + 1, j + 1), ring(i, j + 1)});
    }
  }
  for (uint32_t j = 0; j < s; ++j)
    m.t.push_back({south, ring(rings - 1, j + 1), ring(rings - 1, j)});
  return m;
}

/// n random triangles with vertices near random centres in [-extent, extent]^3 and edge
/// sizes up to `size` (an open soup).
inline RawMesh MakeSoup(std::mt19937& rng, int n, double extent, double size) {
  RawMesh m;
  for (int i = 0; i < n; ++i) {
    Vec3 c = RandomPoint(rng, extent);
    uint32_t base = static_cast<uint32_t>(m.v.size());
    for (int k = 0; k < 3; ++k) m.v.push_back(RandomPoint(rng, size, c));
    m.t.push_back({base, base + 1, base + 2});
  }
  return m;
}

}  // namespace clash::testing
