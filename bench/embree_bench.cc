// Embree 3 baseline: closest hit with rtcIntersect1 on one thread, same rays as clash.
//
// Embree works in single precision. To give it the best-conditioned input, the mesh and the ray
// origins are expressed relative to the part's bounds centre (in double, then rounded to float);
// clash keeps the original coordinates. The scene is built once with RTC_BUILD_QUALITY_HIGH
// (the setting for static scenes traced many times); the build is not timed.
#include <embree3/rtcore.h>

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "answers.h"

namespace clash::bench {
namespace {

struct EmbreeScene {
  RTCDevice device = nullptr;
  RTCScene scene = nullptr;
  geom::Vec3 center;            ///< Subtracted from every coordinate.
  std::vector<RTCRayHit> rays;  ///< The part's ray set, ready to trace.

  EmbreeScene() = default;
  EmbreeScene(const EmbreeScene&) = delete;
  EmbreeScene& operator=(const EmbreeScene&) = delete;
  ~EmbreeScene() {
    if (scene) rtcReleaseScene(scene);
    if (device) rtcReleaseDevice(device);
  }
};

absl::StatusOr<std::unique_ptr<EmbreeScene>> MakeScene(const std::string& part_name) {
  auto part = LoadPart(part_name);
  if (!part.ok()) return part.status();
  auto rays = LoadRays(part_name);
  if (!rays.ok()) return rays.status();
  const geom::TriangleMesh& mesh = (*part)->mesh;
  auto s = std::make_unique<EmbreeScene>();
  s->center = mesh.bounds().Center();
  s->device = rtcNewDevice("threads=1");
  if (!s->device) return absl::InternalError("rtcNewDevice failed");
  s->scene = rtcNewScene(s->device);
  rtcSetSceneBuildQuality(s->scene, RTC_BUILD_QUALITY_HIGH);
  RTCGeometry geometry = rtcNewGeometry(s->device, RTC_GEOMETRY_TYPE_TRIANGLE);
  rtcSetGeometryBuildQuality(geometry, RTC_BUILD_QUALITY_HIGH);
  auto* v = static_cast<float*>(rtcSetNewGeometryBuffer(geometry, RTC_BUFFER_TYPE_VERTEX, 0,
                                                        RTC_FORMAT_FLOAT3, 3 * sizeof(float),
                                                        mesh.vertices().size()));
  auto* t = static_cast<unsigned*>(rtcSetNewGeometryBuffer(geometry, RTC_BUFFER_TYPE_INDEX, 0,
                                                           RTC_FORMAT_UINT3, 3 * sizeof(unsigned),
                                                           mesh.num_triangles()));
  if (!v || !t) {
    rtcReleaseGeometry(geometry);
    return absl::InternalError("rtcSetNewGeometryBuffer failed");
  }
  for (std::size_t i = 0; i < mesh.vertices().size(); ++i) {
    const geom::Vec3 p = mesh.vertices()[i] - s->center;
    for (int k = 0; k < 3; ++k) v[3 * i + k] = static_cast<float>(p[k]);
  }
  for (std::size_t i = 0; i < mesh.num_triangles(); ++i) {
    for (int k = 0; k < 3; ++k) t[3 * i + k] = mesh.triangles()[i][k];
  }
  rtcCommitGeometry(geometry);
  rtcAttachGeometry(s->scene, geometry);
  rtcReleaseGeometry(geometry);
  rtcCommitScene(s->scene);
  if (rtcGetDeviceError(s->device) != RTC_ERROR_NONE) {
    return absl::InternalError("Embree scene build failed");
  }
  for (const geom::Ray& r : (*rays)->rays) {
    RTCRayHit rh{};
    const geom::Vec3 o = r.origin - s->center;
    rh.ray.org_x = static_cast<float>(o.x());
    rh.ray.org_y = static_cast<float>(o.y());
    rh.ray.org_z = static_cast<float>(o.z());
    rh.ray.dir_x = static_cast<float>(r.direction.x());
    rh.ray.dir_y = static_cast<float>(r.direction.y());
    rh.ray.dir_z = static_cast<float>(r.direction.z());
    rh.ray.tnear = static_cast<float>(r.t_min);
    rh.ray.tfar = std::numeric_limits<float>::infinity();
    rh.ray.mask = 0xffffffffu;
    rh.hit.geomID = RTC_INVALID_GEOMETRY_ID;
    rh.hit.instID[0] = RTC_INVALID_GEOMETRY_ID;
    s->rays.push_back(rh);
  }
  return s;
}

absl::StatusOr<const EmbreeScene*> Scene(const std::string& part_name) {
  static std::map<std::string, absl::StatusOr<std::unique_ptr<EmbreeScene>>> cache;
  auto it = cache.find(part_name);
  if (it == cache.end()) it = cache.emplace(part_name, MakeScene(part_name)).first;
  if (!it->second.ok()) return it->second.status();
  return it->second->get();
}

// Closest-hit t, or -1 for a miss.
double Trace(const EmbreeScene& s, std::size_t i) {
  RTCIntersectContext context;
  rtcInitIntersectContext(&context);
  RTCRayHit rh = s.rays[i];
  rtcIntersect1(s.scene, &context, &rh);
  return rh.hit.geomID == RTC_INVALID_GEOMETRY_ID ? -1.0 : static_cast<double>(rh.ray.tfar);
}

void RayBench(benchmark::State& state, const std::string& part_name) {
  const Prepared& p = PrepareOnce(BenchName(Query::kRay, "embree", part_name), [&] {
    Prepared out = PrepareChecked(
        Query::kRay, part_name, EmbreeReferenceAnswers(part_name), "embree",
        ClashAnswers(Query::kRay, geom::BvMode::kAdaptive, part_name), "clash-adaptive");
    if (out.error.empty()) {
      out.counters["hit_fraction"] = (*LoadRays(part_name))->hits / double(kRaysPerPart);
    }
    return out;
  });
  if (!p.error.empty()) {
    state.SkipWithError(p.error.c_str());
    return;
  }
  const EmbreeScene& s = **Scene(part_name);
  TimedLoop(state, p, [&](std::size_t i) { return Trace(s, i); });
  state.counters["rays_per_s"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

absl::StatusOr<const Answers*> EmbreeReferenceAnswers(const std::string& part_name) {
  return CachedAnswers(BenchName(Query::kRay, "embree", part_name),
                       [&]() -> absl::StatusOr<Answers> {
                         auto s = Scene(part_name);
                         if (!s.ok()) return s.status();
                         Answers out;
                         for (std::size_t i = 0; i < (*s)->rays.size(); ++i) {
                           out.values.push_back(Trace(**s, i));
                         }
                         return out;
                       });
}

void RegisterEmbree(Query q, const std::string& dataset) {
  if (q != Query::kRay) return;
  benchmark::RegisterBenchmark(BenchName(q, "embree", dataset).c_str(), RayBench, dataset)
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace clash::bench
