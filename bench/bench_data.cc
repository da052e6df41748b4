#include "bench_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include "absl/status/status.h"
#include "clash/cad/tessellate.h"
#include "clash/geom/query.h"

#ifndef CLASH_BENCH_DATA_DIR
#define CLASH_BENCH_DATA_DIR ""
#endif

namespace clash::bench {
namespace {

namespace fs = std::filesystem;
using geom::Mat3;
using geom::RigidTransform;
using geom::Vec3;

// Fixed seed of every workload (logged in the benchmark context).
constexpr uint64_t kSeed = 0x5eed'c1a5'4d00'0001ULL;

struct PartSpec {
  const char* name;
  const char* file;
};
constexpr PartSpec kPartSpecs[] = {
    {"screw", "screw.step"},     {"linkrods", "linkrods.step"}, {"hammer", "hammer.iges"},
    {"bearing", "bearing.iges"}, {"as1", "as1-oc-214-mat.stp"}, {"motor", "as1_motor.step"},
};

struct PairSpec {
  const char* name;
  const char* a;
  const char* b;
};
constexpr PairSpec kPairSpecs[] = {
    {"screw", "screw", "screw"},    {"linkrods", "linkrods", "linkrods"},
    {"hammer", "hammer", "hammer"}, {"bearing", "bearing", "bearing"},
    {"as1", "as1", "as1"},          {"motor", "motor", "motor"},
    {"as1_screw", "as1", "screw"},  {"motor_hammer", "motor", "hammer"},
};

// Folders searched for the CAD files, in order: $CLASH_BENCH_DATA_DIR, the shared data folder
// beside the repository, Debian's occt-misc examples.
std::vector<fs::path> DataDirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("CLASH_BENCH_DATA_DIR"); env && *env) dirs.emplace_back(env);
  if (*CLASH_BENCH_DATA_DIR) dirs.emplace_back(CLASH_BENCH_DATA_DIR);
  dirs.emplace_back("/usr/share/opencascade/data");
  return dirs;
}

std::string FindFile(const char* file) {
  for (const fs::path& dir : DataDirs()) {
    std::error_code ec;
    if (fs::is_regular_file(dir / file, ec)) return (dir / file).string();
  }
  return {};
}

const PartSpec* FindPartSpec(const std::string& name) {
  for (const PartSpec& s : kPartSpecs) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

Vec3 RandomUnit(std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, 1.0);
  for (;;) {
    Vec3 v(n(rng), n(rng), n(rng));
    const double len = v.norm();
    if (len > 1e-6) return v / len;
  }
}

Mat3 RandomRotation(std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, 1.0);
  Eigen::Quaterniond q(n(rng), n(rng), n(rng), n(rng));
  q.normalize();
  return q.toRotationMatrix();
}

// Pose of b with its bounds' centre on a's bounds' centre, then moved by s along u.
RigidTransform PlaceB(const PartData& a, const PartData& b, const Mat3& R, const Vec3& u,
                      double s) {
  return {R, a.mesh.bounds().Center() - R * b.mesh.bounds().Center() + s * u};
}

PairDataset MakePairs(const std::string& name, const PartData& a, const PartData& b) {
  PairDataset ds;
  ds.name = name;
  ds.a = &a;
  ds.b = &b;
  ds.seed = kSeed ^ Fnv1a(name);
  ds.touch_tolerance_mm = 1e-9 * std::max(a.diagonal, b.diagonal);
  std::mt19937_64 rng(ds.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const geom::Part& pa = a.Get(geom::BvMode::kAdaptive);
  const geom::Part& pb = b.Get(geom::BvMode::kAdaptive);
  const RigidTransform I = RigidTransform::Identity();
  const double min_diag = std::min(a.diagonal, b.diagonal);
  // Bounding spheres of radius diagonal / 2 around the box centres cannot touch beyond this.
  const double s_far = 0.5 * (a.diagonal + b.diagonal) * 1.01;
  constexpr int kSteps = 128;      // March from far to centred: finds the first contact.
  constexpr int kBisections = 40;  // 2^-40 of a step: far below the touch tolerance.
  while (static_cast<int>(ds.pairs.size()) < kPairsPerDataset) {
    const Mat3 R = RandomRotation(rng);
    const Vec3 u = RandomUnit(rng);
    const double offset_fraction = unit(rng);
    auto hits = [&](double s) { return geom::SurfacesIntersect(pa, I, pb, PlaceB(a, b, R, u, s)); };
    double clear = s_far, hit = -1;
    for (int k = 1; k <= kSteps; ++k) {
      const double s = s_far * (1.0 - static_cast<double>(k) / kSteps);
      if (hits(s)) {
        hit = s;
        break;
      }
      clear = s;
    }
    if (hit < 0) {  // b passes through a hole or ends inside a: draw again
      ++ds.placement_retries;
      continue;
    }
    for (int k = 0; k < kBisections; ++k) {
      const double mid = 0.5 * (clear + hit);
      (hits(mid) ? hit : clear) = mid;
    }
    const bool apart = ds.pairs.size() % 2 == 0;
    const double offset = (apart ? 1.0 : -1.0) * offset_fraction * 0.05 * min_diag;
    ds.pairs.push_back({PlaceB(a, b, R, u, clear + offset), u, offset});
  }
  return ds;
}

RaySet MakeRays(const PartData& p) {
  RaySet set;
  std::mt19937_64 rng(kSeed ^ Fnv1a("rays/" + p.name));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const geom::Aabb& box = p.mesh.bounds();
  const geom::Part& part = p.Get(geom::BvMode::kAdaptive);
  const int quota = kRaysPerPart / 2;
  std::vector<geom::Ray> hit, miss, extra;
  for (int attempt = 0; attempt < 200 * kRaysPerPart; ++attempt) {
    if (static_cast<int>(hit.size()) >= quota && static_cast<int>(miss.size()) >= quota) break;
    const Vec3 origin = box.Center() + p.diagonal * RandomUnit(rng);
    const Vec3 target = box.min + box.Size().cwiseProduct(Vec3(unit(rng), unit(rng), unit(rng)));
    geom::Ray ray{origin, (target - origin).normalized(), 0.0,
                  std::numeric_limits<double>::infinity()};
    auto& bucket = geom::CastRay(part, RigidTransform::Identity(), ray) ? hit : miss;
    (static_cast<int>(bucket.size()) < quota ? bucket : extra).push_back(ray);
  }
  // Interleave hits and misses; top up from the surplus if one kind was rare.
  for (int i = 0; i < quota; ++i) {
    for (auto* bucket : {&hit, &miss}) {
      if (i < static_cast<int>(bucket->size())) set.rays.push_back((*bucket)[i]);
    }
  }
  for (std::size_t i = 0; set.rays.size() < kRaysPerPart && i < extra.size(); ++i) {
    set.rays.push_back(extra[i]);
  }
  for (const geom::Ray& r : set.rays) {
    set.hits += geom::CastRay(part, RigidTransform::Identity(), r).has_value();
  }
  return set;
}

template <typename T>
using Cache = std::map<std::string, absl::StatusOr<std::unique_ptr<T>>>;

template <typename T>
absl::StatusOr<const T*> Lookup(const absl::StatusOr<std::unique_ptr<T>>& entry) {
  if (!entry.ok()) return entry.status();
  return entry->get();
}

absl::StatusOr<std::unique_ptr<PartData>> ReadPart(const std::string& name) {
  const PartSpec* spec = FindPartSpec(name);
  if (!spec) return absl::NotFoundError("unknown part dataset " + name);
  auto p = std::make_unique<PartData>();
  p->name = name;
  p->path = FindFile(spec->file);
  if (p->path.empty()) return absl::NotFoundError(std::string("no CAD file ") + spec->file);
  auto buffers = cad::ReadAndTessellate(p->path, cad::TessellationOptions{});
  if (!buffers.ok()) return buffers.status();
  auto mesh = geom::TriangleMesh::FromBuffers(buffers->xyz, buffers->triangles, buffers->face_ids);
  if (!mesh.ok()) return mesh.status();
  p->diagonal = mesh->bounds().Diagonal();
  for (std::size_t m = 0; m < kModes.size(); ++m) {
    geom::PartOptions options;
    options.bv.mode = kModes[m];
    auto part = geom::Part::Create(*mesh, options);
    if (!part.ok()) return part.status();
    p->parts[m] = *std::move(part);
    // A part stores its mesh in hierarchy order (the same in every mode: the node volumes
    // do not change the topology); every library gets that mesh, so triangle ids agree.
    if (m == 0) {
      p->mesh = p->parts[0]->mesh();
    } else if (p->parts[m]->mesh().triangles() != p->mesh.triangles()) {
      return absl::InternalError("the part's triangle order depends on the volume mode");
    }
    const geom::PartStats& st = p->parts[m]->stats();
    std::fprintf(stderr,
                 "# part %s (%s): %zu triangles, diagonal %.6g mm, closed %d; %s: %zu nodes, "
                 "aabb_nodes %zu, obb_nodes %zu, depth %d, volume saved %.3f; ray nodes %zu, "
                 "ray leaves %zu\n",
                 name.c_str(), p->path.c_str(), p->mesh.num_triangles(), p->diagonal,
                 static_cast<int>(p->mesh.IsClosed()), ModeLabel(kModes[m]), st.nodes,
                 st.aabb_nodes, st.obb_nodes, st.depth, st.VolumeSaved(), st.ray_nodes,
                 st.ray_leaves);
  }
  return p;
}

}  // namespace

const char* ModeLabel(geom::BvMode mode) {
  switch (mode) {
    case geom::BvMode::kAdaptive:
      return "clash-adaptive";
    case geom::BvMode::kAabbOnly:
      return "clash-aabb";
    case geom::BvMode::kObbOnly:
      return "clash-obb";
  }
  return "clash-?";
}

const geom::Part& PartData::Get(geom::BvMode mode) const {
  for (std::size_t m = 0; m < kModes.size(); ++m) {
    if (kModes[m] == mode) return *parts[m];
  }
  return *parts[0];
}

std::vector<uint32_t> PairDataset::Indices(bool apart) const {
  std::vector<uint32_t> out;
  for (uint32_t i = apart ? 0 : 1; i < pairs.size(); i += 2) out.push_back(i);
  return out;
}

std::vector<std::string> AvailableParts() {
  std::vector<std::string> out;
  for (const PartSpec& s : kPartSpecs) {
    if (!FindFile(s.file).empty()) out.emplace_back(s.name);
  }
  return out;
}

std::vector<std::string> AvailablePairs() {
  const std::vector<std::string> parts = AvailableParts();
  auto has = [&](const char* n) { return std::find(parts.begin(), parts.end(), n) != parts.end(); };
  std::vector<std::string> out;
  for (const PairSpec& s : kPairSpecs) {
    if (has(s.a) && has(s.b)) out.emplace_back(s.name);
  }
  return out;
}

absl::StatusOr<const PartData*> LoadPart(const std::string& name) {
  static Cache<PartData> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, ReadPart(name)).first;
  return Lookup(it->second);
}

absl::StatusOr<const PairDataset*> LoadPairs(const std::string& name) {
  static Cache<PairDataset> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    const PairSpec* spec = nullptr;
    for (const PairSpec& s : kPairSpecs) {
      if (name == s.name) spec = &s;
    }
    absl::StatusOr<std::unique_ptr<PairDataset>> made =
        absl::NotFoundError("unknown pair dataset " + name);
    if (spec) {
      auto a = LoadPart(spec->a);
      auto b = LoadPart(spec->b);
      if (!a.ok()) {
        made = a.status();
      } else if (!b.ok()) {
        made = b.status();
      } else {
        made = std::make_unique<PairDataset>(MakePairs(name, **a, **b));
        const PairDataset& ds = **made;
        std::fprintf(stderr, "# pairs %s: %zu pairs (%s x %s), seed %#llx, retries %d\n",
                     name.c_str(), ds.pairs.size(), spec->a, spec->b,
                     static_cast<unsigned long long>(ds.seed), ds.placement_retries);
      }
    }
    it = cache.emplace(name, std::move(made)).first;
  }
  return Lookup(it->second);
}

absl::StatusOr<const RaySet*> LoadRays(const std::string& name) {
  static Cache<RaySet> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    auto p = LoadPart(name);
    absl::StatusOr<std::unique_ptr<RaySet>> made =
        p.ok() ? absl::StatusOr<std::unique_ptr<RaySet>>(std::make_unique<RaySet>(MakeRays(**p)))
               : absl::StatusOr<std::unique_ptr<RaySet>>(p.status());
    it = cache.emplace(name, std::move(made)).first;
  }
  return Lookup(it->second);
}

}  // namespace clash::bench
