// In-process tests of clashd: every RPC, its error paths, and the scene queries against
// brute-force oracles over every instance pair (no broad phase, no cache).
#include "server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "clash/cad/durable_file.h"
#include "clash/cad/import_cache.h"
#include "clash/client/client.h"
#include "clash/geom/interference.h"
#include "clash/geom/query.h"
#include "clash/geom/status_macros.h"
#include "clash/v1/sequences.grpc.pb.h"
#include "convert.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "health.h"
#include "limiter.h"
#include "mesh_upload.h"
#include "part_store.h"
#include "query_engine.h"
#include "scene.h"
#include "server/proto/store.pb.h"
#include "storage.h"
#include "testing/random_geometry.h"
#include "testing/status_matchers.h"

namespace clash::server {
namespace {

using ::clash::testing::IsOk;
using ::clash::testing::MakeBox;
using ::clash::testing::MeshUpload;
using ::clash::testing::RawMesh;
using ::clash::testing::StatusIs;
using geom::RigidTransform;
using geom::Vec3;
using ::testing::ElementsAre;

std::string MakeTempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "clash-server-test-XXXXXX").string();
  return mkdtemp(tmpl.data());
}

// Wire poses as the server reads and writes them (quaternion round trip).
v1::Pose ToPose(const RigidTransform& X) {
  v1::Pose p;
  ToProto(X, &p);
  return p;
}
RigidTransform FromPose(const v1::Pose& p) { return *PoseFromProto(p, "test pose"); }

// GET /metrics from the server's metrics port ("" on a connection failure).
// The answer to "GET /metrics", or "" when none came within `timeout`.
std::string FetchMetrics(int port, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string get = "GET /metrics HTTP/1.0\r\n\r\n";
    if (write(fd, get.data(), get.size()) == static_cast<ssize_t>(get.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) body.append(buf, static_cast<size_t>(n));
      if (n < 0) body.clear();  // timed out
    }
  }
  close(fd);
  return body;
}

// A whole ImportCad upload on `ctx`: its header naming `file_name`, then `bytes` as one chunk;
// the call's status.
grpc::Status UploadWhole(v1::PartService::Stub& stub, grpc::ClientContext* ctx,
                         const std::string& file_name, const std::string& bytes) {
  v1::ImportCadResponse resp;
  auto upload = stub.ImportCad(ctx, &resp);
  v1::ImportCadRequest header;
  header.mutable_header()->set_file_name(file_name);
  EXPECT_TRUE(upload->Write(header));
  v1::ImportCadRequest chunk;
  chunk.set_chunk(bytes);
  upload->Write(chunk);
  upload->WritesDone();
  return upload->Finish();
}

// Calls done() every `every` until it returns true or `limit` has passed; whether it did.
bool PollUntil(const std::function<bool()>& done, std::chrono::seconds limit,
               std::chrono::milliseconds every) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

// Waits (up to a minute) until the gauge `name` on the metrics port is non-zero; whether it is.
bool WaitForGauge(int port, const std::string& name) {
  const std::string key = absl::StrCat("\n", name, " ");
  return PollUntil(
      [&] {
        const std::string body = FetchMetrics(port);
        const std::size_t at = body.find(key);
        return at != std::string::npos && body[at + key.size()] != '0';
      },
      std::chrono::seconds(60), std::chrono::milliseconds(2));
}

// The metrics once the server has recorded a call of `method` (waits up to two minutes: the
// handler may still be returning when the client has its status).
std::string MetricsOnceRecorded(int port, const std::string& method) {
  const std::string key = absl::StrCat("clashd_requests_total{method=\"", method, "\"");
  std::string body;
  PollUntil(
      [&] {
        body = FetchMetrics(port);
        return body.find(key) != std::string::npos;
      },
      std::chrono::seconds(120), std::chrono::milliseconds(5));
  return body;
}

// How many files of scene `id` the folder `scenes` holds set aside as damaged
// ("<id>.pb.<time>.damaged").
int DamagedFilesOf(const std::string& scenes, const std::string& id) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(scenes, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    n += name.starts_with(id + ".pb.") && IsDamagedFileName(name);
  }
  return n;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    Start();
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Start(ServerConfig config = {}) {
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "127.0.0.1:0";
    config.data_dir = dir_ + "/data";
    if (config.worker_path.empty()) config.worker_path = CLASH_CAD_WORKER_PATH;
    config.quiet = true;
    config.shutdown_grace_seconds = 1;
    auto server = ClashServer::Start(config);
    ASSERT_THAT(server.status(), IsOk());
    server_ = std::move(*server);
    grpc::ChannelArguments args;
    client_ = client::Client::FromChannel(server_->grpc_server()->InProcessChannel(args));
  }
  void Restart(ServerConfig config = {}) {
    client_.reset();
    server_.reset();
    Start(config);
  }

  // Uploads a mesh; returns the part id.
  std::string Upload(const RawMesh& m, const std::string& name, double deflection = 0) {
    auto part = client_->UploadMesh(MeshUpload(m, name, deflection));
    EXPECT_THAT(part.status(), IsOk());
    return part.ok() ? part->part_id() : std::string();
  }

  std::string NewScene() {
    auto scene = client_->CreateScene("test");
    EXPECT_THAT(scene.status(), IsOk());
    return scene.ok() ? scene->scene_id() : std::string();
  }

  // A new scene of n instances of four small parts (two boxes, a subdivided box, a cylinder)
  // at random poses within `radius` of the origin.
  struct RandomScene {
    std::string id;
    std::vector<std::shared_ptr<const geom::Part>> parts;  // by kind
    std::vector<uint64_t> ids;                             // by instance
    std::vector<int> kind;
    std::vector<RigidTransform> poses;  // as the server reads them
  };
  RandomScene MakeRandomScene(std::mt19937& rng, int n, double radius) {
    const std::vector<RawMesh> meshes = {MakeBox(Vec3(3, 2, 1)), MakeBox(Vec3(1, 1, 6)),
                                         testing::MakeSubdividedBox(Vec3(2, 2, 2), 3),
                                         testing::MakeCylinder(1.5, 5, 24)};
    RandomScene out;
    std::vector<std::string> part_ids;
    for (std::size_t i = 0; i < meshes.size(); ++i) {
      part_ids.push_back(Upload(meshes[i], "m" + std::to_string(i)));
      out.parts.push_back(meshes[i].Part());
    }
    out.id = NewScene();
    for (int i = 0; i < n; ++i) {
      const int k = static_cast<int>(rng() % meshes.size());
      const RigidTransform X = FromPose(ToPose(testing::RandomPose(rng, radius)));
      out.ids.push_back(Place(out.id, part_ids[k], X, "i" + std::to_string(i)));
      out.kind.push_back(k);
      out.poses.push_back(X);
    }
    return out;
  }

  // A request placing n instances of `part` in `scene`: "<prefix><i>" at pose(i), in `group`
  // when one is given.
  static v1::AddInstancesRequest PlaceMany(const std::string& scene, const std::string& part, int n,
                                           const std::string& prefix,
                                           const std::function<RigidTransform(int)>& pose,
                                           const std::string& group = "") {
    v1::AddInstancesRequest add;
    add.set_scene_id(scene);
    for (int i = 0; i < n; ++i) {
      v1::PartPlacement* p = add.add_parts();
      p->set_part_id(part);
      p->set_path(prefix + std::to_string(i));
      *p->mutable_pose() = ToPose(pose(i));
      if (!group.empty()) p->add_groups(group);
    }
    return add;
  }
  // Instances n of them 3 mm apart along x.
  static RigidTransform AlongX3(int i) { return RigidTransform::Translation(Vec3(3.0 * i, 0, 0)); }

  uint64_t Place(const std::string& scene, const std::string& part, const RigidTransform& X,
                 const std::string& path) {
    v1::AddInstancesRequest req;
    req.set_scene_id(scene);
    v1::PartPlacement* p = req.add_parts();
    p->set_part_id(part);
    p->set_path(path);
    *p->mutable_pose() = ToPose(X);
    auto r = client_->AddInstances(req);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? r->instances(0).instance_id() : 0;
  }

  // A new scene placing one box (path "a"); then the server is stopped. Returns the scene id.
  std::string OneBoxSceneThenStop() {
    const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
    const std::string scene_id = NewScene();
    Place(scene_id, box, RigidTransform::Identity(), "a");
    client_.reset();
    server_.reset();
    return scene_id;
  }

  // The local tenant's stores opened directly (the server stopped), as a restart would.
  struct Stores {
    std::unique_ptr<PartStore> parts;
    std::unique_ptr<SceneStore> scenes;
  };
  absl::StatusOr<Stores> OpenStores() {
    const std::string tenant = dir_ + "/data/tenants/local";
    Stores out;
    CLASH_ASSIGN_OR_RETURN(out.parts, PartStore::Open(tenant, ServerConfig{}.max_part_triangles));
    CLASH_ASSIGN_OR_RETURN(out.scenes, SceneStore::Open(tenant + "/scenes", out.parts.get()));
    return out;
  }

  // The server stopped and the local tenant's stores opened, with the scene as a query finds
  // it, locked for reading, and a check of the whole scene to run on it.
  struct OpenedScene {
    Stores stores;
    std::shared_ptr<Scene> scene;
    std::shared_lock<std::shared_timed_mutex> lock;
    v1::InterferenceRequest check;
  };
  absl::StatusOr<OpenedScene> StopAndOpen(const std::string& scene_id) {
    client_.reset();
    server_.reset();
    CLASH_ASSIGN_OR_RETURN(Stores stores, OpenStores());
    CLASH_ASSIGN_OR_RETURN(std::shared_ptr<Scene> scene, stores.scenes->Get(scene_id));
    std::shared_lock lock(scene->mu);
    v1::InterferenceRequest check;
    check.set_scene_id(scene_id);
    return OpenedScene{std::move(stores), std::move(scene), std::move(lock), std::move(check)};
  }

  // A new scene of `count` cylinders crowded about the origin: for 90, ~4000 crossing pairs, a
  // check that takes far longer than a client needs to cancel it or a short deadline to expire.
  std::string CrowdedCylinders(uint32_t seed, int count = 90) {
    std::mt19937 rng = testing::SeededRng(seed);
    const std::string cyl = Upload(testing::MakeCylinder(3, 10, 48), "cyl");
    const std::string scene = NewScene();
    for (int i = 0; i < count; ++i) {
      Place(scene, cyl, testing::RandomPose(rng, 1.5), "c" + std::to_string(i));
    }
    return scene;
  }

  v1::InterferenceResponse Check(const std::string& scene, double tau, double clearance = 0) {
    v1::InterferenceRequest req;
    req.set_scene_id(scene);
    if (tau >= 0) req.mutable_tolerances()->set_contact_tolerance_mm(tau);
    req.mutable_tolerances()->set_clearance_mm(clearance);
    auto r = client_->CheckInterference(req);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? *r : v1::InterferenceResponse();
  }

  // A scene with a tube (bore radius 5, 32-gon) at the origin and another 100 mm along x, the
  // narrow peg (3 x 3 x 20: corner 4.24 < 4.98, it passes) installed in the first and the wide
  // one (4 x 4 x 20: corner 5.66 > 5, it is blocked) in the second, at the given paths.
  std::string PegsAndTubes(const std::string& narrow_path, const std::string& wide_path) {
    const std::string tube = Upload(testing::MakeTube(5, 20, 10, 32), "tube");
    const std::string narrow = Upload(MakeBox(Vec3(3, 3, 20)), "narrow peg");
    const std::string wide = Upload(MakeBox(Vec3(4, 4, 20)), "wide peg");
    const std::string scene = NewScene();
    Place(scene, tube, RigidTransform::Identity(), "tube");
    Place(scene, narrow, RigidTransform::Identity(), narrow_path);
    Place(scene, tube, RigidTransform::Translation(Vec3(100, 0, 0)), "tube2");
    Place(scene, wide, RigidTransform::Translation(Vec3(100, 0, 0)), wide_path);
    return scene;
  }

  // A step installing the instances under `prefix` by a 60 mm move along `direction` (z: down).
  static v1::SequenceStep* AddInstallStep(v1::ValidateSequenceRequest* req,
                                          const std::string& prefix, double direction_z = -1) {
    v1::SequenceStep* step = req->add_steps();
    step->mutable_moving()->add_path_prefixes(prefix);
    step->mutable_motion()->mutable_linear()->mutable_direction()->set_z(direction_z);
    step->mutable_motion()->mutable_linear()->set_distance_mm(60);
    return step;
  }

  // The result of a sequence of one step (an empty result, with the failure recorded, when the
  // call fails or answers another number of steps).
  v1::StepResult OnlyStep(const v1::ValidateSequenceRequest& req) {
    auto report = client_->ValidateSequence(req);
    EXPECT_THAT(report.status(), IsOk());
    if (!report.ok()) return {};
    EXPECT_EQ(report->steps.size(), 1u);
    return report->steps.size() == 1 ? report->steps[0] : v1::StepResult();
  }

  // A whole-scene check on a thread and a client of its own, until it ends or this object goes:
  // then it is cancelled and joined, also when an assertion returns early.
  class BackgroundCheck {
   public:
    BackgroundCheck(ClashServer* server, const std::string& scene)
        : stub_(v1::QueryService::NewStub(server->grpc_server()->InProcessChannel({}))) {
      request_.set_scene_id(scene);
      thread_ = std::thread([this] {
        v1::InterferenceResponse resp;
        status_ = stub_->CheckInterference(&ctx_, request_, &resp);
        done_ = true;
      });
    }
    ~BackgroundCheck() { Stop(); }
    BackgroundCheck(const BackgroundCheck&) = delete;
    BackgroundCheck& operator=(const BackgroundCheck&) = delete;
    /// Whether the check has returned.
    [[nodiscard]] bool done() const { return done_; }
    /// Cancels the check, waits for it and gives its status.
    grpc::Status Stop() {
      ctx_.TryCancel();
      if (thread_.joinable()) thread_.join();
      return status_;
    }

   private:
    std::unique_ptr<v1::QueryService::Stub> stub_;
    grpc::ClientContext ctx_;
    v1::InterferenceRequest request_;
    grpc::Status status_;
    std::atomic<bool> done_{false};
    std::thread thread_;
  };

  std::string dir_;
  std::unique_ptr<ClashServer> server_;
  std::unique_ptr<client::Client> client_;
};

TEST_F(ServerTest, UploadMeshDescribesThePartAndIsContentAddressed) {
  const std::string id = Upload(MakeBox(Vec3(5, 10, 20)), "block", 0.01);
  auto part = client_->GetPart(id);
  ASSERT_THAT(part.status(), IsOk());
  EXPECT_EQ(part->name(), "block");
  EXPECT_EQ(part->triangle_count(), 12u);
  EXPECT_EQ(part->vertex_count(), 8u);
  EXPECT_TRUE(part->closed());
  EXPECT_DOUBLE_EQ(part->bounds().max_mm().z(), 20);
  EXPECT_DOUBLE_EQ(part->bounds().min_mm().y(), -10);
  EXPECT_DOUBLE_EQ(part->deflection_mm(), 0.01);
  EXPECT_EQ(part->hierarchy().aabb_nodes() + part->hierarchy().obb_nodes(),
            part->hierarchy().nodes());
  // The same content gives the same id; other content another one.
  EXPECT_EQ(Upload(MakeBox(Vec3(5, 10, 20)), "again", 0.01), id);
  EXPECT_NE(Upload(MakeBox(Vec3(5, 10, 21)), "other", 0.01), id);
  auto all = client_->ListParts();
  ASSERT_THAT(all.status(), IsOk());
  EXPECT_EQ(all->size(), 2u);
}

TEST_F(ServerTest, BadMeshesAreInvalidArgumentAndStoreNothing) {
  v1::UploadMeshRequest req;
  req.add_vertices_mm(0);
  req.add_vertices_mm(0);
  req.add_vertices_mm(std::nan(""));
  for (int i = 0; i < 6; ++i) req.add_vertices_mm(i);
  req.add_triangles(0);
  req.add_triangles(1);
  req.add_triangles(2);
  EXPECT_THAT(client_->UploadMesh(req), StatusIs(absl::StatusCode::kInvalidArgument, "finite"));
  req.set_vertices_mm(2, 1.0);
  req.set_triangles(2, 7);
  EXPECT_THAT(client_->UploadMesh(req), StatusIs(absl::StatusCode::kInvalidArgument, "vertex 7"));
  req.add_triangles(1);
  EXPECT_THAT(client_->UploadMesh(req), StatusIs(absl::StatusCode::kInvalidArgument, "3 values"));
  auto all = client_->ListParts();
  ASSERT_THAT(all.status(), IsOk());
  EXPECT_TRUE(all->empty());
}

TEST_F(ServerTest, OversizedUploadsAreResourceExhausted) {
  ServerConfig small;
  small.max_part_triangles = 100;
  Restart(small);
  const v1::UploadMeshRequest req =
      MeshUpload(testing::MakeSubdividedBox(Vec3(1, 1, 1), 5), "");  // 300 triangles
  EXPECT_THAT(client_->UploadMesh(req), StatusIs(absl::StatusCode::kResourceExhausted, "limit"));
}

// GetPartMesh answers the mesh as stored: a triangle soup comes back welded (one vertex per
// corner position), every triangle over the same corners in the same order, with its face id.
TEST_F(ServerTest, GetPartMeshReturnsTheWeldedUpload) {
  const RawMesh box = testing::MakeBox(Vec3(1, 2, 3));
  v1::UploadMeshRequest soup;  // three vertices of its own per triangle
  soup.set_name("soup");
  for (std::size_t i = 0; i < box.t.size(); ++i) {
    for (uint32_t k : box.t[i]) {
      for (int c = 0; c < 3; ++c) soup.add_vertices_mm(box.v[k][c]);
      soup.add_triangles(static_cast<uint32_t>(soup.triangles_size()));
    }
    soup.add_face_ids(static_cast<uint32_t>(100 + i / 2));
  }
  auto part = client_->UploadMesh(soup);
  ASSERT_THAT(part.status(), IsOk());
  auto mesh = client_->GetPartMesh(part->part_id());
  ASSERT_THAT(mesh.status(), IsOk());
  EXPECT_EQ(mesh->part_id(), part->part_id());
  EXPECT_EQ(mesh->vertices_mm_size(), 3 * 8);
  EXPECT_EQ(static_cast<uint64_t>(mesh->vertices_mm_size() / 3), part->vertex_count());
  ASSERT_EQ(static_cast<uint64_t>(mesh->triangles_size() / 3), part->triangle_count());
  ASSERT_EQ(mesh->triangles_size(), soup.triangles_size());
  EXPECT_THAT(mesh->face_ids(), ::testing::ElementsAreArray(soup.face_ids()));
  for (int i = 0; i < mesh->triangles_size(); ++i) {
    const uint32_t k = mesh->triangles(i);
    ASSERT_LT(3 * k + 2, static_cast<uint32_t>(mesh->vertices_mm_size()));
    for (int c = 0; c < 3; ++c) {  // welding keeps one of the bit-identical copies
      EXPECT_EQ(mesh->vertices_mm(static_cast<int>(3 * k) + c), soup.vertices_mm(3 * i + c));
    }
  }
  // Cleaning is a fixed point: the answer uploaded again comes back unchanged. (Part ids hash
  // the uploaded buffers, so this part has an id of its own.)
  v1::UploadMeshRequest again;
  *again.mutable_vertices_mm() = mesh->vertices_mm();
  *again.mutable_triangles() = mesh->triangles();
  *again.mutable_face_ids() = mesh->face_ids();
  auto same = client_->UploadMesh(again);
  ASSERT_THAT(same.status(), IsOk());
  EXPECT_EQ(same->welded_vertices(), 0u);
  auto mesh_again = client_->GetPartMesh(same->part_id());
  ASSERT_THAT(mesh_again.status(), IsOk());
  EXPECT_THAT(mesh_again->vertices_mm(), ::testing::ElementsAreArray(mesh->vertices_mm()));
  EXPECT_THAT(mesh_again->triangles(), ::testing::ElementsAreArray(mesh->triangles()));
  EXPECT_THAT(mesh_again->face_ids(), ::testing::ElementsAreArray(mesh->face_ids()));
}

TEST_F(ServerTest, GetPartMeshErrors) {
  EXPECT_THAT(client_->GetPartMesh("../../etc/passwd"),
              StatusIs(absl::StatusCode::kInvalidArgument, "part_id"));
  EXPECT_THAT(client_->GetPartMesh("p" + std::string(32, '1')),
              StatusIs(absl::StatusCode::kNotFound, "part"));
  const std::string id = Upload(testing::MakeSubdividedBox(Vec3(1, 1, 1), 5), "big");
  ServerConfig small;  // the part stays on disk; its ~6 kB mesh no longer fits a message
  small.max_message_bytes = 4096;
  Restart(small);
  EXPECT_THAT(client_->GetPart(id).status(), IsOk());
  EXPECT_THAT(client_->GetPartMesh(id),
              StatusIs(absl::StatusCode::kResourceExhausted, "max-message-bytes"));
}

// A part the server cannot store (its disk fails: here the parts folder is a file) fails the
// import with the server's error. Before, it became a warning, "part left out", of an import that
// answered OK as merely incomplete (and INVALID_ARGUMENT, the file's fault, when strict).
TEST_F(ServerTest, AStorageFailureFailsTheImport) {
  const std::string file = std::string(CLASH_CAD_DATA_DIR) + "/as1-oc-214-mat.stp";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file << " (../shared absent)";
  NewScene();  // the tenant's folders exist
  const std::string parts = dir_ + "/data/tenants/local/parts";
  ASSERT_TRUE(std::filesystem::is_directory(parts));
  std::filesystem::remove_all(parts);
  std::ofstream(parts) << "not a folder";
  EXPECT_THAT(client_->ImportCad(file).status(), StatusIs(absl::StatusCode::kInternal, ""));
}

// A worker that cannot run (the dynamic loader exits 127: a shared library is missing) is the
// server's fault, not the file's: FAILED_PRECONDITION. Health follows the pool's start-ups
// (which run no file, so no upload can fake them): clash.v1.PartService turns NOT_SERVING once
// workers fail to start, and SERVING again once one starts. Before, every import answered
// INVALID_ARGUMENT, blaming the file, and health stayed SERVING.
TEST_F(ServerTest, AWorkerThatCannotRunIsTheServersFault) {
  const std::string worker = dir_ + "/worker";
  const auto install_worker = [&](const std::string& script) {
    const std::string tmp = worker + ".new";
    std::ofstream(tmp) << "#!/bin/sh\n" << script << "\n";
    std::filesystem::permissions(tmp, std::filesystem::perms::owner_all);
    std::filesystem::rename(tmp, worker);  // never a half-written script
  };
  install_worker("echo 'error while loading shared libraries' >&2\nexit 127");
  ServerConfig config;
  config.worker_path = worker;
  config.import_pool_workers = 1;
  Restart(config);
  auto health = grpc::health::v1::Health::NewStub(server_->grpc_server()->InProcessChannel({}));
  const auto part_service_becomes = [&](grpc::health::v1::HealthCheckResponse::ServingStatus want) {
    for (int i = 0; i < 600; ++i) {  // up to 60 s (sanitizers); the pool retries every second
      grpc::ClientContext ctx;
      grpc::health::v1::HealthCheckRequest req;
      req.set_service("clash.v1.PartService");
      grpc::health::v1::HealthCheckResponse resp;
      if (health->Check(&ctx, req, &resp).ok() && resp.status() == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  EXPECT_TRUE(part_service_becomes(grpc::health::v1::HealthCheckResponse::NOT_SERVING));
  const std::string file = dir_ + "/box.stp";
  std::ofstream(file) << "ISO-10303-21;\nEND-ISO-10303-21;\n";
  EXPECT_THAT(client_->ImportCad(file).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "shared libraries"));
  install_worker(absl::StrCat("exec '", CLASH_CAD_WORKER_PATH, "' \"$@\""));
  EXPECT_TRUE(part_service_becomes(grpc::health::v1::HealthCheckResponse::SERVING));
}

// A worker that leaves a FIFO where its stderr file was (a worker taken over by a hostile file)
// cannot hang the import that quotes it: the server reads only regular files there. Before, the
// open waited for a writer forever; should it again, the test opens the FIFO to release it.
TEST_F(ServerTest, AWorkerPlantingAFifoCannotHangItsImport) {
  const std::string worker = dir_ + "/worker";
  std::ofstream(worker) << "#!/bin/sh\nrm -f \"$TMPDIR/stderr.txt\"\nmkfifo "
                           "\"$TMPDIR/stderr.txt\"\nexit 74\n";
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  ServerConfig config;
  config.worker_path = worker;
  config.import_pool_workers = 0;
  Restart(config);
  const std::string file = dir_ + "/box.stp";
  std::ofstream(file) << "ISO-10303-21;\nEND-ISO-10303-21;\n";
  auto import = std::async(std::launch::async, [&] { return client_->ImportCad(file); });
  if (import.wait_for(std::chrono::seconds(20)) == std::future_status::timeout) {
    ADD_FAILURE() << "the import hangs on the worker's FIFO";
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ + "/data", ec)) {
      if (!e.is_fifo()) continue;
      const int fd = open(e.path().c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) close(fd);
    }
  }
  EXPECT_THAT(import.get().status(), StatusIs(absl::StatusCode::kInternal, "exit code 74"));
}

// An imported part's mesh holds Part.triangle_count triangles and vertex_count vertices.
TEST_F(ServerTest, GetPartMeshOfImportedParts) {
  const std::string file = std::string(CLASH_CAD_DATA_DIR) + "/as1-oc-214-mat.stp";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file << " (../shared absent)";
  auto imported = client_->ImportCad(file);
  ASSERT_THAT(imported.status(), IsOk());
  ASSERT_GT(imported->parts_size(), 0);
  for (const v1::Part& p : imported->parts()) {
    auto mesh = client_->GetPartMesh(p.part_id());
    ASSERT_THAT(mesh.status(), IsOk()) << p.name();
    EXPECT_EQ(static_cast<uint64_t>(mesh->triangles_size()), 3 * p.triangle_count()) << p.name();
    EXPECT_EQ(static_cast<uint64_t>(mesh->vertices_mm_size()), 3 * p.vertex_count()) << p.name();
    EXPECT_EQ(static_cast<uint64_t>(mesh->face_ids_size()), p.triangle_count()) << p.name();
    const auto max_face = std::max_element(mesh->face_ids().begin(), mesh->face_ids().end());
    EXPECT_LT(*max_face, static_cast<uint32_t>(p.faces_total())) << p.name();
  }
}

TEST_F(ServerTest, UnknownIdsAreNotFound) {
  const std::string missing_scene = "s" + std::string(32, '0');
  EXPECT_THAT(client_->GetScene(missing_scene), StatusIs(absl::StatusCode::kNotFound, "scene"));
  EXPECT_THAT(client_->GetScene("garbage"), StatusIs(absl::StatusCode::kNotFound, "scene"));
  EXPECT_THAT(client_->DeleteScene(missing_scene), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(client_->GetPart("p" + std::string(32, '1')),
              StatusIs(absl::StatusCode::kNotFound, "part"));
  EXPECT_THAT(client_->GetPart("../../etc/passwd"), StatusIs(absl::StatusCode::kNotFound, "part"));
  EXPECT_THAT(client_->GetAssembly("a" + std::string(32, '2')),
              StatusIs(absl::StatusCode::kNotFound, "assembly"));
  const std::string scene = NewScene();
  v1::AddInstancesRequest add;
  add.set_scene_id(scene);
  add.add_parts()->set_part_id("p" + std::string(32, '3'));
  EXPECT_THAT(client_->AddInstances(add), StatusIs(absl::StatusCode::kNotFound, "part"));
  v1::SetPosesRequest poses;
  poses.set_scene_id(scene);
  poses.add_poses()->set_instance_id(42);
  EXPECT_THAT(client_->SetPoses(poses), StatusIs(absl::StatusCode::kNotFound, "instance 42"));
  v1::InterferenceRequest check;
  check.set_scene_id(scene);
  check.mutable_set_a()->add_groups("nope");
  EXPECT_THAT(client_->CheckInterference(check), StatusIs(absl::StatusCode::kNotFound, "group"));
  check.set_scene_id(missing_scene);
  EXPECT_THAT(client_->CheckInterference(check), StatusIs(absl::StatusCode::kNotFound, "scene"));
}

// Each query's bad input gets the status its proto promises, with a message naming the field.
TEST_F(ServerTest, BadQueryInputsGetThePromisedStatus) {
  const std::string part = Upload(MakeBox(Vec3(1, 1, 1)), "cube");
  const std::string scene = NewScene();
  const uint64_t id = Place(scene, part, RigidTransform::Identity(), "cube");
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  using Code = absl::StatusCode;
  auto check = [&](const std::function<void(v1::InterferenceRequest&)>& edit, Code code,
                   const char* fragment) {
    v1::InterferenceRequest r;
    r.set_scene_id(scene);
    edit(r);
    EXPECT_THAT(client_->CheckInterference(r).status(), StatusIs(code, fragment)) << fragment;
  };
  for (double bad : {-1.0, nan, inf}) {
    check([&](auto& r) { r.mutable_tolerances()->set_contact_tolerance_mm(bad); },
          Code::kInvalidArgument, "contact_tolerance_mm");
    check([&](auto& r) { r.mutable_tolerances()->set_clearance_mm(bad); }, Code::kInvalidArgument,
          "clearance_mm");
  }
  check([&](auto& r) { r.mutable_set_a()->add_instance_ids(id + 100); }, Code::kNotFound,
        "no instance");
  check([&](auto& r) { r.mutable_set_b()->add_path_prefixes("nowhere"); }, Code::kNotFound,
        "no instance under path");
  check(
      [&](auto& r) {
        v1::PoseUpdate* u = r.add_pose_overrides();
        u->set_instance_id(id + 100);
        *u->mutable_pose() = ToPose(RigidTransform::Identity());
      },
      Code::kNotFound, "");
  check(
      [&](auto& r) {
        v1::PoseUpdate* u = r.add_pose_overrides();
        u->set_instance_id(id);
        *u->mutable_pose() = ToPose(RigidTransform::Translation(Vec3(nan, 0, 0)));
      },
      Code::kInvalidArgument, "");
  check([](auto& r) { r.set_depth_estimate(static_cast<v1::DepthEstimate>(7)); },
        Code::kInvalidArgument, "unknown depth_estimate");

  v1::DistanceRequest distance;
  distance.set_scene_id(scene);
  for (double bad : {-1.0, nan}) {
    distance.set_max_distance_mm(bad);
    EXPECT_THAT(client_->ComputeDistance(distance).status(),
                StatusIs(Code::kInvalidArgument, "max_distance_mm"));
  }

  auto pick = [&](const std::function<void(v1::Ray&)>& edit, const char* fragment) {
    v1::PickRequest r;
    r.set_scene_id(scene);
    v1::Ray* ray = r.add_rays();
    ray->mutable_origin_mm()->set_z(10);
    ray->mutable_direction()->set_z(-1);
    edit(*ray);
    EXPECT_THAT(client_->PickRays(r).status(), StatusIs(Code::kInvalidArgument, fragment))
        << fragment;
  };
  pick([](v1::Ray& r) { r.mutable_direction()->set_z(0); }, "direction non-zero");
  pick([&](v1::Ray& r) { r.mutable_direction()->set_x(nan); }, "direction non-zero");
  pick([&](v1::Ray& r) { r.mutable_origin_mm()->set_y(inf); }, "origin and direction");
  pick([](v1::Ray& r) { r.set_max_distance_mm(-1); }, "max_distance_mm");
  v1::PickRequest many;
  many.set_scene_id(scene);
  for (int i = 0; i <= 100000; ++i) many.add_rays()->mutable_direction()->set_z(-1);
  EXPECT_THAT(client_->PickRays(many).status(),
              StatusIs(Code::kInvalidArgument, "above the limit"));
}

TEST_F(ServerTest, BadPosesAreInvalidArgumentAndChangeNothing) {
  const std::string part = Upload(MakeBox(Vec3(1, 1, 1)), "cube");
  const std::string scene = NewScene();
  const uint64_t id = Place(scene, part, RigidTransform::Identity(), "cube");
  const auto before = client_->GetScene(scene);
  ASSERT_THAT(before.status(), IsOk());

  v1::SetPosesRequest req;
  req.set_scene_id(scene);
  v1::PoseUpdate* u = req.add_poses();
  u->set_instance_id(id);
  u->mutable_pose()->mutable_translation_mm()->set_x(std::nan(""));
  EXPECT_THAT(client_->SetPoses(req), StatusIs(absl::StatusCode::kInvalidArgument, "finite"));
  u->mutable_pose()->mutable_translation_mm()->set_x(1);
  u->mutable_pose()->mutable_quaternion()->set_w(2);
  EXPECT_THAT(client_->SetPoses(req), StatusIs(absl::StatusCode::kInvalidArgument, "norm"));
  u->mutable_pose()->mutable_quaternion()->set_w(1.000002);  // its norm said "1 is not 1"
  EXPECT_THAT(client_->SetPoses(req),
              StatusIs(absl::StatusCode::kInvalidArgument, "norm 1.000002 is not 1"));
  v1::RotationMatrix* m = u->mutable_pose()->mutable_matrix();
  for (double v : {1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -1.0}) m->add_rows(v);  // a mirror
  EXPECT_THAT(client_->SetPoses(req), StatusIs(absl::StatusCode::kInvalidArgument, "rotation"));
  // A zero quaternion (a message left empty) is not the identity; a missing pose (which moved
  // the instance to the origin) is refused too.
  u->mutable_pose()->mutable_quaternion();
  EXPECT_THAT(client_->SetPoses(req), StatusIs(absl::StatusCode::kInvalidArgument, "zero"));
  u->clear_pose();
  EXPECT_THAT(client_->SetPoses(req), StatusIs(absl::StatusCode::kInvalidArgument, "no pose"));
  // Finite but beyond the scene's reach (±1e12 mm), where the tolerances would be rounding: it is
  // refused, in a move and in a placement.
  u->mutable_pose()->mutable_translation_mm()->set_z(1.001e12);
  u->mutable_pose()->mutable_quaternion()->set_w(1);
  EXPECT_THAT(client_->SetPoses(req),
              StatusIs(absl::StatusCode::kInvalidArgument, "scene's reach"));
  {
    v1::AddInstancesRequest far;
    far.set_scene_id(scene);
    v1::PartPlacement* p = far.add_parts();
    p->set_part_id(part);
    p->mutable_pose()->mutable_translation_mm()->set_x(-1.001e12);
    EXPECT_THAT(client_->AddInstances(far),
                StatusIs(absl::StatusCode::kInvalidArgument, "scene's reach"));
  }
  v1::InterferenceRequest check;
  check.set_scene_id(scene);
  check.add_pose_overrides()->set_instance_id(id);
  EXPECT_THAT(client_->CheckInterference(check),
              StatusIs(absl::StatusCode::kInvalidArgument, "no pose"));

  // A batch with one bad pose changes nothing.
  v1::AddInstancesRequest add;
  add.set_scene_id(scene);
  add.add_parts()->set_part_id(part);
  v1::PartPlacement* bad = add.add_parts();
  bad->set_part_id(part);
  bad->mutable_pose()->mutable_translation_mm()->set_y(std::numeric_limits<double>::infinity());
  EXPECT_THAT(client_->AddInstances(add), StatusIs(absl::StatusCode::kInvalidArgument, "parts[1]"));
  // So does a duplicate path.
  v1::AddInstancesRequest dup;
  dup.set_scene_id(scene);
  dup.add_parts()->set_part_id(part);
  dup.mutable_parts(0)->set_path("cube");
  EXPECT_THAT(client_->AddInstances(dup), StatusIs(absl::StatusCode::kInvalidArgument, "exists"));
  dup.mutable_parts(0)->set_path("twice");  // in one request: not "exists already"
  *dup.add_parts() = dup.parts(0);
  EXPECT_THAT(client_->AddInstances(dup),
              StatusIs(absl::StatusCode::kInvalidArgument, "'twice' comes twice in this request"));

  const auto after = client_->GetScene(scene);
  ASSERT_THAT(after.status(), IsOk());
  EXPECT_EQ(after->version(), before->version());
  EXPECT_EQ(after->instance_count(), 1u);
}

TEST_F(ServerTest, ClassesOfKnownBoxPairs) {
  const std::string big = Upload(MakeBox(Vec3(5, 5, 5)), "big");
  const std::string small = Upload(MakeBox(Vec3(1, 1, 1)), "small");
  const std::string scene = NewScene();
  auto T = [](double x, double y, double z) { return RigidTransform::Translation(Vec3(x, y, z)); };
  const uint64_t a_id = Place(scene, big, T(0, 0, 0), "a");
  Place(scene, big, T(8, 0, 0), "hard");      // overlaps a by 2 mm
  Place(scene, big, T(0, 10, 0), "touch");    // face contact with a
  Place(scene, small, T(0, 0, 0), "inside");  // inside a
  Place(scene, big, T(0, -10.5, 0), "near");  // 0.5 mm from a
  Place(scene, big, T(0, 0, -20), "far");     // far from everything
  const v1::InterferenceResponse r = Check(scene, 0.01, 1.0);
  std::map<std::pair<std::string, std::string>, v1::Clash> by_pair;
  for (const v1::Clash& c : r.clashes()) by_pair[{c.path_a(), c.path_b()}] = c;
  auto Pair = [&](const std::string& a, const std::string& b) { return by_pair[{a, b}]; };
  ASSERT_TRUE(by_pair.count(std::pair<std::string, std::string>("a", "hard")));
  EXPECT_EQ(Pair("a", "hard").clash_class(), v1::HARD);
  EXPECT_NEAR(Pair("a", "hard").depth_mm(), 2.0, 0.1);
  ASSERT_TRUE(by_pair.count(std::pair<std::string, std::string>("a", "touch")));
  EXPECT_EQ(Pair("a", "touch").clash_class(), v1::CONTACT);
  ASSERT_TRUE(by_pair.count(std::pair<std::string, std::string>("a", "inside")));
  EXPECT_EQ(Pair("a", "inside").clash_class(), v1::CONTAINED);
  ASSERT_TRUE(by_pair.count(std::pair<std::string, std::string>("a", "near")));
  EXPECT_EQ(Pair("a", "near").clash_class(), v1::CLEARANCE);
  EXPECT_NEAR(Pair("a", "near").distance_mm(), 0.5, 1e-9);
  for (const auto& [pair, c] : by_pair) {
    EXPECT_NE(pair.first, "far");
    EXPECT_NE(pair.second, "far");
    EXPECT_LT(c.path_a(), c.path_b());
    EXPECT_EQ(c.contact_tolerance_mm(), 0.01);
  }
  EXPECT_EQ(r.summary().hard(), 1u);
  EXPECT_EQ(r.summary().contained(), 1u);
  EXPECT_EQ(r.tolerances().clearance_mm(), 1.0);
  // Order: HARD, CONTAINED, CONTACT, CLEARANCE; ids stable across calls.
  ASSERT_GE(r.clashes_size(), 4);
  EXPECT_EQ(r.clashes(0).clash_class(), v1::HARD);
  const v1::InterferenceResponse again = Check(scene, 0.01, 1.0);
  ASSERT_EQ(again.clashes_size(), r.clashes_size());
  for (int i = 0; i < r.clashes_size(); ++i) {
    EXPECT_EQ(again.clashes(i).clash_id(), r.clashes(i).clash_id());
  }
  EXPECT_EQ(again.summary().cached_pairs(), again.summary().candidate_pairs());
  // Setting a pose an instance already has (a plugin sending every pose after each edit) keeps
  // its cached pairs; a move does not.
  const auto set_a = [&](const RigidTransform& X) {
    v1::SetPosesRequest req;
    req.set_scene_id(scene);
    v1::PoseUpdate* u = req.add_poses();
    u->set_instance_id(a_id);
    *u->mutable_pose() = ToPose(X);
    ASSERT_THAT(client_->SetPoses(req).status(), IsOk());
  };
  set_a(T(0, 0, 0));
  const v1::InterferenceResponse same = Check(scene, 0.01, 1.0);
  EXPECT_EQ(same.summary().cached_pairs(), same.summary().candidate_pairs());
  set_a(T(0, 0, 1e-9));
  const v1::InterferenceResponse moved = Check(scene, 0.01, 1.0);
  EXPECT_LT(moved.summary().cached_pairs(), moved.summary().candidate_pairs());
}

// Clash ids are stable: the id of a pair of plain paths is the one every earlier version gave
// (pinned here), and paths holding newlines, which a plain join would confuse, still give every
// pair its own id.
TEST(ClashIds, StableForPlainPathsAndDistinctForPathsWithNewlines) {
  EXPECT_EQ(ClashId("as1/bolt", "as1/nut"), "c662d9200885b38c2");  // sha256 of "as1/bolt\nas1/nut"
  EXPECT_NE(ClashId("as1/bolt", "as1/nut"), ClashId("as1/nut", "as1/bolt"));
  // One joined string, four different pairs.
  const std::set<std::string> ids = {ClashId("x\ny", "z"), ClashId("x", "y\nz"),
                                     ClashId("x\ny\nz", ""), ClashId("", "x\ny\nz")};
  EXPECT_EQ(ids.size(), 4u);
  // A pair with a newline never takes the id of a plain pair, whatever the plain pair is.
  EXPECT_NE(ClashId("x\ny", "z"), ClashId("x", "y"));
  EXPECT_NE(ClashId("\n\n3", "x\nyz"), ClashId("\n", "\n3\nx\nyz"));
  EXPECT_EQ(ClashId("x\ny", "z").size(), 17u);
}

// A health handler that throws (here, its admission) answers as every other RPC does: INTERNAL
// without the exception's message, or RESOURCE_EXHAUSTED out of memory; never gRPC's UNKNOWN.
TEST(HealthService, AnExceptionIsAnsweredAsInEveryOtherRpc) {
  HealthService broken(
      [](grpc::ServerContext*) -> grpc::Status { throw std::runtime_error("secret detail"); });
  broken.Set("", true);
  grpc::ServerContext ctx;
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status check = broken.Check(&ctx, &request, &response);
  EXPECT_EQ(check.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(check.error_message(), "internal error (logged)");
  EXPECT_EQ(broken.Watch(&ctx, &request, nullptr).error_code(), grpc::StatusCode::INTERNAL);
  HealthService hungry([](grpc::ServerContext*) -> grpc::Status { throw std::bad_alloc(); });
  hungry.Set("", true);
  EXPECT_EQ(hungry.Check(&ctx, &request, &response).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Admitted, it answers.
  HealthService fine([](grpc::ServerContext*) { return grpc::Status::OK; });
  fine.Set("", true);
  ASSERT_TRUE(fine.Check(&ctx, &request, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// With --health-requires-token, a health check is a tenant's call: a spent rate budget answers
// RESOURCE_EXHAUSTED marked worth retrying (clash-retryable: 1), as every other call does.
TEST_F(ServerTest, AHealthCheckOverTheRateBudgetIsMarkedRetryable) {
  const std::string token = "health-token";
  const std::string tokens = dir_ + "/tokens";
  {
    std::ofstream out(tokens);
    out << cad::Sha256Hex(token) << " prober\n";
  }
  ServerConfig config;
  config.tokens_file = tokens;
  config.health_requires_token = true;
  config.tenant_requests_per_second = 0.001;  // no refill within the test
  config.tenant_burst = 1;
  Restart(config);
  auto health = grpc::health::v1::Health::NewStub(server_->grpc_server()->InProcessChannel({}));
  std::vector<grpc::StatusCode> codes;
  bool marked = false;
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    const grpc::Status st = health->Check(&ctx, req, &resp);
    codes.push_back(st.error_code());
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      const auto& trailers = ctx.GetServerTrailingMetadata();
      const auto it = trailers.find(kRetryableMetadata);
      marked = it != trailers.end() && it->second == "1";
    }
  }
  EXPECT_THAT(codes,
              ::testing::ElementsAre(grpc::StatusCode::OK, grpc::StatusCode::RESOURCE_EXHAUSTED,
                                     grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_TRUE(marked);
}

// The metrics endpoint serves its connections side by side, each within a few seconds: idle
// connections and a client that never reads its answer delay neither a scrape nor shutdown
// (before, one connection at a time: 2 s per idle one, and a stalled send held the thread, and
// with it shutdown, until the client left).
TEST_F(ServerTest, MetricsScrapesAreNotHeldByIdleOrStalledClients) {
  const int port = server_->metrics_port();
  ASSERT_GT(port, 0);
  const auto connect_to = [&](int rcvbuf) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
  };
  std::vector<int> held;
  for (int i = 0; i < 10; ++i) held.push_back(connect_to(0));  // silent
  for (int i = 0; i < 4; ++i) {                                // ask, never read
    const int fd = connect_to(1);
    const std::string get = "GET /metrics HTTP/1.0\r\n\r\n";
    EXPECT_EQ(write(fd, get.data(), get.size()), static_cast<ssize_t>(get.size()));
    held.push_back(fd);
  }
  // A request split across writes is read whole.
  {
    const int fd = connect_to(0);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(write(fd, "GET /met", 8), 8);
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_EQ(write(fd, "rics HTTP/1.0\r\n\r\n", 17), 17);
    char buf[64] = {};
    EXPECT_GT(read(fd, buf, sizeof(buf) - 1), 0);
    EXPECT_THAT(std::string(buf), ::testing::StartsWith("HTTP/1.0 200 OK"));
    close(fd);
  }
  EXPECT_THAT(FetchMetrics(port, std::chrono::seconds(3)),
              ::testing::HasSubstr("clashd_pair_cache_entries"));
  // Shutdown with all of them still open. (Here the old loop got through too: loopback's
  // buffers took its small page, so its write never stalled as the review's client, with a
  // 536-byte segment size, made it; the idle connections and the split request are what this
  // test tells apart.)
  const auto before = std::chrono::steady_clock::now();
  Restart(ServerConfig{});
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(30));
  for (int fd : held) close(fd);
  EXPECT_THAT(FetchMetrics(server_->metrics_port(), std::chrono::seconds(3)),
              ::testing::HasSubstr("clashd_pair_cache_entries"));
}

// Durations and rates that the flags' checks let through (NaN compares false with every
// bound) are refused at start (a NaN deadline was no deadline); an infinite one is "never".
TEST_F(ServerTest, NanDurationsAreRefusedAtStart) {
  for (double ServerConfig::*field :
       {&ServerConfig::pair_cache_idle_seconds, &ServerConfig::cpu_latency_idle_seconds,
        &ServerConfig::shutdown_grace_seconds, &ServerConfig::unserved_scene_retry_seconds,
        &ServerConfig::tenant_requests_per_second, &ServerConfig::tenant_burst,
        &ServerConfig::max_query_seconds, &ServerConfig::max_import_seconds,
        &ServerConfig::max_sequence_seconds}) {
    ServerConfig config;
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "";
    config.data_dir = dir_ + "/nan";
    config.quiet = true;
    config.*field = std::nan("");
    EXPECT_THAT(ClashServer::Start(config).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, "must be a number"));
  }
  ServerConfig forever;
  forever.pair_cache_idle_seconds = std::numeric_limits<double>::infinity();
  Restart(forever);
  EXPECT_THAT(client_->CreateScene("still serving").status(), IsOk());
}

// One data folder serves one server: a second clashd on it is refused before it touches the
// folder (before, both served it, each overwriting the other's acknowledged edits, and the
// second's start emptied the first's temporary folders, in-flight uploads included). Nor may a
// second server share the first's port. Once the first stops, the folder can be served again.
TEST_F(ServerTest, ADataFolderAndAPortServeOneServer) {
  const std::string scene = NewScene();
  const std::filesystem::path in_flight = dir_ + "/data/tenants/local/tmp/upload-x";
  std::filesystem::create_directories(in_flight);
  ServerConfig second;
  second.listen = "127.0.0.1:0";
  second.metrics_listen = "";
  second.data_dir = dir_ + "/data";
  second.quiet = true;
  EXPECT_THAT(ClashServer::Start(second).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("in use by another clashd (pid ", getpid(), ")")));
  EXPECT_TRUE(std::filesystem::exists(in_flight));
  second.data_dir = dir_ + "/other";
  second.listen = absl::StrCat("127.0.0.1:", server_->port());
  EXPECT_THAT(ClashServer::Start(second).status(),
              StatusIs(absl::StatusCode::kUnavailable, "cannot listen"));
  Restart();  // the lock goes with the server, and the restarted one takes it
  EXPECT_THAT(client_->GetScene(scene).status(), IsOk());
}

// Health Watch streams need no token by default and each holds a server thread while open:
// beyond HealthService::kDefaultMaxWatches a new one is RESOURCE_EXHAUSTED (before, 255 of them
// took every thread and every other call failed); a closed one makes room again.
TEST_F(ServerTest, HealthWatchStreamsAreBounded) {
  auto health = grpc::health::v1::Health::NewStub(server_->grpc_server()->InProcessChannel({}));
  struct Watch {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<grpc::health::v1::HealthCheckResponse>> reader;
  };
  const auto open = [&](Watch* w) {
    w->reader = health->Watch(&w->ctx, grpc::health::v1::HealthCheckRequest());
    grpc::health::v1::HealthCheckResponse first;
    return w->reader->Read(&first) &&
           first.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  };
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < HealthService::kDefaultMaxWatches; ++i) {
    watches.push_back(std::make_unique<Watch>());
    ASSERT_TRUE(open(watches.back().get())) << i;
  }
  Watch refused;
  EXPECT_FALSE(open(&refused));
  EXPECT_EQ(refused.reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  const auto& trailers = refused.ctx.GetServerTrailingMetadata();
  const auto marked = trailers.find(kRetryableMetadata);
  EXPECT_TRUE(marked != trailers.end() && marked->second == "1");  // worth retrying
  // Other calls are served meanwhile.
  EXPECT_THAT(client_->CreateScene("while watched").status(), IsOk());
  // One closed: a new one is accepted (once the server has seen the cancellation).
  watches[0]->ctx.TryCancel();
  watches[0]->reader->Finish();
  bool accepted = false;
  for (int attempt = 0; attempt < 50 && !accepted; ++attempt) {
    auto w = std::make_unique<Watch>();
    accepted = open(w.get());
    if (accepted) {
      watches[0] = std::move(w);
    } else {
      w->reader->Finish();
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  EXPECT_TRUE(accepted);
  for (auto& w : watches) {
    w->ctx.TryCancel();
    w->reader->Finish();
  }
}

// DEPTH_ESTIMATE_CLASS_ONLY against FULL on bars dipped into a big cube by known depths
// (τ 0.1 mm): 0.05 (CONTACT, below 0.75 τ: depth 0), 0.09 (CONTACT, uncertain: the same depth),
// 0.5 (HARD: a depth above 1.25 τ, at most 0.5) and 3 (HARD, beyond the 2 mm limit of a rule
// that allows the bars: not suppressed, as with the full depth, while 0.5 is). Classes,
// flags and suppressions are FULL's. A class-only answer in the pair cache does not serve a
// FULL request; a FULL one serves a class-only request.
TEST_F(ServerTest, DepthForTheClassOnlyKeepsClassesFlagsAndSuppressions) {
  const std::string big = Upload(MakeBox(Vec3(5, 5, 5)), "big");
  const std::string bar = Upload(MakeBox(Vec3(2.5, 1, 1)), "bar");
  const std::string scene = NewScene();
  const uint64_t a = Place(scene, big, RigidTransform::Identity(), "a");
  const std::vector<double> depths = {0.05, 0.09, 0.5, 3.0};
  // Apart from each other, and the deep one 3 mm from every face of the big cube but one.
  const std::vector<std::pair<double, double>> yz = {{-3, -3}, {3, -3}, {-3, 3}, {0, 0}};
  std::map<std::string, double> depth_of;
  v1::InterferenceRequest req;
  req.set_scene_id(scene);
  req.mutable_set_a()->add_instance_ids(a);
  req.mutable_set_b();
  req.mutable_tolerances()->set_contact_tolerance_mm(0.1);
  v1::AllowedInterference* rule = req.add_allowed();
  rule->set_name("bars");
  rule->mutable_a()->add_instance_ids(a);
  rule->set_max_depth_mm(2.0);
  for (std::size_t i = 0; i < depths.size(); ++i) {
    const std::string name = absl::StrCat("bar", i);
    const uint64_t id =
        Place(scene, bar,
              RigidTransform::Translation(Vec3(7.5 - depths[i], yz[i].first, yz[i].second)), name);
    rule->mutable_b()->add_instance_ids(id);
    depth_of[name] = depths[i];
  }
  req.set_depth_estimate(v1::DEPTH_ESTIMATE_CLASS_ONLY);
  const auto fast = client_->CheckInterference(req);
  ASSERT_THAT(fast.status(), IsOk());
  EXPECT_EQ(fast->depth_estimate(), v1::DEPTH_ESTIMATE_CLASS_ONLY);
  EXPECT_EQ(fast->summary().cached_pairs(), 0u);
  req.set_depth_estimate(v1::DEPTH_ESTIMATE_FULL);
  const auto full = client_->CheckInterference(req);
  ASSERT_THAT(full.status(), IsOk());
  EXPECT_EQ(full->depth_estimate(), v1::DEPTH_ESTIMATE_FULL);
  EXPECT_EQ(full->summary().cached_pairs(), 0u) << "class-only answers served a FULL request";
  ASSERT_EQ(full->clashes_size(), 4);
  ASSERT_EQ(fast->clashes_size(), 4);
  for (int i = 0; i < 4; ++i) {
    const v1::Clash& f = full->clashes(i);
    const v1::Clash& c = fast->clashes(i);
    const double d = depth_of[f.path_b()];
    SCOPED_TRACE(f.path_b());
    EXPECT_NEAR(f.depth_mm(), d, 1e-9);
    EXPECT_EQ(f.clash_class(), d > 0.1 ? v1::HARD : v1::CONTACT);
    EXPECT_EQ(f.uncertain(), d == 0.09);
    EXPECT_EQ(f.suppressed(), d <= 2.0);
    EXPECT_EQ(std::make_tuple(c.path_b(), c.clash_class(), c.uncertain(), c.suppressed()),
              std::make_tuple(f.path_b(), f.clash_class(), f.uncertain(), f.suppressed()));
    if (d < 0.075) {
      EXPECT_EQ(c.depth_mm(), 0.0);
    } else if (d <= 0.125) {
      EXPECT_EQ(c.depth_mm(), f.depth_mm());
    } else {
      EXPECT_GT(c.depth_mm(), d < 2.0 ? 0.125 : 2.0);
      EXPECT_LE(c.depth_mm(), f.depth_mm());
    }
  }
  EXPECT_EQ(fast->summary().suppressed(), full->summary().suppressed());
  EXPECT_EQ(full->summary().hard(), 1u);
  req.set_depth_estimate(v1::DEPTH_ESTIMATE_CLASS_ONLY);
  const auto cached = client_->CheckInterference(req);
  ASSERT_THAT(cached.status(), IsOk());
  EXPECT_EQ(cached->summary().cached_pairs(), 4u);
  ASSERT_EQ(cached->clashes_size(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(cached->clashes(i).depth_mm(), full->clashes(i).depth_mm());
}

// Disabled instances take no part in checks or picks, whether the request names instances
// or leaves the selector empty (the whole scene, resolved without listing it).
TEST_F(ServerTest, DisabledInstancesAreLeftOutOfWholeSceneQueries) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  auto T = [](double x) { return RigidTransform::Translation(Vec3(x, 0, 0)); };
  const uint64_t a = Place(scene, box, T(0), "a");
  const uint64_t b = Place(scene, box, T(1.5), "b");   // overlaps a
  const uint64_t c = Place(scene, box, T(-1.5), "c");  // overlaps a, nearest the ray
  v1::SetInstancesEnabledRequest off;
  off.set_scene_id(scene);
  off.add_instance_ids(c);
  off.set_enabled(false);
  ASSERT_THAT(client_->SetInstancesEnabled(off).status(), IsOk());

  const v1::InterferenceResponse all = Check(scene, 0.01);
  EXPECT_EQ(all.summary().instances(), 2u);
  ASSERT_EQ(all.clashes_size(), 1);
  EXPECT_EQ(all.clashes(0).path_a(), "a");
  EXPECT_EQ(all.clashes(0).path_b(), "b");
  v1::InterferenceRequest one_vs_all;  // a against the whole scene
  one_vs_all.set_scene_id(scene);
  one_vs_all.mutable_set_a()->add_instance_ids(a);
  *one_vs_all.mutable_set_b() = v1::InstanceSelector();
  auto r = client_->CheckInterference(one_vs_all);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(r->summary().instances(), 2u);
  ASSERT_EQ(r->clashes_size(), 1);
  EXPECT_EQ(r->clashes(0).path_b(), "b");

  auto pick = [&](const std::vector<uint64_t>& targets, double dx = 1) {
    v1::PickRequest req;
    req.set_scene_id(scene);
    v1::Ray* ray = req.add_rays();
    ray->mutable_origin_mm()->set_x(-10);
    ray->mutable_origin_mm()->set_y(0.25);
    ray->mutable_origin_mm()->set_z(0.25);
    ray->mutable_direction()->set_x(dx);
    for (uint64_t id : targets) req.mutable_targets()->add_instance_ids(id);
    auto resp = client_->PickRays(req);
    EXPECT_THAT(resp.status(), IsOk());
    return resp.ok() && resp->hits_size() == 1 ? resp->hits(0) : v1::PickHit();
  };
  const v1::PickHit whole = pick({});
  ASSERT_TRUE(whole.hit());
  EXPECT_EQ(whole.instance_id(), a);  // c is nearer but disabled
  EXPECT_NEAR(whole.distance_mm(), 9.0, 1e-9);
  EXPECT_FALSE(pick({c}).hit());
  const v1::PickHit only_b = pick({b});
  ASSERT_TRUE(only_b.hit());
  EXPECT_EQ(only_b.instance_id(), b);
  EXPECT_NEAR(only_b.distance_mm(), 10.5, 1e-9);
  // Directions need not be unit: lengths whose square underflows or overflows are no zero or
  // infinite direction.
  for (double dx : {1e-170, 1e200}) {
    const v1::PickHit scaled = pick({}, dx);
    EXPECT_TRUE(scaled.hit()) << dx;
    EXPECT_EQ(scaled.instance_id(), a) << dx;
    EXPECT_NEAR(scaled.distance_mm(), 9.0, 1e-9) << dx;
  }
}

TEST_F(ServerTest, AllowedInterferenceIsReportedAsSuppressed) {
  const std::string box = Upload(MakeBox(Vec3(5, 5, 5)), "box");
  const std::string scene = NewScene();
  const uint64_t a = Place(scene, box, RigidTransform::Identity(), "bolt");
  const uint64_t b = Place(scene, box, RigidTransform::Translation(Vec3(3, 0, 0)), "nut");
  v1::InterferenceRequest req;
  req.set_scene_id(scene);
  v1::AllowedInterference* rule = req.add_allowed();
  rule->set_name("threaded");
  rule->mutable_a()->add_instance_ids(a);
  rule->mutable_b()->add_instance_ids(b);
  auto r = client_->CheckInterference(req);
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_EQ(r->clashes_size(), 1);
  EXPECT_EQ(r->clashes(0).clash_class(), v1::HARD);
  EXPECT_TRUE(r->clashes(0).suppressed());
  EXPECT_EQ(r->clashes(0).suppressed_by(), "threaded");
  EXPECT_EQ(r->summary().hard(), 0u);
  EXPECT_EQ(r->summary().suppressed(), 1u);
  // A depth limit below the actual depth does not suppress.
  rule->set_max_depth_mm(1.0);
  r = client_->CheckInterference(req);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_FALSE(r->clashes(0).suppressed());
  // Limits and classes that mean nothing are refused, not read as "no limit" or "no class".
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    rule->set_max_depth_mm(bad);
    EXPECT_THAT(client_->CheckInterference(req).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, "max_depth_mm"))
        << bad;
  }
  rule->set_max_depth_mm(0);
  for (int bad : {static_cast<int>(v1::CLASH_CLASS_UNSPECIFIED), 7}) {
    rule->clear_classes();
    rule->add_classes(static_cast<v1::ClashClass>(bad));
    EXPECT_THAT(client_->CheckInterference(req).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, "unknown clash class"))
        << bad;
  }
}

// Allowed-interference rules are bounded: a request may give at most kMaxAllowRules of them,
// and their selectors may name at most kMaxAllowRuleInstances instances in all (RESOURCE_
// EXHAUSTED beyond, nothing computed); a selector that names nothing (every instance) makes no
// set and counts none. Before, each rule copied the instances it chose, so ten thousand rules
// of a few bytes each naming a large group, or every instance, took gigabytes.
TEST_F(ServerTest, AllowedInterferenceRulesAreBounded) {
  const std::string box = Upload(MakeBox(Vec3(5, 5, 5)), "box");
  // Boxes 10 mm wide, 3 mm apart along x, all in group "all".
  const auto row = [&](int n) {
    const std::string scene = NewScene();
    EXPECT_THAT(client_->AddInstances(PlaceMany(scene, box, n, "b", AlongX3, "all")).status(),
                IsOk());
    return scene;
  };
  v1::InterferenceRequest req;
  req.set_scene_id(row(20));
  auto r = client_->CheckInterference(req);
  ASSERT_THAT(r.status(), IsOk());
  const uint64_t hard = r->summary().hard();  // each box with its three nearest on each side
  EXPECT_EQ(hard, 19u + 18u + 17u);
  for (int i = 0; i < kMaxAllowRules; ++i) req.add_allowed()->set_name("r");  // every pair
  r = client_->CheckInterference(req);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(r->summary().hard(), 0u);
  EXPECT_EQ(r->summary().suppressed(), hard);
  req.add_allowed()->set_name("one too many");
  EXPECT_THAT(client_->CheckInterference(req).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "allowed-interference rules"));
  // 500 instances named by each of 8400 rules: past 2^22 in all (refused before any pair is
  // classified; a check just under the budget resolves 2^22 ids, over a minute in the
  // sanitizer build, and is not run).
  req.clear_allowed();
  req.set_scene_id(row(500));
  const int rules = static_cast<int>(kMaxAllowRuleInstances / 500) + 12;
  for (int i = 0; i < rules; ++i) req.add_allowed()->mutable_a()->add_groups("all");
  EXPECT_THAT(client_->CheckInterference(req).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "name more than"));
}

// Equal ray distances go to the smaller instance id, whatever order the scene's broad-phase
// tree (whose shape depends on the scene's history) visits the instances in: instances of one
// part at one pose, hit at the same distance.
TEST_F(ServerTest, APickThatHitsInstancesAtTheSameDistanceAnswersTheSmallestId) {
  const std::string box = Upload(MakeBox(Vec3(2, 2, 2)), "box");
  const std::string scene = NewScene();
  std::vector<uint64_t> ids;
  for (int i = 0; i < 12; ++i) {
    ids.push_back(Place(scene, box, RigidTransform::Translation(Vec3(i % 3 == 0 ? 0 : 5 * i, 0, 0)),
                        "i" + std::to_string(i)));
  }
  v1::PickRequest req;
  req.set_scene_id(scene);
  v1::Ray* ray = req.add_rays();
  ray->mutable_origin_mm()->set_x(0.3);
  ray->mutable_origin_mm()->set_y(0.2);
  ray->mutable_origin_mm()->set_z(10);
  ray->mutable_direction()->set_z(-1);
  // Removing the smallest of the coincident ones leaves the next smallest, each time.
  for (int i = 0; i < 12; i += 3) {
    auto resp = client_->PickRays(req);
    ASSERT_THAT(resp.status(), IsOk());
    ASSERT_TRUE(resp->hits(0).hit());
    EXPECT_EQ(resp->hits(0).instance_id(), ids[i]) << i;
    v1::RemoveInstancesRequest remove;
    remove.set_scene_id(scene);
    remove.add_instance_ids(ids[i]);
    ASSERT_THAT(client_->RemoveInstances(remove).status(), IsOk());
  }
}

// A rule's b unset covers the pairs within a; set but empty, like every selector, it chooses
// every instance: a against the whole scene (clashctl's SEL/all). The proto says so; this pins
// the difference down.
TEST_F(ServerTest, ARulesBUnsetMeansWithinAAndSetEmptyMeansEveryInstance) {
  const std::string box = Upload(MakeBox(Vec3(5, 5, 5)), "box");
  const std::string scene = NewScene();
  const uint64_t bolt = Place(scene, box, RigidTransform::Identity(), "bolt");
  const uint64_t nut = Place(scene, box, RigidTransform::Translation(Vec3(3, 0, 0)), "nut");
  const uint64_t bracket = Place(scene, box, RigidTransform::Translation(Vec3(0, 3, 0)), "bracket");
  v1::InterferenceRequest req;
  req.set_scene_id(scene);
  v1::AllowedInterference* rule = req.add_allowed();
  rule->set_name("threaded");
  rule->mutable_a()->add_instance_ids(bolt);
  rule->mutable_a()->add_instance_ids(nut);
  for (bool touch_b : {false, true}) {
    if (touch_b) rule->mutable_b();
    ASSERT_EQ(rule->has_b(), touch_b);
    auto r = client_->CheckInterference(req);
    ASSERT_THAT(r.status(), IsOk());
    ASSERT_EQ(r->clashes_size(), 3) << touch_b;  // every two of the three overlap
    for (const v1::Clash& c : r->clashes()) {
      const bool within_a = c.instance_a() != bracket && c.instance_b() != bracket;
      EXPECT_EQ(c.suppressed(), within_a || touch_b)
          << touch_b << " " << c.path_a() << " " << c.path_b();
    }
    EXPECT_EQ(r->summary().hard(), touch_b ? 0u : 2u) << touch_b;
    EXPECT_EQ(r->summary().suppressed(), touch_b ? 3u : 1u) << touch_b;
  }
}

// ComputeDistance against the minimum of Distance over every valid pair, for every shape of
// request: one set (any two of its instances), two disjoint sets, two overlapping sets (a pair
// in both counts once; an instance is never paired with itself), a max_distance of half or
// twice the answer, and pose overrides. The set sizes take each of RunDistance's ways of
// listing pairs (a set of at most 16 instances against every other instance; larger sets
// swept along an axis; a small set_a against the whole scene through its broad phase), with
// the small set as set_a and as set_b, and overrides inside and outside the small set. The
// instances are spread out so that most answers are a true gap, not 0.
TEST_F(ServerTest, ComputeDistanceMatchesBruteForceForEveryKindOfSet) {
  std::mt19937 rng = testing::SeededRng(71);
  const int n = 40;  // not scaled: two sets of more than 16 need it
  RandomScene world = MakeRandomScene(rng, n, 120);
  // Each instance's distance to its nearest neighbour at the stored poses.
  std::vector<double> isolation(n, std::numeric_limits<double>::infinity());
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      const double d = geom::Distance(*world.parts[world.kind[i]], world.poses[i],
                                      *world.parts[world.kind[j]], world.poses[j])
                           .distance;
      isolation[i] = std::min(isolation[i], d);
      isolation[j] = std::min(isolation[j], d);
    }
  }
  auto unordered = [](int x, int y) { return std::pair<int, int>(std::min(x, y), std::max(x, y)); };
  int gaps = 0, not_found = 0, measured_fewer = 0, overrides_nearest = 0;
  constexpr int kShapes = 8;
  const int trials = 4 * kShapes;
  for (int t = 0; t < trials; ++t) {
    const int shape = t % kShapes, round = t / kShapes;
    v1::DistanceRequest req;
    req.set_scene_id(world.id);
    std::vector<bool> in_a(n, false), in_b(n, false);
    // A random order of the instances: the sets are ranges of it.
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    auto take = [&](std::vector<bool>& set, int from, int to) {
      for (int k = from; k < to; ++k) set[order[k]] = true;
    };
    bool two_sets = true;
    switch (shape) {
      case 0:  // one set of half the instances: swept
        two_sets = false;
        take(in_a, 0, n / 2);
        break;
      case 1:  // every instance (an empty selector): swept
        two_sets = false;
        take(in_a, 0, n);
        break;
      case 2:  // a small set_a against the others: direct
        take(in_a, 0, 3);
        take(in_b, 3, n);
        break;
      case 3:  // a small set_b: direct, from set_b's side
        take(in_a, 2, n);
        take(in_b, 0, 2);
        break;
      case 4:  // a small set_a inside set_b (every instance): direct, overlapping
        take(in_a, 0, 4);
        take(in_b, 0, n);
        break;
      case 5:  // two large disjoint sets: swept
        take(in_a, 0, n / 2);
        take(in_b, n / 2, n);
        break;
      case 6:  // two large overlapping sets: swept
        take(in_a, 0, 3 * n / 5);
        take(in_b, 2 * n / 5, n);
        break;
      default: {  // a small set_a against everything (set_b present and empty): broad phase
        // Instances with no other within 20 mm, so that one put 8 mm from them (below) makes
        // the only nearest pair.
        int taken = 0;
        for (int k = 0; k < n && taken < 3; ++k) {
          if (isolation[order[k]] > 20) std::swap(order[taken++], order[k]);
        }
        ASSERT_EQ(taken, 3);
        take(in_a, 0, 3);
        take(in_b, 0, n);
        req.mutable_set_b();
        break;
      }
    }
    for (int i = 0; i < n; ++i) {
      if (in_a[i] && shape != 1) req.mutable_set_a()->add_instance_ids(world.ids[i]);
      if (in_b[i] && shape != 7) req.mutable_set_b()->add_instance_ids(world.ids[i]);
    }
    // What-if poses for two instances in rounds 1 and 3.
    std::vector<RigidTransform> X = world.poses;
    auto override_pose = [&](int i, const RigidTransform& pose) {
      X[i] = FromPose(ToPose(pose));
      v1::PoseUpdate* u = req.add_pose_overrides();
      u->set_instance_id(world.ids[i]);
      *u->mutable_pose() = ToPose(X[i]);
    };
    if (round % 2 == 1 && shape != 7) {
      for (int m = 0; m < 2; ++m) {
        override_pose(order[m * 3], testing::RandomPose(rng, 120));  // in the small sets too
      }
    }
    if (shape == 7 && round >= 2) {
      // Next to a member of set_a, where the broad phase does not have it: an instance
      // outside set_a (round 2), another member of set_a (round 3).
      RigidTransform next_to = X[order[0]];
      next_to.t += Vec3(8, 0, 0);
      override_pose(order[round == 2 ? 3 : 1], next_to);
    }
    // The oracle: every valid pair once.
    double best = std::numeric_limits<double>::infinity();
    double second = best;  // the next pair's distance: the nearest pair is unique when above
    std::pair<int, int> nearest{-1, -1};
    int valid = 0;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        const bool ok =
            two_sets ? (in_a[i] && in_b[j]) || (in_a[j] && in_b[i]) : in_a[i] && in_a[j];
        if (!ok) continue;
        ++valid;
        const double d =
            geom::Distance(*world.parts[world.kind[i]], X[i], *world.parts[world.kind[j]], X[j])
                .distance;
        if (d < best) {
          second = best;
          best = d;
          nearest = {i, j};
        } else {
          second = std::min(second, d);
        }
      }
    }
    ASSERT_GT(valid, 0);
    if (shape == 7 && round >= 2) {  // did the instance put next to set_a's first make it?
      const int moved = order[round == 2 ? 3 : 1];
      overrides_nearest += nearest == unordered(order[0], moved) && second > best + 1e-6;
    }
    // Rounds 2 and 3: a limit of half the answer (even shapes) or twice it (odd).
    double limit = 0;
    if (round >= 2) limit = best > 0 ? best * (shape % 2 ? 2.0 : 0.5) : 1.0;
    req.set_max_distance_mm(limit);
    auto d = client_->ComputeDistance(req);
    ASSERT_THAT(d.status(), IsOk()) << "trial " << t;
    const bool expect_found = limit == 0 || best <= limit;
    ASSERT_EQ(d->found(), expect_found) << "trial " << t << ": best " << best << " limit " << limit;
    EXPECT_LE(d->pairs_measured(), static_cast<uint64_t>(valid));
    measured_fewer += valid > 100 && d->pairs_measured() < static_cast<uint64_t>(valid / 10);
    if (!expect_found) {
      ++not_found;
      continue;
    }
    EXPECT_NEAR(d->distance_mm(), best, 1e-9) << "trial " << t;
    gaps += best > 0;
    // The pair reported is a valid pair at that distance, and the points are that far apart.
    const auto ia =
        std::find(world.ids.begin(), world.ids.end(), d->instance_a()) - world.ids.begin();
    const auto ib =
        std::find(world.ids.begin(), world.ids.end(), d->instance_b()) - world.ids.begin();
    ASSERT_LT(ia, n);
    ASSERT_LT(ib, n);
    EXPECT_NE(ia, ib);
    if (second > best + 1e-6) {  // one nearest pair: it is the one reported
      EXPECT_EQ(unordered(static_cast<int>(ia), static_cast<int>(ib)), nearest) << "trial " << t;
    }
    EXPECT_TRUE(two_sets ? (in_a[ia] && in_b[ib]) || (in_a[ib] && in_b[ia]) : in_a[ia] && in_a[ib])
        << "trial " << t;
    EXPECT_NEAR(
        geom::Distance(*world.parts[world.kind[ia]], X[ia], *world.parts[world.kind[ib]], X[ib])
            .distance,
        best, 1e-9);
    EXPECT_NEAR((Vec3(d->point_a_mm().x(), d->point_a_mm().y(), d->point_a_mm().z()) -
                 Vec3(d->point_b_mm().x(), d->point_b_mm().y(), d->point_b_mm().z()))
                    .norm(),
                best, 1e-6);
  }
  EXPECT_GE(gaps, trials / 3);         // many true gaps, not only touching pairs
  EXPECT_GE(not_found, kShapes / 2);   // the limit below the answer was exercised
  EXPECT_GE(measured_fewer, kShapes);  // the bounds prune: large requests measure few pairs
  // The set-up did what it is for: in both trials meant for it, the overridden instance made
  // the only nearest pair (per the oracle), so the check above that the unique nearest pair is
  // the one reported covers the direct listing of overridden instances and of set_a's pairs.
  EXPECT_EQ(overrides_nearest, 2);
}

// Boxes that share a face near the origin, turned by multiples of 90 degrees (rotations that
// are not exact in floating point): touching, at distance 0, whether the pair is listed from a
// small set or by the sweep. The bound on the answer must allow for the rounding of the box
// distances it is compared with, which scales with the boxes, not with the points bounding it.
TEST_F(ServerTest, ComputeDistanceFindsBoxesTouchingAtAFaceUnderAnyQuarterTurn) {
  const std::string part = Upload(MakeBox(Vec3(1, 1, 1)), "cube");
  const std::string scene = NewScene();
  for (int k = 0; k < 8; ++k) {
    const Eigen::AngleAxisd turn(k * M_PI / 2, k < 4 ? Vec3::UnitZ() : Vec3::UnitY());
    const RigidTransform X_A{turn.toRotationMatrix(), Vec3::Zero()};
    const RigidTransform X_B{X_A.R, X_A.R * Vec3(2, 0, 0)};
    const uint64_t a = Place(scene, part, X_A, "a" + std::to_string(k));
    const uint64_t b = Place(scene, part, X_B, "b" + std::to_string(k));
    for (const bool two_sets : {true, false}) {
      v1::DistanceRequest req;
      req.set_scene_id(scene);
      req.mutable_set_a()->add_instance_ids(a);
      (two_sets ? req.mutable_set_b() : req.mutable_set_a())->add_instance_ids(b);
      auto d = client_->ComputeDistance(req);
      ASSERT_THAT(d.status(), IsOk());
      ASSERT_TRUE(d->found()) << "turn " << k << (two_sets ? ", two sets" : ", one set");
      EXPECT_LE(d->distance_mm(), 1e-12) << "turn " << k;
    }
  }
}

// Every instance (set_a naming nothing) against a few (set_b): the broad phase is asked about
// the few, and the answer is brute force's over the pairs with one of them, as with the sets
// the other way round; an overridden instance among the few takes its override.
TEST_F(ServerTest, EveryInstanceAgainstAFewMatchesBruteForce) {
  std::mt19937 rng = testing::SeededRng(11);
  RandomScene world = MakeRandomScene(rng, testing::Trials(40, 16), 12);
  const int n = static_cast<int>(world.ids.size());
  const double tau = 0.05;
  int clashes = 0;
  for (int trial = 0; trial < 6; ++trial) {
    std::set<int> few = {static_cast<int>(rng() % n), static_cast<int>(rng() % n)};
    std::map<int, RigidTransform> overrides;
    if (trial % 2 == 1) overrides[*few.begin()] = testing::RandomPose(rng, 6);
    auto pose = [&](int i) {
      auto it = overrides.find(i);
      return it == overrides.end() ? world.poses[i] : FromPose(ToPose(it->second));
    };
    std::set<std::pair<uint64_t, uint64_t>> want;
    geom::PairTolerances pt;
    pt.contact_mm = tau;
    for (int i : few) {
      for (int j = 0; j < n; ++j) {
        if (j == i) continue;
        const geom::PairClassification pc = geom::ClassifyPair(
            *world.parts[world.kind[i]], pose(i), *world.parts[world.kind[j]], pose(j), pt);
        if (pc.cls != geom::ClashClass::kClear) {
          want.insert(std::minmax(world.ids[i], world.ids[j]));
        }
      }
    }
    for (const bool few_as_b : {true, false}) {
      v1::InterferenceRequest req;
      req.set_scene_id(world.id);
      req.mutable_tolerances()->set_contact_tolerance_mm(tau);
      v1::InstanceSelector* side = few_as_b ? req.mutable_set_b() : req.mutable_set_a();
      for (int i : few) side->add_instance_ids(world.ids[i]);
      if (!few_as_b) req.mutable_set_b();  // present and empty: every instance
      for (const auto& [i, X] : overrides) {
        v1::PoseUpdate* u = req.add_pose_overrides();
        u->set_instance_id(world.ids[i]);
        *u->mutable_pose() = ToPose(X);
      }
      auto r = client_->CheckInterference(req);
      ASSERT_THAT(r.status(), IsOk());
      std::set<std::pair<uint64_t, uint64_t>> got;
      for (const v1::Clash& c : r->clashes())
        got.insert(std::minmax(c.instance_a(), c.instance_b()));
      EXPECT_EQ(got, want) << "trial " << trial << (few_as_b ? ", few as set_b" : ", few as set_a");
    }
    clashes += static_cast<int>(want.size());
  }
  EXPECT_GE(clashes, 6);  // (not vacuous)
}

// Random scenes: CheckInterference (broad phase + cache + overrides) equals ClassifyPair over
// every pair; ComputeDistance equals the minimum of Distance over every pair; PickRays equals
// the nearest CastRay over every instance.
TEST_F(ServerTest, SceneQueriesMatchBruteForceOverAllPairs) {
  std::mt19937 rng = testing::SeededRng(7);
  RandomScene world = MakeRandomScene(rng, testing::Trials(60, 20), 15);
  const std::string& scene = world.id;
  const std::vector<std::shared_ptr<const geom::Part>>& parts = world.parts;
  const std::vector<uint64_t>& ids = world.ids;
  const std::vector<int>& kind = world.kind;
  std::vector<RigidTransform>& poses = world.poses;
  const int n = static_cast<int>(ids.size());
  const double tau = 0.05;
  const double clearance = 0.8;
  auto expect_matches = [&](const std::map<uint64_t, RigidTransform>& overrides) {
    v1::InterferenceRequest req;
    req.set_scene_id(scene);
    req.mutable_tolerances()->set_contact_tolerance_mm(tau);
    req.mutable_tolerances()->set_clearance_mm(clearance);
    for (const auto& [id, X] : overrides) {
      v1::PoseUpdate* u = req.add_pose_overrides();
      u->set_instance_id(id);
      *u->mutable_pose() = ToPose(X);
    }
    auto r = client_->CheckInterference(req);
    ASSERT_THAT(r.status(), IsOk());
    std::map<std::pair<uint64_t, uint64_t>, v1::ClashClass> got;
    for (const v1::Clash& c : r->clashes()) {
      got[std::minmax(c.instance_a(), c.instance_b())] = c.clash_class();
    }
    std::map<std::pair<uint64_t, uint64_t>, v1::ClashClass> want;
    geom::PairTolerances pt;
    pt.contact_mm = tau;
    pt.clearance_mm = clearance;
    auto pose = [&](int i) {
      auto it = overrides.find(ids[i]);
      return it == overrides.end() ? poses[i] : FromPose(ToPose(it->second));
    };
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        const geom::PairClassification pc =
            geom::ClassifyPair(*parts[kind[i]], pose(i), *parts[kind[j]], pose(j), pt);
        if (pc.cls == geom::ClashClass::kClear) continue;
        const v1::ClashClass cls = pc.cls == geom::ClashClass::kHard        ? v1::HARD
                                   : pc.cls == geom::ClashClass::kContact   ? v1::CONTACT
                                   : pc.cls == geom::ClashClass::kClearance ? v1::CLEARANCE
                                                                            : v1::CONTAINED;
        want[std::minmax(ids[i], ids[j])] = cls;
      }
    }
    EXPECT_EQ(got, want);
    for (const auto& [pair, cls] : want) {
      auto it = got.find(pair);
      if (it == got.end() || it->second != cls) {
        ADD_FAILURE() << "pair " << pair.first << "," << pair.second << " want " << cls << " got "
                      << (it == got.end() ? -1 : it->second);
      }
    }
    EXPECT_GT(want.size(), 0u);
  };
  expect_matches({});
  // Move a few instances; only their pairs are recomputed.
  v1::SetPosesRequest move;
  move.set_scene_id(scene);
  for (int m = 0; m < 5; ++m) {
    const int i = static_cast<int>(rng() % n);
    poses[i] = FromPose(ToPose(testing::RandomPose(rng, 15)));
    v1::PoseUpdate* u = move.add_poses();
    u->set_instance_id(ids[i]);
    *u->mutable_pose() = ToPose(poses[i]);
  }
  ASSERT_THAT(client_->SetPoses(move).status(), IsOk());
  expect_matches({});
  {
    v1::InterferenceRequest req;
    req.set_scene_id(scene);
    req.mutable_tolerances()->set_contact_tolerance_mm(tau);
    req.mutable_tolerances()->set_clearance_mm(clearance);
    auto r = client_->CheckInterference(req);
    ASSERT_THAT(r.status(), IsOk());
    EXPECT_EQ(r->summary().cached_pairs(), r->summary().candidate_pairs());
  }
  // What-if poses, not stored.
  std::map<uint64_t, RigidTransform> what_if;
  for (int m = 0; m < 4; ++m) what_if[ids[rng() % n]] = testing::RandomPose(rng, 15);
  expect_matches(what_if);
  expect_matches({});

  // ComputeDistance between two sets of instances, against the minimum of Distance over every
  // pair of one from each set; returns that minimum.
  auto expect_distance = [&](const std::vector<int>& a, const std::vector<int>& b) {
    v1::DistanceRequest dreq;
    dreq.set_scene_id(scene);
    for (int i : a) dreq.mutable_set_a()->add_instance_ids(ids[i]);
    for (int j : b) dreq.mutable_set_b()->add_instance_ids(ids[j]);
    double best = std::numeric_limits<double>::infinity();
    for (int i : a) {
      for (int j : b) {
        best = std::min(
            best, geom::Distance(*parts[kind[i]], poses[i], *parts[kind[j]], poses[j]).distance);
      }
    }
    auto d = client_->ComputeDistance(dreq);
    EXPECT_THAT(d.status(), IsOk());
    if (!d.ok()) return best;
    EXPECT_TRUE(d->found());
    EXPECT_NEAR(d->distance_mm(), best, 1e-9);
    EXPECT_NEAR((Vec3(d->point_a_mm().x(), d->point_a_mm().y(), d->point_a_mm().z()) -
                 Vec3(d->point_b_mm().x(), d->point_b_mm().y(), d->point_b_mm().z()))
                    .norm(),
                best, 1e-6);
    return best;
  };
  // The first ten instances and the rest (crowded: they may touch), then random pairs of
  // instances against two others, most of them apart, so that positive distances are checked.
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  expect_distance({order.begin(), order.begin() + 10}, {order.begin() + 10, order.end()});
  const int distance_trials = 12;
  int apart = 0;
  for (int k = 0; k < distance_trials; ++k) {
    std::shuffle(order.begin(), order.end(), rng);
    if (expect_distance({order[0], order[1]}, {order[2], order[3]}) > 0) ++apart;
  }
  EXPECT_GE(apart, distance_trials / 3);  // 11 or 12 of 12 at the scales tried (0.1 to 2)

  // Rays: every other one towards the centre of a random instance (a hit: each part encloses
  // its origin), the others towards a random point of a cube wider than the scene (mostly a
  // miss), so that the hit rate stays near the middle whatever the scene's size.
  v1::PickRequest preq;
  preq.set_scene_id(scene);
  std::vector<geom::Ray> rays;
  for (int k = 0; k < testing::Trials(200, 20); ++k) {
    geom::Ray ray;
    rays.emplace_back();
    ray.origin = testing::RandomPoint(rng, 40);
    const Vec3 target = k % 2 == 0 ? poses[rng() % n].t : testing::RandomPoint(rng, 40);
    ray.direction = (target - ray.origin).normalized();
    v1::Ray* r = preq.add_rays();
    r->mutable_origin_mm()->set_x(ray.origin.x());
    r->mutable_origin_mm()->set_y(ray.origin.y());
    r->mutable_origin_mm()->set_z(ray.origin.z());
    r->mutable_direction()->set_x(ray.direction.x() * 3);  // not unit on the wire
    r->mutable_direction()->set_y(ray.direction.y() * 3);
    r->mutable_direction()->set_z(ray.direction.z() * 3);
    if (k % 3 == 1) {  // a third of the rays stop short (some before their first hit)
      ray.t_max = std::uniform_real_distribution<double>(0, 60)(rng);
      r->set_max_distance_mm(ray.t_max);
    }
    rays[k] = ray;
  }
  auto picks = client_->PickRays(preq);
  ASSERT_THAT(picks.status(), IsOk());
  ASSERT_EQ(picks->hits_size(), static_cast<int>(rays.size()));
  int hits = 0, cut_short = 0;
  for (std::size_t k = 0; k < rays.size(); ++k) {
    std::optional<geom::RayHit> best;
    int best_i = -1;
    for (int i = 0; i < n; ++i) {
      if (auto h = geom::CastRay(*parts[kind[i]], poses[i], rays[k]);
          h && (!best || h->t < best->t)) {
        best = h;
        best_i = i;
      }
    }
    const v1::PickHit& hit = picks->hits(static_cast<int>(k));
    ASSERT_EQ(hit.hit(), best.has_value()) << "ray " << k;
    if (!best && k % 3 == 1) {
      geom::Ray unlimited = rays[k];
      unlimited.t_max = std::numeric_limits<double>::infinity();
      for (int i = 0; i < n && !cut_short; ++i) {
        cut_short += geom::CastRay(*parts[kind[i]], poses[i], unlimited).has_value();
      }
    }
    if (hit.hit()) {
      ++hits;
      EXPECT_NEAR(hit.distance_mm(), best->t, 1e-9);
      EXPECT_EQ(hit.instance_id(), ids[static_cast<std::size_t>(best_i)]) << "ray " << k;
      const Vec3 point(hit.point_mm().x(), hit.point_mm().y(), hit.point_mm().z());
      const Vec3 normal(hit.normal().x(), hit.normal().y(), hit.normal().z());
      EXPECT_LT((point - best->p_W).norm(), 1e-9) << "ray " << k;
      EXPECT_LT((normal - best->normal_W).norm(), 1e-9) << "ray " << k;
    }
  }
  EXPECT_GE(cut_short, 1);  // some ray's max_distance_mm did hide a hit
  // Hits and misses both (53-67 % hits at the scales tried, 0.1 to 2).
  const int ray_count = static_cast<int>(rays.size());
  EXPECT_GE(hits * 5, ray_count);
  EXPECT_LE(hits * 5, ray_count * 4);
}

// Interference classified, and rays cast, on helper threads (idle query slots) and on the
// calling thread alone: the same answer, field for field, for a crowded scene, a what-if pose
// and a batch of rays.
TEST_F(ServerTest, HelpersGiveTheSameAnswerAsOneThread) {
  std::mt19937 rng = testing::SeededRng(11);
  const std::vector<RawMesh> meshes = {MakeBox(Vec3(3, 2, 1)), testing::MakeCylinder(1.5, 5, 24),
                                       testing::MakeSubdividedBox(Vec3(2, 2, 2), 3)};
  std::vector<std::string> part_ids;
  for (std::size_t i = 0; i < meshes.size(); ++i) {
    part_ids.push_back(Upload(meshes[i], "m" + std::to_string(i)));
  }
  const std::string scene = NewScene();
  std::map<uint64_t, RigidTransform> poses;
  for (int i = 0; i < testing::Trials(80, 30); ++i) {
    const RigidTransform X = FromPose(ToPose(testing::RandomPose(rng, 12)));
    poses[Place(scene, part_ids[rng() % meshes.size()], X, "i" + std::to_string(i))] = X;
  }
  v1::InterferenceRequest all;
  all.set_scene_id(scene);
  all.mutable_tolerances()->set_contact_tolerance_mm(0.05);
  all.mutable_tolerances()->set_clearance_mm(0.5);
  // The what-if: the instance in the most clashes, moved by 0.2 mm (several pairs to share).
  uint64_t busiest = 0;
  {
    v1::InterferenceRequest first = all;
    first.mutable_tolerances()->set_contact_tolerance_mm(0.06);  // leaves `all` uncached
    auto got = client_->CheckInterference(first);
    ASSERT_THAT(got.status(), IsOk());
    std::map<uint64_t, int> clashes;
    for (const v1::Clash& c : got->clashes()) {
      ++clashes[c.instance_a()];
      ++clashes[c.instance_b()];
    }
    for (const auto& [id, k] : clashes) {
      if (busiest == 0 || k > clashes[busiest]) busiest = id;
    }
    ASSERT_GE(clashes[busiest], 3);
  }
  v1::InterferenceRequest what_if = all;
  v1::PoseUpdate* u = what_if.add_pose_overrides();
  u->set_instance_id(busiest);
  *u->mutable_pose() = ToPose(RigidTransform::Translation(Vec3(0.2, 0, 0)) * poses.at(busiest));
  what_if.mutable_set_a()->add_instance_ids(busiest);
  what_if.mutable_set_b();
  // Rays through the crowd from all sides: several chunks of rays to share.
  v1::PickRequest pick;
  pick.set_scene_id(scene);
  for (int k = 0; k < 500; ++k) {
    const Vec3 from = testing::RandomPoint(rng, 40);
    v1::Ray* ray = pick.add_rays();
    ToProto(from, ray->mutable_origin_mm());
    ToProto(Vec3(testing::RandomPoint(rng, 8) - from), ray->mutable_direction());
  }
  auto answers = [&] {
    std::vector<std::unique_ptr<google::protobuf::Message>> out;
    for (const v1::InterferenceRequest* r : {&all, &what_if}) {
      auto got = client_->CheckInterference(*r);
      EXPECT_THAT(got.status(), IsOk());
      EXPECT_GE(got.ok() ? got->clashes_size() : 0, 2);  // pairs to share
      out.push_back(
          std::make_unique<v1::InterferenceResponse>(got.ok() ? *got : v1::InterferenceResponse()));
    }
    auto picked = client_->PickRays(pick);
    EXPECT_THAT(picked.status(), IsOk());
    int hits = 0;
    if (picked.ok()) {
      for (const v1::PickHit& h : picked->hits()) hits += h.hit();
    }
    EXPECT_GT(hits, 100);
    out.push_back(std::make_unique<v1::PickResponse>(picked.ok() ? *picked : v1::PickResponse()));
    return out;
  };
  const auto helped = answers();
  // How many items helpers ran (recorded, not asserted: whether a helper wakes in time is up
  // to the scheduler; QueryHelpers' own tests prove that they join).
  {
    const std::string body = FetchMetrics(server_->metrics_port());
    EXPECT_THAT(body, ::testing::HasSubstr("\n# TYPE clashd_query_helped_items_total counter\n"));
    const std::string line = "\nclashd_query_helped_items_total ";
    const std::size_t at = body.find(line);
    if (at != std::string::npos) {
      const std::size_t from = at + line.size();
      ::testing::Test::RecordProperty("helped_items",
                                      body.substr(from, body.find('\n', from) - from));
    }
  }
  ServerConfig one_thread;
  one_thread.query_helpers = 0;
  Restart(one_thread);
  const auto alone = answers();
  ASSERT_EQ(helped.size(), alone.size());
  for (std::size_t k = 0; k < helped.size(); ++k) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*helped[k], *alone[k]))
        << "query " << k << "\nhelped:\n"
        << helped[k]->DebugString() << "\nalone:\n"
        << alone[k]->DebugString();
  }
}

TEST_F(ServerTest, PagesFollowTheSceneVersion) {
  const std::string box = Upload(MakeBox(Vec3(5, 5, 5)), "box");
  const std::string scene = NewScene();
  for (int i = 0; i < 4; ++i) {
    Place(scene, box, RigidTransform::Translation(Vec3(i, 0, 0)), "b" + std::to_string(i));
  }
  v1::InterferenceRequest req;
  req.set_scene_id(scene);
  req.set_page_size(2);
  auto all = client_->CheckInterference(req);  // follows every page
  ASSERT_THAT(all.status(), IsOk());
  EXPECT_EQ(all->clashes_size(), 6);
  std::set<std::string> ids;
  for (const v1::Clash& c : all->clashes()) ids.insert(c.clash_id());
  EXPECT_EQ(ids.size(), 6u);
  auto stub = v1::QueryService::NewStub(server_->grpc_server()->InProcessChannel({}));
  grpc::ClientContext ctx;
  v1::InterferenceResponse first;
  ASSERT_TRUE(stub->CheckInterference(&ctx, req, &first).ok());
  ASSERT_FALSE(first.next_page_token().empty());
  // The token continues only the request that gave it: another page size goes on from the
  // same clash; other tolerances (a list of other clashes) are refused, as is a token changed.
  const auto next = [&](const v1::InterferenceRequest& r) {
    grpc::ClientContext c;
    v1::InterferenceResponse out;
    const grpc::Status s = stub->CheckInterference(&c, r, &out);
    return std::pair{s.error_code(), out};
  };
  v1::InterferenceRequest again = req;
  again.set_page_token(first.next_page_token());
  again.set_page_size(10);
  auto [code, rest] = next(again);
  ASSERT_EQ(code, grpc::StatusCode::OK);
  ASSERT_EQ(rest.clashes_size(), 4);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(rest.clashes(k).clash_id(), all->clashes(k + 2).clash_id());
  EXPECT_TRUE(rest.next_page_token().empty());
  again.mutable_tolerances()->set_clearance_mm(0.5);
  EXPECT_EQ(next(again).first, grpc::StatusCode::INVALID_ARGUMENT);
  again = req;
  again.set_page_token(first.next_page_token() + "0");
  EXPECT_EQ(next(again).first, grpc::StatusCode::INVALID_ARGUMENT);
  again.set_page_token("2:2");  // the form before tokens named their request: start again
  EXPECT_EQ(next(again).first, grpc::StatusCode::FAILED_PRECONDITION);
  // A page token from before a change is refused.
  Place(scene, box, RigidTransform::Translation(Vec3(50, 0, 0)), "late");
  req.set_page_token(first.next_page_token());
  EXPECT_EQ(next(req).first, grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ServerTest, ExpiredDeadlineIsDeadlineExceeded) {
  const std::string scene = NewScene();
  auto stub = v1::QueryService::NewStub(server_->grpc_server()->InProcessChannel({}));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() - std::chrono::seconds(1));
  v1::InterferenceRequest req;
  req.set_scene_id(scene);
  v1::InterferenceResponse resp;
  EXPECT_EQ(stub->CheckInterference(&ctx, req, &resp).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(ServerTest, ScenesAndPartsSurviveARestart) {
  const std::string box = Upload(MakeBox(Vec3(5, 5, 5)), "box", 0.02);
  const std::string scene = NewScene();
  const uint64_t a = Place(scene, box, RigidTransform::Identity(), "a");
  Place(scene, box, RigidTransform::Translation(Vec3(7, 0, 0)), "b");
  v1::SetGroupRequest group;
  group.set_scene_id(scene);
  group.set_group("fixed");
  group.add_instance_ids(a);
  ASSERT_THAT(client_->SetGroup(group).status(), IsOk());
  const v1::InterferenceResponse before = Check(scene, -1);
  const auto instances_before = client_->ListInstances(scene);
  ASSERT_THAT(instances_before.status(), IsOk());

  Restart();
  auto s = client_->GetScene(scene);
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_EQ(s->instance_count(), 2u);
  EXPECT_EQ(s->group_sizes().at("fixed"), 1u);
  const auto instances_after = client_->ListInstances(scene);
  ASSERT_THAT(instances_after.status(), IsOk());
  ASSERT_EQ(instances_after->size(), instances_before->size());
  for (std::size_t i = 0; i < instances_after->size(); ++i) {
    EXPECT_EQ((*instances_after)[i].SerializeAsString(),
              (*instances_before)[i].SerializeAsString());
  }
  const v1::InterferenceResponse after = Check(scene, -1);
  ASSERT_EQ(after.clashes_size(), 1);
  EXPECT_EQ(after.clashes(0).clash_id(), before.clashes(0).clash_id());
  EXPECT_EQ(after.clashes(0).clash_class(), v1::HARD);
  EXPECT_DOUBLE_EQ(after.clashes(0).contact_tolerance_mm(), 0.04);  // deflections added

  ASSERT_THAT(client_->DeleteScene(scene), IsOk());
  Restart();
  EXPECT_THAT(client_->GetScene(scene), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(client_->GetPart(box).status(), IsOk());
}

// A stored part that cannot be served is not NOT_FOUND, which a client takes for gone: a
// damaged file is DATA_LOSS (say what to do), and so is a missing one; the part can still be
// deleted and uploaded again.
TEST_F(ServerTest, ADamagedOrMissingPartFileIsDataLossNotNotFound) {
  const std::string box = Upload(MakeBox(Vec3(5, 5, 5)), "box");
  const std::string pin = Upload(MakeBox(Vec3(1, 1, 4)), "pin");
  client_.reset();
  server_.reset();
  const std::string parts = dir_ + "/data/tenants/local/parts/";
  { std::ofstream(parts + box + ".pb", std::ios::trunc) << "garbled"; }
  Start();
  std::filesystem::remove(parts + pin + ".pb");
  EXPECT_THAT(client_->GetPart(box).status(),
              StatusIs(absl::StatusCode::kDataLoss, "its stored file is damaged (delete the part"));
  EXPECT_THAT(client_->GetPart(pin).status(),
              StatusIs(absl::StatusCode::kDataLoss, "its stored file is missing"));
  v1::AddInstancesRequest add;
  add.set_scene_id(NewScene());
  add.add_parts()->set_part_id(box);
  EXPECT_THAT(client_->AddInstances(add).status(), StatusIs(absl::StatusCode::kDataLoss, ""));
  EXPECT_THAT(client_->DeletePart(box), IsOk());
  EXPECT_EQ(Upload(MakeBox(Vec3(5, 5, 5)), "box"), box);
  EXPECT_THAT(client_->GetPart(box).status(), IsOk());
}

// A scene whose part does not load at a start (here: above a lowered triangle limit) is not
// served then, but its file is kept: the next start with the old limit serves it again.
// Before, it was moved aside to .damaged for good.
TEST_F(ServerTest, ASceneWhosePartDoesNotLoadIsKeptForALaterStart) {
  const std::string box = Upload(MakeBox(Vec3(5, 5, 5)), "box");  // 12 triangles
  const std::string scene = NewScene();
  Place(scene, box, RigidTransform::Identity(), "a");
  ServerConfig small;
  small.max_part_triangles = 6;
  Restart(small);
  EXPECT_THAT(client_->GetScene(scene),
              StatusIs(absl::StatusCode::kFailedPrecondition, "is not served"));
  EXPECT_THAT(client_->GetPart(box).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "higher --max-part-triangles"));
  Restart();
  auto s = client_->GetScene(scene);
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_EQ(s->instance_count(), 1u);
  // Not served, it can still be deleted (its file counts against the tenant's storage).
  Restart(small);
  EXPECT_THAT(client_->DeleteScene(scene), IsOk());
  EXPECT_THAT(client_->GetScene(scene), StatusIs(absl::StatusCode::kNotFound, ""));
  Restart();
  EXPECT_THAT(client_->GetScene(scene), StatusIs(absl::StatusCode::kNotFound, ""));
}

// A scene file that parses but holds what no edit writes (two instances of one id or path, an
// id at or above the next one, which would be given again) is damaged too: moved aside at a
// start, as one that does not parse, rather than served with a stray broad-phase entry or ids
// reused.
TEST_F(ServerTest, ASceneFileWithRepeatedOrReusableIdsIsMovedAsideAsDamaged) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  std::vector<std::string> scene_ids;
  for (int k = 0; k < 4; ++k) {
    scene_ids.push_back(NewScene());
    Place(scene_ids.back(), box, RigidTransform::Identity(), "a");
    Place(scene_ids.back(), box, RigidTransform::Translation(Vec3(5, 0, 0)), "b");
  }
  client_.reset();
  server_.reset();
  const std::string scenes = dir_ + "/data/tenants/local/scenes/";
  // Rewrites a scene file, sealed again (as a server would write it, so that only the change
  // is wrong) or not (as a server before sealed records wrote it).
  const auto rewrite = [&](const std::string& id,
                           const std::function<void(store::v1::StoredScene&)>& change,
                           bool seal = true) {
    store::v1::StoredScene stored;
    {
      const absl::StatusOr<std::string> file = ReadFileCapped(scenes + id + ".pb", 1 << 20);
      ASSERT_THAT(file.status(), IsOk());
      const absl::StatusOr<std::string_view> payload = UnsealRecord(*file);
      ASSERT_THAT(payload.status(), IsOk());
      ASSERT_TRUE(stored.ParseFromString(std::string(*payload)));
    }
    ASSERT_EQ(stored.instances_size(), 2);
    change(stored);
    std::ofstream out(scenes + id + ".pb", std::ios::binary | std::ios::trunc);
    const std::string payload = stored.SerializeAsString();
    out << (seal ? SealRecord(payload) : payload);
  };
  rewrite(scene_ids[0], [](auto& s) { s.mutable_instances(1)->set_instance_id(1); });
  rewrite(scene_ids[1], [](auto& s) { s.mutable_instances(1)->set_path("a"); });
  rewrite(scene_ids[2], [](auto& s) { s.set_next_instance_id(2); });
  rewrite(
      scene_ids[3], [](auto& s) { s.set_name("still fine"); }, /*seal=*/false);
  Start();
  for (int k = 0; k < 3; ++k) {
    EXPECT_THAT(client_->GetScene(scene_ids[k]), StatusIs(absl::StatusCode::kNotFound, "")) << k;
    EXPECT_EQ(DamagedFilesOf(scenes, scene_ids[k]), 1) << k;
  }
  auto fine = client_->GetScene(scene_ids[3]);
  ASSERT_THAT(fine.status(), IsOk());
  EXPECT_EQ(fine->instance_count(), 2u);
}

// Scene and assembly files are sealed with their size and hash: one cut short is damaged, not a
// record with fields missing. Before, a scene cut at an instance's end loaded without its last
// instances (and the next edit stored that for good), one cut in its header handed out instance
// ids again, and an assembly cut short placed some of its parts: clashes missed.
TEST_F(ServerTest, AScenesOrAssemblysFileCutShortIsDamagedNotShorter) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  for (int i = 0; i < 4; ++i) {
    Place(scene, box, RigidTransform::Translation(Vec3(5.0 * i, 0, 0)), absl::StrCat("b", i));
  }
  const std::string kept = NewScene();
  Place(kept, box, RigidTransform::Identity(), "a");
  client_.reset();
  server_.reset();
  const std::string file = dir_ + "/data/tenants/local/scenes/" + scene + ".pb";
  const absl::StatusOr<std::string> read = ReadFileCapped(file, 1 << 20);
  ASSERT_THAT(read.status(), IsOk());
  const std::string& bytes = *read;
  const absl::StatusOr<std::string_view> payload = UnsealRecord(bytes);
  ASSERT_THAT(payload.status(), IsOk());
  ASSERT_EQ(payload->size() + kRecordHeaderBytes, bytes.size());  // sealed
  store::v1::StoredScene stored;
  ASSERT_TRUE(stored.ParseFromString(std::string(*payload)));
  ASSERT_EQ(stored.instances_size(), 4);
  // Cut after its third instance: the payload alone would still parse.
  stored.mutable_instances()->RemoveLast();
  const std::size_t cut = kRecordHeaderBytes + stored.ByteSizeLong();
  ASSERT_EQ(stored.SerializeAsString(), bytes.substr(kRecordHeaderBytes, stored.ByteSizeLong()));
  std::filesystem::resize_file(file, cut);
  for (std::size_t at : {std::size_t{0}, std::size_t{5}, kRecordHeaderBytes - 1}) {
    EXPECT_THAT(UnsealRecord(std::string_view(bytes).substr(0, at)).status(),
                StatusIs(absl::StatusCode::kDataLoss, ""))
        << at;
  }
  std::string flipped = bytes;
  flipped.back() ^= 1;
  EXPECT_THAT(UnsealRecord(flipped).status(), StatusIs(absl::StatusCode::kDataLoss, "hash"));
  Start();
  EXPECT_THAT(client_->GetScene(scene), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_EQ(DamagedFilesOf(dir_ + "/data/tenants/local/scenes", scene), 1);
  EXPECT_THAT(client_->GetScene(kept).status(), IsOk());

  const std::string as1 = std::string(CLASH_CAD_DATA_DIR) + "/as1-oc-214-mat.stp";
  if (!std::filesystem::exists(as1)) GTEST_SKIP() << "no " << as1 << " (../shared absent)";
  auto imported = client_->ImportCad(as1);
  ASSERT_THAT(imported.status(), IsOk());
  const std::string assembly = imported->assembly().assembly_id();
  const std::string assembly_file = dir_ + "/data/tenants/local/assemblies/" + assembly + ".pb";
  ASSERT_TRUE(std::filesystem::exists(assembly_file));
  std::filesystem::resize_file(assembly_file, std::filesystem::file_size(assembly_file) / 2);
  EXPECT_THAT(client_->GetAssembly(assembly).status(), StatusIs(absl::StatusCode::kNotFound, ""));
  v1::AddInstancesRequest add;
  add.set_scene_id(kept);
  add.add_assemblies()->set_assembly_id(assembly);
  EXPECT_THAT(client_->AddInstances(add).status(), StatusIs(absl::StatusCode::kNotFound, ""));
}

// At a start, a scene file that does not parse is moved aside as damaged, but one that cannot
// be read now (here a symbolic link, which the store does not follow; on a server, a file
// whose permissions a restore got wrong) is kept and not served: it holds its parts, and the
// first start at which it reads serves it again. Before, both were moved aside.
TEST_F(ServerTest, AtAStartASceneFileThatDoesNotReadIsKeptAndOneThatDoesNotParseMovedAside) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string garbled = NewScene();
  const std::string unreadable = NewScene();
  Place(garbled, box, RigidTransform::Identity(), "a");
  Place(unreadable, box, RigidTransform::Identity(), "b");
  client_.reset();
  server_.reset();
  const std::string scenes = dir_ + "/data/tenants/local/scenes/";
  { std::ofstream(scenes + garbled + ".pb", std::ios::trunc) << "not a scene"; }
  const std::string aside = dir_ + "/scene-file-elsewhere.pb";
  std::filesystem::rename(scenes + unreadable + ".pb", aside);
  std::filesystem::create_symlink(aside, scenes + unreadable + ".pb");
  Start();
  EXPECT_THAT(client_->GetScene(garbled), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_EQ(DamagedFilesOf(scenes, garbled), 1);
  EXPECT_THAT(client_->GetScene(unreadable),
              StatusIs(absl::StatusCode::kFailedPrecondition, "is not served"));
  EXPECT_TRUE(std::filesystem::is_symlink(scenes + unreadable + ".pb"));
  EXPECT_EQ(DamagedFilesOf(scenes, unreadable), 0);
  auto listed = client_->ListScenes();
  ASSERT_THAT(listed.status(), IsOk());
  EXPECT_EQ(listed->size(), 0u);  // (only served scenes are listed)
  EXPECT_THAT(client_->DeletePart(box), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                 unreadable + ", which is not served"));
  client_.reset();
  server_.reset();
  std::filesystem::remove(scenes + unreadable + ".pb");
  std::filesystem::rename(aside, scenes + unreadable + ".pb");
  Start();
  auto s = client_->GetScene(unreadable);
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_EQ(s->instance_count(), 1u);
}

// While it lives, this process can open no file: its descriptor limit is lowered to the lowest
// free descriptor (root reads any file its permissions forbid, so tests fail reads this way).
class NoFileDescriptorLeft {
 public:
  NoFileDescriptorLeft() {
    EXPECT_EQ(getrlimit(RLIMIT_NOFILE, &old_), 0);
    const int lowest_free = open("/dev/null", O_RDONLY | O_CLOEXEC);
    EXPECT_GE(lowest_free, 0);
    close(lowest_free);
    rlimit none_left = old_;
    none_left.rlim_cur = static_cast<rlim_t>(lowest_free);  // the next descriptor is beyond it
    EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &none_left), 0);
  }
  NoFileDescriptorLeft(const NoFileDescriptorLeft&) = delete;
  NoFileDescriptorLeft& operator=(const NoFileDescriptorLeft&) = delete;
  ~NoFileDescriptorLeft() { EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &old_), 0); }

 private:
  rlimit old_{};
};

// An edit whose write fails is undone by reading the scene's file back; when that read fails
// too (here both find no file descriptor), the scene is not served until a restart, which
// serves the last state stored. Before, the edit stayed in memory: queries saw instances the
// file did not hold, and the next successful edit stored them.
TEST_F(ServerTest, AnEditThatCanBeNeitherWrittenNorUndoneStopsServingTheScene) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  Place(scene, box, RigidTransform::Identity(), "a");
  v1::AddInstancesRequest add;
  add.set_scene_id(scene);
  add.add_parts()->set_part_id(box);
  add.mutable_parts(0)->set_path("b");
  absl::Status added;
  {
    const NoFileDescriptorLeft none_left;
    added = client_->AddInstances(add).status();
  }
  EXPECT_THAT(added, StatusIs(absl::StatusCode::kInternal, ""));
  EXPECT_THAT(client_->GetScene(scene), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                 "clashd serves it again once it loads"));
  EXPECT_THAT(client_->ListInstances(scene).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  Restart();
  auto instances = client_->ListInstances(scene);
  ASSERT_THAT(instances.status(), IsOk());
  ASSERT_EQ(instances->size(), 1u);
  EXPECT_EQ((*instances)[0].path(), "a");
}

// Calls that fetched a scene before an edit stopped serving it (its write and the undo both
// failed) answer as Get does now: FAILED_PRECONDITION for reads and writes; DeletePart's check
// reads its file, so it still holds its parts; DeleteScene deletes it as a scene not served.
TEST_F(ServerTest, CallsThatFetchedASceneBeforeItStoppedBeingServedSeeThat) {
  const std::string scene_id = OneBoxSceneThenStop();
  auto stores = OpenStores();
  ASSERT_THAT(stores.status(), IsOk());
  auto scene = stores->scenes->Get(scene_id);  // what a waiting call holds
  ASSERT_THAT(scene.status(), IsOk());
  {
    std::unique_lock lock((*scene)->mu);
    (*scene)->name = "renamed";
    (*scene)->Touch();
    const NoFileDescriptorLeft none_left;
    EXPECT_FALSE(stores->scenes->Commit(**scene).ok());
  }
  const absl::Time later = absl::Now() + absl::Seconds(10);
  EXPECT_THAT(
      stores->scenes->LockForRead(**scene, later).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition, "clashd serves it again once it loads"));
  EXPECT_THAT(
      stores->scenes->LockForWrite(**scene, later).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition, "clashd serves it again once it loads"));
  EXPECT_TRUE(stores->scenes->List("", 10).empty());
  auto user = stores->scenes->FirstUserOf(stores->parts->ListIds("", 10).at(0), later);
  ASSERT_THAT(user.status(), IsOk());
  EXPECT_EQ(user->value_or(""), "scene " + scene_id +
                                    ", which is not served (delete it, or let its parts load: "
                                    "clashd serves it again then)");
  EXPECT_THAT(stores->scenes->Delete(scene_id, later), IsOk());
  EXPECT_THAT(stores->scenes->Get(scene_id).status(), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/data/tenants/local/scenes/" + scene_id + ".pb"));
}

// A scene not served is read again by RetryUnserved and served once it loads: the last state
// stored, as a new object. Calls that still hold the old one get ABORTED (try again) from its
// lock, not NOT_FOUND, which DeletePart's check of the part's users would take for a deleted
// scene; that check looks at the new object instead. A scene that still does not load waits
// before its next read. Before, such a scene came back only with a restart.
TEST_F(ServerTest, ASceneNotServedIsServedAgainOnceItLoads) {
  const std::string scene_id = OneBoxSceneThenStop();
  auto stores = OpenStores();
  ASSERT_THAT(stores.status(), IsOk());
  const std::string part = stores->parts->ListIds("", 10).at(0);
  auto old = stores->scenes->Get(scene_id);
  ASSERT_THAT(old.status(), IsOk());
  const absl::Time later = absl::Now() + absl::Seconds(20);
  std::optional<absl::StatusOr<std::optional<std::string>>> user;
  std::thread check;
  {
    std::unique_lock lock((*old)->mu);  // an edit, which DeletePart's check then waits for
    check = std::thread([&] { user = stores->scenes->FirstUserOf(part, later); });
    absl::SleepFor(absl::Seconds(1));  // (it waits for the old object's lock by now)
    (*old)->name = "renamed";
    (*old)->Touch();
    {
      const NoFileDescriptorLeft none_left;
      EXPECT_FALSE(stores->scenes->Commit(**old).ok());
    }
    EXPECT_EQ(stores->scenes->unserved(), 1u);
    EXPECT_EQ(stores->scenes->RetryUnserved(absl::Seconds(30)), 1u);
  }
  check.join();
  ASSERT_TRUE(user.has_value());
  ASSERT_THAT(user->status(), IsOk());
  EXPECT_EQ(user->value().value_or("none"), "scene " + scene_id + " (remove its instances first)");
  EXPECT_EQ(stores->scenes->unserved(), 0u);
  auto now = stores->scenes->Get(scene_id);
  ASSERT_THAT(now.status(), IsOk());
  EXPECT_NE(now->get(), old->get());
  EXPECT_EQ((*now)->name, "test");  // the last state stored, not the edit that failed
  EXPECT_EQ((*now)->instances.size(), 1u);
  EXPECT_THAT(stores->scenes->LockForRead(**old, later).status(),
              StatusIs(absl::StatusCode::kAborted, "loaded again while this call waited"));
  EXPECT_THAT(stores->scenes->LockForWrite(**old, later).status(),
              StatusIs(absl::StatusCode::kAborted, "try again"));
  EXPECT_THAT(stores->scenes->LockForWrite(**now, later).status(), IsOk());
  ASSERT_EQ(stores->scenes->List("", 10).size(), 1u);
  // What request handlers take: the lock of the object served now.
  std::shared_ptr<Scene> held = *old;
  EXPECT_THAT(stores->scenes->LockCurrentForWrite(&held, later).status(), IsOk());
  EXPECT_EQ(held, *now);

  // A scene that does not load (here its part file is damaged) waits before each next read,
  // twice as long after each failure.
  stores = absl::InternalError("closed");
  const std::string part_file = dir_ + "/data/tenants/local/parts/" + part + ".pb";
  const std::string part_bytes = cad::ReadFileCapped(part_file, 1 << 20).value_or("");
  ASSERT_FALSE(part_bytes.empty());
  { std::ofstream(part_file, std::ios::trunc) << "garbled"; }
  auto damaged = OpenStores();
  ASSERT_THAT(damaged.status(), IsOk());
  EXPECT_EQ(damaged->scenes->unserved(), 1u);
  EXPECT_THAT(damaged->scenes->Get(scene_id).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "its stored file is damaged"));
  EXPECT_EQ(damaged->scenes->RetryUnserved(absl::Seconds(1)), 0u);  // next in 1 s
  absl::SleepFor(absl::Milliseconds(1200));
  EXPECT_EQ(damaged->scenes->RetryUnserved(absl::Seconds(1)), 0u);  // next in 2 s
  { std::ofstream(part_file, std::ios::trunc | std::ios::binary) << part_bytes; }
  EXPECT_EQ(damaged->scenes->RetryUnserved(absl::Seconds(1)), 0u);  // not read yet
  EXPECT_EQ(damaged->scenes->unserved(), 1u);
  absl::SleepFor(absl::Milliseconds(2200));
  EXPECT_EQ(damaged->scenes->RetryUnserved(absl::Seconds(1)), 1u);
  EXPECT_EQ(damaged->scenes->unserved(), 0u);
  auto served = damaged->scenes->Get(scene_id);
  ASSERT_THAT(served.status(), IsOk());
  EXPECT_EQ((*served)->instances.size(), 1u);

  // A part that kept a scene from loading, stored again (here put as an upload puts it, which
  // rewrites its damaged file), makes the scene due at once, whatever its wait.
  damaged = absl::InternalError("closed");
  { std::ofstream(part_file, std::ios::trunc) << "garbled"; }
  auto again = OpenStores();
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_EQ(again->scenes->RetryUnserved(absl::Hours(1)), 0u);  // next in an hour
  EXPECT_EQ(again->scenes->RetryUnserved(absl::Hours(1)), 0u);
  store::v1::StoredPart stored;
  ASSERT_TRUE(stored.ParseFromString(part_bytes));
  PartInput input;
  input.name = stored.name();
  input.xyz_mm = std::span<const double>(stored.xyz_mm().data(), stored.xyz_mm_size());
  input.triangles = std::span<const uint32_t>(stored.triangles().data(), stored.triangles_size());
  input.deflection_mm = stored.deflection_mm();
  auto put = again->parts->Put(input);
  ASSERT_THAT(put.status(), IsOk());
  EXPECT_EQ((*put)->info.part_id(), part);
  EXPECT_EQ(again->scenes->RetryUnserved(absl::Hours(1)), 1u);
  EXPECT_THAT(again->scenes->Get(scene_id).status(), IsOk());
}

// clashd tries the scenes it does not serve again by itself: a scene whose part file was
// damaged is served again once the part is uploaded again (which repairs the file), without a
// restart, and without waiting out the back-off of its failed tries; the metrics count the
// scenes not served.
TEST_F(ServerTest, ClashdServesASceneAgainOnceItsPartIsUploadedAgain) {
  const RawMesh mesh = MakeBox(Vec3(5, 5, 5));
  const std::string box = Upload(mesh, "box");
  const std::string scene = NewScene();
  Place(scene, box, RigidTransform::Identity(), "a");
  client_.reset();
  server_.reset();
  { std::ofstream(dir_ + "/data/tenants/local/parts/" + box + ".pb", std::ios::trunc) << "x"; }
  ServerConfig config;
  config.unserved_scene_retry_seconds = 0.5;
  Start(config);
  EXPECT_THAT(client_->GetScene(scene),
              StatusIs(absl::StatusCode::kFailedPrecondition, "is not served"));
  EXPECT_THAT(FetchMetrics(server_->metrics_port()),
              ::testing::HasSubstr("\nclashd_scenes_unserved 1\n"));
  // Tried at 0.5, 1, 2 and 4 s, each failing: the next read is due at 8 s.
  absl::SleepFor(absl::Milliseconds(4500));
  EXPECT_THAT(client_->GetScene(scene),
              StatusIs(absl::StatusCode::kFailedPrecondition, "is not served"));
  EXPECT_EQ(Upload(mesh, "box"), box);
  const absl::Time uploaded = absl::Now();
  absl::StatusOr<v1::Scene> got = client_->GetScene(scene);
  // The next pass (0.5 s) serves it, not the read due at 8 s.
  while (!got.ok() && absl::Now() - uploaded < absl::Seconds(2)) {
    absl::SleepFor(absl::Milliseconds(50));
    got = client_->GetScene(scene);
  }
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(got->instance_count(), 1u);
  EXPECT_THAT(FetchMetrics(server_->metrics_port()),
              ::testing::HasSubstr("\nclashd_scenes_unserved 0\n"));
}

// A scene file found damaged at a start is set aside, and shows: the gauge clashd_damaged_files
// counts it (with the log line), the tenant's storage quota does not (the tenant cannot remove
// it), and it is removed once --damaged-file-retention-days have passed since it was set aside.
// Before, such files had no metric, were kept for good and counted against the quota: here the
// new scene would have been refused.
TEST_F(ServerTest, DamagedSceneFilesShowInTheMetricsAreNotChargedAndExpire) {
  const std::string scene = NewScene();
  client_.reset();
  server_.reset();
  const std::string scenes = dir_ + "/data/tenants/local/scenes";
  {
    std::ofstream out(scenes + "/" + scene + ".pb", std::ios::trunc);
    out << std::string(200'000, 'x');  // not a scene, and above the quota below
  }
  ServerConfig config;
  config.tenant_max_storage_bytes = 100'000;
  Start(config);
  EXPECT_THAT(client_->GetScene(scene), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_EQ(DamagedFilesOf(scenes, scene), 1);
  EXPECT_THAT(FetchMetrics(server_->metrics_port()),
              ::testing::HasSubstr("\nclashd_damaged_files 1\n"));
  EXPECT_THAT(client_->CreateScene("new").status(), IsOk());
  // Kept for a second here: gone within the sweeps of the next seconds.
  config.damaged_file_retention_days = 1.0 / 86400;
  Restart(config);
  EXPECT_TRUE(PollUntil([&] { return DamagedFilesOf(scenes, scene) == 0; },
                        std::chrono::seconds(30), std::chrono::milliseconds(50)));
  EXPECT_THAT(FetchMetrics(server_->metrics_port()),
              ::testing::HasSubstr("\nclashd_damaged_files 0\n"));
}

// A tenant whose folder cannot be used (here a file where its scenes/ folder should be) costs
// that tenant alone: clashd starts, logs it, serves every other tenant, and answers the
// tenant's calls FAILED_PRECONDITION naming the folder and what is wrong (gauge
// clashd_tenants_unserved); nothing in its folder is removed or overwritten, and once repaired
// it is served again without a restart. Before, clashd did not start at all.
TEST_F(ServerTest, ATenantWhoseFolderCannotBeUsedIsNotServedAndTheOthersAre) {
  const std::string tokens = dir_ + "/tokens";
  {
    std::ofstream out(tokens);
    out << cad::Sha256Hex("token-a") << " a\n" << cad::Sha256Hex("token-b") << " b\n";
  }
  ServerConfig config;
  config.tokens_file = tokens;
  config.unserved_scene_retry_seconds = 0.2;
  Restart(config);
  const auto as = [&](const std::string& token) {
    client::ClientOptions options;
    options.token = token;
    options.max_attempts = 1;
    return client::Client::FromChannel(server_->grpc_server()->InProcessChannel({}), options);
  };
  std::string box, scene;
  {
    auto a = as("token-a");
    auto part = a->UploadMesh(MeshUpload(MakeBox(Vec3(1, 1, 1)), "box"));
    ASSERT_THAT(part.status(), IsOk());
    box = part->part_id();
    auto created = a->CreateScene("kept");
    ASSERT_THAT(created.status(), IsOk());
    scene = created->scene_id();
  }
  client_.reset();
  server_.reset();
  const std::string tenant = dir_ + "/data/tenants/a";
  const std::string saved = dir_ + "/scenes-of-a";
  std::filesystem::rename(tenant + "/scenes", saved);
  { std::ofstream(tenant + "/scenes") << "not a folder"; }
  { std::ofstream(tenant + "/tmp/upload") << "an upload"; }
  Start(config);  // (before: the start failed, INTERNAL "cannot create folder")
  {
    auto a = as("token-a");
    for (const absl::Status& st :
         {a->GetScene(scene).status(), a->GetPart(box).status(), a->CreateScene("new").status()}) {
      EXPECT_THAT(st, StatusIs(absl::StatusCode::kFailedPrecondition,
                               tenant + "/scenes is a file, where a folder should be"));
    }
    auto b = as("token-b");
    EXPECT_THAT(b->CreateScene("fine").status(), IsOk());
    EXPECT_THAT(b->ListParts().status(), IsOk());
  }
  EXPECT_THAT(FetchMetrics(server_->metrics_port()),
              ::testing::HasSubstr("\nclashd_tenants_unserved 1\n"));
  {
    std::ifstream in(tenant + "/scenes");
    std::string text;
    std::getline(in, text);
    EXPECT_EQ(text, "not a folder");
  }
  EXPECT_TRUE(std::filesystem::exists(tenant + "/tmp/upload"));
  EXPECT_TRUE(std::filesystem::exists(tenant + "/parts/" + box + ".pb"));
  // Repaired, the tenant is served again (tried at its next call after the retry interval).
  std::filesystem::remove(tenant + "/scenes");
  std::filesystem::rename(saved, tenant + "/scenes");
  auto a = as("token-a");
  absl::StatusOr<v1::Scene> got = a->GetScene(scene);
  EXPECT_TRUE(PollUntil(
      [&] {
        got = a->GetScene(scene);
        return got.ok();
      },
      std::chrono::seconds(30), std::chrono::milliseconds(50)))
      << got.status();
  EXPECT_THAT(a->GetPart(box).status(), IsOk());
  EXPECT_THAT(FetchMetrics(server_->metrics_port()),
              ::testing::HasSubstr("\nclashd_tenants_unserved 0\n"));
}

// A store folder that cannot be listed fails the store's open (and so the start): serving no
// part or scene would hide those on disk, also from DeletePart's check of a part's users.
// Here no file descriptor is left to list with (root lists any folder its permissions forbid).
TEST_F(ServerTest, AStoreFolderThatCannotBeListedFailsItsOpen) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  Place(NewScene(), box, RigidTransform::Identity(), "a");
  client_.reset();
  server_.reset();
  const std::string tenant = dir_ + "/data/tenants/local";
  auto parts = PartStore::Open(tenant, ServerConfig{}.max_part_triangles);
  ASSERT_THAT(parts.status(), IsOk());
  absl::StatusOr<std::unique_ptr<PartStore>> parts_again;
  absl::StatusOr<std::unique_ptr<SceneStore>> scenes;
  {
    const NoFileDescriptorLeft none_left;
    parts_again = PartStore::Open(tenant, ServerConfig{}.max_part_triangles);
    scenes = SceneStore::Open(tenant + "/scenes", parts->get());
  }
  EXPECT_THAT(parts_again.status(), StatusIs(absl::StatusCode::kInternal, "cannot be listed"));
  EXPECT_THAT(scenes.status(), StatusIs(absl::StatusCode::kInternal, "cannot be listed"));
  // With descriptors again, both open and the scene is served.
  scenes = SceneStore::Open(tenant + "/scenes", parts->get());
  ASSERT_THAT(scenes.status(), IsOk());
  EXPECT_EQ((*scenes)->List("", 10).size(), 1u);
}

// Instance paths and names are at most 64 KiB: the scene's file is read back with a cap, and
// edits it acknowledged must load again.
TEST_F(ServerTest, InstancePathsAndNamesHaveALimit) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  const std::string longest(64 * 1024, 'p');
  for (bool as_name : {false, true}) {
    v1::AddInstancesRequest req;
    req.set_scene_id(scene);
    v1::PartPlacement* p = req.add_parts();
    p->set_part_id(box);  // (a name without a path: the path is made from it)
    (as_name ? p->mutable_name() : p->mutable_path())->assign(longest + "x");
    EXPECT_THAT(client_->AddInstances(req).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, as_name ? "name has" : "path has"));
    (as_name ? p->mutable_name() : p->mutable_path())->assign(longest);
    EXPECT_THAT(client_->AddInstances(req).status(), IsOk()) << as_name;
  }
  Restart();
  auto s = client_->GetScene(scene);
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_EQ(s->instance_count(), 2u);
}

// Stored poses are read back bit for bit: after a restart, instances at arbitrary rotations
// (set as quaternions, so the stored transform is not a quaternion's exact matrix) give the
// same answer, witness points and depths included, to the last bit.
TEST_F(ServerTest, ARestartKeepsPosesBitForBit) {
  std::mt19937 rng = testing::SeededRng(23);
  const std::string cyl = Upload(testing::MakeCylinder(1.5, 5, 24), "cyl");
  const std::string box = Upload(MakeBox(Vec3(3, 2, 1)), "box");
  const std::string scene = NewScene();
  for (int i = 0; i < 12; ++i) {
    Place(scene, i % 2 ? cyl : box, testing::RandomPose(rng, 4), "i" + std::to_string(i));
  }
  v1::InterferenceRequest req;
  req.set_scene_id(scene);
  req.mutable_tolerances()->set_contact_tolerance_mm(0.05);
  const auto before = client_->CheckInterference(req);
  ASSERT_THAT(before.status(), IsOk());
  ASSERT_GT(before->summary().hard(), 2u);
  Restart();
  const auto after = client_->CheckInterference(req);
  ASSERT_THAT(after.status(), IsOk());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*before, *after))
      << "before:\n"
      << before->DebugString() << "\nafter:\n"
      << after->DebugString();
}

// An assembly instance holds the product of the client's pose (a rotation accepted within 1e-6
// of orthonormal) and the assembly's, which may be a few 1e-6 off. Stored exactly, such a pose
// must read back after a restart: not refused, which would move the whole scene aside as
// damaged.
TEST_F(ServerTest, APoseAFewMillionthsOffOrthonormalSurvivesARestart) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene_id = NewScene();
  const uint64_t id = Place(scene_id, box, RigidTransform::Identity(), "a");
  client_.reset();
  server_.reset();
  RigidTransform X;
  X.R = Eigen::AngleAxisd(0.3, Vec3(1, 2, 3).normalized()).toRotationMatrix();
  X.R(0, 1) += 3e-6;
  X.t = Vec3(1, 2, 3);
  ASSERT_FALSE(X.IsValid(1e-6));
  {
    // What the server would hold for such an instance, written through its own store.
    auto stores = OpenStores();
    ASSERT_THAT(stores.status(), IsOk());
    auto scene = stores->scenes->Get(scene_id);
    ASSERT_THAT(scene.status(), IsOk());
    std::unique_lock lock((*scene)->mu);
    InstanceRec* rec = (*scene)->Find(id);
    ASSERT_NE(rec, nullptr);
    (*scene)->SetPose(*rec, X);
    (*scene)->Touch();
    ASSERT_THAT(stores->scenes->Commit(**scene), IsOk());
  }
  Start();
  auto instances = client_->ListInstances(scene_id);
  ASSERT_THAT(instances.status(), IsOk());
  ASSERT_EQ(instances->size(), 1u);
  const RigidTransform read = FromPose((*instances)[0].pose());
  EXPECT_NEAR((read.R - X.R).cwiseAbs().maxCoeff(), 0.0, 1e-5);  // the wire form is a quaternion
  EXPECT_EQ(read.t, X.t);
  EXPECT_EQ(DamagedFilesOf(dir_ + "/data/tenants/local/scenes", scene_id), 0);
}

TEST_F(ServerTest, HealthIsServing) {
  auto h = client_->CheckHealth();
  ASSERT_THAT(h.status(), IsOk());
  EXPECT_EQ(*h, client::Health::kServing);
  auto q = client_->CheckHealth("clash.v1.QueryService");
  ASSERT_THAT(q.status(), IsOk());
  EXPECT_EQ(*q, client::Health::kServing);
}

TEST_F(ServerTest, ImportCadErrorsAreClassified) {
  const std::string empty = dir_ + "/empty.step";
  { std::ofstream(empty).put('\n'); }
  EXPECT_THAT(client_->ImportCad(empty).status(), StatusIs(absl::StatusCode::kInvalidArgument, ""));
  const std::string junk = dir_ + "/junk.step";
  {
    std::ofstream f(junk);
    f << "ISO-10303-21;\nHEADER;\nthis is not STEP at all ((((\n";
  }
  EXPECT_THAT(client_->ImportCad(junk).status(), StatusIs(absl::StatusCode::kInvalidArgument, ""));
  // Nothing is left in the upload folder.
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/data/tenants/local/tmp"));
}

TEST_F(ServerTest, ImportsTheAs1AssemblyFromSharedData) {
  const std::string file = std::string(CLASH_CAD_DATA_DIR) + "/as1-oc-214-mat.stp";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file << " (../shared absent)";
  auto imported = client_->ImportCad(file);
  ASSERT_THAT(imported.status(), IsOk());
  const v1::Assembly& as = imported->assembly();
  EXPECT_TRUE(as.report().complete());
  EXPECT_FALSE(as.report().from_cache());
  EXPECT_EQ(as.instances_size(), 18);
  std::set<std::string> names;
  uint64_t triangles = 0;
  for (const v1::Part& p : imported->parts()) {
    names.insert(p.name());
    triangles += p.triangle_count();
  }
  EXPECT_THAT(names, ::testing::IsSupersetOf({"nut", "bolt", "rod", "l-bracket", "plate"}));
  // Each distinct part counted once.
  EXPECT_EQ(as.report().triangles(), triangles);

  const std::string scene = NewScene();
  v1::AddInstancesRequest add;
  add.set_scene_id(scene);
  add.add_assemblies()->set_assembly_id(as.assembly_id());
  auto added = client_->AddInstances(add);
  ASSERT_THAT(added.status(), IsOk());
  EXPECT_EQ(added->instances_size(), 18);
  // At default tolerances the touching parts are contacts, not hard clashes.
  const v1::InterferenceResponse r = Check(scene, -1);
  EXPECT_EQ(r.summary().hard(), 0u) << r.DebugString();
  EXPECT_EQ(r.summary().contained(), 0u);
  EXPECT_GT(r.summary().contact(), 0u);

  auto again = client_->ImportCad(file);
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_TRUE(again->assembly().report().from_cache());
  EXPECT_EQ(again->assembly().assembly_id(), as.assembly_id());
}

// An import writes its cache entry last: after its upload is removed and its parts are stored,
// so that under a tight quota the entry takes only the room they leave. Here as1's upload
// beside its entry would pass the quota (the entry was not stored before), its parts and entry
// fit.
TEST_F(ServerTest, AnImportsCacheEntryTakesOnlyTheRoomItsPartsLeave) {
  const std::string file = std::string(CLASH_CAD_DATA_DIR) + "/as1-oc-214-mat.stp";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file << " (../shared absent)";
  const std::uint64_t upload = std::filesystem::file_size(file);
  ServerConfig config;
  config.tenant_max_storage_bytes = upload + upload / 8;
  Restart(config);
  auto imported = client_->ImportCad(file);
  ASSERT_THAT(imported.status(), IsOk());
  const std::string tenant = dir_ + "/data/tenants/local";
  std::uint64_t entries = 0, entry_bytes = 0, total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tenant)) {
    if (!e.is_regular_file()) continue;
    total += e.file_size();
    if (e.path().extension() == ".clshasm") {
      ++entries;
      entry_bytes += e.file_size();
    }
  }
  EXPECT_EQ(entries, 1u);
  EXPECT_GT(upload + entry_bytes, config.tenant_max_storage_bytes) << "the test needs this";
  EXPECT_LE(total, config.tenant_max_storage_bytes);
}

// DeletePart deletes a part no scene places and no assembly holds, from memory and disk; a
// part in use stays. The scene that used it is served after a restart; uploaded again, the part
// has the same id.
TEST_F(ServerTest, DeletePartTakesOnlyUnusedParts) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string pin = Upload(MakeBox(Vec3(1, 1, 3)), "pin");
  const std::string plate = Upload(MakeBox(Vec3(5, 5, 1)), "plate");
  const std::string scene = NewScene();
  const uint64_t a = Place(scene, box, RigidTransform::Identity(), "a");
  Place(scene, plate, RigidTransform{geom::Mat3::Identity(), Vec3(0, 0, -10)}, "kept");
  EXPECT_THAT(client_->DeletePart(box),
              StatusIs(absl::StatusCode::kFailedPrecondition, "is in use by scene " + scene));
  EXPECT_THAT(client_->GetPart(box).status(), IsOk());
  EXPECT_THAT(client_->DeletePart(pin), IsOk());
  EXPECT_THAT(client_->GetPart(pin).status(), StatusIs(absl::StatusCode::kNotFound, ""));
  const std::string parts = dir_ + "/data/tenants/local/parts/";
  EXPECT_FALSE(std::filesystem::exists(parts + pin + ".pb"));
  auto listed = client_->ListParts();
  ASSERT_THAT(listed.status(), IsOk());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_TRUE((*listed)[0].part_id() != pin && (*listed)[1].part_id() != pin);
  v1::AddInstancesRequest add;
  add.set_scene_id(scene);
  add.add_parts()->set_part_id(pin);
  *add.mutable_parts(0)->mutable_pose() = ToPose(RigidTransform::Identity());
  EXPECT_THAT(client_->AddInstances(add).status(), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(client_->DeletePart(pin), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(client_->DeletePart("p-not-an-id"), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(client_->DeleteAssembly("a" + std::string(32, '0')),
              StatusIs(absl::StatusCode::kNotFound, ""));
  // Its instance removed, the box goes too.
  v1::RemoveInstancesRequest remove;
  remove.set_scene_id(scene);
  remove.add_instance_ids(a);
  ASSERT_THAT(client_->RemoveInstances(remove).status(), IsOk());
  EXPECT_THAT(client_->DeletePart(box), IsOk());
  // Uploaded again, the pin is back under its id, on disk too.
  EXPECT_EQ(Upload(MakeBox(Vec3(1, 1, 3)), "pin"), pin);
  EXPECT_TRUE(std::filesystem::exists(parts + pin + ".pb"));
  // After a restart the scene is served with its other instance; the box is gone, the pin is
  // there.
  Restart();
  auto kept = client_->ListInstances(scene);
  ASSERT_THAT(kept.status(), IsOk());
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_EQ((*kept)[0].part_id(), plate);
  EXPECT_THAT(client_->GetPart(box).status(), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(client_->GetPart(pin).status(), IsOk());
}

// AddInstances is bounded before it builds anything: a scene holds at most
// --max-scene-instances, and the answer, which lists every instance added, must fit the
// message limit. Before, a small request placing an assembly many times built every instance
// (memory without bound) and stored the edit even when gRPC could not send its answer.
TEST_F(ServerTest, AddInstancesIsBoundedBeforeItBuildsAnything) {
  ServerConfig config;
  config.max_scene_instances = 20;
  Restart(config);
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  const auto boxes = [&](int first, int count) {
    v1::AddInstancesRequest add;
    add.set_scene_id(scene);
    for (int i = first; i < first + count; ++i) {
      v1::PartPlacement* p = add.add_parts();
      p->set_part_id(box);
      p->set_path("b" + std::to_string(i));
    }
    return client_->AddInstances(add).status();
  };
  EXPECT_THAT(boxes(0, 21), StatusIs(absl::StatusCode::kResourceExhausted, "more than 20"));
  {
    // A limit, not a full queue: the answer does not invite a retry.
    auto stub = v1::SceneService::NewStub(server_->grpc_server()->InProcessChannel({}));
    grpc::ClientContext ctx;
    v1::AddInstancesRequest add;
    add.set_scene_id(scene);
    for (int i = 0; i < 21; ++i) add.add_parts()->set_part_id(box);
    v1::AddInstancesResponse response;
    EXPECT_EQ(stub->AddInstances(&ctx, add, &response).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_FALSE(ctx.GetServerTrailingMetadata().contains(kRetryableMetadata));
  }
  EXPECT_THAT(boxes(0, 15), IsOk());
  EXPECT_THAT(boxes(15, 6), StatusIs(absl::StatusCode::kResourceExhausted, "would hold 21"));
  EXPECT_THAT(boxes(15, 5), IsOk());
  auto s = client_->GetScene(scene);
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_EQ(s->instance_count(), 20u);

  const std::string file = std::string(CLASH_CAD_DATA_DIR) + "/as1-oc-214-mat.stp";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file << " (../shared absent)";
  config = {};
  config.max_message_bytes = std::size_t{1} << 20;
  Restart(config);
  auto imported = client_->ImportCad(file);
  ASSERT_THAT(imported.status(), IsOk());
  ASSERT_EQ(imported->assembly().instances_size(), 18);
  const std::string as1 = NewScene();
  const auto assemblies = [&](int count) {
    v1::AddInstancesRequest add;  // ~1 KB per placement, ~23 KB of answer
    add.set_scene_id(as1);
    for (int i = 0; i < count; ++i) {
      v1::AssemblyPlacement* a = add.add_assemblies();
      a->set_assembly_id(imported->assembly().assembly_id());
      a->set_path_prefix(std::to_string(i) + std::string(1000, 'p'));
    }
    return client_->AddInstances(add);
  };
  EXPECT_THAT(assemblies(100).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "add fewer per call"));
  s = client_->GetScene(as1);
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_EQ(s->instance_count(), 0u);  // nothing stored
  auto added = assemblies(10);
  ASSERT_THAT(added.status(), IsOk());
  EXPECT_EQ(added->instances_size(), 180);
}

// A step whose result gRPC could not send (its movers' paths alone above --max-message-bytes)
// ends the call with RESOURCE_EXHAUSTED saying what to do, not a closed stream; a step within
// the limit is answered.
TEST_F(ServerTest, AStepResultAboveTheMessageLimitIsRefusedClearly) {
  ServerConfig config;
  config.max_message_bytes = std::size_t{1} << 20;
  Restart(config);
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  for (int i = 0; i < 20; ++i) {  // 20 movers of ~60 KB paths: 1.2 MB of moving_paths
    Place(scene, box, RigidTransform::Translation(Vec3(10.0 * i, 0, 0)),
          "big/" + std::to_string(i) + std::string(60000, 'x'));
  }
  for (int i = 0; i < 5; ++i) {
    Place(scene, box, RigidTransform::Translation(Vec3(10.0 * i, 100, 0)),
          "small/" + std::to_string(i) + std::string(60000, 'x'));
  }
  v1::ValidateSequenceRequest req;
  req.set_scene_id(scene);
  AddInstallStep(&req, "big", 1);
  EXPECT_THAT(client_->ValidateSequence(req).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "split the step"));
  req.clear_steps();
  AddInstallStep(&req, "small", 1);
  const v1::StepResult step = OnlyStep(req);
  EXPECT_TRUE(step.ok());
  EXPECT_EQ(step.moving_paths_size(), 5);
}

// An imported assembly holds its parts: they go once it is deleted (and no scene places them);
// importing the file again brings both back under the same ids. DeletePart's reading of the
// assembly files (while the tenant's other writes wait for it) stops at the call's deadline:
// DEADLINE_EXCEEDED, nothing deleted.
TEST_F(ServerTest, DeleteAssemblyReleasesItsParts) {
  const std::string file = std::string(CLASH_CAD_DATA_DIR) + "/as1-oc-214-mat.stp";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file << " (../shared absent)";
  auto imported = client_->ImportCad(file);
  ASSERT_THAT(imported.status(), IsOk());
  const std::string assembly = imported->assembly().assembly_id();
  const std::string part = imported->parts(0).part_id();
  const std::string scene = NewScene();
  v1::AddInstancesRequest add;
  add.set_scene_id(scene);
  add.add_assemblies()->set_assembly_id(assembly);
  ASSERT_THAT(client_->AddInstances(add).status(), IsOk());
  EXPECT_THAT(client_->DeletePart(part),
              StatusIs(absl::StatusCode::kFailedPrecondition, "in use by scene " + scene));
  ASSERT_THAT(client_->DeleteScene(scene), IsOk());
  EXPECT_THAT(client_->DeletePart(part),
              StatusIs(absl::StatusCode::kFailedPrecondition, "in use by assembly " + assembly));
  EXPECT_THAT(client_->DeleteAssembly(assembly), IsOk());
  EXPECT_THAT(client_->GetAssembly(assembly).status(), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(client_->DeleteAssembly(assembly), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(client_->DeletePart(part), IsOk());
  EXPECT_THAT(client_->GetPart(part).status(), StatusIs(absl::StatusCode::kNotFound, ""));
  auto again = client_->ImportCad(file);
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_EQ(again->assembly().assembly_id(), assembly);
  Restart();  // served from disk, not from what memory kept
  EXPECT_THAT(client_->GetAssembly(assembly).status(), IsOk());
  EXPECT_THAT(client_->GetPart(part).status(), IsOk());
  client_.reset();
  server_.reset();
  auto stores = OpenStores();
  ASSERT_THAT(stores.status(), IsOk());
  EXPECT_THAT(stores->parts->FirstAssemblyWith(part, absl::Now() - absl::Seconds(1)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "nothing deleted"));
  auto user = stores->parts->FirstAssemblyWith(part, absl::InfiniteFuture());
  ASSERT_THAT(user.status(), IsOk());
  EXPECT_EQ(*user, "assembly " + assembly + " (delete it first)");
}

// DeletePart racing AddInstances of the same part: one of them wins, never both. Before the
// tenant's part-use lock, an instance could be added between the delete's check of the scenes
// and its removal of the file, leaving a scene that no restart could serve.
TEST_F(ServerTest, DeletePartRacingAddInstancesNeverLeavesAnInstanceWithoutItsPart) {
  const std::string scene = NewScene();
  constexpr int kRounds = 48;
  int added = 0, deleted = 0;
  for (int i = 0; i < kRounds; ++i) {
    const std::string part = Upload(MakeBox(Vec3(1, 1, 1 + i)), "racer");
    std::atomic<bool> go{false};
    absl::StatusOr<v1::AddInstancesResponse> add_result;
    absl::Status delete_result;
    std::thread adder([&] {
      while (!go) std::this_thread::yield();
      v1::AddInstancesRequest add;
      add.set_scene_id(scene);
      add.add_parts()->set_part_id(part);
      *add.mutable_parts(0)->mutable_pose() = ToPose(RigidTransform::Identity());
      add_result = client_->AddInstances(add);
    });
    std::thread deleter([&] {
      while (!go) std::this_thread::yield();
      delete_result = client_->DeletePart(part);
    });
    go = true;
    adder.join();
    deleter.join();
    // Exactly one wins: the instance (the delete refused) or the delete (the add not found).
    if (add_result.ok()) {
      ++added;
      EXPECT_THAT(delete_result, StatusIs(absl::StatusCode::kFailedPrecondition, "")) << i;
      EXPECT_THAT(client_->GetPart(part).status(), IsOk()) << i;
    } else {
      ++deleted;
      EXPECT_THAT(add_result.status(), StatusIs(absl::StatusCode::kNotFound, "")) << i;
      EXPECT_THAT(delete_result, IsOk()) << i;
    }
  }
  EXPECT_EQ(added + deleted, kRounds);
  RecordProperty("added", added);  // which side won how often
  RecordProperty("deleted", deleted);
  Restart();
  auto instances = client_->ListInstances(scene);
  ASSERT_THAT(instances.status(), IsOk()) << "the scene is served after a restart";
  EXPECT_EQ(instances->size(), static_cast<std::size_t>(added));
  for (const v1::Instance& inst : *instances) {
    EXPECT_THAT(client_->GetPart(inst.part_id()).status(), IsOk());
  }
}

TEST_F(ServerTest, FullImportQueueIsResourceExhaustedAtOnce) {
  ServerConfig one;
  one.import_slots = 1;
  one.import_queue = 0;
  Restart(one);
  auto stub = v1::PartService::NewStub(server_->grpc_server()->InProcessChannel({}));
  // The first import holds the only upload place (slots + queue) while its upload stays open.
  grpc::ClientContext first_ctx;
  v1::ImportCadResponse first_resp;
  auto first = stub->ImportCad(&first_ctx, &first_resp);
  v1::ImportCadRequest header;
  header.mutable_header()->set_file_name("slow.step");
  ASSERT_TRUE(first->Write(header));
  // Wait until the server has admitted it (the gauge says so).
  grpc::ClientContext second_ctx;
  v1::ImportCadResponse second_resp;
  grpc::Status second_status;
  bool marked_transient = false;
  for (int attempt = 0; attempt < 200; ++attempt) {
    grpc::ClientContext ctx;
    v1::ImportCadResponse resp;
    auto second = stub->ImportCad(&ctx, &resp);
    second->Write(header);
    second->WritesDone();
    second_status = second->Finish();
    if (second_status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      // A full queue is worth retrying: the answer says so (clash-retryable: 1).
      const auto& trailers = ctx.GetServerTrailingMetadata();
      const auto it = trailers.find(kRetryableMetadata);
      marked_transient = it != trailers.end() && it->second == "1";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(second_status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(second_status.error_message(), ::testing::HasSubstr("upload queue full"));
  EXPECT_TRUE(marked_transient);
  first_ctx.TryCancel();
  first->Finish();
}

// An upload that stalls takes no import slot: an import whose file is in runs beside it (before,
// the slot was taken before the header was read, so one client's stalled uploads held every
// import, other tenants' too, until the server's deadline).
TEST_F(ServerTest, AStalledUploadDoesNotHoldTheImportSlot) {
  ServerConfig one;
  one.import_slots = 1;
  one.import_queue = 1;  // two uploads at once
  Restart(one);
  auto stub = v1::PartService::NewStub(server_->grpc_server()->InProcessChannel({}));
  grpc::ClientContext stalled_ctx;
  v1::ImportCadResponse stalled_resp;
  auto stalled = stub->ImportCad(&stalled_ctx, &stalled_resp);
  v1::ImportCadRequest header;
  header.mutable_header()->set_file_name("stalled.step");
  ASSERT_TRUE(stalled->Write(header));
  ASSERT_TRUE(WaitForGauge(server_->metrics_port(), "clashd_uploads_in_progress"));
  // A whole upload: it reaches the worker, which refuses its content, well before its deadline.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  const grpc::Status status = UploadWhole(*stub, &ctx, "whole.step", "not a CAD file");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  stalled_ctx.TryCancel();
  stalled->Finish();
}

// A sequence whose client stops reading (no deadline of its own, its flow-control window
// full) blocks the server's stream write; it is cancelled a second after the server's
// sequence time limit, which frees its query slot and its scene: a query waiting for the only
// slot then runs, and the scene takes edits. Before, the write blocked for good.
TEST_F(ServerTest, ASequenceWhoseClientStopsReadingEndsAfterTheTimeLimit) {
  ServerConfig config;
  config.query_slots = 1;
  config.max_sequence_seconds = 2;
  Restart(config);
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  // 400 boxes 10 mm apart, each moved 0.5 mm by a step of its own.
  auto added = client_->AddInstances(PlaceMany(scene, box, 400, "m", [](int i) {
    return RigidTransform::Translation(Vec3(10.0 * i, 0, 0));
  }));
  ASSERT_THAT(added.status(), IsOk());
  const uint64_t mover = added->instances(0).instance_id();
  v1::ValidateSequenceRequest req;
  req.set_scene_id(scene);
  for (int i = 0; i < 400; ++i) {  // ~400 KB of results, far beyond a 16 KB window
    v1::SequenceStep* step = req.add_steps();
    step->set_name(std::string(1000, static_cast<char>('a' + i % 26)));
    step->mutable_moving()->add_path_prefixes("m" + std::to_string(i));
    step->mutable_motion()->mutable_linear()->mutable_direction()->set_x(1);
    step->mutable_motion()->mutable_linear()->set_distance_mm(0.5);
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 * 1024);
  auto stub = v1::SequenceService::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext stalled;  // no deadline
  auto reader = stub->ValidateSequence(&stalled, req);
  v1::ValidateSequenceEvent first;
  ASSERT_TRUE(reader->Read(&first));  // the call runs; nothing more is read
  const absl::Time start = absl::Now();
  v1::InterferenceRequest check;
  check.set_scene_id(scene);
  EXPECT_THAT(client_->CheckInterference(check).status(), IsOk());
  // It waited for the stalled sequence's slot: the limit and the second after it (before the
  // fix, the whole 60 s of its own deadline, and then failed).
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(1500));
  EXPECT_LE(absl::Now() - start, absl::Seconds(20));
  v1::SetPosesRequest move;
  move.set_scene_id(scene);
  v1::PoseUpdate* update = move.add_poses();
  update->set_instance_id(mover);
  *update->mutable_pose() = ToPose(RigidTransform::Translation(Vec3(5, 0, 0)));
  EXPECT_THAT(client_->SetPoses(move).status(), IsOk());
  while (reader->Read(&first)) {
  }
  EXPECT_FALSE(reader->Finish().ok());
}

// A peg lowered through a tube: a narrow one passes, a wide one is blocked where it reaches the
// tube's top face; the stream carries progress, one result per step and the summary.
TEST_F(ServerTest, SequencesAreValidatedContinuouslyAndStreamed) {
  const std::string scene = PegsAndTubes("narrow", "wide");
  v1::ValidateSequenceRequest req;
  req.set_scene_id(scene);
  req.mutable_tolerances()->set_contact_tolerance_mm(0.01);
  req.set_clearance_profile(true);
  for (const char* path : {"narrow", "wide"}) {
    AddInstallStep(&req, path, -2)->set_name(path);  // a direction that is not unit
  }
  int progress = 0;
  auto report = client_->ValidateSequence(
      req, [&](const v1::ValidateSequenceEvent& e) { progress += e.has_progress(); });
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_GE(progress, 2);
  ASSERT_EQ(report->steps.size(), 2u);
  const v1::StepResult& ok = report->steps[0];
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.first_contact_t(), -1);
  // The peg's corner edge (radius 3√2) passes the 32-gon hole (radius 5 at its vertices).
  EXPECT_GE(ok.min_clearance_mm(), 5 * std::cos(M_PI / 32) - 3 * std::sqrt(2.0) - 1e-9);
  EXPECT_LE(ok.min_clearance_mm(), 5 - 3 * std::sqrt(2.0) + 1e-9);
  EXPECT_FALSE(ok.profile().empty());
  const v1::StepResult& blocked = report->steps[1];
  EXPECT_FALSE(blocked.ok());
  // The peg's bottom starts at z = 40 and meets the tube's top (z = 5) after 35 of 60 mm; it is
  // blocked τ (0.01 mm) deeper, found by bisection within τ/4 of travel.
  EXPECT_GE(blocked.blocked_t(), 35.01 / 60.0 - 1e-9);
  EXPECT_LE(blocked.blocked_t(), 35.0125 / 60.0 + 1e-9);
  ASSERT_EQ(blocked.blockers_size(), 1);
  EXPECT_EQ(blocked.blockers(0).path(), "tube2");
  EXPECT_EQ(blocked.blockers(0).clash_class(), v1::HARD);
  EXPECT_EQ(report->summary.steps_blocked(), 1);
  EXPECT_EQ(report->summary.first_blocked_step(), 1);

  // Bad requests.
  v1::ValidateSequenceRequest bad = req;
  bad.mutable_steps(1)->mutable_moving()->set_path_prefixes(0, "narrow");
  EXPECT_THAT(client_->ValidateSequence(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "moved by steps 1 and 2"));
  bad = req;
  bad.mutable_steps(0)->mutable_moving()->set_path_prefixes(0, "nothing/here");
  EXPECT_THAT(client_->ValidateSequence(bad).status(),
              StatusIs(absl::StatusCode::kNotFound, "nothing/here"));
  bad = req;
  bad.mutable_steps(0)->mutable_motion()->mutable_linear()->mutable_direction()->set_z(0);
  EXPECT_THAT(client_->ValidateSequence(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "direction"));
  bad = req;
  bad.mutable_steps(0)->clear_moving();
  EXPECT_THAT(client_->ValidateSequence(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "moves nothing"));
  bad = req;
  bad.set_scene_id("s" + std::string(32, '9'));
  EXPECT_THAT(client_->ValidateSequence(bad).status(),
              StatusIs(absl::StatusCode::kNotFound, "scene"));
}

// A step moving two instances together: when the second is the one blocked, blocked_pose is
// still the first mover's pose at blocked_t (reports place the moving group by it).
TEST_F(ServerTest, BlockedPoseIsTheFirstMoversWhicheverMoverIsBlocked) {
  const std::string scene = PegsAndTubes("pegs/narrow", "pegs/wide");
  v1::ValidateSequenceRequest req;
  req.set_scene_id(scene);
  req.mutable_tolerances()->set_contact_tolerance_mm(0.01);
  AddInstallStep(&req, "pegs");
  const v1::StepResult r = OnlyStep(req);
  ASSERT_EQ(r.moving_paths_size(), 2);
  ASSERT_EQ(r.moving_paths(0), "pegs/narrow");  // the first mover passes its tube
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.blockers_size(), 1);
  EXPECT_EQ(r.blockers(0).moving_path(), "pegs/wide");
  EXPECT_GE(r.blocked_t(), 35.01 / 60.0 - 1e-9);  // as in SequencesAreValidatedContinuously...
  EXPECT_LE(r.blocked_t(), 35.0125 / 60.0 + 1e-9);
  // The narrow peg, installed at the origin, comes down from z = 60.
  const RigidTransform X = FromPose(r.blocked_pose());
  EXPECT_NEAR(X.t.x(), 0.0, 1e-9);
  EXPECT_NEAR(X.t.y(), 0.0, 1e-9);
  EXPECT_NEAR(X.t.z(), 60.0 * (1.0 - r.blocked_t()), 1e-6);
}

// A keyframe path moves its instances as one rigid group: the first mover's pose is
// interpolated and the others ride on it. Two 4 mm cubes 200 mm apart come back a quarter turn
// about the world origin into place: the second cube swings out to (-91.4, -91.4) mid-path
// (where a post blocks it) and never comes near (-50, -50), where interpolating each cube's own
// pose took it, shearing the group to 141 mm.
TEST_F(ServerTest, AKeyframePathMovesItsGroupRigidly) {
  const std::string cube = Upload(MakeBox(Vec3(2, 2, 2)), "cube");
  const auto validate = [&](const Vec3& post) {
    const std::string scene = NewScene();
    Place(scene, cube, RigidTransform::Translation(Vec3(100, 0, 0)), "group/a");
    Place(scene, cube, RigidTransform::Translation(Vec3(-100, 0, 0)), "group/b");
    Place(scene, cube, RigidTransform::Translation(post), "post");
    v1::ValidateSequenceRequest req;
    req.set_scene_id(scene);
    v1::SequenceStep* step = req.add_steps();
    step->mutable_moving()->add_path_prefixes("group");
    auto* path = step->mutable_motion()->mutable_path();
    auto* start = path->add_keyframes();
    start->set_t(0);
    *start->mutable_offset() =
        ToPose({testing::AxisAngle(std::numbers::pi / 2, Vec3::UnitZ()), Vec3::Zero()});
    auto* end = path->add_keyframes();
    end->set_t(1);
    *end->mutable_offset() = ToPose(RigidTransform::Identity());
    return OnlyStep(req);
  };
  const double mid = 50 - 100 * std::sqrt(2.0);  // -91.42: b's origin at t = 0.5
  const v1::StepResult blocked = validate(Vec3(mid, mid, 0));
  EXPECT_FALSE(blocked.ok());
  ASSERT_EQ(blocked.blockers_size(), 1);
  EXPECT_EQ(blocked.blockers(0).moving_path(), "group/b");
  EXPECT_EQ(blocked.blockers(0).path(), "post");
  EXPECT_GT(blocked.blocked_t(), 0.3);
  EXPECT_LT(blocked.blocked_t(), 0.5);
  // blocked_pose is a's pose: its origin moves straight from (0, 100) to (100, 0).
  const RigidTransform X = FromPose(blocked.blocked_pose());
  EXPECT_NEAR(X.t.x(), 100 * blocked.blocked_t(), 1e-6);
  EXPECT_NEAR(X.t.y(), 100 * (1 - blocked.blocked_t()), 1e-6);
  const v1::StepResult clear = validate(Vec3(-50, -50, 0));
  EXPECT_TRUE(clear.ok()) << (clear.blockers_size() > 0 ? clear.blockers(0).path() : "");
}

// A sweep drops a pair an allowed rule names whole, so a rule suppressing only part of what
// blocks (some classes, or HARD only up to a depth) is refused in a sequence. Before, such a rule
// let a peg through a wall it should have stopped at.
TEST_F(ServerTest, SequencesRefuseRulesTheyCannotApplyAsWritten) {
  const std::string scene = PegsAndTubes("narrow", "wide");
  const auto validate = [&](const std::vector<v1::ClashClass>& classes, double max_depth) {
    v1::ValidateSequenceRequest req;
    req.set_scene_id(scene);
    req.mutable_tolerances()->set_contact_tolerance_mm(0.01);
    v1::SequenceStep* step = AddInstallStep(&req, "wide");
    v1::AllowedInterference* rule = step->add_allowed();
    rule->set_name("fit");
    rule->mutable_a()->add_path_prefixes("wide");
    rule->mutable_b()->add_path_prefixes("tube2");
    for (v1::ClashClass c : classes) rule->add_classes(c);
    rule->set_max_depth_mm(max_depth);
    return client_->ValidateSequence(req);
  };
  EXPECT_THAT(validate({v1::CONTACT}, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "every class that blocks"));
  EXPECT_THAT(validate({v1::HARD}, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "every class that blocks"));
  EXPECT_THAT(validate({}, 0.2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "max_depth_mm"));
  for (const auto& classes :
       {std::vector<v1::ClashClass>{}, std::vector<v1::ClashClass>{v1::HARD, v1::CONTAINED}}) {
    auto report = validate(classes, 0);
    ASSERT_THAT(report.status(), IsOk());
    ASSERT_EQ(report->steps.size(), 1u);
    EXPECT_TRUE(report->steps[0].ok());
    EXPECT_EQ(report->steps[0].suppressed_size(), 1);
  }
}

// Without an explicit contact tolerance a mover's τ is its deflection plus the largest of the
// standing parts it can come near: a coarse part (0.5 mm) far away no longer turns a 0.4 mm
// overlap with a fine wall (0.01 mm) into contact; the same part beside the path does.
TEST_F(ServerTest, ACoarsePartFarAwayDoesNotLoosenASequencesTolerance) {
  const std::string block = Upload(MakeBox(Vec3(5, 5, 5)), "block", 0.01);
  const std::string wall = Upload(MakeBox(Vec3(5, 5, 50)), "wall", 0.01);
  const std::string coarse = Upload(MakeBox(Vec3(5, 5, 5)), "coarse", 0.5);
  const auto validate = [&](const Vec3& coarse_at) {
    const std::string scene = NewScene();
    Place(scene, block, RigidTransform::Identity(), "block");
    Place(scene, wall, RigidTransform::Translation(Vec3(9.6, 0, 0)), "wall");  // 0.4 mm overlap
    Place(scene, coarse, RigidTransform::Translation(coarse_at), "coarse");
    v1::ValidateSequenceRequest req;
    req.set_scene_id(scene);
    AddInstallStep(&req, "block");
    return OnlyStep(req);
  };
  const v1::StepResult far = validate(Vec3(1000, 0, 0));
  EXPECT_FALSE(far.ok());
  ASSERT_EQ(far.blockers_size(), 1);
  EXPECT_EQ(far.blockers(0).path(), "wall");
  const v1::StepResult near = validate(Vec3(-10.5, 0, 30));  // 0.5 mm beside the path
  EXPECT_TRUE(near.ok());
  EXPECT_GE(near.first_contact_t(), 0.0);
}

// Two movers blocked at the same t both list their blockers, each with its own witness point;
// and a block is a contact, so first_contact_t is never later than blocked_t. Before, the second
// mover's blockers were dropped, every blocker carried the deepest one's point, and a part
// starting around an obstacle (no surface within τ) was blocked at 0 with no first contact.
TEST_F(ServerTest, BlockersOfEveryMoverBlockedFirstEachWithItsPoint) {
  const std::string peg = Upload(MakeBox(Vec3(1, 1, 20)), "peg");
  const std::string bar = Upload(MakeBox(Vec3(3, 0.5, 0.5)), "bar");
  const std::string bead = Upload(MakeBox(Vec3(0.1, 0.1, 0.1)), "bead");
  v1::ValidateSequenceRequest req;
  req.mutable_tolerances()->set_contact_tolerance_mm(0.01);
  AddInstallStep(&req, "g");  // from 60 mm above
  // Each peg starts crossed by a bar: both are blocked at t = 0.
  req.set_scene_id(NewScene());
  Place(req.scene_id(), peg, RigidTransform::Identity(), "g/p1");
  Place(req.scene_id(), peg, RigidTransform::Translation(Vec3(100, 0, 0)), "g/p2");
  Place(req.scene_id(), bar, RigidTransform::Translation(Vec3(0, 0, 60)), "bar1");
  Place(req.scene_id(), bar, RigidTransform::Translation(Vec3(100, 0, 60)), "bar2");
  Place(req.scene_id(), bar, RigidTransform::Translation(Vec3(0, 0, 75)), "bar3");  // p1 again
  const v1::StepResult r = OnlyStep(req);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.blocked_t(), 0.0);
  EXPECT_EQ(r.first_contact_t(), 0.0);
  std::map<std::string, std::pair<std::string, Vec3>> by_blocker;  // path -> mover, point
  for (const v1::Blocker& b : r.blockers()) {
    by_blocker[b.path()] = {b.moving_path(), FromProto(b.point_mm())};
  }
  ASSERT_EQ(by_blocker.size(), 3u);
  EXPECT_EQ(by_blocker["bar1"].first, "g/p1");
  EXPECT_EQ(by_blocker["bar2"].first, "g/p2");
  EXPECT_EQ(by_blocker["bar3"].first, "g/p1");
  // Each point where its own bar crosses its peg (bar: 6 x 1 x 1 mm).
  EXPECT_LT((by_blocker["bar1"].second - Vec3(0, 0, 60)).cwiseAbs().maxCoeff(), 3.0);
  EXPECT_LT((by_blocker["bar2"].second - Vec3(100, 0, 60)).cwiseAbs().maxCoeff(), 3.0);
  EXPECT_LT((by_blocker["bar3"].second - Vec3(0, 0, 75)).cwiseAbs().maxCoeff(), 3.0);
  // A bead wholly inside the peg's start: CONTAINED at t = 0, and that is its first contact.
  req.set_scene_id(NewScene());
  Place(req.scene_id(), peg, RigidTransform::Identity(), "g/p1");
  Place(req.scene_id(), bead, RigidTransform::Translation(Vec3(0, 0, 60)), "bead");
  const v1::StepResult c = OnlyStep(req);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.blocked_t(), 0.0);
  ASSERT_EQ(c.blockers_size(), 1);
  EXPECT_EQ(c.blockers(0).clash_class(), v1::CONTAINED);
  // The witness is a point of the bead, the part inside the other.
  EXPECT_LT((FromProto(c.blockers(0).point_mm()) - Vec3(0, 0, 60)).cwiseAbs().maxCoeff(), 0.2);
  EXPECT_EQ(c.first_contact_t(), 0.0);
}

// Escape directions leave out the standing instances an allowed-interference rule pairs with
// the mover, as its sweep does: a peg allowed to overlap its tube is free in every direction.
TEST_F(ServerTest, EscapeDirectionsLeaveOutAllowedPairs) {
  const std::string tube = Upload(testing::MakeTube(5, 20, 10, 32), "tube");
  const std::string wide = Upload(MakeBox(Vec3(4, 4, 20)), "wide peg");  // corners cut the tube
  const std::string scene = NewScene();
  Place(scene, tube, RigidTransform::Identity(), "tube");
  Place(scene, wide, RigidTransform::Identity(), "wide");
  v1::ValidateSequenceRequest req;
  req.set_scene_id(scene);
  req.mutable_tolerances()->set_contact_tolerance_mm(0.01);
  req.set_all_free_directions(true);
  v1::SequenceStep* step = AddInstallStep(&req, "wide");
  // Without a rule the peg is blocked, and so are its escape directions sideways.
  const v1::StepResult blocked = OnlyStep(req);
  EXPECT_FALSE(blocked.ok());
  int blocked_directions = 0;
  for (const v1::FreeDirection& d : blocked.free_directions()) {
    blocked_directions += !d.free();
  }
  EXPECT_GT(blocked_directions, 0);
  v1::AllowedInterference* rule = step->add_allowed();
  rule->set_name("press fit");
  rule->mutable_a()->add_path_prefixes("wide");
  rule->mutable_b()->add_path_prefixes("tube");
  const v1::StepResult r = OnlyStep(req);
  EXPECT_TRUE(r.ok());
  ASSERT_GT(r.free_directions_size(), 0);
  for (const v1::FreeDirection& d : r.free_directions()) EXPECT_TRUE(d.free()) << d.name();
}

TEST(WorkLimiterTest, QueuesUpToItsBoundThenRefuses) {
  WorkLimiter limiter("test", 1, 1);
  auto a = limiter.Acquire({});
  ASSERT_THAT(a.status(), IsOk());
  std::atomic<bool> got_b{false};
  std::thread waiter([&] {
    auto b = limiter.Acquire({});
    got_b = b.ok();
  });
  while (limiter.waiting() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // One running, one waiting: the next caller is refused at once.
  EXPECT_THAT(limiter.Acquire({}).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "queue full"));
  *a = WorkLimiter::Permit();  // releases the slot: the waiter proceeds
  waiter.join();
  EXPECT_TRUE(got_b);
  EXPECT_EQ(limiter.running(), 0);
}

// Slots go to waiters first come, first served: a freed slot goes to the first waiter, not to a
// caller arriving just then (before, a newcomer took it while the waiter was still waking, so a
// steady stream of newcomers could keep a waiter out until its deadline), and waiters are
// served in the order they came.
TEST(WorkLimiterTest, WaitersAreServedFirstComeFirstServed) {
  WorkLimiter limiter("test", 1, 4);
  auto held = limiter.Acquire({});
  ASSERT_THAT(held.status(), IsOk());
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> callers;
  for (int i = 0; i < 3; ++i) {
    callers.emplace_back([&, i] {
      auto permit = limiter.Acquire({});
      ASSERT_THAT(permit.status(), IsOk());
      std::lock_guard lock(mu);
      order.push_back(i);
      // (The permit is released as the thread ends: the next waiter's turn.)
    });
    // Each waits before the next comes.
    while (limiter.waiting() < i + 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // The slot frees while a newcomer arrives: the newcomer queues behind the three.
  *held = WorkLimiter::Permit();
  auto newcomer = limiter.Acquire({});
  ASSERT_THAT(newcomer.status(), IsOk());
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(limiter.waiting(), 0);
  EXPECT_EQ(limiter.running(), 1);
}

// A waiter whose call is cancelled while it waits leaves with its stop check's status: it gives
// up its place in the queue and takes no slot.
TEST(WorkLimiterTest, AWaiterWhoseStopFiresLeavesWithTheStopStatus) {
  WorkLimiter limiter("test", 1, 1);
  auto a = limiter.Acquire({});
  ASSERT_THAT(a.status(), IsOk());
  std::atomic<bool> cancelled{false};
  absl::Status waited;
  std::thread waiter([&] {
    waited = limiter
                 .Acquire([&] {
                   return cancelled ? absl::CancelledError("caller went away") : absl::OkStatus();
                 })
                 .status();
  });
  while (limiter.waiting() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  cancelled = true;
  waiter.join();
  EXPECT_EQ(waited, absl::CancelledError("caller went away"));
  EXPECT_EQ(limiter.waiting(), 0);
  EXPECT_EQ(limiter.running(), 1);  // only the first caller's slot
  *a = WorkLimiter::Permit();
  EXPECT_EQ(limiter.running(), 0);
}

// A client that cancels a long interference check while it runs: the server notices inside the
// work and answers CANCELLED (its own record of the call says so), rather than finishing the
// query for nobody. ~4000 crossing pairs take far longer than the cancellation needs.
TEST_F(ServerTest, ACancelledQueryStopsInsideItsWork) {
  const std::string scene = CrowdedCylinders(31);
  auto stub = v1::QueryService::NewStub(server_->grpc_server()->InProcessChannel({}));
  v1::InterferenceRequest req;
  req.set_scene_id(scene);
  grpc::ClientContext ctx;
  std::thread canceller([&] {
    // Cancel once the server runs the query (helpers may hold a second slot).
    EXPECT_TRUE(WaitForGauge(server_->metrics_port(), "clashd_query_running"));
    ctx.TryCancel();
  });
  v1::InterferenceResponse resp;
  const grpc::Status status = stub->CheckInterference(&ctx, req, &resp);
  canceller.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  // The server's record of the call, once it has returned.
  const std::string body = MetricsOnceRecorded(server_->metrics_port(), "CheckInterference");
  EXPECT_THAT(body,
              ::testing::HasSubstr(
                  "clashd_requests_total{method=\"CheckInterference\",code=\"CANCELLED\"} 1"));
  EXPECT_THAT(body, ::testing::Not(::testing::HasSubstr(
                        "clashd_requests_total{method=\"CheckInterference\",code=\"OK\"}")));
}

// An upload cancelled by the client while the server waits for it ends CANCELLED in the
// server's own record, not as an invalid (empty) upload: the stop check asks gRPC about
// cancellation only from 5 ms into a call, so the end of the stream is asked directly.
TEST_F(ServerTest, AnUploadCancelledBeforeItsHeaderIsCancelled) {
  auto stub = v1::PartService::NewStub(server_->grpc_server()->InProcessChannel({}));
  grpc::ClientContext ctx;
  v1::ImportCadResponse resp;
  auto upload = stub->ImportCad(&ctx, &resp);
  // Wait until the server holds an upload place: it then waits for the header.
  ASSERT_TRUE(WaitForGauge(server_->metrics_port(), "clashd_uploads_in_progress"));
  ctx.TryCancel();
  EXPECT_EQ(upload->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const std::string body = MetricsOnceRecorded(server_->metrics_port(), "ImportCad");
  EXPECT_THAT(body, ::testing::HasSubstr(
                        "clashd_requests_total{method=\"ImportCad\",code=\"CANCELLED\"} 1"));
  EXPECT_THAT(body, ::testing::Not(::testing::HasSubstr(
                        "clashd_requests_total{method=\"ImportCad\",code=\"INVALID_ARGUMENT\"}")));
}

// A client that opens an upload and then sends nothing holds its upload place only until the
// server's import time limit: the server then cancels the call, and the place is free for the
// next import.
TEST_F(ServerTest, AStalledUploadEndsAtTheServersDeadline) {
  ServerConfig config;
  config.max_import_seconds = 1;
  config.import_slots = 1;
  config.import_queue = 0;
  Restart(config);
  auto stub = v1::PartService::NewStub(server_->grpc_server()->InProcessChannel({}));
  grpc::ClientContext ctx;  // a deadline far beyond the server's limit, as a safety net only
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::ImportCadResponse resp;
  const auto start = std::chrono::steady_clock::now();
  auto upload = stub->ImportCad(&ctx, &resp);
  ASSERT_TRUE(WaitForGauge(server_->metrics_port(), "clashd_uploads_in_progress"));
  // Sends nothing, never closes: only the server's deadline can end the call.
  EXPECT_NE(upload->Finish().error_code(), grpc::StatusCode::OK);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.9);
  const std::string body = MetricsOnceRecorded(server_->metrics_port(), "ImportCad");
  EXPECT_THAT(body,
              ::testing::HasSubstr(
                  "clashd_requests_total{method=\"ImportCad\",code=\"DEADLINE_EXCEEDED\"} 1"));
  EXPECT_THAT(body, ::testing::HasSubstr("clashd_uploads_in_progress 0"));
  // The one place is free again: an import is admitted (and fails only on its content).
  grpc::ClientContext next_ctx;
  const grpc::Status next_status = UploadWhole(*stub, &next_ctx, "x.step", "not a CAD file");
  // Admitted: it fails on its content (or, on a slow machine, the 1 s limit), not the queue.
  EXPECT_NE(next_status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << next_status.error_message();
  EXPECT_NE(next_status.error_code(), grpc::StatusCode::OK);
}

// The header's sha256 is 64 hexadecimal digits in either case; anything else is refused before
// the file is read.
TEST_F(ServerTest, TheHeaderSha256IsCheckedBeforeTheUpload) {
  auto stub = v1::PartService::NewStub(server_->grpc_server()->InProcessChannel({}));
  grpc::ClientContext ctx;
  v1::ImportCadResponse resp;
  auto upload = stub->ImportCad(&ctx, &resp);
  v1::ImportCadRequest header;
  header.mutable_header()->set_file_name("x.step");
  header.mutable_header()->set_sha256("not-a-digest");
  upload->Write(header);  // the server may answer before any chunk
  upload->WritesDone();
  const grpc::Status status = upload->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("64 hexadecimal digits"));
}

// A check stopped part-way (deadline, cancellation) keeps the pairs it finished: the same check
// asked again finds them in the pair cache. The stop fires after a fixed number of checks, so
// how far the first run gets does not depend on timing (on one thread: one check per 16
// candidates while a block of 1024 is gathered, then one per pair).
TEST_F(ServerTest, ACheckStoppedPartWayKeepsItsFinishedPairs) {
  // 40 cylinders (~800 crossing pairs): the second check runs them all, which under the
  // sanitizers' Debug build took longer than the test's 300 s with 90.
  const std::string scene_id = CrowdedCylinders(37, 40);
  auto opened = StopAndOpen(scene_id);
  ASSERT_THAT(opened.status(), IsOk());
  const Scene& scene = *opened->scene;
  v1::InterferenceRequest& req = opened->check;
  int checks = 0;
  const StopCheck stop = [&]() -> absl::Status {
    return ++checks > 64 + 200 ? absl::CancelledError("stop") : absl::OkStatus();
  };
  EXPECT_THAT(RunInterference(scene, req, stop).status(),
              StatusIs(absl::StatusCode::kCancelled, "stop"));
  const auto again = RunInterference(scene, req, nullptr);
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_GE(again->summary().cached_pairs(), 150u);
  EXPECT_LT(again->summary().cached_pairs(), again->summary().candidate_pairs());
}

// Listing the candidate pairs of a large scene asks the stop check (every 1024 instances), and
// a query without one (nullptr, as in process) runs.
TEST_F(ServerTest, ListingCandidatePairsAsksTheStopCheck) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene_id = NewScene();
  // 5 mm apart: no pair
  ASSERT_THAT(client_
                  ->AddInstances(PlaceMany(scene_id, box, 2100, "b",
                                           [](int i) {
                                             return RigidTransform::Translation(
                                                 Vec3(5.0 * (i % 50), 5.0 * (i / 50), 0));
                                           }))
                  .status(),
              IsOk());
  auto opened = StopAndOpen(scene_id);
  ASSERT_THAT(opened.status(), IsOk());
  const Scene& scene = *opened->scene;
  v1::InterferenceRequest& req = opened->check;
  int checks = 0;
  const StopCheck stop = [&]() -> absl::Status {
    ++checks;
    return absl::CancelledError("stop");
  };
  EXPECT_THAT(RunInterference(scene, req, stop).status(),
              StatusIs(absl::StatusCode::kCancelled, "stop"));
  EXPECT_EQ(checks, 1);
  const auto all = RunInterference(scene, req, nullptr);
  ASSERT_THAT(all.status(), IsOk());
  EXPECT_EQ(all->summary().candidate_pairs(), 0u);
}

// Interference holds its candidate pairs and clashes in memory, so both are bounded
// (QueryLimits): past either, RESOURCE_EXHAUSTED naming it, with or without pose overrides; at
// the limit, the same answer as without one. A row of 30 boxes 10 mm wide, 3 mm apart: each
// crosses the three nearest on each side, 84 pairs and 84 HARD clashes.
TEST_F(ServerTest, InterferenceBoundsItsCandidatePairsAndClashes) {
  const std::string box = Upload(MakeBox(Vec3(5, 5, 5)), "box");
  const std::string scene_id = NewScene();
  ASSERT_THAT(client_->AddInstances(PlaceMany(scene_id, box, 30, "b", AlongX3)).status(), IsOk());
  auto opened = StopAndOpen(scene_id);
  ASSERT_THAT(opened.status(), IsOk());
  const Scene& scene = *opened->scene;
  v1::InterferenceRequest& req = opened->check;
  const auto unbounded = RunInterference(scene, req, nullptr);
  ASSERT_THAT(unbounded.status(), IsOk());
  ASSERT_EQ(unbounded->summary().candidate_pairs(), 84u);
  ASSERT_EQ(unbounded->summary().hard(), 84u);
  const auto run = [&](std::size_t pairs, std::size_t clashes) {
    QueryLimits limits;
    limits.max_candidate_pairs = pairs;
    limits.max_clashes = clashes;
    return RunInterference(scene, req, nullptr, limits);
  };
  EXPECT_THAT(run(83, 84).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "more than 83 candidate pairs"));
  EXPECT_THAT(run(84, 83).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "more than 83 clashes"));
  const auto at_limit = run(84, 84);
  ASSERT_THAT(at_limit.status(), IsOk());
  ASSERT_EQ(at_limit->clashes_size(), 84);  // (the summary differs: the pairs are now cached)
  for (int k = 0; k < 84; ++k) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(at_limit->clashes(k),
                                                                   unbounded->clashes(k)));
  }
  // The first box dragged over the 11th (x = 30): 7 pairs of it instead of 3.
  v1::PoseUpdate* drag = req.add_pose_overrides();
  drag->set_instance_id(scene.by_path.at("b0"));
  *drag->mutable_pose() = ToPose(RigidTransform::Translation(Vec3(30, 0, 0)));
  const auto dragged = RunInterference(scene, req, nullptr);
  ASSERT_THAT(dragged.status(), IsOk());
  ASSERT_EQ(dragged->summary().candidate_pairs(), 88u);
  EXPECT_THAT(run(87, 88).status(), StatusIs(absl::StatusCode::kResourceExhausted, "87"));
  EXPECT_THAT(run(88, 88).status(), IsOk());
}

// The pair caches of all scenes share --pair-cache-entries: a scene filling the budget empties
// its own cache, not another scene's, and the gauge never passes the budget; with none, nothing
// is cached. Rows of 30 boxes 3 mm apart: 84 crossing pairs each.
TEST_F(ServerTest, PairCachesShareOneBudget) {
  ServerConfig config;
  config.pair_cache_entries = 100;
  Restart(config);
  const std::string box = Upload(MakeBox(Vec3(5, 5, 5)), "box");
  const auto row = [&] {
    const std::string scene = NewScene();
    EXPECT_THAT(client_->AddInstances(PlaceMany(scene, box, 30, "b", AlongX3)).status(), IsOk());
    return scene;
  };
  const auto cached = [&](const std::string& scene) -> uint64_t {
    v1::InterferenceRequest req;
    req.set_scene_id(scene);
    auto r = client_->CheckInterference(req);
    EXPECT_THAT(r.status(), IsOk());
    EXPECT_EQ(r.ok() ? r->summary().hard() : 0u, 84u);
    return r.ok() ? r->summary().cached_pairs() : 0;
  };
  const auto gauge = [&] {
    const std::string body = FetchMetrics(server_->metrics_port());
    const std::string line = "\nclashd_pair_cache_entries ";
    const std::size_t at = body.find(line);
    EXPECT_NE(at, std::string::npos);
    return at == std::string::npos ? -1 : std::stoi(body.substr(at + line.size()));
  };
  const std::string a = row();
  EXPECT_EQ(cached(a), 0u);
  EXPECT_EQ(gauge(), 84);
  EXPECT_EQ(cached(a), 84u);
  const std::string b = row();
  EXPECT_EQ(cached(b), 0u);
  EXPECT_LE(gauge(), 100);
  EXPECT_EQ(cached(a), 84u);  // b emptied its own cache, not a's (in use)
  EXPECT_LT(cached(b), 84u);

  // With scenes idle at once (the idle time 0), b's filling empties a's cache instead of its
  // own: b keeps every pair.
  config.pair_cache_idle_seconds = 0;
  Restart(config);
  EXPECT_EQ(cached(a), 0u);
  EXPECT_EQ(cached(a), 84u);
  EXPECT_EQ(cached(b), 0u);
  EXPECT_EQ(cached(b), 84u);
  EXPECT_EQ(cached(a), 0u);
  EXPECT_LE(gauge(), 100);

  config.pair_cache_entries = 0;
  Restart(config);
  EXPECT_EQ(cached(a), 0u);
  EXPECT_EQ(cached(a), 0u);
  EXPECT_EQ(gauge(), 0);
}

// An edit that does not complete (an exception part-way, say out of memory) is undone: memory
// is read back from the scene's file; when that read fails too, the scene is served no more
// (rather than answer from a state never stored) and calls that held it cannot write it.
TEST_F(ServerTest, AnEditThatDoesNotCompleteIsUndoneFromTheFile) {
  const std::string scene_id = OneBoxSceneThenStop();
  auto stores = OpenStores();
  ASSERT_THAT(stores.status(), IsOk());
  auto scene = stores->scenes->Get(scene_id);
  ASSERT_THAT(scene.status(), IsOk());
  {
    std::unique_lock lock((*scene)->mu);
    const uint64_t version = (*scene)->version;
    ASSERT_EQ((*scene)->instances.size(), 1u);
    (*scene)->Remove((*scene)->instances.begin()->first);  // half an edit, never written
    (*scene)->Touch();
    stores->scenes->Undo(**scene, "test");
    EXPECT_EQ((*scene)->version, version);
    ASSERT_EQ((*scene)->instances.size(), 1u);
    EXPECT_EQ((*scene)->instances.begin()->second.path, "a");
    EXPECT_EQ((*scene)->by_path.count("a"), 1u);
    EXPECT_FALSE((*scene)->deleted);
  }
  // The file unreadable now: the scene goes out of service.
  {
    std::ofstream(dir_ + "/data/tenants/local/scenes/" + scene_id + ".pb", std::ios::trunc)
        << "garbled";
  }
  {
    std::unique_lock lock((*scene)->mu);
    (*scene)->Touch();
    stores->scenes->Undo(**scene, "test");
    EXPECT_TRUE((*scene)->deleted);
  }
  EXPECT_THAT(stores->scenes->Get(scene_id).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "test and the scene could not"));
  EXPECT_EQ(stores->scenes->unserved(), 1u);
}

// Listings end a page at about a quarter of the message limit as well as at page_size, so that
// long paths, names and groups cannot make a page gRPC cannot send; an instance listing's token
// holds for its scene only. With a 64 KiB limit: instances with 1000-byte paths, scenes with
// 40 groups of 200 bytes each.
TEST_F(ServerTest, ListingsEndPagesBeforeTheMessageLimit) {
  ServerConfig config;
  config.max_message_bytes = 64 << 10;
  Restart(config);
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  ASSERT_THAT(
      client_->AddInstances(PlaceMany(scene, box, 40, std::string(1000, 'p'), AlongX3)).status(),
      IsOk());
  auto scenes = v1::SceneService::NewStub(server_->grpc_server()->InProcessChannel({}));
  v1::ListInstancesRequest list;
  list.set_scene_id(scene);
  list.set_page_size(1000);
  grpc::ClientContext ctx;
  v1::ListInstancesResponse page;
  ASSERT_TRUE(scenes->ListInstances(&ctx, list, &page).ok());
  EXPECT_GT(page.instances_size(), 10);
  EXPECT_LT(page.instances_size(), 20);  // 16 KiB of ~1 KiB instances
  ASSERT_FALSE(page.next_page_token().empty());
  const auto all = client_->ListInstances(scene);  // follows the pages
  ASSERT_THAT(all.status(), IsOk());
  std::set<uint64_t> ids;
  for (const v1::Instance& i : *all) ids.insert(i.instance_id());
  EXPECT_EQ(all->size(), 40u);
  EXPECT_EQ(ids.size(), 40u);
  // The token given for another scene is refused, not read as an instance id there.
  const std::string other = NewScene();
  list.set_scene_id(other);
  list.set_page_token(page.next_page_token());
  grpc::ClientContext ctx2;
  v1::ListInstancesResponse wrong;
  EXPECT_EQ(scenes->ListInstances(&ctx2, list, &wrong).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  list.set_page_token("17");  // an older server's form: start again
  grpc::ClientContext ctx4;
  EXPECT_EQ(scenes->ListInstances(&ctx4, list, &wrong).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  for (int k = 0; k < 6; ++k) {
    const std::string s = NewScene();
    v1::AddInstancesRequest add = PlaceMany(s, box, 1, "b", AlongX3);
    for (int g = 0; g < 40; ++g)
      add.mutable_parts(0)->add_groups(absl::StrCat(g, std::string(200, 'g')));
    ASSERT_THAT(client_->AddInstances(add).status(), IsOk());
  }
  v1::ListScenesRequest list_scenes;
  list_scenes.set_page_size(1000);
  grpc::ClientContext ctx3;
  v1::ListScenesResponse scene_page;
  ASSERT_TRUE(scenes->ListScenes(&ctx3, list_scenes, &scene_page).ok());
  EXPECT_LT(scene_page.scenes_size(), 8);
  EXPECT_FALSE(scene_page.next_page_token().empty());
  const auto every = client_->ListScenes();
  ASSERT_THAT(every.status(), IsOk());
  EXPECT_EQ(every->size(), 8u);
  // A token that is no scene or part id is refused: an empty page read as the end of the list.
  list_scenes.set_page_token("zzz");
  grpc::ClientContext ctx5;
  EXPECT_EQ(scenes->ListScenes(&ctx5, list_scenes, &scene_page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  auto parts = v1::PartService::NewStub(server_->grpc_server()->InProcessChannel({}));
  v1::ListPartsRequest list_parts;
  list_parts.set_page_token("garbage!");
  grpc::ClientContext ctx6;
  v1::ListPartsResponse part_page;
  EXPECT_EQ(parts->ListParts(&ctx6, list_parts, &part_page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  list_parts.set_page_token(box);  // a part id: the parts after it
  grpc::ClientContext ctx7;
  EXPECT_TRUE(parts->ListParts(&ctx7, list_parts, &part_page).ok());
}

// A scene has at most 10 000 groups (GetScene lists each); an instance added without a path
// whose generated path "<name>:<id>" a caller's path holds gets a suffix instead of a refusal
// naming a path the caller never gave; AddInstances to an unknown scene is NOT_FOUND before any
// part is looked at.
TEST_F(ServerTest, GroupsAreBoundedAndGeneratedPathsAvoidCallersPaths) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  v1::AddInstancesRequest add = PlaceMany(scene, box, 1, "b", AlongX3);
  for (int g = 0; g <= 10000; ++g) add.mutable_parts(0)->add_groups(absl::StrCat("g", g));
  EXPECT_THAT(client_->AddInstances(add).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "at most 10000"));
  add.mutable_parts(0)->mutable_groups()->RemoveLast();
  auto added = client_->AddInstances(add);
  ASSERT_THAT(added.status(), IsOk());
  v1::SetGroupRequest group;
  group.set_scene_id(scene);
  group.set_group("one more");
  group.add_instance_ids(added->instances(0).instance_id());
  EXPECT_THAT(client_->SetGroup(group), StatusIs(absl::StatusCode::kResourceExhausted, "groups"));
  group.set_group("g7");  // an existing one
  EXPECT_THAT(client_->SetGroup(group), IsOk());

  const uint64_t next = added->instances(0).instance_id() + 1;
  Place(scene, box, RigidTransform::Identity(), absl::StrCat("box:", next + 1));  // id `next`
  v1::AddInstancesRequest unnamed;
  unnamed.set_scene_id(scene);
  unnamed.add_parts()->set_part_id(box);
  auto generated = client_->AddInstances(unnamed);
  ASSERT_THAT(generated.status(), IsOk());
  EXPECT_EQ(generated->instances(0).instance_id(), next + 1);
  EXPECT_EQ(generated->instances(0).path(), absl::StrCat("box:", next + 1, "~2"));
  // A caller's path later in the same request is kept clear of too.
  v1::PartPlacement* later = unnamed.add_parts();
  later->set_part_id(box);
  later->set_path(absl::StrCat("box:", next + 2));
  generated = client_->AddInstances(unnamed);
  ASSERT_THAT(generated.status(), IsOk());
  EXPECT_EQ(generated->instances(0).path(), absl::StrCat("box:", next + 2, "~2"));
  EXPECT_EQ(generated->instances(1).path(), absl::StrCat("box:", next + 2));
  unnamed.mutable_parts()->RemoveLast();

  unnamed.set_scene_id("s0000000000000000000000000000dead");
  unnamed.mutable_parts(0)->set_part_id("p" + std::string(64, '0'));
  EXPECT_THAT(client_->AddInstances(unnamed).status(),
              StatusIs(absl::StatusCode::kNotFound, "scene"));
}

TEST_F(ServerTest, MetricsAreServedInPrometheusFormat) {
  NewScene();
  const std::string body = FetchMetrics(server_->metrics_port());
  EXPECT_THAT(body, ::testing::HasSubstr("200 OK"));
  EXPECT_THAT(body,
              ::testing::HasSubstr("clashd_requests_total{method=\"CreateScene\",code=\"OK\"} 1"));
  EXPECT_THAT(
      body, ::testing::HasSubstr("clashd_request_duration_seconds_bucket{method=\"CreateScene\""));
  EXPECT_THAT(body, ::testing::HasSubstr("clashd_import_waiting 0"));
  EXPECT_THAT(body, ::testing::HasSubstr("\nclashd_cpu_latency_limit_us -1\n"));
}

// A mesh upload takes a query slot for its welding and hierarchy: with the only slot held by a
// running check and no queue, it is RESOURCE_EXHAUSTED at once; once the slot is free it works.
TEST_F(ServerTest, MeshUploadsTakeAQuerySlot) {
  ServerConfig config;
  config.query_slots = 1;
  config.query_queue = 0;
  config.query_helpers = 0;
  Restart(config);
  const std::string scene = CrowdedCylinders(35);
  auto parts = v1::PartService::NewStub(server_->grpc_server()->InProcessChannel({}));
  BackgroundCheck check(server_.get(), scene);
  ASSERT_TRUE(WaitForGauge(server_->metrics_port(), "clashd_query_running"));
  const RawMesh box = MakeBox(Vec3(1, 2, 3));
  const v1::UploadMeshRequest upload = MeshUpload(box, "box");
  {
    grpc::ClientContext ctx;
    v1::Part part;
    const grpc::Status status = parts->UploadMesh(&ctx, upload, &part);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  }
  EXPECT_FALSE(check.done());  // refused for the slot, not after the check
  EXPECT_EQ(check.Stop().error_code(), grpc::StatusCode::CANCELLED);
  MetricsOnceRecorded(server_->metrics_port(), "CheckInterference");
  grpc::ClientContext ctx;
  v1::Part part;
  EXPECT_TRUE(parts->UploadMesh(&ctx, upload, &part).ok());
  EXPECT_EQ(part.triangle_count(), box.t.size());
}

// A stored part that is not in memory (after a restart, in no scene) is read and its hierarchy
// built under a query slot, as an upload is: with the only slot busy, GetPart, AddInstances and
// ListParts that would load it are refused at once instead of building beside the running check;
// parts in memory are answered regardless, and the same calls succeed once the slot is free.
TEST_F(ServerTest, LoadingAStoredPartTakesAQuerySlot) {
  const RawMesh box = MakeBox(Vec3(1, 2, 3));
  const std::string box_id = Upload(box, "box");
  ServerConfig config;
  config.query_slots = 1;
  config.query_queue = 0;
  config.query_helpers = 0;
  Restart(config);
  const std::string scene = CrowdedCylinders(35);
  const std::string plate_id = Upload(MakeBox(Vec3(9, 9, 1)), "plate");
  auto parts = v1::PartService::NewStub(server_->grpc_server()->InProcessChannel({}));
  auto scenes = v1::SceneService::NewStub(server_->grpc_server()->InProcessChannel({}));
  const auto get_part = [&](const std::string& id) {
    grpc::ClientContext ctx;
    v1::GetPartRequest req;
    req.set_part_id(id);
    v1::Part part;
    const grpc::Status status = parts->GetPart(&ctx, req, &part);
    return std::make_pair(status, part);
  };
  const auto list_parts = [&] {
    grpc::ClientContext ctx;
    v1::ListPartsRequest req;
    v1::ListPartsResponse resp;
    const grpc::Status status = parts->ListParts(&ctx, req, &resp);
    return std::make_pair(status, resp);
  };
  const auto add_box = [&] {
    grpc::ClientContext ctx;
    v1::AddInstancesRequest req;
    req.set_scene_id(scene);
    v1::PartPlacement* p = req.add_parts();
    p->set_part_id(box_id);
    *p->mutable_pose() = ToPose(RigidTransform::Identity());
    v1::AddInstancesResponse resp;
    return scenes->AddInstances(&ctx, req, &resp);
  };
  {
    BackgroundCheck check(server_.get(), scene);
    ASSERT_TRUE(WaitForGauge(server_->metrics_port(), "clashd_query_running"));
    const auto [plate_status, plate] = get_part(plate_id);
    EXPECT_TRUE(plate_status.ok()) << plate_status.error_message();
    EXPECT_EQ(plate.triangle_count(), 12);
    EXPECT_EQ(get_part(box_id).first.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(add_box().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(list_parts().first.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_FALSE(check.done());  // refused for the slot, not after the check
    EXPECT_EQ(check.Stop().error_code(), grpc::StatusCode::CANCELLED);
  }
  MetricsOnceRecorded(server_->metrics_port(), "CheckInterference");
  const auto [box_status, box_part] = get_part(box_id);
  ASSERT_TRUE(box_status.ok()) << box_status.error_message();
  EXPECT_EQ(box_part.triangle_count(), box.t.size());
  const auto [list_status, list] = list_parts();
  ASSERT_TRUE(list_status.ok()) << list_status.error_message();
  EXPECT_EQ(list.parts_size(), 3);  // the box, the cylinder and the plate
  EXPECT_TRUE(add_box().ok());
}

// An edit or a deletion waits for a running query only until its call's deadline, and one that
// gave up has changed nothing: before, it went on waiting and applied itself after the client
// had been told DEADLINE_EXCEEDED (which the client's own deadline gives either way: what tells
// the two apart is the scene after the query).
TEST_F(ServerTest, WritesWaitForARunningQueryOnlyUntilTheirDeadline) {
  // 240 crowded cylinders: ~28 700 crossing pairs, a check of about 2 s here (~1 s for 160),
  // far longer than the writes below wait.
  std::mt19937 rng = testing::SeededRng(33);
  const std::string cyl = Upload(testing::MakeCylinder(3, 10, 48), "cyl");
  const std::string scene = NewScene();
  for (int i = 0; i < 240; ++i) {
    Place(scene, cyl, testing::RandomPose(rng, 1.5), "c" + std::to_string(i));
  }
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const uint64_t id = Place(scene, box, RigidTransform::Identity(), "box");
  auto scenes = v1::SceneService::NewStub(server_->grpc_server()->InProcessChannel({}));
  const auto move_box = [&](const Vec3& t, int deadline_ms) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    v1::SetPosesRequest moves;
    moves.set_scene_id(scene);
    v1::PoseUpdate* u = moves.add_poses();
    u->set_instance_id(id);
    *u->mutable_pose() = ToPose(RigidTransform{geom::Mat3::Identity(), t});
    v1::SceneUpdateResponse resp;
    return scenes->SetPoses(&ctx, moves, &resp).error_code();
  };
  BackgroundCheck check(server_.get(), scene);
  ASSERT_TRUE(WaitForGauge(server_->metrics_port(), "clashd_query_running"));
  // The gauge rises when the check has its slot, a moment before it takes the scene's lock:
  // writes that leave the box where it is probe until one has to wait.
  bool held = false;
  for (int i = 0; i < 100 && !held && !check.done(); ++i) {
    held = move_box(Vec3::Zero(), 50) == grpc::StatusCode::DEADLINE_EXCEEDED;
  }
  ASSERT_TRUE(held) << "the check never held the scene's lock";
  EXPECT_EQ(move_box(Vec3(50, 0, 0), 150), grpc::StatusCode::DEADLINE_EXCEEDED);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(150));
    v1::DeleteSceneRequest del;
    del.set_scene_id(scene);
    v1::DeleteSceneResponse resp;
    EXPECT_EQ(scenes->DeleteScene(&ctx, del, &resp).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // Still running: the writes above gave up on its lock, not on a finished query.
  EXPECT_FALSE(check.done());
  EXPECT_EQ(check.Stop().error_code(), grpc::StatusCode::CANCELLED);
  // Once the query is gone the writes could have gone ahead: they must not have.
  MetricsOnceRecorded(server_->metrics_port(), "CheckInterference");
  auto instances = client_->ListInstances(scene);
  ASSERT_THAT(instances.status(), IsOk());
  bool seen = false;
  for (const v1::Instance& inst : *instances) {
    if (inst.instance_id() != id) continue;
    seen = true;
    EXPECT_EQ(FromPose(inst.pose()).t, Vec3::Zero());
  }
  EXPECT_TRUE(seen);
  // And now they go through.
  EXPECT_EQ(move_box(Vec3(50, 0, 0), 30'000), grpc::StatusCode::OK);
  EXPECT_THAT(client_->DeleteScene(scene), IsOk());
}

// An edit that fetched a scene before it was deleted cannot write it back: the scene would
// otherwise reappear after a restart.
TEST_F(ServerTest, ADeletedSceneIsNeverWrittenAgain) {
  const std::string scene_id = OneBoxSceneThenStop();
  {
    auto stores = OpenStores();
    ASSERT_THAT(stores.status(), IsOk());
    auto scene = stores->scenes->Get(scene_id);  // what an edit holds when the delete comes
    ASSERT_THAT(scene.status(), IsOk());
    ASSERT_THAT(stores->scenes->Delete(scene_id, absl::InfiniteFuture()), IsOk());
    EXPECT_THAT(stores->scenes->LockForWrite(**scene, absl::InfiniteFuture()).status(),
                StatusIs(absl::StatusCode::kNotFound, ""));
    std::unique_lock lock((*scene)->mu);
    (*scene)->name = "edited after the delete";
    (*scene)->Touch();
    EXPECT_THAT(stores->scenes->Commit(**scene), StatusIs(absl::StatusCode::kNotFound, ""));
    EXPECT_THAT(stores->scenes->Get(scene_id).status(), StatusIs(absl::StatusCode::kNotFound, ""));
    EXPECT_THAT(stores->scenes->Delete(scene_id, absl::InfiniteFuture()),
                StatusIs(absl::StatusCode::kNotFound, ""));
  }
  auto reopened = OpenStores();
  ASSERT_THAT(reopened.status(), IsOk());
  EXPECT_THAT(reopened->scenes->Get(scene_id).status(), StatusIs(absl::StatusCode::kNotFound, ""));
}

// Group names have 1 to 256 bytes wherever they are given; a bad one changes nothing.
TEST_F(ServerTest, GroupNamesOfAddedInstancesAreChecked) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  for (const std::string& group : {std::string(), std::string(257, 'g')}) {
    v1::AddInstancesRequest req;
    req.set_scene_id(scene);
    v1::PartPlacement* p = req.add_parts();
    p->set_part_id(box);
    p->set_path("a");
    *p->mutable_pose() = ToPose(RigidTransform::Identity());
    p->add_groups(group);
    EXPECT_THAT(client_->AddInstances(req).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, "group names"));
  }
  auto instances = client_->ListInstances(scene);
  ASSERT_THAT(instances.status(), IsOk());
  EXPECT_TRUE(instances->empty());
  // 256 bytes are fine.
  v1::AddInstancesRequest req;
  req.set_scene_id(scene);
  v1::PartPlacement* p = req.add_parts();
  p->set_part_id(box);
  *p->mutable_pose() = ToPose(RigidTransform::Identity());
  p->add_groups(std::string(256, 'g'));
  EXPECT_THAT(client_->AddInstances(req).status(), IsOk());
}

// Uploads running at once share the tenant's storage quota: each sets its bytes aside (all at
// once when its header announces them, else as its chunks come), so two uploads that each fit
// alone cannot together pass it. Before, each was checked against the space free when it
// started.
TEST_F(ServerTest, UploadsAtOnceShareTheStorageQuota) {
  ServerConfig config;
  config.tenant_max_storage_bytes = 1'000'000;
  config.import_slots = 2;
  Restart(config);
  auto stub = v1::PartService::NewStub(server_->grpc_server()->InProcessChannel({}));
  // The first upload announces 600 kB and stays open after its first 100 kB.
  grpc::ClientContext first_ctx;
  v1::ImportCadResponse first_resp;
  auto first = stub->ImportCad(&first_ctx, &first_resp);
  v1::ImportCadRequest header;
  header.mutable_header()->set_file_name("big.step");
  header.mutable_header()->set_size_bytes(600'000);
  ASSERT_TRUE(first->Write(header));
  v1::ImportCadRequest chunk;
  chunk.set_chunk(std::string(100'000, 'x'));
  ASSERT_TRUE(first->Write(chunk));
  // Once its chunk is on disk, the server has read its header and set the 600 kB aside.
  const auto first_chunk_written = [&] {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir_ + "/data/tenants", ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code size_ec;
      if (it->path().filename() == "big.step" && it->file_size(size_ec) == 100'000) return true;
    }
    return false;
  };
  for (int attempt = 0; attempt < 500 && !first_chunk_written(); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(first_chunk_written());
  const auto second_upload = [&](uint64_t announced, int chunks) {
    grpc::ClientContext ctx;
    v1::ImportCadResponse resp;
    auto second = stub->ImportCad(&ctx, &resp);
    v1::ImportCadRequest h;
    h.mutable_header()->set_file_name("second.step");
    h.mutable_header()->set_size_bytes(announced);
    second->Write(h);
    for (int i = 0; i < chunks; ++i) {
      if (!second->Write(chunk)) break;
    }
    second->WritesDone();
    return second->Finish();
  };
  // A second announcing as much is refused.
  const grpc::Status refused = second_upload(600'000, 0);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(),
              ::testing::HasSubstr("file of 600000 bytes is above the tenant's free storage"));
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("set aside for writes in progress"));
  // Unannounced, it is cut off when its chunks pass what the first leaves.
  const grpc::Status cut = second_upload(0, 5);
  EXPECT_EQ(cut.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << cut.error_message();
  EXPECT_THAT(cut.error_message(),
              ::testing::HasSubstr("upload is above the tenant's free storage"));
  // What fits beside the first is admitted (and fails on its size only).
  const grpc::Status fits = second_upload(300'000, 1);
  EXPECT_EQ(fits.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << fits.error_message();
  EXPECT_THAT(fits.error_message(), ::testing::HasSubstr("the header announced 300000"));
  // With the first gone, its room is free again.
  first_ctx.TryCancel();
  first->Finish();
  grpc::Status after;
  for (int attempt = 0; attempt < 200; ++attempt) {
    after = second_upload(600'000, 1);
    if (after.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(after.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << after.error_message();
}

// A tenant over its storage quota cannot grow a scene (new instances, groups) but can still
// move, disable and remove instances and delete scenes, which free space or keep it.
TEST_F(ServerTest, ATenantOverItsQuotaCanStillFreeSpace) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  const uint64_t a = Place(scene, box, RigidTransform::Identity(), "a");
  const uint64_t b = Place(scene, box, RigidTransform{geom::Mat3::Identity(), Vec3(5, 0, 0)}, "b");
  ServerConfig config;
  config.tenant_max_storage_bytes = 1;  // far below what the part and the scene take
  Restart(config);
  v1::SetGroupRequest group;
  group.set_scene_id(scene);
  group.set_group("g");
  group.add_instance_ids(a);
  EXPECT_THAT(client_->SetGroup(group).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, ""));
  v1::AddInstancesRequest add;
  add.set_scene_id(scene);
  v1::PartPlacement* p = add.add_parts();
  p->set_part_id(box);
  *p->mutable_pose() = ToPose(RigidTransform::Identity());
  EXPECT_THAT(client_->AddInstances(add).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, ""));
  group.clear_instance_ids();  // deleting a group (here one that does not exist) only shrinks
  EXPECT_THAT(client_->SetGroup(group).status(), IsOk());
  v1::SetPosesRequest moves;
  moves.set_scene_id(scene);
  v1::PoseUpdate* u = moves.add_poses();
  u->set_instance_id(a);
  *u->mutable_pose() = ToPose(RigidTransform{geom::Mat3::Identity(), Vec3(0, 9, 0)});
  EXPECT_THAT(client_->SetPoses(moves).status(), IsOk());
  v1::SetInstancesEnabledRequest disable;
  disable.set_scene_id(scene);
  disable.add_instance_ids(a);
  disable.set_enabled(false);
  EXPECT_THAT(client_->SetInstancesEnabled(disable).status(), IsOk());
  v1::RemoveInstancesRequest remove;
  remove.set_scene_id(scene);
  remove.add_instance_ids(b);
  EXPECT_THAT(client_->RemoveInstances(remove).status(), IsOk());
  EXPECT_THAT(client_->DeleteScene(scene), IsOk());
}

// A scene edit sets the bytes its file grows by aside of the tenant's storage quota before it
// writes: an edit that would pass the quota is refused with nothing changed (in memory, and on
// disk after a restart), however little of it the tenant used before; one that fits passes.
TEST_F(ServerTest, SceneEditsThatWouldPassTheStorageQuotaAreRefused) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  Place(scene, box, RigidTransform::Identity(), "a");
  // The data folder's files: at least what the tenant's quota counts.
  std::uint64_t used = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ + "/data")) {
    if (e.is_regular_file()) used += e.file_size();
  }
  ServerConfig config;
  config.tenant_max_storage_bytes = used + 4096;
  Restart(config);
  const auto before = client_->GetScene(scene);
  ASSERT_THAT(before.status(), IsOk());
  // 200 instances with 100-byte paths take far more than the 4 KiB left.
  v1::AddInstancesRequest add;
  add.set_scene_id(scene);
  for (int i = 0; i < 200; ++i) {
    v1::PartPlacement* p = add.add_parts();
    p->set_part_id(box);
    p->set_path(absl::StrCat(std::string(96, 'p'), 1000 + i));
    *p->mutable_pose() = ToPose(RigidTransform{geom::Mat3::Identity(), Vec3(3.0 * i, 0, 0)});
  }
  EXPECT_THAT(client_->AddInstances(add).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "storage quota"));
  const auto refused = client_->GetScene(scene);
  ASSERT_THAT(refused.status(), IsOk());
  EXPECT_EQ(refused->instance_count(), before->instance_count());
  EXPECT_EQ(refused->version(), before->version());
  // What fits passes, and is what a restart serves.
  Place(scene, box, RigidTransform{geom::Mat3::Identity(), Vec3(5, 0, 0)}, "b");
  Restart(config);
  const auto after = client_->GetScene(scene);
  ASSERT_THAT(after.status(), IsOk());
  EXPECT_EQ(after->instance_count(), before->instance_count() + 1);
  EXPECT_EQ(after->version(), before->version() + 1);
}

// fsync stand-ins for SetFsyncForTesting: one that fails for folders (EIO: a file renamed into
// place whose rename may not survive a crash), and one that counts its calls in `syncs`.
int FsyncFailingFolders(int fd) {
  struct stat st {};
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = EIO;
    return -1;
  }
  return fsync(fd);
}
std::atomic<int> syncs{0};
int CountingFsync(int fd) {
  ++syncs;
  return fsync(fd);
}

// An edit that changes nothing (poses re-sent as they are, the enabled state it has, a group
// set to its members, empty lists) keeps the scene's version and writes nothing; the first real
// change then bumps the version by one and is written.
TEST_F(ServerTest, EditsThatChangeNothingKeepTheVersionAndWriteNothing) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  const RigidTransform X_a{geom::Mat3::Identity(), Vec3(0.25, 0.5, 0.75)};
  const uint64_t a = Place(scene, box, X_a, "a");
  Place(scene, box, RigidTransform{geom::Mat3::Identity(), Vec3(5, 0, 0)}, "b");
  v1::SetGroupRequest group;
  group.set_scene_id(scene);
  group.set_group("g");
  group.add_instance_ids(a);
  ASSERT_THAT(client_->SetGroup(group).status(), IsOk());
  const auto before = client_->GetScene(scene);
  ASSERT_THAT(before.status(), IsOk());

  syncs = 0;
  cad::internal::SetFsyncForTesting(CountingFsync);
  v1::SetPosesRequest same;
  same.set_scene_id(scene);
  v1::PoseUpdate* u = same.add_poses();
  u->set_instance_id(a);
  *u->mutable_pose() = ToPose(X_a);
  v1::SetPosesRequest none;
  none.set_scene_id(scene);
  v1::SetInstancesEnabledRequest enabled;
  enabled.set_scene_id(scene);
  enabled.set_enabled(true);
  enabled.add_instance_ids(a);
  v1::SetGroupRequest no_group;  // deleting a group that does not exist
  no_group.set_scene_id(scene);
  no_group.set_group("nothing");
  v1::RemoveInstancesRequest remove_none;
  remove_none.set_scene_id(scene);
  const std::vector<absl::StatusOr<uint64_t>> versions = {
      client_->SetPoses(same),  client_->SetPoses(none),     client_->SetInstancesEnabled(enabled),
      client_->SetGroup(group), client_->SetGroup(no_group), client_->RemoveInstances(remove_none)};
  const int unchanged_syncs = syncs;
  // A real change: one moved instance.
  *u->mutable_pose() = ToPose(RigidTransform{geom::Mat3::Identity(), Vec3(0, 9, 0)});
  const auto moved = client_->SetPoses(same);
  const int changed_syncs = syncs;
  cad::internal::SetFsyncForTesting(nullptr);

  for (const auto& v : versions) {
    ASSERT_THAT(v.status(), IsOk());
    EXPECT_EQ(*v, before->version());
  }
  EXPECT_EQ(unchanged_syncs, 0);
  ASSERT_THAT(moved.status(), IsOk());
  EXPECT_EQ(*moved, before->version() + 1);
  EXPECT_GT(changed_syncs, 0);
  const auto after = client_->GetScene(scene);
  ASSERT_THAT(after.status(), IsOk());
  EXPECT_EQ(after->version(), before->version() + 1);
}

// An edit whose file was written but whose folder could not be synced (INTERNAL, "may not
// survive a crash") is in memory: a retry of it changes nothing there, but it is written and
// synced again rather than acknowledged without a write (a review's finding), without a new
// version; once synced, the same edit again writes nothing.
TEST_F(ServerTest, ARetryOfAnUnsyncedEditIsWrittenAgain) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  const uint64_t a = Place(scene, box, RigidTransform::Identity(), "a");
  v1::SetPosesRequest moves;
  moves.set_scene_id(scene);
  v1::PoseUpdate* u = moves.add_poses();
  u->set_instance_id(a);
  *u->mutable_pose() = ToPose(RigidTransform{geom::Mat3::Identity(), Vec3(0, 9, 0)});
  cad::internal::SetFsyncForTesting(FsyncFailingFolders);
  const auto unsynced = client_->SetPoses(moves);
  syncs = 0;
  cad::internal::SetFsyncForTesting(CountingFsync);
  const auto retried = client_->SetPoses(moves);
  const int retry_syncs = syncs;
  const auto again = client_->SetPoses(moves);
  const int again_syncs = syncs - retry_syncs;
  cad::internal::SetFsyncForTesting(nullptr);
  EXPECT_THAT(unsynced.status(), StatusIs(absl::StatusCode::kInternal, "may not survive a crash"));
  ASSERT_THAT(retried.status(), IsOk());
  EXPECT_GE(retry_syncs, 2);  // the file and its folder
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_EQ(*again, *retried);
  EXPECT_EQ(again_syncs, 0);
  const auto served = client_->GetScene(scene);
  ASSERT_THAT(served.status(), IsOk());
  EXPECT_EQ(served->version(), *retried);
}

// A scene written whose folder cannot be synced: the call says so (INTERNAL), and the scene
// served is the one its file holds (the edit, in place though it may not survive a crash);
// deleting it then removes it, with the same warning.
TEST_F(ServerTest, AnEditWhoseFolderCannotBeSyncedServesWhatItsFileHolds) {
  const std::string box = Upload(MakeBox(Vec3(1, 1, 1)), "box");
  const std::string scene = NewScene();
  const uint64_t a = Place(scene, box, RigidTransform::Identity(), "a");
  const auto before = client_->GetScene(scene);
  ASSERT_THAT(before.status(), IsOk());
  cad::internal::SetFsyncForTesting(FsyncFailingFolders);
  v1::SetPosesRequest moves;
  moves.set_scene_id(scene);
  v1::PoseUpdate* u = moves.add_poses();
  u->set_instance_id(a);
  *u->mutable_pose() = ToPose(RigidTransform{geom::Mat3::Identity(), Vec3(0, 9, 0)});
  const auto moved = client_->SetPoses(moves);
  const auto served = client_->GetScene(scene);
  const absl::Status deleted = client_->DeleteScene(scene);
  const auto created = client_->CreateScene("unsynced");
  const auto uploaded = client_->UploadMesh(MeshUpload(MakeBox(Vec3(2, 2, 2)), "box2", 0));
  const auto listed = client_->ListParts();
  cad::internal::SetFsyncForTesting(nullptr);
  // A new scene is told not made, and is not: its file is removed again.
  EXPECT_THAT(created.status(), StatusIs(absl::StatusCode::kInternal, "scene not created"));
  auto scenes = client_->ListScenes();
  ASSERT_THAT(scenes.status(), IsOk());
  EXPECT_TRUE(scenes->empty());
  std::size_t scene_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/data/tenants/local/scenes")) {
    scene_files += e.path().extension() == ".pb";
  }
  EXPECT_EQ(scene_files, 0u);
  // A part written is served (its id comes from its content: a retry answers the same).
  EXPECT_THAT(uploaded.status(), StatusIs(absl::StatusCode::kInternal, "may not survive a crash"));
  ASSERT_THAT(listed.status(), IsOk());
  EXPECT_EQ(listed->size(), 2u);
  const auto again = client_->UploadMesh(MeshUpload(MakeBox(Vec3(2, 2, 2)), "box2", 0));
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_THAT(client_->GetPart(again->part_id()).status(), IsOk());
  EXPECT_THAT(moved.status(), StatusIs(absl::StatusCode::kInternal, "may not survive a crash"));
  ASSERT_THAT(served.status(), IsOk());
  EXPECT_EQ(served->version(), before->version() + 1);
  EXPECT_THAT(deleted, StatusIs(absl::StatusCode::kInternal, "a crash may bring it back"));
  EXPECT_THAT(client_->GetScene(scene).status(), StatusIs(absl::StatusCode::kNotFound, "scene"));
}

}  // namespace
}  // namespace clash::server
