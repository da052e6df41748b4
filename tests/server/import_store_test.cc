// StoreImportedAssembly on assemblies made here (no CAD worker): what an import stores, and that
// an import it refuses stores nothing. Before, a strict import refused for a mirrored instance
// or a degenerate part, or any import refused for a part above the triangle limit, had already
// written the parts before it (and the mirrored one's) to the tenant's store.
#include "import_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "part_store.h"
#include "testing/status_matchers.h"

namespace clash::server {
namespace {

using ::clash::testing::IsOk;
using ::clash::testing::StatusIs;

// An axis-aligned box of size (x, y, z) with its corner at the origin, one face id per side.
cad::AssemblyPart Box(const std::string& name, double x, double y, double z) {
  cad::AssemblyPart p;
  p.name = name;
  for (int i = 0; i < 8; ++i) {
    p.mesh.xyz.insert(p.mesh.xyz.end(), {(i & 1) ? x : 0.0, (i & 2) ? y : 0.0, (i & 4) ? z : 0.0});
  }
  p.mesh.triangles = {0, 2, 1, 1, 2, 3, 4, 5, 6, 5, 7, 6, 0, 1, 4, 1, 5, 4,
                      2, 6, 3, 3, 6, 7, 0, 4, 2, 2, 4, 6, 1, 3, 5, 3, 7, 5};
  p.mesh.face_ids = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5};
  p.mesh.faces_total = p.mesh.faces_meshed = 6;
  return p;
}

// A part whose every triangle has zero area (the file's fault: left out, or refused when strict).
cad::AssemblyPart Degenerate(const std::string& name) {
  cad::AssemblyPart p;
  p.name = name;
  p.mesh.xyz = {0, 0, 0, 1, 0, 0, 2, 0, 0};
  p.mesh.triangles = {0, 1, 2};
  p.mesh.face_ids = {0};
  p.mesh.faces_total = p.mesh.faces_meshed = 1;
  return p;
}

cad::AssemblyInstance Instance(const std::string& path, int part, double dx = 0) {
  cad::AssemblyInstance inst;
  inst.path = path;
  inst.name = path;
  inst.part = part;
  inst.placement.translation_mm = {dx, 0, 0};
  return inst;
}

cad::AssemblyInstance Mirrored(const std::string& path, int part) {
  cad::AssemblyInstance inst = Instance(path, part);
  inst.placement.rotation = {1, 0, 0, 0, 1, 0, 0, 0, -1};
  return inst;
}

// A block and two identical pins (two part definitions of the same content), one instance each.
cad::ImportedAssembly BlockAndTwoPins() {
  cad::ImportedAssembly a;
  a.roots_total = a.roots_transferred = 1;
  a.parts = {Box("block", 10, 20, 30), Box("pin", 2, 2, 8), Box("pin-again", 2, 2, 8)};
  a.instances = {Instance("top/block_1", 0), Instance("top/pin_1", 1, 3),
                 Instance("top/pin_2", 2, 6)};
  return a;
}

class ImportStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/import_store_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    Open(1000);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Open(std::size_t max_triangles) {
    auto store = PartStore::Open(dir_, max_triangles);
    ASSERT_THAT(store.status(), IsOk());
    store_ = std::move(*store);
  }

  // Stores with a storage reservation that grants `room` bytes (the default: any); the bytes
  // asked for are in reserved_ (-1: never asked).
  absl::Status Store(const cad::ImportedAssembly& assembly, bool strict,
                     v1::ImportCadResponse* response = nullptr,
                     std::int64_t room = std::numeric_limits<std::int64_t>::max(),
                     const std::string& cache_key = std::string(64, 'b')) {
    ImportFacts facts;
    facts.file_name = "made.step";
    facts.sha256 = std::string(64, 'a');
    facts.cache_key = cache_key;
    facts.strict = strict;
    v1::ImportCadResponse ignored;
    reserved_ = -1;
    return StoreImportedAssembly(
        assembly, facts, *store_,
        [&](std::uint64_t bytes) {
          EXPECT_EQ(reserved_, -1) << "asked twice";
          reserved_ = static_cast<std::int64_t>(bytes);
          return reserved_ <= room ? absl::OkStatus()
                                   : absl::ResourceExhaustedError("storage quota (test)");
        },
        response ? response : &ignored);
  }

  // Bytes of the files in the store's parts/ and assemblies/ folders.
  std::int64_t BytesStored() const {
    std::int64_t n = 0;
    for (const char* sub : {"/parts", "/assemblies"}) {
      for (const auto& e : std::filesystem::directory_iterator(dir_ + sub)) {
        if (e.is_regular_file()) n += static_cast<std::int64_t>(e.file_size());
      }
    }
    return n;
  }

  // Files in the store's parts/ and assemblies/ folders, and the ids it lists (after a reopen,
  // which reads the folders afresh).
  std::size_t FilesStored() const {
    std::size_t n = 0;
    for (const char* sub : {"/parts", "/assemblies"}) {
      for (const auto& e : std::filesystem::directory_iterator(dir_ + sub))
        n += e.is_regular_file();
    }
    return n;
  }
  std::vector<std::string> IdsAfterReopen() {
    Open(1000);
    return store_->ListIds("", 100);
  }

  std::string dir_;
  std::unique_ptr<PartStore> store_;
  std::int64_t reserved_ = -1;
};

// The storage reservation is asked once, before anything is written, for what the import then
// writes (each new part once, the assembly); refused, nothing is stored. A second import of
// the same parts asks only for its assembly.
TEST_F(ImportStoreTest, AsksTheStorageQuotaForWhatItWritesBeforeWriting) {
  const cad::ImportedAssembly a = BlockAndTwoPins();
  EXPECT_THAT(Store(a, /*strict=*/true, nullptr, /*room=*/100),
              StatusIs(absl::StatusCode::kResourceExhausted, "storage quota (test)"));
  EXPECT_GT(reserved_, 100);
  EXPECT_EQ(FilesStored(), 0u);
  EXPECT_THAT(IdsAfterReopen(), ::testing::IsEmpty());

  ASSERT_THAT(Store(a, /*strict=*/true), IsOk());
  const std::int64_t written = BytesStored();
  EXPECT_EQ(FilesStored(), 3u);  // two parts (the identical pins once) and the assembly
  // Enough for what was written, and not much more (the pin counted once).
  EXPECT_GE(reserved_, written);
  EXPECT_LE(reserved_, written + 64);

  // The same parts again, under another cache key: only the new assembly is written.
  cad::ImportedAssembly b = a;
  b.instances.pop_back();
  ASSERT_THAT(Store(b, /*strict=*/true, nullptr, std::numeric_limits<std::int64_t>::max(),
                    std::string(64, 'd')),
              IsOk());
  const std::int64_t asked = reserved_;
  EXPECT_EQ(FilesStored(), 4u);
  EXPECT_GE(asked, BytesStored() - written);
  EXPECT_LE(asked, BytesStored() - written + 64);
}

TEST_F(ImportStoreTest, StoresThePartsAndTheAssembly) {
  const cad::ImportedAssembly a = BlockAndTwoPins();
  v1::ImportCadResponse r;
  ASSERT_THAT(Store(a, /*strict=*/true, &r), IsOk());
  // Identical parts share an id: built, listed and counted once.
  EXPECT_EQ(store_->builds(), 2u);
  ASSERT_EQ(r.parts_size(), 2);
  EXPECT_EQ(r.parts(0).name(), "block");
  EXPECT_EQ(r.assembly().report().triangles(), 24u);
  EXPECT_TRUE(r.assembly().report().complete());
  ASSERT_EQ(r.assembly().instances_size(), 3);
  EXPECT_EQ(r.assembly().instances(1).part_id(), r.assembly().instances(2).part_id());
  EXPECT_NEAR(r.assembly().instances(2).pose().translation_mm().x(), 6.0, 0.0);
  EXPECT_EQ(r.assembly().assembly_id(), "a" + std::string(32, 'b'));
  EXPECT_THAT(store_->GetAssembly(r.assembly().assembly_id()).status(), IsOk());
  EXPECT_EQ(FilesStored(), 3u);  // two parts and the assembly
  EXPECT_THAT(IdsAfterReopen(),
              ::testing::UnorderedElementsAre(r.parts(0).part_id(), r.parts(1).part_id()));
}

TEST_F(ImportStoreTest, AStrictImportRefusedForAMirroredInstanceStoresNothing) {
  cad::ImportedAssembly a;
  a.roots_total = a.roots_transferred = 1;
  a.parts = {Box("block", 10, 20, 30), Box("pin", 2, 2, 8)};
  a.instances = {Instance("top/block_1", 0), Mirrored("top/pin_1", 1)};
  EXPECT_THAT(Store(a, /*strict=*/true),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "instance 'top/pin_1' left out: its placement is not a rigid motion"));
  EXPECT_EQ(FilesStored(), 0u);
  EXPECT_THAT(IdsAfterReopen(), ::testing::IsEmpty());

  // Without strict: the instance is left out, and said so; both parts are stored.
  v1::ImportCadResponse r;
  ASSERT_THAT(Store(a, /*strict=*/false, &r), IsOk());
  EXPECT_FALSE(r.assembly().report().complete());
  EXPECT_THAT(r.assembly().report().warnings(),
              ::testing::ElementsAre(::testing::HasSubstr("'top/pin_1' left out")));
  ASSERT_EQ(r.assembly().instances_size(), 1);
  EXPECT_EQ(r.assembly().instances(0).path(), "top/block_1");
  EXPECT_EQ(r.parts_size(), 2);
  EXPECT_EQ(IdsAfterReopen().size(), 2u);
}

// What the reader left out that is no geometry (its warnings, e.g. colours dropped) reaches the
// report's warnings, and is no loss: the import stays complete, also when strict.
TEST_F(ImportStoreTest, TheReadersWarningsReachTheReportAndAreNoLoss) {
  cad::ImportedAssembly a = BlockAndTwoPins();
  a.warnings = {"colours dropped: the file's transfer failed with its colours"};
  v1::ImportCadResponse r;
  ASSERT_THAT(Store(a, /*strict=*/true, &r), IsOk());
  EXPECT_TRUE(r.assembly().report().complete());
  EXPECT_THAT(
      r.assembly().report().warnings(),
      ::testing::ElementsAre("colours dropped: the file's transfer failed with its colours"));
  EXPECT_EQ(r.assembly().instances_size(), 3);
}

TEST_F(ImportStoreTest, AStrictImportRefusedForADegeneratePartStoresNothing) {
  cad::ImportedAssembly a;
  a.roots_total = a.roots_transferred = 1;
  a.parts = {Box("block", 10, 20, 30), Degenerate("sliver"), Box("pin", 2, 2, 8)};
  a.instances = {Instance("top/block_1", 0), Instance("top/sliver_1", 1), Instance("top/pin_1", 2)};
  EXPECT_THAT(Store(a, /*strict=*/true), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  "incomplete import: part 'sliver' left out"));
  EXPECT_EQ(FilesStored(), 0u);
  EXPECT_THAT(IdsAfterReopen(), ::testing::IsEmpty());

  // Without strict: the part is left out with its instance, the others are stored.
  v1::ImportCadResponse r;
  ASSERT_THAT(Store(a, /*strict=*/false, &r), IsOk());
  EXPECT_FALSE(r.assembly().report().complete());
  ASSERT_EQ(r.assembly().report().warnings_size(), 1);
  EXPECT_THAT(r.assembly().report().warnings(0), ::testing::HasSubstr("'sliver' left out"));
  ASSERT_EQ(r.assembly().instances_size(), 2);
  EXPECT_EQ(r.assembly().instances(1).path(), "top/pin_1");
  EXPECT_EQ(IdsAfterReopen().size(), 2u);
}

TEST_F(ImportStoreTest, AnIncompleteFileRefusedWhenStrictStoresNothing) {
  cad::ImportedAssembly a;
  a.roots_total = 2;
  a.roots_transferred = 1;
  a.parts = {Box("block", 10, 20, 30)};
  a.instances = {Instance("top/block_1", 0)};
  EXPECT_THAT(Store(a, /*strict=*/true), StatusIs(absl::StatusCode::kInvalidArgument, "root"));
  EXPECT_EQ(FilesStored(), 0u);
}

TEST_F(ImportStoreTest, APartAboveTheTriangleLimitStoresNothing) {
  Open(12);  // a box has 12 triangles
  cad::ImportedAssembly a;
  a.roots_total = a.roots_transferred = 1;
  a.parts = {Box("block", 10, 20, 30), Box("pin", 2, 2, 8), Box("plate", 50, 50, 2)};
  a.parts[2].mesh.xyz.insert(a.parts[2].mesh.xyz.end(), {25, 25, 3});  // a 13th triangle:
  a.parts[2].mesh.triangles.insert(a.parts[2].mesh.triangles.end(), {4, 5, 8});
  a.parts[2].mesh.face_ids.push_back(1);
  a.instances = {Instance("top/block_1", 0), Instance("top/pin_1", 1), Instance("top/plate_1", 2)};
  for (const bool strict : {true, false}) {
    EXPECT_THAT(Store(a, strict),
                StatusIs(absl::StatusCode::kResourceExhausted, "above the limit of 12"));
    EXPECT_EQ(FilesStored(), 0u) << strict;
  }
}

TEST_F(ImportStoreTest, AnImportWithNoUsableInstanceStoresNothing) {
  cad::ImportedAssembly a;
  a.roots_total = a.roots_transferred = 1;
  a.parts = {Box("block", 10, 20, 30), Degenerate("sliver")};
  a.instances = {Mirrored("top/block_1", 0), Instance("top/sliver_1", 1)};
  EXPECT_THAT(Store(a, /*strict=*/false), StatusIs(absl::StatusCode::kInvalidArgument, "usable"));
  EXPECT_EQ(FilesStored(), 0u);
}

}  // namespace
}  // namespace clash::server
