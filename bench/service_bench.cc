// clash_service_bench: clashd's latency through gRPC on loopback TCP (issue 4), beside the same
// queries run in process on an identical scene, and FCL's broad + narrow phase for "move one
// instance and check it against the scene". Every answer is checked before anything is timed;
// see README.md, "clash_service_bench".
//
// Flags: --check-only (build the scene, run the agreement checks, time nothing), --tiles=N (a
// smaller scene, for profiling runs under valgrind) and Google Benchmark's own flags (default
// --benchmark_min_time=2).
#include <benchmark/benchmark.h>
#include <fcl/broadphase/broadphase_dynamic_AABB_tree.h>
#include <fcl/geometry/bvh/BVH_model.h>
#include <fcl/math/bv/OBBRSS.h>
#include <fcl/narrowphase/collision.h>
#include <fcl/narrowphase/collision_object.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "clash/client/client.h"
#include "clash/geom/status_macros.h"
#include "convert.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "parallel.h"
#include "part_store.h"
#include "query_engine.h"
#include "scene.h"
#include "server.h"

#ifndef CLASH_BENCH_DATA_DIR
#define CLASH_BENCH_DATA_DIR ""
#endif
#ifndef CLASH_CAD_WORKER_PATH
#define CLASH_CAD_WORKER_PATH ""
#endif
#ifndef CLASH_SAMPLE_ASSEMBLY_PATH
#define CLASH_SAMPLE_ASSEMBLY_PATH ""
#endif

extern char** environ;

namespace clash::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using geom::Aabb;
using geom::Mat3;
using geom::RigidTransform;
using geom::Vec3;

// The scene: the assembly tiled until it has at least this many instances.
constexpr std::size_t kMinInstances = 2048;
// Tiles sit this much farther apart than the assembly's bounds (relative, plus 1 mm), so no two
// tiles touch.
constexpr double kTileGap = 0.25;
// Poses the moved instance cycles through, and the seed they are drawn from.
constexpr int kMovePoses = 64;
constexpr uint64_t kSeed = 0x5eed'c1a5'4d00'0004ULL;
// Largest displacement of a move: translation as a fraction of the part's bounding-box
// diagonal, rotation in radians (about the part's box centre). A dragged part near its place.
constexpr double kMoveShift = 0.02;
constexpr double kMoveTurn = 0.02;
// Stored moves checked (each is a durable write on both sides).
constexpr int kStoredChecks = 4;
// The CAD file tiled, when found.
constexpr const char* kAssemblyFile = "as1-oc-214-mat.stp";

// ---------------------------------------------------------------------------------------------
// Latencies

struct Stats {
  double p50_us = 0;
  double p99_us = 0;
  double mean_us = 0;
  std::size_t samples = 0;
};

// Figures of the finished benchmarks by name (the last run of each), for the closing table.
std::map<std::string, Stats>& Results() {
  static std::map<std::string, Stats> results;
  return results;
}

// Nearest-rank percentile of sorted samples.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

Stats Summarize(std::vector<double> us) {
  Stats s;
  s.samples = us.size();
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  s.p50_us = Percentile(us, 0.50);
  s.p99_us = Percentile(us, 0.99);
  double sum = 0;
  for (double v : us) sum += v;
  s.mean_us = sum / static_cast<double>(us.size());
  return s;
}

double Microseconds(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// Runs `run(i)` once per iteration, timing each call, then `verify(i, answer)` outside the
// per-call timer; reports p50/p99/mean of the calls as counters.
template <class Run, class Verify>
void TimedLoop(benchmark::State& state, const std::string& name, Run&& run, Verify&& verify) {
  std::vector<double> us;
  us.reserve(1 << 14);
  int64_t i = 0;
  for (auto _ : state) {
    const Clock::time_point start = Clock::now();
    auto answer = run(i);
    us.push_back(Microseconds(Clock::now() - start));
    if (absl::Status st = verify(i, answer); !st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      break;
    }
    ++i;
  }
  const Stats s = Summarize(std::move(us));
  state.counters["p50_us"] = s.p50_us;
  state.counters["p99_us"] = s.p99_us;
  state.counters["mean_us"] = s.mean_us;
  Results()[name] = s;
}

// ---------------------------------------------------------------------------------------------
// Answers

// What the checks compare: clash ids and classes, in the response's order.
std::string Key(const v1::InterferenceResponse& r) {
  std::string s;
  for (const v1::Clash& c : r.clashes()) {
    absl::StrAppend(&s, c.clash_id(), ":", v1::ClashClass_Name(c.clash_class()), " ");
  }
  return s;
}

std::string Key(const v1::DistanceResponse& r) {
  return absl::StrFormat("%d:%d:%d:%.17g:%d", r.found(), r.instance_a(), r.instance_b(),
                         r.distance_mm(), r.pairs_measured());
}

std::string Key(const v1::PickResponse& r) {
  std::string s;
  for (const v1::PickHit& h : r.hits()) {
    absl::StrAppendFormat(&s, "%d:%d:%u:%.17g ", h.hit(), h.instance_id(), h.triangle(),
                          h.distance_mm());
  }
  return s;
}

// The first few items of `a` that `b` lacks, for messages.
std::string Missing(const std::string& a, const std::string& b) {
  const std::vector<std::string> va = absl::StrSplit(a, ' ', absl::SkipEmpty());
  const std::vector<std::string> vb = absl::StrSplit(b, ' ', absl::SkipEmpty());
  const std::set<std::string> sb(vb.begin(), vb.end());
  std::string out;
  int shown = 0;
  for (const std::string& item : va) {
    if (sb.contains(item)) continue;
    if (++shown > 5) {
      absl::StrAppend(&out, "...");
      break;
    }
    absl::StrAppend(&out, item, " ");
  }
  return absl::StrCat(va.size(), " items; not in the other: ", out.empty() ? "none" : out);
}

template <class Response>
absl::Status SameAnswer(const std::string& what, const Response& grpc, const Response& local) {
  const std::string g = Key(grpc);
  const std::string l = Key(local);
  if (g == l) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": gRPC and in-process answers differ:\n  gRPC: ",
                                          Missing(g, l), "\n  in-process: ", Missing(l, g)));
}

template <class Response>
absl::Status Expect(const std::string& what, const absl::StatusOr<Response>& got,
                    const std::string& expected) {
  if (!got.ok()) return got.status();
  if (Key(*got) == expected) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": the answer changed while timing: now ",
                                          Missing(Key(*got), expected), "; checked ",
                                          Missing(expected, Key(*got))));
}

// Instance ids of the clashes of `r` involving `id` (the other instance), by class.
std::set<uint64_t> Partners(const v1::InterferenceResponse& r, uint64_t id,
                            std::initializer_list<v1::ClashClass> classes) {
  std::set<uint64_t> out;
  for (const v1::Clash& c : r.clashes()) {
    if (std::find(classes.begin(), classes.end(), c.clash_class()) == classes.end()) continue;
    out.insert(c.instance_a() == id ? c.instance_b() : c.instance_a());
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Files and processes

std::string FindAssemblyFile() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("CLASH_BENCH_DATA_DIR"); env && *env) dirs.emplace_back(env);
  if (*CLASH_BENCH_DATA_DIR) dirs.emplace_back(CLASH_BENCH_DATA_DIR);
  dirs.emplace_back("/usr/share/opencascade/data/step");
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    if (fs::is_regular_file(dir / kAssemblyFile, ec)) return (dir / kAssemblyFile).string();
  }
  return {};
}

absl::Status RunProgram(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int err = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ); err != 0) {
    return absl::InternalError(absl::StrCat("cannot run ", args[0], ": ", std::strerror(err)));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(args[0], " failed (status ", status, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(base && *base ? base : "/tmp", "/clash-service-bench-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", std::strerror(errno)));
  }
  return pattern;
}

// ---------------------------------------------------------------------------------------------
// FCL

using FclModel = fcl::BVHModel<fcl::OBBRSSd>;

std::shared_ptr<FclModel> BuildFclModel(const geom::TriangleMesh& m) {
  std::vector<fcl::Vector3d> vertices(m.vertices().begin(), m.vertices().end());
  std::vector<fcl::Triangle> triangles;
  triangles.reserve(m.num_triangles());
  for (const auto& t : m.triangles()) triangles.emplace_back(t[0], t[1], t[2]);
  auto model = std::make_shared<FclModel>();
  if (model->beginModel(static_cast<int>(triangles.size()), static_cast<int>(vertices.size())) !=
          fcl::BVH_OK ||
      model->addSubModel(vertices, triangles) != fcl::BVH_OK || model->endModel() != fcl::BVH_OK) {
    return nullptr;
  }
  return model;
}

fcl::Transform3d ToFcl(const RigidTransform& X) {
  fcl::Transform3d out = fcl::Transform3d::Identity();
  out.linear() = X.R;
  out.translation() = X.t;
  return out;
}

uint64_t InstanceOf(const fcl::CollisionObjectd* o) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(o->getUserData()));
}

// One-vs-all query state: the moved object, the narrow-phase request, the colliding instances.
struct FclQuery {
  fcl::CollisionObjectd* moved = nullptr;
  fcl::CollisionRequestd request{1, false};
  std::vector<uint64_t> hits;
};

// Broad-phase callback: narrow phase on every pair whose world boxes overlap; never stops early.
bool FclNarrowPhase(fcl::CollisionObjectd* o1, fcl::CollisionObjectd* o2, void* data) {
  auto* q = static_cast<FclQuery*>(data);
  fcl::CollisionObjectd* other = o1 == q->moved ? o2 : o1;
  if (other == q->moved) return false;
  fcl::CollisionResultd result;
  fcl::collide(o1, o2, q->request, result);
  if (result.isCollision()) q->hits.push_back(InstanceOf(other));
  return false;
}

// ---------------------------------------------------------------------------------------------
// The scene, served and in process

class World {
 public:
  /// tiles = 0: enough tiles for kMinInstances.
  // server_helpers, cpu_latency_us: clashd's --query-helpers and --cpu-latency-us (-1: their
  // defaults).
  World(int tiles, int server_helpers, int cpu_latency_us)
      : tiles_(tiles), server_helpers_(server_helpers), cpu_latency_us_(cpu_latency_us) {}
  ~World() { Stop(); }

  [[nodiscard]] absl::Status Build();
  [[nodiscard]] absl::Status Check();
  // Every class-only move request once, in process on this thread (for an instruction count:
  // valgrind --tool=callgrind --toggle-collect='*RunMovePosesOnce*').
  [[nodiscard]] absl::Status RunMovePosesOnce() const;
  void Register();
  void Stop();

 private:
  [[nodiscard]] absl::Status Tile(const std::string& assembly_id);
  [[nodiscard]] absl::Status ChooseWorkloads();
  [[nodiscard]] absl::Status BuildFcl();
  [[nodiscard]] std::set<uint64_t> FclMove(int k);
  // In-process queries, holding the scene's mutex as the server does (the request's scene_id,
  // the served scene's, is not read).
  // In process, classifying pairs on a helper thread too, as clashd does on its default two
  // query slots when the other is idle; `one_thread`: on the calling thread only.
  [[nodiscard]] absl::StatusOr<v1::InterferenceResponse> LocalInterference(
      const v1::InterferenceRequest& request, bool one_thread = false) const;
  [[nodiscard]] absl::StatusOr<v1::DistanceResponse> LocalDistance(
      const v1::DistanceRequest& request) const;
  [[nodiscard]] absl::StatusOr<v1::PickResponse> LocalPick(const v1::PickRequest& request,
                                                           bool one_thread = false) const;
  // A stored move and the check of the moved instance, through gRPC and in process.
  [[nodiscard]] absl::StatusOr<v1::InterferenceResponse> GrpcStoredMove(const v1::Pose& pose,
                                                                        double* write_us);
  [[nodiscard]] absl::StatusOr<v1::InterferenceResponse> LocalStoredMove(const v1::Pose& pose,
                                                                         double* write_us);
  // The pair request with a contact tolerance used by no earlier query (defeats the pair cache).
  [[nodiscard]] v1::InterferenceRequest FreshPairRequest();
  // The whole scene at the pair's tolerance, changed likewise (every pair classified afresh).
  [[nodiscard]] v1::InterferenceRequest FreshWholeSceneRequest();

  std::string tmp_;
  std::string assembly_file_;
  std::unique_ptr<server::ClashServer> server_;
  std::unique_ptr<server::QueryHelpers> local_helpers_ =
      std::make_unique<server::QueryHelpers>(1, nullptr);
  std::unique_ptr<client::Client> client_;
  std::string scene_id_;
  std::size_t assembly_instances_ = 0;
  int tiles_ = 0;
  int server_helpers_ = -1;
  int cpu_latency_us_ = -1;

  std::unique_ptr<server::PartStore> parts_;
  std::unique_ptr<server::SceneStore> scenes_;
  std::shared_ptr<server::Scene> scene_;

  // Workloads.
  v1::InterferenceRequest pair_request_;
  double pair_tolerance_mm_ = 0;
  std::atomic<uint64_t> fresh_counter_{0};
  v1::PickRequest pick_request_;
  v1::PickRequest pick_batch_request_;  // 16 x 16 rays straight down over tile 0
  uint64_t moved_ = 0;
  RigidTransform moved_X_WP_;
  std::vector<v1::Pose> move_poses_;
  std::vector<RigidTransform> move_X_;  // As the server reads move_poses_.
  std::vector<v1::InterferenceRequest> move_requests_;
  // The same moves with DEPTH_ESTIMATE_CLASS_ONLY (a plugin dragging a part wants the classes).
  std::vector<v1::InterferenceRequest> move_class_requests_;
  v1::DistanceRequest distance_request_;        // the moved instance (first pose) vs the rest
  v1::DistanceRequest whole_distance_request_;  // any two instances of the scene
  v1::InterferenceRequest stored_request_;

  // Checked answers.
  std::string pair_key_;
  std::string pair_fresh_key_;
  std::string pick_key_;
  std::string pick_batch_key_;
  std::string distance_key_;
  std::string whole_distance_key_;
  std::string whole_fresh_key_;
  std::vector<std::string> move_keys_;
  std::vector<std::set<uint64_t>> fcl_keys_;
  std::size_t move_clashes_ = 0;

  // FCL's copy of the scene.
  std::map<std::string, std::shared_ptr<FclModel>> fcl_models_;
  std::vector<std::unique_ptr<fcl::CollisionObjectd>> fcl_objects_;
  fcl::CollisionObjectd* fcl_moved_ = nullptr;
  std::unique_ptr<fcl::DynamicAABBTreeCollisionManagerd> fcl_manager_;
};

absl::Status World::Build() {
  CLASH_ASSIGN_OR_RETURN(tmp_, MakeTempDir());
  assembly_file_ = FindAssemblyFile();
  if (assembly_file_.empty()) {
    // The project's sample assembly, written by its generator.
    assembly_file_ = tmp_ + "/sample.step";
    CLASH_RETURN_IF_ERROR(RunProgram({CLASH_SAMPLE_ASSEMBLY_PATH, assembly_file_}));
  }
  std::fprintf(stderr, "clash_service_bench: assembly %s, work folder %s\n", assembly_file_.c_str(),
               tmp_.c_str());

  server::ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.data_dir = tmp_ + "/server";
  config.metrics_listen = "";
  config.quiet = true;
  config.worker_path = CLASH_CAD_WORKER_PATH;
  config.query_helpers = server_helpers_;
  config.cpu_latency_us = cpu_latency_us_;
  CLASH_ASSIGN_OR_RETURN(server_, server::ClashServer::Start(config));
  client::ClientOptions options;
  options.target = absl::StrCat("127.0.0.1:", server_->port());
  CLASH_ASSIGN_OR_RETURN(client_, client::Client::Connect(options));

  CLASH_ASSIGN_OR_RETURN(v1::ImportCadResponse imported, client_->ImportCad(assembly_file_));
  assembly_instances_ = imported.assembly().instances_size();
  if (assembly_instances_ == 0) return absl::InternalError("the assembly has no instances");

  // The in-process stores read a copy of the server's parts and assemblies.
  const std::string local = tmp_ + "/in-process";
  for (const char* sub : {"parts", "assemblies"}) {
    std::error_code ec;
    fs::create_directories(local, ec);
    fs::copy(config.data_dir + "/tenants/local/" + sub, local + "/" + sub,
             fs::copy_options::recursive, ec);
    if (ec) return absl::InternalError(absl::StrCat("copy ", sub, ": ", ec.message()));
  }
  CLASH_ASSIGN_OR_RETURN(parts_, server::PartStore::Open(local, config.max_part_triangles));
  CLASH_ASSIGN_OR_RETURN(scenes_, server::SceneStore::Open(local + "/scenes", parts_.get()));
  CLASH_RETURN_IF_ERROR(Tile(imported.assembly().assembly_id()));
  CLASH_RETURN_IF_ERROR(ChooseWorkloads());
  return BuildFcl();
}

absl::Status World::Tile(const std::string& assembly_id) {
  CLASH_ASSIGN_OR_RETURN(v1::Assembly assembly, parts_->GetAssembly(assembly_id));
  Aabb box;
  for (const v1::AssemblyInstance& inst : assembly.instances()) {
    CLASH_ASSIGN_OR_RETURN(auto part, parts_->Get(inst.part_id()));
    CLASH_ASSIGN_OR_RETURN(RigidTransform X_AP, server::PoseFromProto(inst.pose(), inst.path()));
    box.Add(part->geom->bounds().Transformed(X_AP));
  }
  if (tiles_ <= 0) {
    tiles_ = static_cast<int>((kMinInstances + assembly_instances_ - 1) / assembly_instances_);
  }
  const int cols = static_cast<int>(std::ceil(std::sqrt(tiles_)));
  const Vec3 spacing = box.Size() * (1 + kTileGap) + Vec3::Constant(1.0);

  CLASH_ASSIGN_OR_RETURN(v1::Scene scene, client_->CreateScene("service-bench"));
  scene_id_ = scene.scene_id();
  v1::AddInstancesRequest request;
  request.set_scene_id(scene_id_);
  for (int k = 0; k < tiles_; ++k) {
    v1::AssemblyPlacement* a = request.add_assemblies();
    a->set_assembly_id(assembly_id);
    a->set_path_prefix(absl::StrCat("tile", k));
    const Vec3 t((k % cols) * spacing.x(), (k / cols) * spacing.y(), 0);
    server::ToProto(RigidTransform::Translation(t), a->mutable_pose());
  }
  CLASH_ASSIGN_OR_RETURN(v1::AddInstancesResponse added, client_->AddInstances(request));

  // The same instances in process, placed as the server places them (same ids, paths, poses).
  CLASH_ASSIGN_OR_RETURN(scene_, scenes_->Create("service-bench"));
  std::unique_lock lock(scene_->mu);
  for (const v1::AssemblyPlacement& a : request.assemblies()) {
    CLASH_ASSIGN_OR_RETURN(RigidTransform X_WA, server::PoseFromProto(a.pose(), "tile"));
    for (const v1::AssemblyInstance& inst : assembly.instances()) {
      server::InstanceRec rec;
      rec.id = scene_->next_instance_id++;
      CLASH_ASSIGN_OR_RETURN(rec.part, parts_->Get(inst.part_id()));
      rec.path = absl::StrCat(a.path_prefix(), "/", inst.path());
      rec.name = inst.name();
      CLASH_ASSIGN_OR_RETURN(RigidTransform X_AP, server::PoseFromProto(inst.pose(), inst.path()));
      rec.X_WP = X_WA * X_AP;
      scene_->Add(std::move(rec));
    }
  }
  scene_->Touch();
  CLASH_RETURN_IF_ERROR(scenes_->Commit(*scene_));
  if (static_cast<std::size_t>(added.instances_size()) != scene_->instances.size()) {
    return absl::InternalError("the server added another number of instances");
  }
  for (const v1::Instance& served : added.instances()) {
    const server::InstanceRec* rec = scene_->Find(served.instance_id());
    v1::Instance mine;
    if (rec != nullptr) server::Scene::InstanceToProto(*rec, &mine);
    if (rec == nullptr || mine.SerializeAsString() != served.SerializeAsString()) {
      return absl::InternalError(absl::StrCat("instance ", served.instance_id(), " (",
                                              served.path(), ") differs in process"));
    }
  }
  std::fprintf(stderr,
               "clash_service_bench: %d tiles x %zu instances = %zu instances, tile spacing %.1f x "
               "%.1f mm\n",
               tiles_, assembly_instances_, scene_->instances.size(), spacing.x(), spacing.y());
  return absl::OkStatus();
}

absl::StatusOr<v1::InterferenceResponse> World::LocalInterference(
    const v1::InterferenceRequest& request, bool one_thread) const {
  std::shared_lock lock(scene_->mu);
  return server::RunInterference(*scene_, request, nullptr, {},
                                 one_thread ? nullptr : local_helpers_.get());
}

absl::StatusOr<v1::DistanceResponse> World::LocalDistance(
    const v1::DistanceRequest& request) const {
  std::shared_lock lock(scene_->mu);
  return server::RunDistance(*scene_, request, nullptr);
}

absl::StatusOr<v1::PickResponse> World::LocalPick(const v1::PickRequest& request,
                                                  bool one_thread) const {
  std::shared_lock lock(scene_->mu);
  return server::RunPick(*scene_, request, nullptr, {},
                         one_thread ? nullptr : local_helpers_.get());
}

v1::InterferenceRequest World::FreshPairRequest() {
  v1::InterferenceRequest r = pair_request_;
  // A relative change of 1e-12 per query: distinct doubles, the same classes.
  const double k = static_cast<double>(++fresh_counter_);
  r.mutable_tolerances()->set_contact_tolerance_mm(pair_tolerance_mm_ * (1 + 1e-12 * k));
  return r;
}

v1::InterferenceRequest World::FreshWholeSceneRequest() {
  v1::InterferenceRequest r;
  r.set_scene_id(scene_id_);
  r.set_page_size(10000);
  const double k = static_cast<double>(++fresh_counter_);
  r.mutable_tolerances()->set_contact_tolerance_mm(pair_tolerance_mm_ * (1 + 1e-12 * k));
  return r;
}

absl::Status World::ChooseWorkloads() {
  // The pair: the first touching (CONTACT) pair of tile 0, else its first clash.
  v1::InterferenceRequest tile0;
  tile0.set_scene_id(scene_id_);
  tile0.mutable_set_a()->add_path_prefixes("tile0");
  CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse within, LocalInterference(tile0));
  if (within.clashes().empty()) return absl::InternalError("tile 0 has no clash to query");
  const v1::Clash* pair = &within.clashes(0);
  for (const v1::Clash& c : within.clashes()) {
    if (c.clash_class() == v1::CONTACT) {
      pair = &c;
      break;
    }
  }
  pair_request_.set_scene_id(scene_id_);
  pair_request_.mutable_set_a()->add_instance_ids(pair->instance_a());
  pair_request_.mutable_set_b()->add_instance_ids(pair->instance_b());
  pair_tolerance_mm_ = pair->contact_tolerance_mm();
  std::fprintf(stderr, "  pair: %s / %s (%s)\n", pair->path_a().c_str(), pair->path_b().c_str(),
               v1::ClashClass_Name(pair->clash_class()).c_str());

  // The moved instance: in the middle tile, the one with the most clashes against the scene
  // (HARD ones first), so the check has the most narrow-phase work.
  const std::string middle = absl::StrCat("tile", tiles_ / 2, "/");
  std::pair<std::size_t, std::size_t> best{0, 0};
  for (const auto& [id, rec] : scene_->instances) {
    if (!absl::StartsWith(rec.path, middle)) continue;
    v1::InterferenceRequest r;
    r.set_scene_id(scene_id_);
    r.mutable_set_a()->add_instance_ids(id);
    r.mutable_set_b();
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse resp, LocalInterference(r));
    const std::pair<std::size_t, std::size_t> score{resp.summary().hard(), resp.clashes_size()};
    if (moved_ == 0 || score > best) {
      best = score;
      moved_ = id;
    }
  }
  const server::InstanceRec& moved = *scene_->Find(moved_);
  moved_X_WP_ = moved.X_WP;
  std::fprintf(stderr, "  moved: %s (%llu HARD, %zu clashes at its place)\n", moved.path.c_str(),
               static_cast<unsigned long long>(best.first), best.second);

  // Its poses: small random rigid motions about its box centre.
  std::mt19937_64 rng(kSeed);
  std::uniform_real_distribution<double> unit(-1, 1);
  auto direction = [&] {
    Vec3 v;
    do v = Vec3(unit(rng), unit(rng), unit(rng));
    while (v.norm() < 1e-3 || v.norm() > 1);
    return v.normalized();
  };
  const Vec3 c = moved.world_box.Center();
  const double diag = moved.part->geom->bounds().Diagonal();
  for (int k = 0; k < kMovePoses; ++k) {
    const double shift = kMoveShift * diag * std::abs(unit(rng));
    const Mat3 R = Eigen::AngleAxisd(kMoveTurn * unit(rng), direction()).toRotationMatrix();
    const Vec3 d = shift * direction();
    const RigidTransform X = RigidTransform{R, c + d - R * c} * moved_X_WP_;
    v1::Pose pose;
    server::ToProto(X, &pose);
    CLASH_ASSIGN_OR_RETURN(RigidTransform read, server::PoseFromProto(pose, "move"));
    move_poses_.push_back(pose);
    move_X_.push_back(read);
    v1::InterferenceRequest r;
    r.set_scene_id(scene_id_);
    r.mutable_set_a()->add_instance_ids(moved_);
    r.mutable_set_b();  // Present and empty: every instance.
    v1::PoseUpdate* u = r.add_pose_overrides();
    u->set_instance_id(moved_);
    *u->mutable_pose() = pose;
    if (move_requests_.empty()) {
      distance_request_.set_scene_id(scene_id_);
      *distance_request_.mutable_set_a() = r.set_a();
      distance_request_.mutable_set_b();  // present and empty: every instance
      *distance_request_.mutable_pose_overrides() = r.pose_overrides();
      whole_distance_request_.set_scene_id(scene_id_);
    }
    move_class_requests_.push_back(r);
    move_class_requests_.back().set_depth_estimate(v1::DEPTH_ESTIMATE_CLASS_ONLY);
    move_requests_.push_back(std::move(r));
  }
  stored_request_.set_scene_id(scene_id_);
  stored_request_.mutable_set_a()->add_instance_ids(moved_);
  stored_request_.mutable_set_b();

  // A batch: 16 x 16 rays straight down over the box of tile 0 (a plugin's preview grid).
  {
    Aabb first_tile;
    for (const auto& [id, rec] : scene_->instances) {
      if (absl::StartsWith(rec.path, "tile0/")) first_tile.Add(rec.world_box);
    }
    pick_batch_request_.set_scene_id(scene_id_);
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 16; ++j) {
        v1::Ray* ray = pick_batch_request_.add_rays();
        const Vec3 at(
            first_tile.min.x() + (i + 0.5) / 16 * (first_tile.max.x() - first_tile.min.x()),
            first_tile.min.y() + (j + 0.5) / 16 * (first_tile.max.y() - first_tile.min.y()),
            first_tile.max.z() + 10);
        server::ToProto(at, ray->mutable_origin_mm());
        server::ToProto(Vec3(0, 0, -1), ray->mutable_direction());
      }
    }
  }

  // The ray: straight down onto the centre of the pair's first instance (tile 0, away from the
  // moved one); the next instances of tile 0 when that misses.
  for (const auto& [id, rec] : scene_->instances) {
    if (!absl::StartsWith(rec.path, "tile0/") || id < pair->instance_a()) continue;
    const Aabb& b = rec.world_box;
    v1::PickRequest p;
    p.set_scene_id(scene_id_);
    v1::Ray* ray = p.add_rays();
    server::ToProto(Vec3(b.Center().x(), b.Center().y(), b.max.z() + b.Diagonal()),
                    ray->mutable_origin_mm());
    server::ToProto(Vec3(0, 0, -1), ray->mutable_direction());
    CLASH_ASSIGN_OR_RETURN(v1::PickResponse hit, LocalPick(p));
    if (hit.hits(0).hit()) {
      pick_request_ = std::move(p);
      std::fprintf(stderr, "  ray: down onto %s, hits %s at %.3f mm\n", rec.path.c_str(),
                   hit.hits(0).path().c_str(), hit.hits(0).distance_mm());
      return absl::OkStatus();
    }
  }
  return absl::InternalError("no ray down onto tile 0 hits anything");
}

absl::Status World::BuildFcl() {
  std::vector<fcl::CollisionObjectd*> objects;
  for (const auto& [id, rec] : scene_->instances) {
    std::shared_ptr<FclModel>& model = fcl_models_[rec.part->info.part_id()];
    if (!model) model = BuildFclModel(rec.part->geom->mesh());
    if (!model) return absl::InternalError("FCL BVHModel build failed");
    auto object = std::make_unique<fcl::CollisionObjectd>(model, ToFcl(rec.X_WP));
    object->setUserData(reinterpret_cast<void*>(static_cast<uintptr_t>(id)));
    if (id == moved_) fcl_moved_ = object.get();
    objects.push_back(object.get());
    fcl_objects_.push_back(std::move(object));
  }
  fcl_manager_ = std::make_unique<fcl::DynamicAABBTreeCollisionManagerd>();
  fcl_manager_->registerObjects(objects);
  fcl_manager_->setup();
  std::fprintf(stderr, "  FCL: %zu objects, %zu distinct BVHModel<OBBRSS>\n", objects.size(),
               fcl_models_.size());
  return absl::OkStatus();
}

std::set<uint64_t> World::FclMove(int k) {
  fcl_moved_->setTransform(ToFcl(move_X_[k]));
  fcl_moved_->computeAABB();
  fcl_manager_->update(fcl_moved_);
  FclQuery q;
  q.moved = fcl_moved_;
  fcl_manager_->collide(fcl_moved_, &q, FclNarrowPhase);
  return {q.hits.begin(), q.hits.end()};
}

absl::StatusOr<v1::InterferenceResponse> World::GrpcStoredMove(const v1::Pose& pose,
                                                               double* write_us) {
  v1::SetPosesRequest set;
  set.set_scene_id(scene_id_);
  v1::PoseUpdate* u = set.add_poses();
  u->set_instance_id(moved_);
  *u->mutable_pose() = pose;
  const Clock::time_point start = Clock::now();
  CLASH_RETURN_IF_ERROR(client_->SetPoses(set).status());
  if (write_us) *write_us = Microseconds(Clock::now() - start);
  return client_->CheckInterference(stored_request_);
}

absl::StatusOr<v1::InterferenceResponse> World::LocalStoredMove(const v1::Pose& pose,
                                                                double* write_us) {
  const Clock::time_point start = Clock::now();
  {
    // What SceneService.SetPoses does: validate, move, bump the version, write durably.
    CLASH_ASSIGN_OR_RETURN(RigidTransform X, server::PoseFromProto(pose, "move"));
    std::unique_lock lock(scene_->mu);
    scene_->SetPose(*scene_->Find(moved_), X);
    scene_->Touch();
    CLASH_RETURN_IF_ERROR(scenes_->Commit(*scene_));
  }
  if (write_us) *write_us = Microseconds(Clock::now() - start);
  return LocalInterference(stored_request_);
}

__attribute__((noinline)) absl::Status World::RunMovePosesOnce() const {
  for (int k = 0; k < kMovePoses; ++k) {
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse r,
                           LocalInterference(move_class_requests_[k], true));
    if (Key(r) != move_keys_[k]) return absl::InternalError("a move's answer changed");
  }
  return absl::OkStatus();
}

absl::Status World::Check() {
  // 1. The whole scene: the same clashes, none between tiles.
  {
    v1::InterferenceRequest all;
    all.set_scene_id(scene_id_);
    all.set_page_size(10000);  // One page in process (the client follows the pages).
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse grpc, client_->CheckInterference(all));
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse local, LocalInterference(all));
    CLASH_RETURN_IF_ERROR(SameAnswer("whole scene", grpc, local));
    for (const v1::Clash& c : grpc.clashes()) {
      const std::string tile = c.path_a().substr(0, c.path_a().find('/') + 1);
      if (!absl::StartsWith(c.path_b(), tile)) {
        return absl::InternalError(
            absl::StrCat("tiles touch: ", c.path_a(), " clashes with ", c.path_b()));
      }
    }
    std::fprintf(stderr, "check: whole scene: %zu clashes (%llu HARD), same through gRPC\n",
                 static_cast<std::size_t>(grpc.clashes_size()),
                 static_cast<unsigned long long>(grpc.summary().hard()));
  }
  // 2. The pair, repeated (answered from the pair cache after the first call) and fresh.
  {
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse grpc,
                           client_->CheckInterference(pair_request_));
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse local, LocalInterference(pair_request_));
    CLASH_RETURN_IF_ERROR(SameAnswer("pair", grpc, local));
    if (grpc.clashes_size() != 1) return absl::InternalError("the pair query found no clash");
    pair_key_ = Key(grpc);
    const v1::InterferenceRequest fresh = FreshPairRequest();
    CLASH_ASSIGN_OR_RETURN(grpc, client_->CheckInterference(fresh));
    CLASH_ASSIGN_OR_RETURN(local, LocalInterference(fresh));
    CLASH_RETURN_IF_ERROR(SameAnswer("pair, fresh", grpc, local));
    if (grpc.summary().cached_pairs() != 0 || local.summary().cached_pairs() != 0) {
      return absl::InternalError("the fresh pair query was answered from the cache");
    }
    pair_fresh_key_ = Key(grpc);
    if (pair_fresh_key_ != pair_key_) {
      return absl::InternalError("the pair's class depends on a 1e-12 change of its tolerance");
    }
  }
  // 3. The ray.
  {
    CLASH_ASSIGN_OR_RETURN(v1::PickResponse grpc, client_->PickRays(pick_request_));
    CLASH_ASSIGN_OR_RETURN(v1::PickResponse local, LocalPick(pick_request_));
    CLASH_RETURN_IF_ERROR(SameAnswer("pick", grpc, local));
    pick_key_ = Key(grpc);
    CLASH_ASSIGN_OR_RETURN(grpc, client_->PickRays(pick_batch_request_));
    CLASH_ASSIGN_OR_RETURN(local, LocalPick(pick_batch_request_));
    CLASH_RETURN_IF_ERROR(SameAnswer("pick batch", grpc, local));
    CLASH_ASSIGN_OR_RETURN(v1::PickResponse alone, LocalPick(pick_batch_request_, true));
    CLASH_RETURN_IF_ERROR(SameAnswer("pick batch, one thread", grpc, alone));
    pick_batch_key_ = Key(grpc);
    int hits = 0;
    for (const v1::PickHit& h : grpc.hits()) hits += h.hit();
    if (hits < 64) return absl::InternalError("the batch of rays hits fewer than 64 times");
    std::fprintf(stderr,
                 "check: pick batch, 256 rays: %d hits, same through gRPC and on one "
                 "thread\n",
                 hits);
  }
  // 4. Move-and-check at every pose: gRPC = in process; FCL finds every HARD partner.
  std::size_t hard = 0, contact = 0, fcl_total = 0, fcl_contact = 0, fcl_other = 0;
  for (int k = 0; k < kMovePoses; ++k) {
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse grpc,
                           client_->CheckInterference(move_requests_[k]));
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse local, LocalInterference(move_requests_[k]));
    CLASH_RETURN_IF_ERROR(SameAnswer(absl::StrCat("move ", k), grpc, local));
    move_keys_.push_back(Key(grpc));
    move_clashes_ += grpc.clashes_size();
    const std::set<uint64_t> fcl = FclMove(k);
    const std::set<uint64_t> hard_partners = Partners(grpc, moved_, {v1::HARD});
    const std::set<uint64_t> touching = Partners(grpc, moved_, {v1::HARD, v1::CONTACT});
    for (uint64_t id : hard_partners) {
      if (!fcl.contains(id)) {
        return absl::InternalError(absl::StrCat("move ", k, ": clashd reports a HARD clash with ",
                                                scene_->Find(id)->path, " that FCL does not find"));
      }
    }
    hard += hard_partners.size();
    contact += touching.size() - hard_partners.size();
    fcl_total += fcl.size();
    for (uint64_t id : fcl) {
      if (hard_partners.contains(id)) continue;
      ++(touching.contains(id) ? fcl_contact : fcl_other);
    }
    fcl_keys_.push_back(fcl);
    // The class-only depth gives the same clashes and classes (the key), through gRPC and in
    // process, and no depth beyond the full estimate's.
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse fast,
                           client_->CheckInterference(move_class_requests_[k]));
    CLASH_ASSIGN_OR_RETURN(local, LocalInterference(move_class_requests_[k]));
    CLASH_RETURN_IF_ERROR(SameAnswer(absl::StrCat("class-only move ", k), fast, local));
    if (Key(fast) != move_keys_[k]) {
      return absl::InternalError(absl::StrCat("move ", k, ": the class-only depth answers ",
                                              Key(fast), " but the full depth ", move_keys_[k]));
    }
    for (int c = 0; c < fast.clashes_size(); ++c) {
      if (fast.clashes(c).depth_mm() > grpc.clashes(c).depth_mm()) {
        return absl::InternalError(absl::StrCat("move ", k, ": a class-only depth ",
                                                fast.clashes(c).depth_mm(), " exceeds the full ",
                                                grpc.clashes(c).depth_mm()));
      }
    }
  }
  // FCL's tree back to the stored pose.
  fcl_moved_->setTransform(ToFcl(moved_X_WP_));
  fcl_moved_->computeAABB();
  fcl_manager_->update(fcl_moved_);
  std::fprintf(stderr,
               "check: move-and-check, %d poses: %zu clashes, same through gRPC; HARD partners "
               "%zu, all found by FCL; CONTACT partners %zu, of which FCL reports %zu "
               "(FCL has no contact tolerance: touching pairs go either way); FCL pairs outside "
               "clashd's HARD+CONTACT: %zu; FCL pairs in all: %zu; the class-only depth gives "
               "the same clashes and classes\n",
               kMovePoses, move_clashes_, hard, contact, fcl_contact, fcl_other, fcl_total);
  // 5. Stored moves: through gRPC = in process = the same pose given as an override. Both sides
  // are left at the same stored pose; queries with an override of the moved instance do not
  // depend on its stored pose.
  for (int k = 0; k < kStoredChecks; ++k) {
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse grpc, GrpcStoredMove(move_poses_[k], nullptr));
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse local,
                           LocalStoredMove(move_poses_[k], nullptr));
    CLASH_RETURN_IF_ERROR(SameAnswer(absl::StrCat("stored move ", k), grpc, local));
    if (Key(grpc) != move_keys_[k]) {
      return absl::InternalError(absl::StrCat("stored move ", k, " answers ", Key(grpc),
                                              " but the same pose as an override ", move_keys_[k]));
    }
  }
  // 5b. Distances: through gRPC = in process; the whole scene's answer is at most the moved
  // instance's (its pairs are among the whole scene's), and the pair reported is that far apart.
  {
    CLASH_ASSIGN_OR_RETURN(v1::DistanceResponse grpc, client_->ComputeDistance(distance_request_));
    CLASH_ASSIGN_OR_RETURN(v1::DistanceResponse local, LocalDistance(distance_request_));
    CLASH_RETURN_IF_ERROR(SameAnswer("distance", grpc, local));
    CLASH_ASSIGN_OR_RETURN(v1::DistanceResponse whole,
                           client_->ComputeDistance(whole_distance_request_));
    CLASH_ASSIGN_OR_RETURN(local, LocalDistance(whole_distance_request_));
    CLASH_RETURN_IF_ERROR(SameAnswer("whole-scene distance", whole, local));
    if (!grpc.found() || !whole.found() || whole.distance_mm() > grpc.distance_mm()) {
      return absl::InternalError("the whole scene's distance exceeds one instance's");
    }
    for (const v1::DistanceResponse* r : {&grpc, &whole}) {
      const server::InstanceRec* a = scene_->Find(r->instance_a());
      const server::InstanceRec* b = scene_->Find(r->instance_b());
      if (a == nullptr || b == nullptr)
        return absl::InternalError("unknown instance in a distance");
      RigidTransform X_a = a->X_WP, X_b = b->X_WP;
      if (r == &grpc) (a->id == moved_ ? X_a : X_b) = move_X_[0];
      const double d = geom::Distance(*a->part->geom, X_a, *b->part->geom, X_b).distance;
      if (std::abs(d - r->distance_mm()) > 1e-9) {
        return absl::InternalError(
            absl::StrCat("distance ", r->distance_mm(), " but the pair is ", d, " apart"));
      }
    }
    distance_key_ = Key(grpc);
    whole_distance_key_ = Key(whole);
    std::fprintf(stderr,
                 "check: distance of the moved instance %.6g mm (%lu pairs measured), of "
                 "the whole scene %.6g mm (%lu), same through gRPC\n",
                 grpc.distance_mm(), static_cast<unsigned long>(grpc.pairs_measured()),
                 whole.distance_mm(), static_cast<unsigned long>(whole.pairs_measured()));
  }
  // 6. The whole scene at a fresh tolerance (after the stored moves: the scene as timed): the
  // same clashes with and without a helper thread.
  {
    // Each run at its own tolerance, so neither is answered from the other's cache entries.
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse helped,
                           LocalInterference(FreshWholeSceneRequest()));
    CLASH_ASSIGN_OR_RETURN(v1::InterferenceResponse alone,
                           LocalInterference(FreshWholeSceneRequest(), true));
    CLASH_RETURN_IF_ERROR(SameAnswer("whole scene, fresh", helped, alone));
    if (helped.summary().cached_pairs() != 0 || alone.summary().cached_pairs() != 0) {
      return absl::InternalError("the fresh whole-scene query was answered from the cache");
    }
    whole_fresh_key_ = Key(helped);
    std::fprintf(stderr,
                 "check: whole scene at %.4g mm: %d clashes of %llu candidate pairs, the same on "
                 "one thread\n",
                 pair_tolerance_mm_, helped.clashes_size(),
                 static_cast<unsigned long long>(helped.summary().candidate_pairs()));
  }
  return absl::OkStatus();
}

void World::Register() {
  auto add = [](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMicrosecond);
  };
  // 0. The floor: GetScene, a call that does next to nothing (a map look-up and a small reply).
  add("BM_GetScene/grpc", [this](benchmark::State& state) {
    TimedLoop(
        state, "BM_GetScene/grpc", [&](int64_t) { return client_->GetScene(scene_id_); },
        [&](int64_t, const absl::StatusOr<v1::Scene>& got) { return got.status(); });
  });
  // The same call on a bare generated stub (its own channel): what clash::client adds.
  add("BM_GetScene/grpc-stub", [this](benchmark::State& state) {
    auto stub = v1::SceneService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
    v1::GetSceneRequest request;
    request.set_scene_id(scene_id_);
    TimedLoop(
        state, "BM_GetScene/grpc-stub",
        [&](int64_t) {
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
          v1::Scene out;
          return stub->GetScene(&ctx, request, &out);
        },
        [&](int64_t, const grpc::Status& got) { return client::FromGrpc(got); });
  });
  add("BM_GetScene/in-process", [this](benchmark::State& state) {
    TimedLoop(
        state, "BM_GetScene/in-process",
        [&](int64_t) -> absl::StatusOr<v1::Scene> {
          CLASH_ASSIGN_OR_RETURN(std::shared_ptr<server::Scene> scene, scenes_->Get(scene_->id()));
          std::shared_lock lock(scene->mu);
          v1::Scene out;
          scene->ToProto(&out);
          return out;
        },
        [&](int64_t, const absl::StatusOr<v1::Scene>& got) { return got.status(); });
  });
  // BM_<query>/grpc and BM_<query>/in-process: the same request through the client and in
  // process, every answer compared with the checked one (key(i) for iteration i).
  auto both = [&add](const std::string& query, auto grpc_run, auto local_run, auto key) {
    for (const bool grpc : {true, false}) {
      const std::string name = absl::StrCat("BM_", query, grpc ? "/grpc" : "/in-process");
      add(name, [=](benchmark::State& state) {
        auto verify = [&](int64_t i, const auto& got) { return Expect(query, got, key(i)); };
        if (grpc) {
          TimedLoop(state, name, grpc_run, verify);
        } else {
          TimedLoop(state, name, local_run, verify);
        }
      });
    }
  };
  // BM_<query>/<mode>: an in-process run alone (no gRPC twin), every answer compared with the
  // checked one; mode "one-thread": on the calling thread alone (no helper thread).
  auto local = [&add](const std::string& query, const std::string& mode, auto run, auto key) {
    const std::string name = absl::StrCat("BM_", query, "/", mode);
    add(name, [=](benchmark::State& state) {
      TimedLoop(state, name, run,
                [&](int64_t i, const auto& got) { return Expect(query, got, key(i)); });
    });
  };
  // 1. The pair, repeated: the scene's pair cache answers after the first call.
  both(
      "Pair", [this](int64_t) { return client_->CheckInterference(pair_request_); },
      [this](int64_t) { return LocalInterference(pair_request_); },
      [this](int64_t) -> const std::string& { return pair_key_; });
  // The pair with a tolerance no earlier query used: the narrow phase runs every time.
  both(
      "PairFresh", [this](int64_t) { return client_->CheckInterference(FreshPairRequest()); },
      [this](int64_t) { return LocalInterference(FreshPairRequest()); },
      [this](int64_t) -> const std::string& { return pair_fresh_key_; });
  // 2. One ray that hits, against every instance.
  both(
      "Pick", [this](int64_t) { return client_->PickRays(pick_request_); },
      [this](int64_t) { return LocalPick(pick_request_); },
      [this](int64_t) -> const std::string& { return pick_key_; });
  // The whole scene, every pair classified afresh (what a batch check of an assembly does).
  for (const bool alone : {false, true}) {
    local(
        "WholeScene", alone ? "one-thread" : "in-process",
        [this, alone](int64_t) { return LocalInterference(FreshWholeSceneRequest(), alone); },
        [this](int64_t) -> const std::string& { return whole_fresh_key_; });
  }
  // A one-ray pick while another client keeps checking the whole scene (every pair afresh):
  // what an interactive user sees beside a batch job. With helpers the batch check holds the
  // second slot too, and a pick waits for the helper's current pair.
  add("BM_PickUnderLoad/grpc", [this](benchmark::State& state) {
    client::ClientOptions options;
    options.target = absl::StrCat("127.0.0.1:", server_->port());
    auto batch = client::Client::Connect(options);
    if (!batch.ok()) {
      state.SkipWithError(std::string(batch.status().message()).c_str());
      return;
    }
    std::atomic<bool> done{false};
    std::atomic<int> batch_checks{0};
    std::thread load([&] {
      while (!done.load()) {
        v1::InterferenceRequest r;
        r.set_scene_id(scene_id_);
        r.set_page_size(10000);
        const double k = static_cast<double>(batch_checks.fetch_add(1) + 1);
        r.mutable_tolerances()->set_contact_tolerance_mm(pair_tolerance_mm_ * (1 + 1e-9 * k));
        (void)(*batch)->CheckInterference(r);
      }
    });
    TimedLoop(
        state, "BM_PickUnderLoad/grpc", [&](int64_t) { return client_->PickRays(pick_request_); },
        [&](int64_t, const auto& got) { return Expect("PickUnderLoad", got, pick_key_); });
    done = true;
    load.join();
    state.counters["batch_checks"] = batch_checks.load();
  });
  // 256 rays in one request.
  both(
      "PickBatch", [this](int64_t) { return client_->PickRays(pick_batch_request_); },
      [this](int64_t) { return LocalPick(pick_batch_request_); },
      [this](int64_t) -> const std::string& { return pick_batch_key_; });
  local(
      "PickBatch", "one-thread", [this](int64_t) { return LocalPick(pick_batch_request_, true); },
      [this](int64_t) -> const std::string& { return pick_batch_key_; });
  // Clearance of the dragged instance (first move pose) against every other, and the smallest
  // distance between any two instances of the scene.
  both(
      "Distance", [this](int64_t) { return client_->ComputeDistance(distance_request_); },
      [this](int64_t) { return LocalDistance(distance_request_); },
      [this](int64_t) -> const std::string& { return distance_key_; });
  both(
      "DistanceWholeScene",
      [this](int64_t) { return client_->ComputeDistance(whole_distance_request_); },
      [this](int64_t) { return LocalDistance(whole_distance_request_); },
      [this](int64_t) -> const std::string& { return whole_distance_key_; });
  // 3. Move one instance (pose override, nothing stored) and check it against the scene, with
  // the full depth and with the depth for the class only (the same clashes and classes).
  const std::pair<const char*, const std::vector<v1::InterferenceRequest>*> kMoves[] = {
      {"MoveCheck", &move_requests_}, {"MoveCheckClass", &move_class_requests_}};
  for (const auto& [query, requests] : kMoves) {
    both(
        query,
        [this, requests](int64_t i) {
          return client_->CheckInterference((*requests)[i % kMovePoses]);
        },
        [this, requests](int64_t i) { return LocalInterference((*requests)[i % kMovePoses]); },
        [this](int64_t i) -> const std::string& { return move_keys_[i % kMovePoses]; });
    local(
        query, "one-thread",
        [this, requests](int64_t i) {
          return LocalInterference((*requests)[i % kMovePoses], true);
        },
        [this](int64_t i) -> const std::string& { return move_keys_[i % kMovePoses]; });
  }
  // The one-thread class-only move-and-check on a worker thread woken for each call: the cost
  // of the two thread wake-ups a call through gRPC has too, without gRPC.
  add("BM_MoveCheckClass/handoff", [this](benchmark::State& state) {
    std::mutex mu;
    std::condition_variable cv;
    int64_t job = -1;  // the pose to check; -1: none
    bool quit = false;
    std::optional<absl::StatusOr<v1::InterferenceResponse>> result;
    std::thread worker([&] {
      std::unique_lock lock(mu);
      while (true) {
        cv.wait(lock, [&] { return job >= 0 || quit; });
        if (quit) return;
        const int64_t i = std::exchange(job, -1);
        lock.unlock();
        auto r = LocalInterference(move_class_requests_[i % kMovePoses], true);
        lock.lock();
        result = std::move(r);
        cv.notify_all();
      }
    });
    TimedLoop(
        state, "BM_MoveCheckClass/handoff",
        [&](int64_t i) {
          std::unique_lock lock(mu);
          job = i;
          result.reset();
          cv.notify_all();
          cv.wait(lock, [&] { return result.has_value(); });
          return std::move(*result);
        },
        [&](int64_t i, const auto& got) {
          return Expect("MoveCheckClass", got, move_keys_[i % kMovePoses]);
        });
    {
      std::lock_guard lock(mu);
      quit = true;
    }
    cv.notify_all();
    worker.join();
  });
  add("BM_MoveCheck/fcl", [this](benchmark::State& state) {
    TimedLoop(
        state, "BM_MoveCheck/fcl", [&](int64_t i) { return FclMove(i % kMovePoses); },
        [&](int64_t i, const std::set<uint64_t>& got) {
          return got == fcl_keys_[i % kMovePoses]
                     ? absl::OkStatus()
                     : absl::InternalError("FCL's answer changed while timing");
        });
    fcl_moved_->setTransform(ToFcl(moved_X_WP_));
    fcl_moved_->computeAABB();
    fcl_manager_->update(fcl_moved_);
  });
  // The stored move: SetPoses (durable write) + CheckInterference, two calls. Last, as it
  // leaves the instance moved (within kMoveShift of its place) on the server.
  auto stored = [this](const std::string& name, bool grpc) {
    return [this, name, grpc](benchmark::State& state) {
      std::vector<double> write_us;
      TimedLoop(
          state, name,
          [&](int64_t i) {
            double us = 0;
            const v1::Pose& pose = move_poses_[i % kMovePoses];
            auto r = grpc ? GrpcStoredMove(pose, &us) : LocalStoredMove(pose, &us);
            write_us.push_back(us);
            return r;
          },
          [&](int64_t i, const auto& got) {
            return Expect("stored move", got, move_keys_[i % kMovePoses]);
          });
      const Stats w = Summarize(std::move(write_us));
      state.counters["write_p50_us"] = w.p50_us;
      state.counters["write_p99_us"] = w.p99_us;
      Results()[name + ":write"] = w;
    };
  };
  add("BM_StoredMoveCheck/grpc", stored("BM_StoredMoveCheck/grpc", true));
  add("BM_StoredMoveCheck/in-process", stored("BM_StoredMoveCheck/in-process", false));
}

void World::Stop() {
  client_.reset();
  if (server_) {
    server_->Shutdown();
    server_->Wait();
    server_.reset();
  }
  scene_.reset();
  scenes_.reset();
  parts_.reset();
  if (!tmp_.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
    tmp_.clear();
  }
}

// ---------------------------------------------------------------------------------------------
// The closing table

std::string Cell(const std::string& name, bool p99) {
  auto it = Results().find(name);
  if (it == Results().end() || it->second.samples == 0) return "-";
  return p99 ? absl::StrFormat("%.1f / %.1f", it->second.p50_us, it->second.p99_us)
             : absl::StrFormat("%.1f", it->second.p50_us);
}

void PrintTable() {
  struct Row {
    const char* label;
    const char* query;
  };
  constexpr Row kRows[] = {
      {"GetScene (floor: no query)", "GetScene"},
      {"pair, repeated (pair cache)", "Pair"},
      {"pair, fresh tolerance (narrow phase)", "PairFresh"},
      {"ray pick, 1 ray", "Pick"},
      {"ray pick, 256 rays", "PickBatch"},
      {"distance, dragged instance vs the scene", "Distance"},
      {"distance, any two instances", "DistanceWholeScene"},
      {"move-and-check (override)", "MoveCheck"},
      {"move-and-check, depth for the class only", "MoveCheckClass"},
      {"SetPoses + check (stored)", "StoredMoveCheck"},
      {"whole scene, every pair afresh", "WholeScene"},
  };
  std::fprintf(stderr,
               "\n| query | gRPC p50 / p99 us | in-process p50 / p99 us | overhead p50 us | "
               "one thread p50 / p99 us | FCL p50 / p99 us |\n|---|---|---|---|---|---|\n");
  for (const Row& row : kRows) {
    const std::string base = absl::StrCat("BM_", row.query, "/");
    auto grpc = Results().find(base + "grpc");
    auto local = Results().find(base + "in-process");
    std::string overhead = "-";
    if (grpc != Results().end() && local != Results().end() && grpc->second.samples &&
        local->second.samples) {
      overhead = absl::StrFormat("%.1f", grpc->second.p50_us - local->second.p50_us);
    }
    std::fprintf(stderr, "| %s | %s | %s | %s | %s | %s |\n", row.label,
                 Cell(base + "grpc", true).c_str(), Cell(base + "in-process", true).c_str(),
                 overhead.c_str(), Cell(base + "one-thread", true).c_str(),
                 Cell(base + "fcl", true).c_str());
  }
  if (Results().contains("BM_PickUnderLoad/grpc")) {
    std::fprintf(stderr,
                 "ray pick, 1 ray, through gRPC while another client checks the whole scene: "
                 "p50 / p99 %s us\n",
                 Cell("BM_PickUnderLoad/grpc", true).c_str());
  }
  if (Results().contains("BM_GetScene/grpc-stub")) {
    std::fprintf(stderr, "GetScene on a bare generated stub: p50 / p99 %s us\n",
                 Cell("BM_GetScene/grpc-stub", true).c_str());
  }
  for (const char* lib : {"grpc", "in-process"}) {
    const std::string name = absl::StrCat("BM_StoredMoveCheck/", lib, ":write");
    if (Results().contains(name)) {
      std::fprintf(stderr, "stored move, the write alone (%s): p50 / p99 %s us\n", lib,
                   Cell(name, true).c_str());
    }
  }
}

}  // namespace
}  // namespace clash::bench

int main(int argc, char** argv) {
  // Our flags out of argv; a default minimum time per benchmark (p99 needs many samples).
  bool check_only = false;
  bool move_poses_once = false;  // with --check-only: then every move pose once (RunMovePosesOnce)
  // Off as clashd has it (server/src/main.cc), unless --deadlock-detection asks for Debian's
  // default.
  bool deadlock_detection = false;
  bool min_time = false;
  int tiles = 0;
  int server_helpers = -1;
  int cpu_latency_us = -1;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    // "--name=<int>": true (and *out set) when arg is that flag.
    auto int_flag = [&arg](std::string_view prefix, int* out) {
      if (!arg.starts_with(prefix)) return false;
      *out = std::atoi(arg.substr(prefix.size()).data());
      return true;
    };
    if (arg == "--check-only") {
      check_only = true;
    } else if (arg == "--move-poses-once") {
      move_poses_once = true;
    } else if (arg == "--deadlock-detection") {
      deadlock_detection = true;
    } else if (!int_flag("--tiles=", &tiles) && !int_flag("--query-helpers=", &server_helpers) &&
               !int_flag("--cpu-latency-us=", &cpu_latency_us)) {
      min_time |= arg.starts_with("--benchmark_min_time");
      args.push_back(argv[i]);
    }
  }
  std::string default_min_time = "--benchmark_min_time=2";
  if (!min_time) args.push_back(default_min_time.data());
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;

  if (!deadlock_detection) absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  clash::bench::World world(tiles, server_helpers, cpu_latency_us);
  absl::Status st = world.Build();
  if (st.ok()) st = world.Check();
  if (!st.ok()) {
    std::fprintf(stderr, "clash_service_bench: FAILED: %s\n", st.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "clash_service_bench: all agreement checks passed\n");
  if (check_only) {
    if (!move_poses_once) return 0;
    st = world.RunMovePosesOnce();
    if (!st.ok()) std::fprintf(stderr, "clash_service_bench: FAILED: %s\n", st.ToString().c_str());
    return st.ok() ? 0 : 1;
  }
  world.Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  clash::bench::PrintTable();
  return 0;
}
