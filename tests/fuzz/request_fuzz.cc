// libFuzzer target: what clashd does with a request before and while answering it. The input's
// first byte picks the RPC (interference, distance, pick, sequence), the rest is its serialized
// request, run against a small in-memory scene (two boxes and a pin). Every input must end in
// a response or a status (INVALID_ARGUMENT, NOT_FOUND, ...): no crash, no sanitizer report, no
// unbounded work (each call gets a 0.2 s budget through its stop check), and never INTERNAL or
// UNKNOWN, which blame the server for a bad request (the target aborts on them).
#include <stdlib.h>  // mkdtemp

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "clash/v1/queries.pb.h"
#include "clash/v1/sequences.pb.h"
#include "part_store.h"
#include "query_engine.h"
#include "scene.h"
#include "sequence_engine.h"

namespace {

using clash::server::InstanceRec;
using clash::server::PartInput;
using clash::server::PartStore;
using clash::server::Scene;

// Vertices and triangles of an axis-aligned box from the origin to `size`.
void Box(double sx, double sy, double sz, std::vector<double>* xyz, std::vector<uint32_t>* tri) {
  for (int z = 0; z < 2; ++z) {
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 2; ++x) xyz->insert(xyz->end(), {x * sx, y * sy, z * sz});
    }
  }
  const uint32_t quads[6][4] = {{0, 2, 3, 1}, {4, 5, 7, 6}, {0, 1, 5, 4},
                                {2, 6, 7, 3}, {0, 4, 6, 2}, {1, 3, 7, 5}};
  for (const auto& q : quads) tri->insert(tri->end(), {q[0], q[1], q[2], q[0], q[2], q[3]});
}

struct World {
  std::unique_ptr<PartStore> parts;
  std::shared_ptr<Scene> scene;
};

// The world's part store folder: private to this process (two fuzzers may run at once), removed
// when the fuzzer exits.
std::string& WorldDir() {
  static std::string dir;
  return dir;
}

// Aborts on a status that blames the server: a request, however malformed, is the caller's.
void ExpectCallersStatus(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInternal || status.code() == absl::StatusCode::kUnknown) {
    std::fprintf(stderr, "server's fault for a request: %s\n", status.ToString().c_str());
    std::abort();
  }
}

World* MakeWorld() {
  auto* w = new World;
  WorldDir() = (std::filesystem::temp_directory_path() / "clash-request-fuzz-XXXXXX").string();
  if (mkdtemp(WorldDir().data()) == nullptr) std::abort();
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(WorldDir(), ec);
  });
  w->parts = *PartStore::Open(WorldDir(), 1'000'000);
  w->scene = std::make_shared<Scene>("s00000000000000000000000000000001");
  const double sizes[3][3] = {{10, 10, 10}, {10, 10, 10}, {2, 2, 30}};
  const double at[3][3] = {{0, 0, 0}, {5, 5, 5}, {4, 4, -10}};
  const char* names[3] = {"a/box", "a/box2", "a/pin"};
  for (int i = 0; i < 3; ++i) {
    std::vector<double> xyz;
    std::vector<uint32_t> tri;
    Box(sizes[i][0], sizes[i][1], sizes[i][2], &xyz, &tri);
    PartInput in;
    in.name = names[i];
    in.xyz_mm = xyz;
    in.triangles = tri;
    in.deflection_mm = 0.01;
    InstanceRec rec;
    rec.id = w->scene->next_instance_id++;
    rec.part = *w->parts->Put(in);
    rec.path = names[i];
    rec.name = names[i];
    rec.X_WP = clash::geom::RigidTransform::Translation({at[i][0], at[i][1], at[i][2]});
    rec.groups.insert(i == 2 ? "pins" : "boxes");
    w->scene->Add(std::move(rec));
  }
  return w;
}

clash::server::StopCheck Budget() {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  return [end]() -> absl::Status {
    if (std::chrono::steady_clock::now() > end) return absl::DeadlineExceededError("budget");
    return absl::OkStatus();
  };
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static World* world = MakeWorld();
  if (size == 0) return 0;
  const void* body = data + 1;
  const int body_size = static_cast<int>(size - 1);
  const Scene& scene = *world->scene;
  switch (data[0] % 4) {
    case 0: {
      clash::v1::InterferenceRequest r;
      if (r.ParseFromArray(body, body_size)) {
        ExpectCallersStatus(clash::server::RunInterference(scene, r, Budget()).status());
      }
      break;
    }
    case 1: {
      clash::v1::DistanceRequest r;
      if (r.ParseFromArray(body, body_size)) {
        ExpectCallersStatus(clash::server::RunDistance(scene, r, Budget()).status());
      }
      break;
    }
    case 2: {
      clash::v1::PickRequest r;
      if (r.ParseFromArray(body, body_size)) {
        ExpectCallersStatus(clash::server::RunPick(scene, r, Budget()).status());
      }
      break;
    }
    default: {
      clash::v1::ValidateSequenceRequest r;
      if (r.ParseFromArray(body, body_size)) {
        ExpectCallersStatus(clash::server::RunSequence(
            scene, r, Budget(), [](const clash::v1::ValidateSequenceEvent&) {}));
      }
      break;
    }
  }
  return 0;
}
