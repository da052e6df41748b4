// What one import or upload may make the server hold, and what it refuses before doing the work:
// the worker's result file is capped by the import's triangle limit (not the 2 GiB default), the
// parts' triangles are capped in sum, names are capped at 64 KiB, bad tessellation options are
// refused before the upload and the worker, and GetPartMesh refuses a reply above
// --max-message-bytes before it builds it. Also the import report's face counts, summed once
// per distinct part.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clash/cad/import_cache.h"
#include "clash/client/client.h"
#include "clash/v1/parts.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "import_store.h"
#include "mesh_upload.h"
#include "part_store.h"
#include "server.h"
#include "testing/random_geometry.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace clash::server {
namespace {

using ::clash::testing::IsOk;
using ::clash::testing::MakeBox;
using ::clash::testing::MeshUpload;
using ::clash::testing::RawMesh;
using ::clash::testing::StatusIs;

// A flat n x n grid of vertices, 2 (n - 1)^2 triangles: a large part without welding.
RawMesh Grid(int n) {
  RawMesh m;
  for (int y = 0; y < n; ++y) {
    for (int x = 0; x < n; ++x) m.v.emplace_back(x, y, 0);
  }
  for (int y = 0; y + 1 < n; ++y) {
    for (int x = 0; x + 1 < n; ++x) {
      const auto i = static_cast<uint32_t>(y * n + x);
      const auto row = static_cast<uint32_t>(n);
      m.t.push_back({i, i + 1, i + row});
      m.t.push_back({i + 1, i + row + 1, i + row});
    }
  }
  return m;
}

// The import of parts made here (no worker): their buffers as the worker gives them.
cad::AssemblyPart PartOf(const std::string& name, const RawMesh& m) {
  cad::AssemblyPart p;
  p.name = name;
  for (const geom::Vec3& v : m.v) p.mesh.xyz.insert(p.mesh.xyz.end(), {v.x(), v.y(), v.z()});
  for (const auto& t : m.t) {
    p.mesh.triangles.insert(p.mesh.triangles.end(), t.begin(), t.end());
    p.mesh.face_ids.push_back(static_cast<uint32_t>(p.mesh.face_ids.size() / 2));
  }
  p.mesh.faces_total = p.mesh.faces_meshed = static_cast<int>(m.t.size() / 2);
  return p;
}

cad::ImportedAssembly OneInstanceEach(std::vector<cad::AssemblyPart> parts) {
  cad::ImportedAssembly a;
  a.roots_total = a.roots_transferred = 1;
  a.parts = std::move(parts);
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    cad::AssemblyInstance inst;
    inst.path = inst.name = absl::StrCat("top/", a.parts[i].name);
    inst.part = static_cast<int>(i);
    inst.placement.translation_mm = {10.0 * static_cast<double>(i), 0, 0};
    a.instances.push_back(inst);
  }
  return a;
}

// Peak resident bytes of this process since the last ResetPeakResident.
std::int64_t PeakResidentBytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // in kB
  }
  return -1;
}
bool ResetPeakResident() {
  return static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5");
}

class ImportLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        clash::testing::MakeTempDir(std::filesystem::temp_directory_path(), "clash-import-limits-");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Start(ServerConfig config = {}) {
    client_.reset();
    server_.reset();
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "";
    config.data_dir = dir_ + "/data";
    if (config.worker_path.empty()) config.worker_path = CLASH_CAD_WORKER_PATH;
    config.import_pool_workers = 0;
    config.quiet = true;
    config.shutdown_grace_seconds = 1;
    auto server = ClashServer::Start(config);
    ASSERT_THAT(server.status(), IsOk());
    server_ = std::move(*server);
    client_ = client::Client::FromChannel(server_->grpc_server()->InProcessChannel({}));
    stub_ = v1::PartService::NewStub(server_->grpc_server()->InProcessChannel({}));
  }

  // An ImportCad stream of `header` and then `file` (no chunk when empty).
  absl::Status Import(const v1::ImportCadHeader& header, const std::string& file) {
    grpc::ClientContext ctx;
    v1::ImportCadResponse response;
    auto stream = stub_->ImportCad(&ctx, &response);
    v1::ImportCadRequest msg;
    *msg.mutable_header() = header;
    stream->Write(msg);  // (the server may answer before it reads what follows)
    if (!file.empty()) {
      msg.set_chunk(file);
      stream->Write(msg);
    }
    stream->WritesDone();
    const grpc::Status s = stream->Finish();
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }

  // A clash-cad-worker stand-in: a shell script.
  std::string FakeWorker(const std::string& script) {
    const std::string path = dir_ + "/fake-worker";
    std::ofstream(path) << "#!/bin/sh\n" << script << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
  }

  std::string dir_;
  std::unique_ptr<ClashServer> server_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<v1::PartService::Stub> stub_;
};

// The server reads the worker's whole result file: its size is capped by what the import's
// triangle cap can need (here --max-part-triangles 1000), so a worker writing more is stopped by
// RLIMIT_FSIZE (RESOURCE_EXHAUSTED). Before, the cap was 2 GiB whatever the triangle limit: the
// server read this file (256 MiB of zeros, sparse) into memory and found it malformed.
TEST_F(ImportLimitsTest, WorkerOutputIsCappedByTheImportsTriangleLimit) {
  const std::size_t cap = MaxWorkerOutputBytes(1000);
  ASSERT_LT(cap, std::size_t{1} << 30);
  ServerConfig config;
  config.max_part_triangles = 1000;
  // Grows its result file (the last argument) to one byte above the cap, writing nothing.
  config.worker_path =
      FakeWorker(absl::StrCat("for last; do :; done\nexec truncate -s ", cap + 1, " \"$last\""));
  Start(config);
  v1::ImportCadHeader header;
  header.set_file_name("box.step");
  EXPECT_THAT(Import(header, "ISO-10303-21;\nEND-ISO-10303-21;\n"),
              StatusIs(absl::StatusCode::kResourceExhausted, "output limit"));
}

// The bound holds the worst case of the worker's format: unshared vertices (3 per triangle),
// long names and paths. (Measured as an import cache entry: the same format plus a 32-byte
// checksum.)
TEST_F(ImportLimitsTest, WorkerOutputCapHoldsTheWorstCaseMesh) {
  constexpr std::size_t kTriangles = 3000;
  cad::AssemblyPart part;
  part.name = std::string(kMaxInstanceTextBytes - 1, 'n');
  for (std::size_t i = 0; i < kTriangles; ++i) {
    for (int k = 0; k < 9; ++k) part.mesh.xyz.push_back(static_cast<double>(i + k));
    for (uint32_t k = 0; k < 3; ++k)
      part.mesh.triangles.push_back(static_cast<uint32_t>(3 * i) + k);
    part.mesh.face_ids.push_back(static_cast<uint32_t>(i));
  }
  part.mesh.faces_total = part.mesh.faces_meshed = static_cast<int>(kTriangles);
  cad::ImportedAssembly a = OneInstanceEach({part});
  a.instances[0].path = std::string(kMaxInstanceTextBytes - 1, 'p');
  auto cache = cad::ImportCache::Open(dir_ + "/cache");
  ASSERT_THAT(cache.status(), IsOk());
  const std::string key(64, 'c');
  ASSERT_THAT(cache->StoreAssembly(key, a), IsOk());
  EXPECT_LE(cache->SizeBytes(), MaxWorkerOutputBytes(kTriangles));
  // The per-triangle term is the worst case itself, not slack: 1000 triangles more need more.
  EXPECT_EQ(MaxWorkerOutputBytes(kTriangles + 1000) - MaxWorkerOutputBytes(kTriangles),
            1000u * (3 * 24 + 12 + 4));
  EXPECT_EQ(MaxWorkerOutputBytes(std::numeric_limits<std::size_t>::max()),
            std::numeric_limits<std::size_t>::max());
}

// The import's triangle cap is on the sum over its parts (README, --max-part-triangles): the
// server checks it on the worker's output (and cache entries) too. Before, each part was checked
// alone against the store's limit, so two parts of 12 passed a cap of 20.
TEST_F(ImportLimitsTest, PartsWhoseTrianglesSumAboveTheCapAreRefused) {
  auto store = PartStore::Open(dir_ + "/store", 1000);
  ASSERT_THAT(store.status(), IsOk());
  const cad::ImportedAssembly a =
      OneInstanceEach({PartOf("big", MakeBox({2, 2, 2})), PartOf("small", MakeBox({1, 1, 1}))});
  ImportFacts facts;
  facts.file_name = "made.step";
  facts.sha256 = std::string(64, 'a');
  facts.cache_key = std::string(64, 'b');
  const auto reserve = [](std::uint64_t) { return absl::OkStatus(); };
  v1::ImportCadResponse response;
  facts.options.max_triangles = 23;
  EXPECT_THAT(StoreImportedAssembly(a, facts, **store, reserve, &response),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "24 triangles over all parts, above the limit of 23"));
  EXPECT_THAT((*store)->ListIds("", 10), ::testing::IsEmpty());
  facts.options.max_triangles = 24;
  EXPECT_THAT(StoreImportedAssembly(a, facts, **store, reserve, &response), IsOk());
  EXPECT_EQ(response.assembly().report().triangles(), 24u);
}

// faces_total and faces_meshed are over the distinct parts, like triangles: two part
// definitions of the same content (one id, listed once) count once. Before, 18 and 18.
TEST_F(ImportLimitsTest, ReportFaceCountsAreOverDistinctParts) {
  auto store = PartStore::Open(dir_ + "/store", 1000);
  ASSERT_THAT(store.status(), IsOk());
  cad::ImportedAssembly a =
      OneInstanceEach({PartOf("block", MakeBox({5, 5, 5})), PartOf("pin", MakeBox({1, 1, 4})),
                       PartOf("pin-again", MakeBox({1, 1, 4}))});
  a.parts[0].mesh.faces_meshed = 5;  // told apart from faces_total
  ImportFacts facts;
  facts.file_name = "made.step";
  facts.sha256 = std::string(64, 'a');
  facts.cache_key = std::string(64, 'b');
  v1::ImportCadResponse response;
  ASSERT_THAT(StoreImportedAssembly(
                  a, facts, **store, [](std::uint64_t) { return absl::OkStatus(); }, &response),
              IsOk());
  ASSERT_EQ(response.parts_size(), 2);
  const v1::ImportReport& report = response.assembly().report();
  EXPECT_EQ(report.faces_total(), 12);
  EXPECT_EQ(report.faces_meshed(), 11);
  EXPECT_EQ(report.triangles(), 24u);
}

// Part names and import file names are capped like instance paths and names (64 KiB): a part's
// name is kept in its file and copied into every listing. Before, up to --max-message-bytes.
TEST_F(ImportLimitsTest, UploadNamesAreCappedAt64KiB) {
  Start();
  const RawMesh box = MakeBox({1, 1, 1});
  auto at_cap = client_->UploadMesh(MeshUpload(box, std::string(kMaxInstanceTextBytes, 'n')));
  ASSERT_THAT(at_cap.status(), IsOk());
  EXPECT_EQ(at_cap->name().size(), kMaxInstanceTextBytes);
  EXPECT_THAT(
      client_
          ->UploadMesh(MeshUpload(MakeBox({2, 1, 1}), std::string(kMaxInstanceTextBytes + 1, 'n')))
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, "name has 65537 bytes; at most 65536"));
  auto parts = client_->ListParts();
  ASSERT_THAT(parts.status(), IsOk());
  EXPECT_EQ(parts->size(), 1u);
}

// (The file is refused at the header, before its upload: the empty stream would be "read: the
// uploaded file is empty".)
TEST_F(ImportLimitsTest, ImportFileNamesAreCappedAt64KiB) {
  Start();
  v1::ImportCadHeader header;
  header.set_file_name(std::string(kMaxInstanceTextBytes + 1, 'f'));
  EXPECT_THAT(Import(header, ""), StatusIs(absl::StatusCode::kInvalidArgument,
                                           "file_name has 65537 bytes; at most 65536"));
}

// Options the worker would refuse are refused after the header, before the upload is read and
// a worker starts: here no worker can start (FAILED_PRECONDITION), which valid options reach.
// Before, every row was FAILED_PRECONDITION too.
TEST_F(ImportLimitsTest, BadTessellationOptionsAreRefusedBeforeTheWorker) {
  ServerConfig config;
  config.worker_path = dir_ + "/no-such-worker";
  Start(config);
  const std::string file = "ISO-10303-21;\nEND-ISO-10303-21;\n";
  v1::ImportCadHeader header;
  header.set_file_name("box.step");
  EXPECT_THAT(Import(header, file),
              StatusIs(absl::StatusCode::kFailedPrecondition, "cannot be started"));
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  const struct {
    double linear, relative, angular;
    const char* field;
  } kBad[] = {
      {kNan, 0, 0, "linear_deflection_mm"},
      {-1, 0, 0, "linear_deflection_mm"},
      {0, kNan, 0, "relative_deflection"},
      {0, -0.01, 0, "relative_deflection"},
      {0, 1e-6, 0, "relative_deflection must be at least 1e-05"},
      {0, 0, kNan, "angular_deflection_rad"},
      {0, 0, -0.1, "angular_deflection_rad"},
      {0, 0, 3.5, "angular_deflection_rad"},
  };
  for (const auto& bad : kBad) {
    v1::TessellationOptions* tess = header.mutable_tessellation();
    tess->set_linear_deflection_mm(bad.linear);
    tess->set_relative_deflection(bad.relative);
    tess->set_angular_deflection_rad(bad.angular);
    EXPECT_THAT(Import(header, file), StatusIs(absl::StatusCode::kInvalidArgument, bad.field))
        << bad.linear << " " << bad.relative << " " << bad.angular;
  }
}

// GetPartMesh computes the size of its reply before it builds it: one above --max-message-bytes
// is refused without the memory it would take (here ~20 MB). Before, the whole reply was built,
// then measured and dropped.
TEST_F(ImportLimitsTest, GetPartMeshRefusesAnOversizedReplyBeforeBuildingIt) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator (quarantine, no malloc_trim) makes the peak "
                  "resident size say nothing about one call's memory";
#endif
  Start();
  auto part = client_->UploadMesh(MeshUpload(Grid(600), "grid"));
  ASSERT_THAT(part.status(), IsOk());
  const std::int64_t reply_bytes =
      24 * static_cast<std::int64_t>(part->vertex_count()) +
      10 * static_cast<std::int64_t>(part->triangle_count());  // (3-byte indices, face id 1)
  ServerConfig small;
  small.max_message_bytes = std::size_t{1} << 20;
  Start(small);
  ASSERT_THAT(client_->GetPart(part->part_id()).status(), IsOk());  // loaded: not measured
  // Free memory given back: memory the reply takes shows in the peak resident size instead of
  // reusing pages that loading the part left resident.
  malloc_trim(0);
  if (!ResetPeakResident()) {
    GTEST_SKIP() << "/proc/self/clear_refs cannot be written here: the peak resident size "
                    "cannot be measured for one call";
  }
  const std::int64_t before = PeakResidentBytes();
  EXPECT_THAT(client_->GetPartMesh(part->part_id()).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "--max-message-bytes"));
  const std::int64_t grown = PeakResidentBytes() - before;
  EXPECT_LT(grown, reply_bytes / 4) << "reply of about " << reply_bytes << " bytes";
}

// The size is the reply's own, to the byte: a reply of exactly --max-message-bytes is served.
TEST_F(ImportLimitsTest, GetPartMeshSizeIsTheRepliesToTheByte) {
  Start();
  auto part = client_->UploadMesh(MeshUpload(MakeBox({1, 2, 3}), "box"));
  ASSERT_THAT(part.status(), IsOk());
  auto mesh = client_->GetPartMesh(part->part_id());
  ASSERT_THAT(mesh.status(), IsOk());
  ServerConfig config;
  config.max_message_bytes = mesh->ByteSizeLong();
  Start(config);
  auto again = client_->GetPartMesh(part->part_id());
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_EQ(again->SerializeAsString(), mesh->SerializeAsString());
  config.max_message_bytes = mesh->ByteSizeLong() - 1;
  Start(config);
  EXPECT_THAT(client_->GetPartMesh(part->part_id()).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       absl::StrCat("takes ", mesh->ByteSizeLong(), " bytes")));
}

}  // namespace
}  // namespace clash::server
