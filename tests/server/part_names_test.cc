// Part ids and names in the part store: an id is a hash of the buffers as given (not of the
// cleaned mesh, and not of the name), and the same content stored again keeps the first name
// stored, whether the part is in memory or only on disk. Before, a part stored before a restart
// and uploaded again under another name took the new name (its file was written again), and of
// two uploads prepared at once the second renamed the file while memory kept the first name.
// Also: an assembly id depends on the triangle cap in effect.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "clash/cad/import_cache.h"
#include "part_store.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace clash::server {
namespace {

using ::clash::testing::IsOk;

// A tetrahedron's buffers.
struct Buffers {
  std::vector<double> xyz = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
  std::vector<uint32_t> triangles = {0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3};

  PartInput Input(const std::string& name) const {
    PartInput in;
    in.name = name;
    in.xyz_mm = xyz;
    in.triangles = triangles;
    return in;
  }
};

class PartNamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = clash::testing::MakeTempDir(std::filesystem::temp_directory_path(), "clash-part-names-");
    ASSERT_FALSE(dir_.empty());
    Reopen();
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // A fresh store on the same folder: a restart (nothing in memory).
  void Reopen() {
    store_.reset();
    auto store = PartStore::Open(dir_, 1000);
    ASSERT_THAT(store.status(), IsOk());
    store_ = std::move(*store);
  }
  // Stores the tetrahedron as `name`, then restarts (stored, not loaded); returns its id.
  std::string StoredBeforeARestart(const std::string& name) {
    auto part = store_->Put(tetra_.Input(name));
    EXPECT_THAT(part.status(), IsOk());
    Reopen();
    return part.ok() ? (*part)->info.part_id() : "";
  }
  // The name the store answers when the tetrahedron is put as `name`.
  std::string NameOfPut(const std::string& name) {
    auto part = store_->Put(tetra_.Input(name));
    EXPECT_THAT(part.status(), IsOk());
    return part.ok() ? (*part)->info.name() : "";
  }
  std::string NameAfterRestart(const std::string& id) {
    Reopen();
    auto part = store_->Get(id);
    EXPECT_THAT(part.status(), IsOk());
    return part.ok() ? (*part)->info.name() : "";
  }

  std::string dir_;
  std::unique_ptr<PartStore> store_;
  Buffers tetra_;
};

TEST_F(PartNamesTest, TheFirstNameStoredWinsInMemory) {
  auto first = store_->Put(tetra_.Input("first"));
  ASSERT_THAT(first.status(), IsOk());
  EXPECT_EQ(NameOfPut("second"), "first");
  EXPECT_EQ(NameAfterRestart((*first)->info.part_id()), "first");
}

TEST_F(PartNamesTest, TheFirstNameStoredWinsOnDisk) {
  const std::string id = StoredBeforeARestart("first");
  EXPECT_EQ(NameOfPut("second"), "first");
  EXPECT_EQ(store_->ListIds("", 10), std::vector<std::string>{id});
  EXPECT_EQ(NameAfterRestart(id), "first");
}

// Two uploads of one content prepared before either is stored: the second commit serves the
// first part and leaves its file alone.
TEST_F(PartNamesTest, TheSecondOfTwoPreparedAtOnceDoesNotRenameTheFile) {
  auto a = store_->Prepare(tetra_.Input("a"));
  auto b = store_->Prepare(tetra_.Input("b"));
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  ASSERT_THAT(store_->Commit(*std::move(a)).status(), IsOk());
  auto served = store_->Commit(*std::move(b));
  ASSERT_THAT(served.status(), IsOk());
  EXPECT_EQ((*served)->info.name(), "a");
  EXPECT_EQ(NameAfterRestart((*served)->info.part_id()), "a");
}

// A stored file that is damaged is written anew by the next upload of its content, which
// then names it (the old name is lost with the file).
TEST_F(PartNamesTest, ADamagedFileIsWrittenAgainUnderTheNewName) {
  const std::string id = StoredBeforeARestart("first");
  std::ofstream(dir_ + "/parts/" + id + ".pb", std::ios::trunc) << "damaged";
  EXPECT_EQ(NameOfPut("second"), "second");
  EXPECT_EQ(NameAfterRestart(id), "second");
}

// The id hashes the buffers as given: the same cleaned mesh from other buffers (a vertex given
// twice, welded by cleaning) is another part.
TEST_F(PartNamesTest, IdsHashTheBuffersAsGivenNotTheCleanedMesh) {
  auto plain = store_->Put(tetra_.Input("tetra"));
  ASSERT_THAT(plain.status(), IsOk());
  Buffers doubled = tetra_;
  doubled.xyz.insert(doubled.xyz.end(), {0, 0, 1});  // vertex 4 = vertex 3
  doubled.triangles[5] = 4;                          // the second triangle uses the copy
  auto welded = store_->Put(doubled.Input("tetra"));
  ASSERT_THAT(welded.status(), IsOk());
  EXPECT_EQ((*welded)->geom->mesh().vertices().size(), (*plain)->geom->mesh().vertices().size());
  EXPECT_NE((*welded)->info.part_id(), (*plain)->info.part_id());
}

// An assembly id is made from the import cache key, which holds the triangle cap in effect (the
// request's, or --max-part-triangles when it gives none or more): the same file and deflections
// under another cap is another assembly, though a successful result is the same.
TEST(AssemblyIds, DependOnTheTriangleCapInEffect) {
  const std::string sha(64, 'f');
  cad::TessellationOptions options;
  options.max_triangles = 20'000'000;
  const std::string at_default = cad::ImportCacheKey(sha, options, cad::ImportKind::kAssembly);
  options.max_triangles = 1'000'000;
  EXPECT_NE(cad::ImportCacheKey(sha, options, cad::ImportKind::kAssembly), at_default);
}

}  // namespace
}  // namespace clash::server
