// clashctl end to end: clash::clashctl::Run against fake clash.v1 services on a local port. The
// fakes record the requests clashctl sends and answer canned responses, so these tests check
// what each command puts on the wire, what it prints and which exit code it returns.
#include <gmock/gmock.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clash/client/client.h"
#include "clash/v1/parts.grpc.pb.h"
#include "clash/v1/queries.grpc.pb.h"
#include "clash/v1/scenes.grpc.pb.h"
#include "clash/v1/sequences.grpc.pb.h"
#include "clashctl/cli.h"
#include "clashctl/format.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "testing/temp_dir.h"

namespace clash::clashctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Everything the fakes received, and what they answer.
struct Record {
  std::mutex mu;
  v1::ImportCadHeader import_header;
  uint64_t import_bytes = 0;
  v1::AddInstancesRequest add;
  v1::SetPosesRequest poses;
  v1::SetInstancesEnabledRequest enabled;
  v1::SetGroupRequest group;
  v1::InterferenceRequest interference;
  v1::DistanceRequest distance;
  v1::PickRequest pick;
  // Calls of every RPC the fakes serve (reads included), and of those they do not fake.
  int calls = 0;
  // Answers.
  std::vector<v1::Instance> instances;
  // Listings (ListParts, ListScenes, ListInstances, CheckInterference): while list_token_left
  // > 0, every page names list_token as the next one (a server whose listing never advances,
  // bounded so that a client that follows it still ends).
  std::string list_token = "again";
  int list_token_left = 0;
  // ListInstances, when not empty: two pages (instance 1, then 2) with these scene versions,
  // one per call in turn (the last repeats); list_instances_calls counts the calls.
  std::vector<uint64_t> instance_versions;
  int list_instances_calls = 0;
  v1::InterferenceResponse interference_answer;
  grpc::health::v1::HealthCheckResponse::ServingStatus health =
      grpc::health::v1::HealthCheckResponse::SERVING;
};

// The next page token of a listing page (see Record::list_token).
std::string NextPageToken(Record* r) {
  if (r->list_token_left <= 0) return "";
  --r->list_token_left;
  return r->list_token;
}

// Counts a call of an RPC the fakes do not answer, and refuses it (UNIMPLEMENTED).
grpc::Status NotFaked(Record* r) {
  std::lock_guard lock(r->mu);
  ++r->calls;
  return {grpc::StatusCode::UNIMPLEMENTED, "not faked"};
}

v1::Part SamplePart() {
  v1::Part p;
  p.set_part_id("p00ff");
  p.set_name("bolt");
  p.set_triangle_count(994);
  p.set_closed(true);
  p.set_deflection_mm(0.01);
  p.mutable_hierarchy()->set_aabb_nodes(108);
  p.mutable_hierarchy()->set_obb_nodes(549);
  return p;
}

class FakeParts final : public v1::PartService::Service {
 public:
  explicit FakeParts(Record* r) : r_(r) {}
  grpc::Status ImportCad(grpc::ServerContext*, grpc::ServerReader<v1::ImportCadRequest>* reader,
                         v1::ImportCadResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    v1::ImportCadRequest msg;
    while (reader->Read(&msg)) {
      if (msg.has_header()) r_->import_header = msg.header();
      r_->import_bytes += msg.chunk().size();
    }
    v1::Assembly* a = response->mutable_assembly();
    a->set_assembly_id("a0123");
    a->set_file_name(r_->import_header.file_name());
    a->mutable_report()->set_roots_total(1);
    a->mutable_report()->set_roots_transferred(1);
    a->mutable_report()->set_faces_total(12);
    a->mutable_report()->set_faces_meshed(12);
    a->mutable_report()->set_triangles(994);
    a->mutable_report()->add_warnings("face 7: degenerate");
    *response->add_parts() = SamplePart();
    return grpc::Status::OK;
  }
  grpc::Status GetPart(grpc::ServerContext*, const v1::GetPartRequest* request,
                       v1::Part* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    if (request->part_id() != "p00ff") {
      return {grpc::StatusCode::NOT_FOUND, "no part " + request->part_id()};
    }
    *response = SamplePart();
    return grpc::Status::OK;
  }
  grpc::Status GetAssembly(grpc::ServerContext*, const v1::GetAssemblyRequest* request,
                           v1::Assembly* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    response->set_assembly_id(request->assembly_id());
    response->add_instances()->set_path("top/sub/bolt");
    return grpc::Status::OK;
  }
  grpc::Status UploadMesh(grpc::ServerContext*, const v1::UploadMeshRequest*, v1::Part*) override {
    return NotFaked(r_);
  }
  grpc::Status GetPartMesh(grpc::ServerContext*, const v1::GetPartMeshRequest*,
                           v1::PartMesh*) override {
    return NotFaked(r_);
  }
  grpc::Status ListParts(grpc::ServerContext*, const v1::ListPartsRequest*,
                         v1::ListPartsResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    *response->add_parts() = SamplePart();
    response->set_next_page_token(NextPageToken(r_));
    return grpc::Status::OK;
  }

 private:
  Record* r_;
};

class FakeScenes final : public v1::SceneService::Service {
 public:
  explicit FakeScenes(Record* r) : r_(r) {}
  grpc::Status CreateScene(grpc::ServerContext*, const v1::CreateSceneRequest* request,
                           v1::Scene* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    response->set_scene_id("s42");
    response->set_name(request->name());
    return grpc::Status::OK;
  }
  grpc::Status GetScene(grpc::ServerContext*, const v1::GetSceneRequest* request,
                        v1::Scene* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    if (request->scene_id() != "s42") {
      return {grpc::StatusCode::NOT_FOUND, "no scene " + request->scene_id()};
    }
    response->set_scene_id("s42");
    response->set_name("cell");
    response->set_version(3);
    response->set_instance_count(1);
    (*response->mutable_group_sizes())["bolts"] = 1;
    return grpc::Status::OK;
  }
  grpc::Status ListScenes(grpc::ServerContext*, const v1::ListScenesRequest*,
                          v1::ListScenesResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    response->add_scenes()->set_scene_id("s1");
    response->add_scenes()->set_scene_id("s2");
    response->set_next_page_token(NextPageToken(r_));
    return grpc::Status::OK;
  }
  grpc::Status DeleteScene(grpc::ServerContext*, const v1::DeleteSceneRequest* request,
                           v1::DeleteSceneResponse*) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    if (request->scene_id() != "s42") {
      return {grpc::StatusCode::NOT_FOUND, "no scene " + request->scene_id()};
    }
    return grpc::Status::OK;
  }
  grpc::Status AddInstances(grpc::ServerContext*, const v1::AddInstancesRequest* request,
                            v1::AddInstancesResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    r_->add = *request;
    for (uint64_t id : {7, 8}) {
      v1::Instance* i = response->add_instances();
      i->set_instance_id(id);
      i->set_path("inst" + std::to_string(id));
      i->set_enabled(true);
    }
    response->set_scene_version(5);
    return grpc::Status::OK;
  }
  grpc::Status ListInstances(grpc::ServerContext*, const v1::ListInstancesRequest* request,
                             v1::ListInstancesResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    const std::size_t call = static_cast<std::size_t>(r_->list_instances_calls++);
    if (!r_->instance_versions.empty()) {
      response->set_scene_version(
          r_->instance_versions[std::min(call, r_->instance_versions.size() - 1)]);
      const bool first = request->page_token().empty();
      response->add_instances()->set_instance_id(first ? 1 : 2);
      if (first) response->set_next_page_token("1");
      return grpc::Status::OK;
    }
    for (const v1::Instance& i : r_->instances) *response->add_instances() = i;
    response->set_next_page_token(NextPageToken(r_));
    return grpc::Status::OK;
  }
  grpc::Status SetPoses(grpc::ServerContext*, const v1::SetPosesRequest* request,
                        v1::SceneUpdateResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    r_->poses = *request;
    response->set_scene_version(6);
    return grpc::Status::OK;
  }
  grpc::Status SetInstancesEnabled(grpc::ServerContext*, const v1::SetInstancesEnabledRequest* req,
                                   v1::SceneUpdateResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    r_->enabled = *req;
    response->set_scene_version(7);
    return grpc::Status::OK;
  }
  grpc::Status SetGroup(grpc::ServerContext*, const v1::SetGroupRequest* request,
                        v1::SceneUpdateResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    r_->group = *request;
    response->set_scene_version(8);
    return grpc::Status::OK;
  }
  grpc::Status RemoveInstances(grpc::ServerContext*, const v1::RemoveInstancesRequest*,
                               v1::SceneUpdateResponse*) override {
    return NotFaked(r_);
  }

 private:
  Record* r_;
};

class FakeQueries final : public v1::QueryService::Service {
 public:
  explicit FakeQueries(Record* r) : r_(r) {}
  grpc::Status CheckInterference(grpc::ServerContext* ctx, const v1::InterferenceRequest* request,
                                 v1::InterferenceResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    r_->interference = *request;
    if (request->scene_id() == "gone") return {grpc::StatusCode::NOT_FOUND, "no scene gone"};
    if (request->scene_id() == "busy" || request->scene_id() == "huge") {
      // A full queue is marked transient; an answer above a limit is not.
      if (request->scene_id() == "busy") ctx->AddTrailingMetadata("clash-retryable", "1");
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, "limit"};
    }
    *response = r_->interference_answer;
    response->set_next_page_token(NextPageToken(r_));
    return grpc::Status::OK;
  }
  grpc::Status ComputeDistance(grpc::ServerContext*, const v1::DistanceRequest* request,
                               v1::DistanceResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    r_->distance = *request;
    response->set_found(true);
    response->set_distance_mm(2.5);
    response->set_path_a("a");
    response->set_path_b("b");
    return grpc::Status::OK;
  }
  grpc::Status PickRays(grpc::ServerContext*, const v1::PickRequest* request,
                        v1::PickResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    r_->pick = *request;
    for (int i = 0; i < request->rays_size(); ++i) {
      v1::PickHit* hit = response->add_hits();
      hit->set_hit(i == 0);
      hit->set_path("as1/plate");
    }
    return grpc::Status::OK;
  }

 private:
  Record* r_;
};

class FakeSequences final : public v1::SequenceService::Service {
 public:
  explicit FakeSequences(Record* r) : r_(r) {}
  // Scene "partial": one step's result (blocked), then the deadline passes.
  grpc::Status ValidateSequence(grpc::ServerContext*, const v1::ValidateSequenceRequest* request,
                                grpc::ServerWriter<v1::ValidateSequenceEvent>* writer) override {
    if (request->scene_id() != "partial") return NotFaked(r_);
    {
      std::lock_guard lock(r_->mu);
      ++r_->calls;
    }
    v1::ValidateSequenceEvent e;
    v1::StepResult* step = e.mutable_step();
    step->set_step_index(0);
    step->set_name("insert <pin>");
    step->set_blocked_t(0.25);
    step->add_blockers()->set_path("as1/plate");
    writer->Write(e);
    return {grpc::StatusCode::DEADLINE_EXCEEDED, "the sequence ran past its deadline"};
  }

 private:
  Record* r_;
};

class FakeHealth final : public grpc::health::v1::Health::Service {
 public:
  explicit FakeHealth(Record* r) : r_(r) {}
  grpc::Status Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override {
    std::lock_guard lock(r_->mu);
    ++r_->calls;
    if (request->service() == "nope") return {grpc::StatusCode::NOT_FOUND, "unknown service"};
    response->set_status(r_->health);
    return grpc::Status::OK;
  }

 private:
  Record* r_;
};

v1::Clash MakeClash(v1::ClashClass c, bool suppressed) {
  v1::Clash clash;
  clash.set_clash_id("c1");
  clash.set_path_a("as1/bolt");
  clash.set_path_b("as1/plate");
  clash.set_clash_class(c);
  clash.set_depth_mm(0.75);
  clash.set_suppressed(suppressed);
  if (suppressed) clash.set_suppressed_by("fit");
  return clash;
}

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

class ClashctlCli : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&parts_);
    builder.RegisterService(&scenes_);
    builder.RegisterService(&queries_);
    builder.RegisterService(&sequences_);
    builder.RegisterService(&health_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    server_->Shutdown();
    for (const std::string& path : temp_files_) std::remove(path.c_str());
  }

  // clashctl --server <fake> args...
  Result Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {"clashctl", "--server", "127.0.0.1:" + std::to_string(port_)});
    std::ostringstream out;
    std::ostringstream err;
    Result r;
    r.code = clashctl::Run(args, out, err);
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  // A file name of this process and test (ctest runs tests in parallel processes).
  // Removed after the test.
  std::string TempPath(const std::string& name) {
    temp_files_.push_back(::testing::TempDir() + std::to_string(getpid()) + "_" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                          name);
    return temp_files_.back();
  }

  // An earlier run's (passing) JUnit report at `path`.
  static void WriteStaleReport(const std::string& path) {
    std::ofstream(path, std::ios::trunc) << "<testsuites><testsuite name=\"old\" tests=\"1\"/>";
  }

  static std::string ReadText(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // The client library on the fakes.
  std::unique_ptr<client::Client> FakeClient() {
    client::ClientOptions options;
    options.target = "127.0.0.1:" + std::to_string(port_);
    absl::StatusOr<std::unique_ptr<client::Client>> client = client::Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  Record record_;
  FakeParts parts_{&record_};
  FakeScenes scenes_{&record_};
  FakeQueries queries_{&record_};
  FakeSequences sequences_{&record_};
  FakeHealth health_{&record_};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::string> temp_files_;
};

TEST_F(ClashctlCli, CheckWithAHardClashExitsOneAndSendsTheSelectorsAndRules) {
  record_.interference_answer.add_clashes()->CopyFrom(MakeClash(v1::HARD, false));
  record_.interference_answer.mutable_summary()->set_hard(1);
  const Result r =
      Cli({"check", "s42", "--a", "group:bolts", "--b", "3,path:as1/plate", "--clearance-mm", "0.5",
           "--allow", "fit=group:bolts/group:nuts:hard", "--allow", "touch=all:contact"});
  EXPECT_EQ(r.code, kExitFound) << r.err;
  EXPECT_THAT(r.out, HasSubstr("HARD"));
  EXPECT_THAT(r.out, HasSubstr("as1/bolt"));
  EXPECT_THAT(r.out, HasSubstr("0.750"));
  EXPECT_THAT(r.out, HasSubstr("HARD 1, CONTAINED 0"));
  const v1::InterferenceRequest& q = record_.interference;
  EXPECT_EQ(q.scene_id(), "s42");
  // The largest page: each page runs the check again on the server.
  EXPECT_EQ(q.page_size(), 10000);
  EXPECT_THAT(q.set_a().groups(), ElementsAre("bolts"));
  ASSERT_TRUE(q.has_set_b());
  EXPECT_THAT(q.set_b().instance_ids(), ElementsAre(3u));
  EXPECT_THAT(q.set_b().path_prefixes(), ElementsAre("as1/plate"));
  EXPECT_FALSE(q.tolerances().has_contact_tolerance_mm());
  EXPECT_EQ(q.tolerances().clearance_mm(), 0.5);
  ASSERT_EQ(q.allowed_size(), 2);
  EXPECT_EQ(q.allowed(0).name(), "fit");
  EXPECT_THAT(q.allowed(0).b().groups(), ElementsAre("nuts"));
  EXPECT_THAT(q.allowed(0).classes(), ElementsAre(v1::HARD));
  EXPECT_THAT(q.allowed(1).classes(), ElementsAre(v1::CONTACT));
}

TEST_F(ClashctlCli, CheckWithoutBLeavesSetBUnsetAndSendsAnExplicitTolerance) {
  const Result r = Cli({"check", "s42", "--contact-tolerance-mm", "0.05"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_FALSE(record_.interference.has_set_b());
  EXPECT_EQ(record_.interference.set_a().ByteSizeLong(), 0u);
  ASSERT_TRUE(record_.interference.tolerances().has_contact_tolerance_mm());
  EXPECT_EQ(record_.interference.tolerances().contact_tolerance_mm(), 0.05);
  EXPECT_EQ(record_.interference.depth_estimate(), v1::DEPTH_ESTIMATE_UNSPECIFIED);
}

// --depth class asks for DEPTH_ESTIMATE_CLASS_ONLY. When the answer says the depths were
// resolved for the class only, the summary says so, and the table and the JUnit report show a
// HARD depth above 1.25 τ as a lower bound and a crossing CONTACT's depth 0 as below 0.75 τ;
// a depth within [0.75 τ, 1.25 τ] is exact and shown plainly.
TEST_F(ClashctlCli, CheckDepthForTheClassOnly) {
  v1::Clash* deep = record_.interference_answer.add_clashes();
  *deep = MakeClash(v1::HARD, false);  // depth 0.75 mm
  deep->set_contact_tolerance_mm(0.1);
  v1::Clash* near = record_.interference_answer.add_clashes();
  *near = MakeClash(v1::HARD, false);
  near->set_clash_id("c2");
  near->set_path_b("as1/rod");
  near->set_depth_mm(0.11);
  near->set_contact_tolerance_mm(0.1);
  v1::Clash* shallow = record_.interference_answer.add_clashes();
  *shallow = MakeClash(v1::CONTACT, false);
  shallow->set_clash_id("c3");
  shallow->set_path_b("as1/nut");
  shallow->set_depth_mm(0);
  shallow->set_contact_tolerance_mm(0.1);
  record_.interference_answer.mutable_summary()->set_hard(2);
  record_.interference_answer.mutable_summary()->set_contact(1);
  record_.interference_answer.set_depth_estimate(v1::DEPTH_ESTIMATE_CLASS_ONLY);
  const std::string junit = TempPath("class_only.xml");
  const Result r = Cli({"check", "s42", "--depth", "class", "--all-classes", "--junit", junit});
  EXPECT_EQ(r.code, kExitFound) << r.err;
  EXPECT_EQ(record_.interference.depth_estimate(), v1::DEPTH_ESTIMATE_CLASS_ONLY);
  EXPECT_THAT(r.out, HasSubstr("depths for the class only"));
  EXPECT_THAT(r.out, HasSubstr(">= 0.750"));
  EXPECT_THAT(r.out, HasSubstr("< 0.075"));
  EXPECT_THAT(r.out, HasSubstr(" 0.110 "));
  EXPECT_THAT(r.out, Not(HasSubstr(">= 0.110")));
  std::ifstream in(junit);
  std::stringstream xml;
  xml << in.rdbuf();
  EXPECT_THAT(xml.str(), HasSubstr("message=\"HARD depth &gt;= 0.750 mm\""));
  EXPECT_THAT(xml.str(), HasSubstr("message=\"HARD depth 0.110 mm\""));

  record_.interference_answer.set_depth_estimate(v1::DEPTH_ESTIMATE_FULL);
  const Result full = Cli({"check", "s42", "--depth", "full", "--all-classes"});
  EXPECT_EQ(full.code, kExitFound) << full.err;
  EXPECT_EQ(record_.interference.depth_estimate(), v1::DEPTH_ESTIMATE_UNSPECIFIED);
  EXPECT_THAT(full.out, Not(HasSubstr("class only")));
  EXPECT_THAT(full.out, Not(HasSubstr(">=")));
  EXPECT_THAT(full.out, HasSubstr(" 0.750 "));
}

TEST_F(ClashctlCli, CheckExitCodeFollowsSuppressionAndClass) {
  record_.interference_answer.add_clashes()->CopyFrom(MakeClash(v1::HARD, true));
  record_.interference_answer.mutable_summary()->set_suppressed(1);
  EXPECT_EQ(Cli({"check", "s42"}).code, kExitOk);

  record_.interference_answer.add_clashes()->CopyFrom(MakeClash(v1::CONTACT, false));
  record_.interference_answer.mutable_summary()->set_contact(1);
  const Result contacts = Cli({"check", "s42"});
  EXPECT_EQ(contacts.code, kExitOk);
  EXPECT_THAT(contacts.out, HasSubstr("1 CONTACT row not shown"));
  EXPECT_THAT(Cli({"check", "s42", "--all-classes"}).out, HasSubstr("CONTACT  as1/bolt"));

  record_.interference_answer.add_clashes()->CopyFrom(MakeClash(v1::CONTAINED, false));
  record_.interference_answer.mutable_summary()->set_contained(1);
  EXPECT_EQ(Cli({"check", "s42", "-q"}).code, kExitFound);
}

TEST_F(ClashctlCli, CheckJsonAndJunit) {
  record_.interference_answer.add_clashes()->CopyFrom(MakeClash(v1::HARD, false));
  record_.interference_answer.mutable_summary()->set_hard(1);
  const std::string junit = TempPath("clashctl_cli_junit.xml");
  const Result r = Cli({"--json", "check", "s42", "--junit", junit});
  EXPECT_EQ(r.code, kExitFound);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["clashes"][0]["clash_class"], "HARD");
  EXPECT_EQ(j["summary"]["hard"], "1");
  std::ifstream in(junit);
  std::stringstream xml;
  xml << in.rdbuf();
  EXPECT_THAT(xml.str(), HasSubstr("<testsuite name=\"interference s42\""));
  EXPECT_THAT(xml.str(), HasSubstr("name=\"c1: as1/bolt &lt;-&gt; as1/plate\""));
  EXPECT_THAT(xml.str(), HasSubstr("<failure type=\"HARD\""));

  const Result unwritable = Cli({"check", "s42", "--junit", "/nonexistent-dir/x.xml"});
  EXPECT_EQ(unwritable.code, kExitUsage);
  EXPECT_THAT(unwritable.err, HasSubstr("cannot write /nonexistent-dir/x.xml"));
}

// A --junit run whose call fails writes a report of that error over the file, so a CI job
// that publishes JUnit files whatever the exit code never shows an earlier run's (green)
// report; before, the file was left as it was.
TEST_F(ClashctlCli, AFailedCallReplacesTheJunitReportWithItsError) {
  const std::string junit = TempPath("clashctl_cli_failed.xml");
  WriteStaleReport(junit);
  EXPECT_EQ(Cli({"check", "gone", "--junit", junit}).code, kExitError);
  std::string xml = ReadText(junit);
  EXPECT_THAT(xml, Not(HasSubstr("old")));
  EXPECT_THAT(xml, HasSubstr("<testsuite name=\"interference gone\" tests=\"1\" failures=\"0\" "
                             "errors=\"1\">"));
  EXPECT_THAT(xml, HasSubstr("<error type=\"NOT_FOUND\" message=\"clashctl: NOT_FOUND: no scene "
                             "gone\"/>"));
  WriteStaleReport(junit);
  const std::string sequence = TempPath("clashctl_cli_failed.json");
  std::ofstream(sequence, std::ios::trunc) << "{}";
  EXPECT_EQ(Cli({"validate", "s42", sequence, "--junit", junit}).code, kExitError);
  xml = ReadText(junit);
  EXPECT_THAT(xml, Not(HasSubstr("old")));
  EXPECT_THAT(xml, HasSubstr("<testsuite name=\"sequence s42\""));
  EXPECT_THAT(xml, HasSubstr("<error type=\"UNIMPLEMENTED\""));
}

// A sequence whose call fails part-way keeps the steps that came before the failure: the table
// shows them, --json lists them with the error, and the --junit report has them beside a case
// in error (before, all of it was thrown away for the error alone).
TEST_F(ClashctlCli, AValidationThatFailsPartWayReportsTheStepsRun) {
  const std::string junit = TempPath("clashctl_cli_partial.xml");
  const std::string sequence = TempPath("clashctl_cli_partial.json");
  std::ofstream(sequence, std::ios::trunc) << "{}";
  const Result table = Cli({"validate", "partial", sequence, "--junit", junit});
  EXPECT_EQ(table.code, kExitError);
  EXPECT_THAT(table.out, HasSubstr("insert <pin>"));
  EXPECT_THAT(table.out, HasSubstr("BLOCKED     0.2500"));
  EXPECT_THAT(table.err, HasSubstr("DEADLINE_EXCEEDED: the sequence ran past its deadline"));
  const std::string xml = ReadText(junit);
  EXPECT_THAT(xml, HasSubstr("<testsuite name=\"sequence partial\" tests=\"2\" failures=\"1\" "
                             "errors=\"1\">"));
  EXPECT_THAT(xml, HasSubstr("name=\"1 insert &lt;pin&gt;\""));
  EXPECT_THAT(xml, HasSubstr("<failure message=\"blocked at t=0.25\">as1/plate"));
  EXPECT_THAT(xml, HasSubstr("<error type=\"DEADLINE_EXCEEDED\""));
  const Result json = Cli({"--json", "validate", "partial", sequence});
  EXPECT_EQ(json.code, kExitError);
  const auto doc = nlohmann::json::parse(json.out);
  ASSERT_EQ(doc["steps"].size(), 1u);
  EXPECT_EQ(doc["steps"][0]["name"], "insert <pin>");
  EXPECT_THAT(doc["error"].get<std::string>(), HasSubstr("DEADLINE_EXCEEDED"));
}

// Once the command line names the --junit file, a failure before the call (a bad argument, an
// unreadable token or TLS file, a value CLI11 cannot convert) replaces the report with one of
// that error too; before, such a run exited 2 and left an earlier run's passing report.
TEST_F(ClashctlCli, AFailureBeforeTheCallReplacesTheJunitReportToo) {
  testing::ScopedEnv no_token("CLASH_TOKEN", "");
  const std::string junit = TempPath("before_call.xml");
  const std::string sequence = TempPath("before_call.json");
  std::ofstream(sequence, std::ios::trunc) << "{}";
  const struct {
    std::vector<std::string> args;
    const char* suite;
    const char* message;
  } cases[] = {
      {{"check", "s42", "--junit", junit, "--allow", "nameless"},
       "interference s42",
       "is not NAME=SEL_A"},
      {{"check", "s42", "--junit", junit, "--depth", "deep"}, "interference s42", "--depth: "},
      {{"check", "s42", "--a", "bolts", "--junit", junit}, "interference s42", "--a: selector"},
      {{"check", "s42", "--junit", junit, "--clearance-mm", "abc"},
       "interference s42",
       "--clearance-mm"},
      {{"--token-file", "/nonexistent-token", "check", "s42", "--junit", junit},
       "interference s42",
       "cannot read a token: cannot read /nonexistent-token"},
      {{"check", "s7", "--junit", junit, "--tls-ca", "/nonexistent-ca"},
       "interference s7",
       "cannot read the CA file"},
      {{"validate", "s42", "/nonexistent.json", "--junit", junit},
       "sequence s42",
       "cannot read /nonexistent.json"},
      {{"validate", "s42", sequence, "--junit", junit, "--token-file", "/dev/null"},
       "sequence s42",
       "/dev/null is not a regular file"},
      {{"--timeout", "0", "validate", "s42", sequence, "--junit", junit},
       "sequence s42",
       "--timeout must be"},
  };
  for (const auto& c : cases) {
    WriteStaleReport(junit);
    const Result r = Cli(c.args);
    EXPECT_EQ(r.code, kExitUsage) << ::testing::PrintToString(c.args) << "\n" << r.err;
    const std::string xml = ReadText(junit);
    EXPECT_THAT(xml, Not(HasSubstr("old"))) << ::testing::PrintToString(c.args);
    EXPECT_THAT(xml, HasSubstr(absl::StrCat("<testsuite name=\"", c.suite,
                                            "\" tests=\"1\" failures=\"0\" errors=\"1\">")))
        << ::testing::PrintToString(c.args);
    EXPECT_THAT(xml, HasSubstr("<error type=\"INVALID_ARGUMENT\" message=\"clashctl: "
                               "INVALID_ARGUMENT: "))
        << ::testing::PrintToString(c.args);
    EXPECT_THAT(xml, HasSubstr(c.message)) << ::testing::PrintToString(c.args);
  }
  EXPECT_EQ(record_.calls, 0);
  // Help is no failure: the report stays.
  WriteStaleReport(junit);
  EXPECT_EQ(Cli({"check", "s42", "--junit", junit, "--help"}).code, kExitOk);
  EXPECT_THAT(ReadText(junit), HasSubstr("old"));
}

// Input files must be regular files of bounded size: /dev/zero as --rays, a sequence file or a
// --token-file grew memory until the process was killed, and a FIFO blocked for ever. Each is
// a usage error now, before any call. (Devices here are /dev/null, which ends at once, so that
// a regression fails instead of exhausting memory; ReadRegularFile's test reads /dev/zero and a
// FIFO.)
TEST_F(ClashctlCli, InputFilesMustBeRegularFilesOfBoundedSize) {
  testing::ScopedEnv no_token("CLASH_TOKEN", "");
  const std::string big_pem = TempPath("big.pem");
  std::ofstream(big_pem, std::ios::binary) << std::string((4 << 20) + 1, 'A');
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"pick", "s42", "--rays", "/dev/null"}, "/dev/null is not a regular file"},
      {{"validate", "s42", "/dev/null"}, "/dev/null is not a regular file"},
      {{"--token-file", "/dev/null", "health"}, "cannot read a token: /dev/null is not a regular"},
      {{"--tls-ca", "/dev/null", "health"}, "cannot read the CA file: /dev/null is not a regular"},
      {{"--tls-ca", big_pem, "health"}, big_pem + " is larger than 4 MiB"},
  };
  for (const auto& c : cases) {
    const Result r = Cli(c.args);
    EXPECT_EQ(r.code, kExitUsage) << ::testing::PrintToString(c.args) << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << ::testing::PrintToString(c.args);
  }
  EXPECT_EQ(record_.calls, 0);
}

// RESOURCE_EXHAUSTED is retried only when the server marks it transient (clash-retryable):
// a query queue that is full may have room later, a request above a limit fails again (an
// upload would be sent again for nothing). Before, both were tried four times.
TEST_F(ClashctlCli, OnlyATransientResourceExhaustedIsRetried) {
  EXPECT_EQ(Cli({"check", "huge"}).code, kExitError);
  EXPECT_EQ(record_.calls, 1);
  EXPECT_EQ(Cli({"check", "busy"}).code, kExitError);
  EXPECT_EQ(record_.calls, 1 + 4);  // the client's default attempts
}

TEST_F(ClashctlCli, UsageErrorsExitTwoWithoutCallingTheServer) {
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"check", "s42", "--a", "bolts"}, "--a: selector item 'bolts'"},
      {{"check", "s42", "--allow", "nameless"}, "is not NAME=SEL_A"},
      {{"check", "s42", "--clearance-mm", "-1"}, "--clearance-mm must be"},
      {{"check", "s42", "--depth", "deep"}, "--depth: 'deep' is neither full nor class"},
      {{"place", "s42", "--part", "p1", "--at", "1,2"}, "--at: expected x,y,z"},
      {{"place", "s42", "--part", "p1", "--rot-deg", "nan,0,0"}, "'nan' is not a finite"},
      {{"place", "s42"}, "exactly one of --part, --assembly"},
      {{"place", "s42", "--assembly", "a1", "--disabled"}, "--part only"},
      {{"move", "s42", "7"}, "give --at, --rot-deg or --quat"},
      {{"move", "s42", "x7", "--at", "1,2,3"}, "'x7' is not an instance id"},
      {{"enable", "s42", "1", "-2"}, ""},
      {{"pick", "s42", "--origin", "0,0,0"}, "--origin and --dir pairs"},
      {{"pick", "s42", "--origin", "0,0,0", "--dir", "0,0,0"}, "direction is zero"},
      {{"pick", "s42", "--rays", "/nonexistent-file"}, "cannot read /nonexistent-file"},
      {{"import", "/nonexistent.step"}, "cannot read /nonexistent.step"},
      {{"info", "s42"}, "neither a part id"},
      {{"--timeout", "0", "health"}, "--timeout must be"},
      {{"validate", "s42", "seq.json", "--html", "r.html", "--html-max-triangles", "-5"},
       "--html-max-triangles"},
      {{"frobnicate", "s1"}, "unknown command 'frobnicate'"},
      {{"scene", "show"}, "SCENE_ID is required"},
      {{}, "A subcommand is required"},
  };
  for (const auto& c : cases) {
    const Result r = Cli(c.args);
    EXPECT_EQ(r.code, kExitUsage) << ::testing::PrintToString(c.args) << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << ::testing::PrintToString(c.args);
    EXPECT_THAT(r.out, IsEmpty());
  }
  EXPECT_EQ(record_.calls, 0);
  EXPECT_EQ(record_.add.ByteSizeLong(), 0u);
}

TEST_F(ClashctlCli, HelpExitsZero) {
  const Result r = Cli({"--help"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_THAT(r.out, HasSubstr("Exit codes:"));
  EXPECT_THAT(r.out, HasSubstr("DEGREES about the fixed X, then Y, then Z"));
}

TEST_F(ClashctlCli, ServerErrorsExitThreeWithTheCodeName) {
  const Result r = Cli({"scene", "show", "s9"});
  EXPECT_EQ(r.code, kExitError);
  EXPECT_EQ(r.err, "clashctl: NOT_FOUND: no scene s9\n");
  EXPECT_EQ(Cli({"info", "p77"}).err, "clashctl: NOT_FOUND: no part p77\n");
}

TEST_F(ClashctlCli, UnreachableServerExitsThree) {
  std::ostringstream out;
  std::ostringstream err;
  // Port 1 on localhost refuses connections at once.
  const int code = clashctl::Run(
      {"clashctl", "--server", "127.0.0.1:1", "--timeout", "5", "scene", "list"}, out, err);
  EXPECT_EQ(code, kExitError);
  EXPECT_THAT(err.str(), HasSubstr("clashctl: UNAVAILABLE: "));
}

TEST_F(ClashctlCli, PlaceSendsPoseGroupsAndPrintsIds) {
  const Result r =
      Cli({"-q", "place", "s42", "--part", "p00ff", "--path", "cell/bolt", "--at=-1,2,3",
           "--rot-deg", "0,0,90", "--group", "bolts", "--group", "m8", "--disabled"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "7\n8\n");
  ASSERT_EQ(record_.add.parts_size(), 1);
  const v1::PartPlacement& p = record_.add.parts(0);
  EXPECT_EQ(p.part_id(), "p00ff");
  EXPECT_EQ(p.path(), "cell/bolt");
  EXPECT_TRUE(p.disabled());
  EXPECT_THAT(p.groups(), ElementsAre("bolts", "m8"));
  EXPECT_EQ(p.pose().translation_mm().x(), -1.0);
  EXPECT_NEAR(p.pose().quaternion().w(), std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(p.pose().quaternion().z(), std::sqrt(0.5), 1e-12);

  const Result assembly = Cli({"place", "s42", "--assembly", "a0123", "--path", "left"});
  EXPECT_EQ(assembly.code, kExitOk);
  EXPECT_THAT(assembly.out, HasSubstr("added 2 instances to scene s42 (version 5)"));
  ASSERT_EQ(record_.add.assemblies_size(), 1);
  EXPECT_EQ(record_.add.assemblies(0).path_prefix(), "left");
}

TEST_F(ClashctlCli, MoveKeepsTheStoredRotationWhenOnlyATranslationIsGiven) {
  v1::Instance stored;
  stored.set_instance_id(7);
  stored.mutable_pose()->mutable_quaternion()->set_w(0.6);
  stored.mutable_pose()->mutable_quaternion()->set_x(0.8);
  stored.mutable_pose()->mutable_translation_mm()->set_x(100);
  record_.instances = {stored};

  // A negative first value is taken as the option's value, not as an option.
  Result r = Cli({"move", "s42", "7", "--at", "-1,2,3"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "moved instance 7; scene version 6\n");
  ASSERT_EQ(record_.poses.poses_size(), 1);
  v1::Pose sent = record_.poses.poses(0).pose();
  EXPECT_EQ(sent.translation_mm().x(), -1.0);
  EXPECT_EQ(sent.quaternion().x(), 0.8);

  r = Cli({"move", "s42", "7", "--quat", "1,0,0,0"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  sent = record_.poses.poses(0).pose();
  EXPECT_EQ(sent.translation_mm().x(), 100.0);
  EXPECT_EQ(sent.quaternion().w(), 1.0);

  r = Cli({"move", "s42", "9", "--at", "0,0,0"});
  EXPECT_EQ(r.code, kExitError);
  EXPECT_EQ(r.err, "clashctl: NOT_FOUND: no instance 9 in scene s42\n");
}

TEST_F(ClashctlCli, EnableDisableAndGroup) {
  EXPECT_EQ(Cli({"disable", "s42", "1", "2"}).out, "disabled 2 instances; scene version 7\n");
  EXPECT_FALSE(record_.enabled.enabled());
  EXPECT_THAT(record_.enabled.instance_ids(), ElementsAre(1u, 2u));
  EXPECT_EQ(Cli({"enable", "s42", "3"}).code, kExitOk);
  EXPECT_TRUE(record_.enabled.enabled());

  EXPECT_EQ(Cli({"group", "s42", "bolts", "4", "5"}).out,
            "group bolts has 2 members; scene version 8\n");
  EXPECT_THAT(record_.group.instance_ids(), ElementsAre(4u, 5u));
  EXPECT_EQ(Cli({"group", "s42", "bolts"}).out, "deleted group bolts; scene version 8\n");
  EXPECT_THAT(record_.group.instance_ids(), IsEmpty());
  EXPECT_EQ(nlohmann::json::parse(Cli({"--json", "enable", "s42", "1"}).out)["scene_version"], "7");
}

TEST_F(ClashctlCli, ImportStreamsTheFileAndAddsTheAssemblyToAScene) {
  const std::string file = TempPath("clashctl_cli_import.step");
  const std::string content(3 << 20, 'x');  // three client chunks
  std::ofstream(file, std::ios::binary) << content;
  const Result r =
      Cli({"import", file, "--deflection-mm", "0.05", "--angular-deflection-rad", "0.2", "--strict",
           "--scene", "s42", "--prefix", "left", "--at", "0,0,10", "--group", "motor"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(record_.import_bytes, content.size());
  EXPECT_EQ(record_.import_header.file_name(), file.substr(file.rfind('/') + 1));
  EXPECT_EQ(record_.import_header.size_bytes(), content.size());
  EXPECT_TRUE(record_.import_header.strict());
  EXPECT_EQ(record_.import_header.tessellation().linear_deflection_mm(), 0.05);
  EXPECT_EQ(record_.import_header.tessellation().angular_deflection_rad(), 0.2);
  ASSERT_EQ(record_.add.assemblies_size(), 1);
  EXPECT_EQ(record_.add.assemblies(0).assembly_id(), "a0123");
  EXPECT_EQ(record_.add.assemblies(0).path_prefix(), "left");
  EXPECT_EQ(record_.add.assemblies(0).pose().translation_mm().z(), 10.0);
  EXPECT_THAT(record_.add.assemblies(0).groups(), ElementsAre("motor"));
  EXPECT_THAT(r.out, HasSubstr("assembly    a0123"));
  EXPECT_THAT(r.out, HasSubstr("faces       12/12 meshed"));
  EXPECT_THAT(r.out, HasSubstr("  - face 7: degenerate"));
  EXPECT_THAT(r.out, HasSubstr("p00ff  bolt"));
  EXPECT_THAT(r.out, HasSubstr("added 2 instances to scene s42 (version 5)"));
  // Not a terminal: one plain progress line.
  EXPECT_THAT(r.err, HasSubstr("uploaded 3.1 MB in "));

  const Result quiet = Cli({"-q", "import", file});
  EXPECT_EQ(quiet.out, "a0123\n");
  EXPECT_THAT(quiet.err, IsEmpty());

  const Result json = Cli({"--json", "import", file, "--scene", "s42"});
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["import"]["assembly"]["assembly_id"], "a0123");
  EXPECT_EQ(j["add_instances"]["instances"].size(), 2u);
}

TEST_F(ClashctlCli, ImportDrawsABarOnATerminal) {
  const std::string file = TempPath("clashctl_cli_import_tty.step");
  std::ofstream(file, std::ios::binary) << std::string(1 << 20, 'y');
  std::ostringstream out;
  std::ostringstream err;
  const int code =
      clashctl::Run({"clashctl", "--server", "127.0.0.1:" + std::to_string(port_), "import", file},
                    out, err, {.err_is_tty = true});
  EXPECT_EQ(code, kExitOk);
  EXPECT_THAT(err.str(), HasSubstr("\r[##############################] 100%  1.0/1.0 MB"));
}

// The client library's import announces the file's size, so it takes only a regular file:
// a FIFO is refused before any call (its size would have been announced as 2^64 - 1).
TEST_F(ClashctlCli, TheLibrarysImportRefusesAFileOfUnknownSize) {
  const std::string fifo = TempPath("clashctl_cli_import.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::unique_ptr<client::Client> client = FakeClient();
  ASSERT_NE(client, nullptr);
  const absl::StatusOr<v1::ImportCadResponse> imported = client->ImportCad(fifo);
  EXPECT_EQ(imported.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(imported.status().message()), HasSubstr("not a regular file"));
  EXPECT_EQ(record_.calls, 0);
  EXPECT_EQ(record_.import_bytes, 0u);
}

TEST_F(ClashctlCli, SceneCommands) {
  EXPECT_EQ(Cli({"-q", "scene", "create", "cell"}).out, "s42\n");
  EXPECT_EQ(Cli({"scene", "create", "cell"}).out, "created scene s42 (cell)\n");
  EXPECT_EQ(Cli({"scene", "list", "-q"}).out, "s1\ns2\n");
  v1::Instance i;
  i.set_instance_id(7);
  i.set_path("cell/bolt");
  i.add_groups("bolts");
  record_.instances = {i};
  const Result show = Cli({"scene", "show", "s42"});
  EXPECT_EQ(show.code, kExitOk);
  EXPECT_THAT(show.out, HasSubstr("groups     bolts (1)"));
  EXPECT_THAT(show.out, HasSubstr(" 7  cell/bolt"));
  const nlohmann::json j = nlohmann::json::parse(Cli({"--json", "scene", "show", "s42"}).out);
  EXPECT_EQ(j["scene"]["name"], "cell");
  EXPECT_EQ(j["instances"][0]["path"], "cell/bolt");
  EXPECT_EQ(Cli({"scene", "delete", "s42"}).out, "deleted scene s42\n");
}

// Whatever prints a name the server sends back, no control character reaches the terminal as
// such; JSON escapes it (and is unchanged by the filter).
TEST_F(ClashctlCli, NamesFromTheServerCannotDriveTheTerminal) {
  const std::string name = "cell\x1b]0;pwned\x07\x1b[2J";
  const Result created = Cli({"scene", "create", name});
  EXPECT_EQ(created.code, kExitOk);
  EXPECT_EQ(created.out, "created scene s42 (cell?]0;pwned??[2J)\n");
  const Result json = Cli({"--json", "scene", "create", name});
  EXPECT_EQ(nlohmann::json::parse(json.out)["name"], name);
  EXPECT_EQ(json.out.find('\x1b'), std::string::npos);
}

// An error message or a name the server sends back cannot fake a line: the output filters keep
// line breaks (and stderr carriage returns), so these are replaced where they are printed.
TEST_F(ClashctlCli, ServerMessagesAndNamesCannotFakeLines) {
  Result r = Cli({"scene", "show", "s9\nclashctl: all is well\r"});
  EXPECT_EQ(r.code, kExitError);
  EXPECT_EQ(r.err, "clashctl: NOT_FOUND: no scene s9?clashctl: all is well?\n");
  r = Cli({"scene", "create", "cell\nFAKE LINE\r"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "created scene s42 (cell?FAKE LINE?)\n");
}

// A server that hands out a page token it gave before would keep a listing going for ever:
// the client stops with INTERNAL at the first repeated token. (The fake repeats its token 20
// times: a client that follows it ends, having listed everything 10 times over.)
TEST_F(ClashctlCli, AListingStopsWhenThePageTokenDoesNotAdvance) {
  record_.list_token_left = 20;
  Result r = Cli({"scene", "list"});
  EXPECT_EQ(r.code, kExitError) << r.out;
  EXPECT_THAT(r.err, HasSubstr("clashctl: INTERNAL: the server repeated a page token while "
                               "listing scenes"));
  EXPECT_EQ(record_.calls, 2);
  r = Cli({"scene", "show", "s42"});  // GetScene, then ListInstances
  EXPECT_EQ(r.code, kExitError) << r.out;
  EXPECT_THAT(r.err, HasSubstr("clashctl: INTERNAL: the server repeated a page token while "
                               "listing instances"));
  EXPECT_EQ(record_.calls, 2 + 3);
  r = Cli({"check", "s42"});
  EXPECT_EQ(r.code, kExitError) << r.out;
  EXPECT_THAT(r.err, HasSubstr("listing clashes"));
  EXPECT_EQ(record_.calls, 5 + 2);
  const std::unique_ptr<client::Client> client = FakeClient();
  ASSERT_NE(client, nullptr);
  const absl::StatusOr<std::vector<v1::Part>> parts = client->ListParts();
  EXPECT_EQ(parts.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(parts.status().message()), HasSubstr("listing parts"));
  EXPECT_EQ(record_.calls, 7 + 2);
}

// ListInstances pages continue from an instance id, so pages of two scene versions may miss
// instances or mix old and new poses. When the version changes between pages the listing
// starts again, once; a second change is ABORTED (before, the pages were merged whatever their
// versions).
TEST_F(ClashctlCli, ListInstancesStartsAgainWhenTheSceneChangesBetweenPages) {
  const std::unique_ptr<client::Client> client = FakeClient();
  ASSERT_NE(client, nullptr);
  // The versions of the answers in turn, and the calls they take.
  for (const auto& [versions, calls] :
       {std::pair{std::vector<uint64_t>{7}, 2}, std::pair{std::vector<uint64_t>{3, 4, 4, 4}, 4}}) {
    record_.list_instances_calls = 0;
    record_.instance_versions = versions;
    const absl::StatusOr<std::vector<v1::Instance>> listed = client->ListInstances("s42");
    ASSERT_TRUE(listed.ok()) << listed.status();
    std::vector<uint64_t> ids;
    for (const v1::Instance& i : *listed) ids.push_back(i.instance_id());
    EXPECT_THAT(ids, ElementsAre(1u, 2u));
    EXPECT_EQ(record_.list_instances_calls, calls);
  }
  record_.list_instances_calls = 0;
  record_.instance_versions = {3, 4, 5, 6};
  const absl::StatusOr<std::vector<v1::Instance>> listed = client->ListInstances("s42");
  EXPECT_EQ(listed.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(listed.status().message()),
              HasSubstr("scene s42 changed while its instances were listed (version 5, then 6)"));
  EXPECT_EQ(record_.list_instances_calls, 4);
}

TEST_F(ClashctlCli, DistancePickInfoAndHealth) {
  Result r = Cli({"distance", "s42", "--a", "1", "--b", "group:g", "--max-mm", "10"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("distance mm     2.500"));
  EXPECT_THAT(record_.distance.set_a().instance_ids(), ElementsAre(1u));
  EXPECT_THAT(record_.distance.set_b().groups(), ElementsAre("g"));
  EXPECT_EQ(record_.distance.max_distance_mm(), 10.0);
  EXPECT_EQ(Cli({"-q", "distance", "s42", "--a", "all"}).out, "2.500\n");

  const std::string rays = TempPath("clashctl_cli_rays.txt");
  std::ofstream(rays) << "# two rays\n0 0 10 0 0 -1\n5 5 10 0 0 -1\n";
  r = Cli({"pick", "s42", "--rays", rays, "--targets", "group:g", "--max-mm", "20"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  ASSERT_EQ(record_.pick.rays_size(), 2);
  EXPECT_EQ(record_.pick.rays(1).origin_mm().x(), 5.0);
  EXPECT_EQ(record_.pick.rays(1).max_distance_mm(), 20.0);
  EXPECT_THAT(record_.pick.targets().groups(), ElementsAre("g"));
  EXPECT_THAT(r.out, HasSubstr("yes"));
  r = Cli({"pick", "s42", "--origin", "0,0,1", "--dir", "0,0,-1", "--origin", "1,1,1", "--dir",
           "1,0,0"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  ASSERT_EQ(record_.pick.rays_size(), 2);
  EXPECT_EQ(record_.pick.rays(1).direction().x(), 1.0);

  EXPECT_THAT(Cli({"info", "p00ff"}).out, HasSubstr("triangles         994"));
  EXPECT_THAT(Cli({"info", "a0123"}).out, HasSubstr("  top\n    sub\n      bolt  "));

  r = Cli({"health"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "SERVING\n");
  record_.health = grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  r = Cli({"health", "--json"});
  EXPECT_EQ(r.code, kExitFound);
  EXPECT_EQ(nlohmann::json::parse(r.out)["status"], "NOT_SERVING");
  EXPECT_EQ(Cli({"health", "--service", "nope"}).code, kExitError);
}

}  // namespace
}  // namespace clash::clashctl
