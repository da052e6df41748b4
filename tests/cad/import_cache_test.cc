#include "clash/cad/import_cache.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <BRepPrimAPI_MakeBox.hxx>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "assembly_fixtures.h"
#include "clash/cad/assembly.h"
#include "clash/cad/durable_file.h"
#include "occt_fixtures.h"
#include "testing/status_matchers.h"

namespace clash::cad {
namespace {

namespace fs = std::filesystem;
using clash::testing::IsOk;
using clash::testing::StatusIs;

// OCCT leaks its one-time registrations; only leaks inside libTK* are ignored.
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

// A private scratch folder `dir_` (removed after the test) and Debian's sample STEP file.
class ImportCacheTest : public testing::ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    if (HasFatalFailure()) return;
    sample_ = CLASH_OCCT_SAMPLE_STEP;
    if (!fs::exists(sample_)) GTEST_SKIP() << sample_ << " is missing (Debian package occt-misc)";
    limits_.worker_path = CLASH_CAD_WORKER_PATH;
    limits_.wall_seconds = 60;
  }

  // Files in the cache folder (entries and anything left behind).
  std::vector<fs::path> Files() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path());
    return out;
  }

  std::string sample_;
  IsolationLimits limits_;
};

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_THAT(Sha256OfFile("/nonexistent/file.step"),
              StatusIs(absl::StatusCode::kNotFound, "no such"));
}

// Runs `call` on a thread of its own and waits at most `seconds` for it: a call that blocks for
// good (a FIFO with no writer, /dev/zero read to its end) fails the test instead of hanging it.
// The thread is left behind then; the test binary exits with it.
absl::StatusOr<std::string> WithinSeconds(double seconds,
                                          std::function<absl::StatusOr<std::string>()> call) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<std::string>>>();
  std::future<absl::StatusOr<std::string>> result = promise->get_future();
  std::thread([promise, call = std::move(call)] { promise->set_value(call()); }).detach();
  if (result.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    return absl::DeadlineExceededError("the call did not return in time");
  }
  return result.get();
}

TEST_F(ImportCacheTest, OnlyRegularFilesAreHashedAndHashingCanBeCancelled) {
  // A device never ends and a FIFO blocks until a writer comes: both are refused at once.
  EXPECT_THAT(WithinSeconds(10, [] { return Sha256OfFile("/dev/zero"); }),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a regular file"));
  const fs::path fifo = dir_ / "fifo.step";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_THAT(WithinSeconds(10, [&] { return Sha256OfFile(fifo.string()); }),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a regular file"));
  EXPECT_THAT(Sha256OfFile(dir_.string()),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a regular file"));
  // Through the cache, before any worker starts.
  auto cache = ImportCache::Open((dir_ / "cache").string());
  ASSERT_THAT(cache, IsOk());
  EXPECT_THAT(WithinSeconds(10,
                            [&]() -> absl::StatusOr<std::string> {
                              auto r = ImportAssemblyWithCache("/dev/zero", {}, limits_, *cache);
                              if (!r.ok()) return r.status();
                              return r->key;
                            }),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a regular file"));

  // The cancel flag is checked while hashing.
  const std::atomic<bool> cancelled{true};
  EXPECT_THAT(Sha256OfFile(sample_, &cancelled),
              StatusIs(absl::StatusCode::kCancelled, "cancelled"));
  EXPECT_THAT(ImportWithCache(sample_, {}, limits_, *cache, &cancelled),
              StatusIs(absl::StatusCode::kCancelled, "cancelled"));
  const std::atomic<bool> running{false};
  EXPECT_EQ(*Sha256OfFile(sample_, &running), Sha256Hex(testing::ReadBytes(sample_)));
}

TEST_F(ImportCacheTest, AFileChangedDuringTheImportIsNotStored) {
  // A worker wrapper replaces the file after it was hashed, then runs the real worker: the
  // import reads other content than the key names.
  const fs::path file = dir_ / "part.step";
  fs::copy_file(sample_, file);
  const fs::path other = dir_ / "other.step";
  testing::WriteStep(BRepPrimAPI_MakeBox(10, 20, 30).Shape(), other);
  const fs::path wrapper = dir_ / "swapping-worker.sh";
  std::ofstream(wrapper) << "#!/bin/sh\n/bin/cp '" << other.string() << "' '" << file.string()
                         << "'\nexec '" << CLASH_CAD_WORKER_PATH << "' \"$@\"\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  IsolationLimits swapping = limits_;
  swapping.worker_path = wrapper.string();
  const fs::path cache_dir = dir_ / "cache";
  auto cache = ImportCache::Open(cache_dir.string());
  ASSERT_THAT(cache, IsOk());
  const std::string key_before = ImportCacheKey(*Sha256OfFile(sample_), {}, ImportKind::kMesh);

  EXPECT_THAT(ImportWithCache(file.string(), {}, swapping, *cache),
              StatusIs(absl::StatusCode::kAborted, "changed while it was imported"));
  auto stored = cache->Load(key_before);
  ASSERT_THAT(stored, IsOk());
  EXPECT_FALSE(stored->has_value()) << "the box was stored under the screw's key";
  EXPECT_TRUE(fs::is_empty(cache_dir));

  // Unchanged, the same file imports and is stored.
  auto again = ImportWithCache(file.string(), {}, limits_, *cache);
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(again->stored);
}

TEST(ImportCacheKeys, DependOnContentAndOptions) {
  const std::string h = Sha256Hex("file");
  TessellationOptions o;
  EXPECT_EQ(ImportCacheKey(h, o), ImportCacheKey(h, o));
  EXPECT_EQ(ImportCacheKey(h, o).size(), 64u);
  TessellationOptions parallel = o;
  parallel.parallel = !o.parallel;  // does not change the mesh
  EXPECT_EQ(ImportCacheKey(h, o), ImportCacheKey(h, parallel));
  TessellationOptions finer = o;
  finer.relative_deflection *= 0.5;
  EXPECT_NE(ImportCacheKey(h, o), ImportCacheKey(h, finer));
  TessellationOptions angle = o;
  angle.angular_deflection_rad = std::nextafter(o.angular_deflection_rad, 1.0);
  EXPECT_NE(ImportCacheKey(h, o), ImportCacheKey(h, angle));
  EXPECT_NE(ImportCacheKey(h, o), ImportCacheKey(Sha256Hex("other file"), o));
  // Meshes and assemblies of the same file and options are separate entries.
  EXPECT_EQ(ImportCacheKey(h, o), ImportCacheKey(h, o, ImportKind::kMesh));
  EXPECT_NE(ImportCacheKey(h, o, ImportKind::kMesh), ImportCacheKey(h, o, ImportKind::kAssembly));
}

TEST_F(ImportCacheTest, SecondImportComesFromTheCacheWithoutAWorker) {
  auto cache = ImportCache::Open(dir_.string());
  ASSERT_THAT(cache, IsOk());
  auto first = ImportWithCache(sample_, {}, limits_, *cache);
  ASSERT_THAT(first, IsOk());
  EXPECT_FALSE(first->from_cache);
  EXPECT_TRUE(first->stored);
  EXPECT_GT(first->mesh.triangles.size(), 300u);
  ASSERT_EQ(Files().size(), 1u);  // one entry, no temporary file left
  EXPECT_EQ(Files()[0].filename().string(), first->key + ".clshmesh");

  // With no worker to run, only a cache hit can succeed.
  IsolationLimits no_worker = limits_;
  no_worker.worker_path = "/nonexistent/clash-cad-worker";
  EXPECT_THAT(ImportIsolated(sample_, {}, no_worker),
              StatusIs(absl::StatusCode::kFailedPrecondition, "cannot be started"));
  auto second = ImportWithCache(sample_, {}, no_worker, *cache);
  ASSERT_THAT(second, IsOk());
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->key, first->key);
  EXPECT_EQ(second->mesh.xyz, first->mesh.xyz);
  EXPECT_EQ(second->mesh.triangles, first->mesh.triangles);
  EXPECT_EQ(second->mesh.face_ids, first->mesh.face_ids);
  EXPECT_EQ(second->mesh.faces_total, first->mesh.faces_total);
  EXPECT_EQ(second->mesh.deflection_mm, first->mesh.deflection_mm);

  // Other options are another entry.
  TessellationOptions finer;
  finer.relative_deflection = 0.0005;
  auto third = ImportWithCache(sample_, finer, limits_, *cache);
  ASSERT_THAT(third, IsOk());
  EXPECT_FALSE(third->from_cache);
  EXPECT_GT(third->mesh.triangles.size(), first->mesh.triangles.size());
  EXPECT_EQ(Files().size(), 2u);
}

TEST_F(ImportCacheTest, DamagedEntriesAreDetectedAndRebuilt) {
  auto cache = ImportCache::Open(dir_.string());
  ASSERT_THAT(cache, IsOk());
  auto first = ImportWithCache(sample_, {}, limits_, *cache);
  ASSERT_THAT(first, IsOk());
  const fs::path entry = dir_ / (first->key + ".clshmesh");
  const auto size = fs::file_size(entry);
  for (const char* damage : {"flip", "truncate", "empty"}) {
    SCOPED_TRACE(damage);
    {
      std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
      if (std::string(damage) == "flip") {
        f.seekg(static_cast<std::streamoff>(size / 2));
        char c = 0;
        f.read(&c, 1);
        f.seekp(static_cast<std::streamoff>(size / 2));
        c = static_cast<char>(c ^ 0x10);
        f.write(&c, 1);
      }
    }
    if (std::string(damage) == "truncate") fs::resize_file(entry, size - 7);
    if (std::string(damage) == "empty") fs::resize_file(entry, 0);
    auto loaded = cache->Load(first->key);
    ASSERT_THAT(loaded, IsOk());
    EXPECT_FALSE(loaded->has_value());
    EXPECT_FALSE(fs::exists(entry));  // the damaged entry was dropped
    auto again = ImportWithCache(sample_, {}, limits_, *cache);
    ASSERT_THAT(again, IsOk());
    EXPECT_FALSE(again->from_cache);  // rebuilt by a worker
    EXPECT_EQ(again->mesh.triangles, first->mesh.triangles);
    EXPECT_EQ(fs::file_size(entry), size);
    auto hit = cache->Load(first->key);
    ASSERT_THAT(hit, IsOk());
    EXPECT_TRUE(hit->has_value());
  }
}

// An entry file above kMaxImportCacheEntryBytes (here a sparse one) is a miss and is removed,
// without being read: a load under an address-space limit far below its size still succeeds (an
// uncapped load allocates the whole file and throws std::bad_alloc).
TEST_F(ImportCacheTest, AnEntryAboveTheCapIsAMissAndIsNeverReadIntoMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer cannot run under RLIMIT_AS";
#endif
  auto cache = ImportCache::Open(dir_.string());
  ASSERT_THAT(cache, IsOk());
  const std::string key(64, 'c');
  const fs::path entry = dir_ / (key + ".clshmesh");
  std::ofstream(entry) << "CLSHMSH1";
  fs::resize_file(entry, kMaxImportCacheEntryBytes + 1);
  ASSERT_EQ(fs::file_size(entry), kMaxImportCacheEntryBytes + 1);

  // In a child process, so that the limit and a failure stay there. Exit codes: 0 a miss,
  // 1 a hit or an error, 2 std::bad_alloc.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit as{};
    getrlimit(RLIMIT_AS, &as);
    std::ifstream status("/proc/self/status");
    std::size_t vm_kb = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("VmSize:")) vm_kb = std::stoull(line.substr(7));
    }
    // What the process maps now, and 512 MiB: a quarter of the entry's size.
    as.rlim_cur = static_cast<rlim_t>((vm_kb << 10) + (std::size_t{512} << 20));
    if (vm_kb == 0 || setrlimit(RLIMIT_AS, &as) != 0) _exit(3);
    try {
      const absl::StatusOr<std::optional<MeshBuffers>> loaded = cache->Load(key);
      _exit(loaded.ok() && !loaded->has_value() ? 0 : 1);
    } catch (const std::bad_alloc&) {
      _exit(2);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(fs::exists(entry));  // dropped as damage
}

// Something that cannot be read under an entry's name (here a folder) is dropped as damage, so
// that the next import can store its entry there.
TEST_F(ImportCacheTest, AnEntryThatCannotBeReadIsDroppedAndReplaced) {
  auto cache = ImportCache::Open(dir_.string());
  ASSERT_THAT(cache, IsOk());
  auto first = ImportWithCache(sample_, {}, limits_, *cache);
  ASSERT_THAT(first, IsOk());
  const fs::path entry = dir_ / (first->key + ".clshmesh");
  ASSERT_TRUE(fs::remove(entry));
  ASSERT_TRUE(fs::create_directory(entry));
  auto loaded = cache->Load(first->key);
  ASSERT_THAT(loaded, IsOk());
  EXPECT_FALSE(loaded->has_value());
  EXPECT_FALSE(fs::exists(entry));
  auto again = ImportWithCache(sample_, {}, limits_, *cache);
  ASSERT_THAT(again, IsOk());
  EXPECT_FALSE(again->from_cache);
  EXPECT_TRUE(again->stored);
  EXPECT_TRUE(fs::is_regular_file(entry));
}

// A load that cannot open a good entry for want of resources (here file descriptors) is a miss
// that keeps the entry: only what is no entry (a folder, a file above the cap, a bad checksum) is
// removed as damage (the diff review found that any read error removed it).
TEST_F(ImportCacheTest, AnEntryThatCannotBeOpenedForWantOfResourcesIsKept) {
  auto cache = ImportCache::Open(dir_.string());
  ASSERT_THAT(cache, IsOk());
  auto first = ImportWithCache(sample_, {}, limits_, *cache);
  ASSERT_THAT(first, IsOk());
  const fs::path entry = dir_ / (first->key + ".clshmesh");
  ASSERT_TRUE(fs::is_regular_file(entry));
  // In a child process: no descriptor left to open with. Exit codes: 0 a miss, 1 otherwise.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int lowest_free = dup(0);
    close(lowest_free);
    const rlimit none{static_cast<rlim_t>(lowest_free), static_cast<rlim_t>(lowest_free)};
    if (lowest_free < 0 || setrlimit(RLIMIT_NOFILE, &none) != 0) _exit(3);
    const absl::StatusOr<std::optional<MeshBuffers>> loaded = cache->Load(first->key);
    _exit(loaded.ok() && !loaded->has_value() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(fs::is_regular_file(entry));
  auto loaded = cache->Load(first->key);
  ASSERT_THAT(loaded, IsOk());
  EXPECT_TRUE(loaded->has_value());
}

TEST_F(ImportCacheTest, BadKeysFoldersAndFilesGiveClearErrors) {
  auto cache = ImportCache::Open(dir_.string());
  ASSERT_THAT(cache, IsOk());
  EXPECT_THAT(cache->Load("../../etc/passwd"),
              StatusIs(absl::StatusCode::kInvalidArgument, "64 hex"));
  EXPECT_THAT(cache->Store(std::string(64, 'G'), MeshBuffers{}),
              StatusIs(absl::StatusCode::kInvalidArgument, "64 hex"));
  auto miss = cache->Load(std::string(64, 'a'));
  ASSERT_THAT(miss, IsOk());
  EXPECT_FALSE(miss->has_value());
  const fs::path file = dir_ / "not-a-folder";
  std::ofstream(file) << "x";
  EXPECT_THAT(ImportCache::Open(file.string()),
              StatusIs(absl::StatusCode::kInvalidArgument, "cannot be used"));
  EXPECT_THAT(ImportWithCache((dir_ / "missing.step").string(), {}, limits_, *cache),
              StatusIs(absl::StatusCode::kNotFound, "no such file"));
  // A bad file is not cached: the error comes back each time, nothing is stored.
  const fs::path junk = dir_ / "junk.step";
  std::ofstream(junk) << "ISO-10303-21;\nthis is not a STEP file\n";
  EXPECT_THAT(ImportWithCache(junk.string(), {}, limits_, *cache),
              StatusIs(absl::StatusCode::kInvalidArgument, ""));
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) entries += e.path().extension() == ".clshmesh";
  EXPECT_EQ(entries, 0);
}

// ---------------------------------------------------------------------------------------------
// Assemblies.

// The generated assembly `step_`, a cache folder and limits with and without a worker.
class AssemblyCacheTest : public testing::GeneratedAssemblyTest {
 protected:
  void SetUp() override {
    GeneratedAssemblyTest::SetUp();
    cache_dir_ = dir_ / "cache";
    limits_.worker_path = CLASH_CAD_WORKER_PATH;
    limits_.wall_seconds = 60;
    no_worker_.worker_path = "/nonexistent/clash-cad-worker";
  }

  // Entry files in the cache folder with this extension.
  std::vector<fs::path> Entries(const std::string& extension) const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(cache_dir_)) {
      if (e.path().extension() == extension) out.push_back(e.path());
    }
    return out;
  }

  fs::path cache_dir_;
  IsolationLimits limits_;
  IsolationLimits no_worker_;  // only a cache hit can succeed with these
};

TEST_F(AssemblyCacheTest, SecondImportComesFromTheCacheWithoutAWorker) {
  auto cache = ImportCache::Open(cache_dir_.string());
  ASSERT_THAT(cache, IsOk());
  auto first = ImportAssemblyWithCache(step_, {}, limits_, *cache);
  ASSERT_THAT(first, IsOk());
  EXPECT_FALSE(first->from_cache);
  EXPECT_TRUE(first->stored);
  testing::CheckGeneratedAssembly(first->assembly);
  auto file_hash = Sha256OfFile(step_);
  ASSERT_THAT(file_hash, IsOk());
  EXPECT_EQ(first->key, ImportCacheKey(*file_hash, {}, ImportKind::kAssembly));
  const std::vector<fs::path> entries = Entries(".clshasm");
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].filename().string(), first->key + ".clshasm");
  EXPECT_EQ(std::distance(fs::directory_iterator(cache_dir_), fs::directory_iterator()), 1)
      << "no temporary file may be left";

  EXPECT_THAT(ImportAssemblyIsolated(step_, {}, no_worker_),
              StatusIs(absl::StatusCode::kFailedPrecondition, "cannot be started"));
  auto second = ImportAssemblyWithCache(step_, {}, no_worker_, *cache);
  ASSERT_THAT(second, IsOk());
  EXPECT_TRUE(second->from_cache);
  EXPECT_FALSE(second->stored);
  EXPECT_EQ(second->key, first->key);
  testing::ExpectSameAssembly(second->assembly, first->assembly);

  // The whole-file mesh of the same file is another entry, and neither is read as the other.
  auto mesh = ImportWithCache(step_, {}, limits_, *cache);
  ASSERT_THAT(mesh, IsOk());
  EXPECT_FALSE(mesh->from_cache);
  EXPECT_NE(mesh->key, first->key);
  EXPECT_EQ(Entries(".clshmesh").size(), 1u);
  auto as_assembly = cache->LoadAssembly(mesh->key);
  ASSERT_THAT(as_assembly, IsOk());
  EXPECT_FALSE(as_assembly->has_value());
  auto as_mesh = cache->Load(first->key);
  ASSERT_THAT(as_mesh, IsOk());
  EXPECT_FALSE(as_mesh->has_value());
  EXPECT_EQ(Entries(".clshmesh").size() + Entries(".clshasm").size(), 2u) << "nothing dropped";
  auto mesh_again = ImportWithCache(step_, {}, no_worker_, *cache);
  ASSERT_THAT(mesh_again, IsOk());
  EXPECT_TRUE(mesh_again->from_cache);
}

TEST_F(AssemblyCacheTest, DamagedAssemblyEntriesAreDetectedAndRebuilt) {
  auto cache = ImportCache::Open(cache_dir_.string());
  ASSERT_THAT(cache, IsOk());
  auto first = ImportAssemblyWithCache(step_, {}, limits_, *cache);
  ASSERT_THAT(first, IsOk());
  const fs::path entry = cache_dir_ / (first->key + ".clshasm");
  const std::string good = testing::ReadBytes(entry);
  // A valid mesh entry (with a valid checksum) under the assembly's name is damage too.
  auto mesh = ImportWithCache(step_, {}, limits_, *cache);
  ASSERT_THAT(mesh, IsOk());
  const std::string mesh_entry = testing::ReadBytes(cache_dir_ / (mesh->key + ".clshmesh"));

  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  const std::vector<std::pair<const char*, std::string>> damages{
      {"flip", flipped},
      {"truncate", good.substr(0, good.size() - 7)},
      {"empty", ""},
      {"mesh entry", mesh_entry}};
  for (const auto& [name, bytes] : damages) {
    SCOPED_TRACE(name);
    testing::WriteBytes(entry, bytes);
    auto loaded = cache->LoadAssembly(first->key);
    ASSERT_THAT(loaded, IsOk());
    EXPECT_FALSE(loaded->has_value());
    EXPECT_FALSE(fs::exists(entry));  // the damaged entry was dropped
    EXPECT_THAT(ImportAssemblyWithCache(step_, {}, no_worker_, *cache),
                StatusIs(absl::StatusCode::kFailedPrecondition, "cannot be started"));
    auto again = ImportAssemblyWithCache(step_, {}, limits_, *cache);
    ASSERT_THAT(again, IsOk());
    EXPECT_FALSE(again->from_cache);  // rebuilt by a worker
    EXPECT_TRUE(again->stored);
    testing::ExpectSameAssembly(again->assembly, first->assembly);
    EXPECT_EQ(testing::ReadBytes(entry), good);
    auto hit = ImportAssemblyWithCache(step_, {}, no_worker_, *cache);
    ASSERT_THAT(hit, IsOk());
    EXPECT_TRUE(hit->from_cache);
  }
}

TEST_F(AssemblyCacheTest, StoreAndLoadAssemblyDirectly) {
  auto cache = ImportCache::Open(cache_dir_.string());
  ASSERT_THAT(cache, IsOk());
  auto assembly = ImportAssemblyIsolated(step_, {}, limits_);
  ASSERT_THAT(assembly, IsOk());
  const std::string key(64, 'c');
  ASSERT_THAT(cache->StoreAssembly(key, *assembly), IsOk());
  auto loaded = cache->LoadAssembly(key);
  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  testing::ExpectSameAssembly(**loaded, *assembly);
  EXPECT_THAT(cache->StoreAssembly("not a key", *assembly),
              StatusIs(absl::StatusCode::kInvalidArgument, "64 hex"));
  EXPECT_THAT(cache->LoadAssembly("../x"), StatusIs(absl::StatusCode::kInvalidArgument, "64 hex"));
  // A file that is not an assembly is not cached: the error comes back, nothing is stored.
  const fs::path junk = dir_ / "junk.step";
  testing::WriteBytes(junk, "ISO-10303-21;\nthis is not a STEP file\n");
  EXPECT_THAT(ImportAssemblyWithCache(junk.string(), {}, limits_, *cache),
              StatusIs(absl::StatusCode::kInvalidArgument, ""));
  EXPECT_EQ(Entries(".clshasm").size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// The size bound, least-recently-used eviction and the reserve hook, on small synthetic entries
// (no OCCT): the fan of `n` triangles around a vertex, whose entry size grows with n.

MeshBuffers Fan(int n) {
  MeshBuffers mesh;
  mesh.xyz = {0, 0, 0};
  for (int i = 0; i <= n; ++i) {
    const double a = 0.1 * i;
    mesh.xyz.insert(mesh.xyz.end(), {std::cos(a), std::sin(a), 1.0});
  }
  for (int i = 0; i < n; ++i) {
    mesh.triangles.insert(mesh.triangles.end(),
                          {0u, static_cast<uint32_t>(i + 1), static_cast<uint32_t>(i + 2)});
    mesh.face_ids.push_back(0);
  }
  mesh.faces_total = mesh.faces_meshed = 1;
  return mesh;
}

class BoundedImportCacheTest : public testing::ScratchDirTest {
 protected:
  static std::string Key(char c) { return std::string(64, c); }
  fs::path Entry(char c) const { return dir_ / (Key(c) + ".clshmesh"); }
  // Sets an entry's last use to `seconds` after the epoch (long ago: before any store or load).
  void SetUsed(char c, time_t seconds) const {
    const timespec times[2] = {{seconds, 0}, {seconds, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, Entry(c).c_str(), times, 0), 0) << Entry(c);
  }
  // The size of the entry of Fan(n) into *size, measured in an unbounded cache of its own.
  void EntrySize(int n, std::uint64_t* size) const {
    const fs::path probe = dir_ / "probe";
    auto cache = ImportCache::Open(probe.string());
    ASSERT_THAT(cache, IsOk());
    ASSERT_THAT(cache->Store(Key('f'), Fan(n)), IsOk());
    *size = fs::file_size(probe / (Key('f') + ".clshmesh"));
    fs::remove_all(probe);
  }
};

// With room for two entries, a third evicts the least recently used: the one stored or loaded
// longest ago, so a load keeps an old entry (first-in-first-out would drop it).
TEST_F(BoundedImportCacheTest, StoresStayWithinTheBoundLeastRecentlyUsedFirst) {
  std::uint64_t size = 0;
  ASSERT_NO_FATAL_FAILURE(EntrySize(50, &size));
  auto cache = ImportCache::Open(dir_.string(), {.max_bytes = 2 * size + size / 2, .reserve = {}});
  ASSERT_THAT(cache, IsOk());
  ASSERT_THAT(cache->Store(Key('a'), Fan(50)), IsOk());
  ASSERT_THAT(cache->Store(Key('b'), Fan(50)), IsOk());
  EXPECT_EQ(cache->SizeBytes(), 2 * size);
  ASSERT_NO_FATAL_FAILURE(SetUsed('a', 1000));
  ASSERT_NO_FATAL_FAILURE(SetUsed('b', 2000));
  auto hit = cache->Load(Key('a'));  // a is used now: b is the least recently used
  ASSERT_THAT(hit, IsOk());
  ASSERT_TRUE(hit->has_value());
  ASSERT_THAT(cache->Store(Key('c'), Fan(50)), IsOk());
  EXPECT_TRUE(fs::exists(Entry('a')));
  EXPECT_FALSE(fs::exists(Entry('b')));
  EXPECT_TRUE(fs::exists(Entry('c')));
  EXPECT_EQ(cache->SizeBytes(), 2 * size);
  // Storing a key again replaces its entry and evicts nothing else (also through a folder
  // named with a trailing slash).
  ASSERT_NO_FATAL_FAILURE(SetUsed('c', 1000));
  auto slash =
      ImportCache::Open(dir_.string() + "/", {.max_bytes = 2 * size + size / 2, .reserve = {}});
  ASSERT_THAT(slash, IsOk());
  ASSERT_THAT(slash->Store(Key('a'), Fan(50)), IsOk());
  EXPECT_TRUE(fs::exists(Entry('c')));
  // An entry larger than the bound is not stored, and evicts nothing.
  EXPECT_THAT(cache->Store(Key('d'), Fan(200)),
              StatusIs(absl::StatusCode::kResourceExhausted, "larger than the cache's bound"));
  EXPECT_FALSE(fs::exists(Entry('d')));
  EXPECT_EQ(cache->SizeBytes(), 2 * size);
  // A bound of 0 caches nothing; an import through it still succeeds, unstored.
  auto none = ImportCache::Open((dir_ / "none").string(), {.max_bytes = 0, .reserve = {}});
  ASSERT_THAT(none, IsOk());
  EXPECT_THAT(none->Store(Key('a'), Fan(1)), StatusIs(absl::StatusCode::kResourceExhausted, ""));
  EXPECT_EQ(none->SizeBytes(), 0u);
}

// Evict frees the least recently used entries first, only entries (not temporaries of writes
// in progress nor other files), and says how much it freed.
TEST_F(BoundedImportCacheTest, EvictTakesTheLeastRecentlyUsedEntriesFirst) {
  std::uint64_t size = 0;
  ASSERT_NO_FATAL_FAILURE(EntrySize(50, &size));
  auto cache = ImportCache::Open(dir_.string());
  ASSERT_THAT(cache, IsOk());
  for (char c : {'a', 'b', 'c'}) ASSERT_THAT(cache->Store(Key(c), Fan(50)), IsOk());
  ASSERT_NO_FATAL_FAILURE(SetUsed('a', 3000));
  ASSERT_NO_FATAL_FAILURE(SetUsed('b', 1000));
  ASSERT_NO_FATAL_FAILURE(SetUsed('c', 2000));
  std::ofstream(dir_ / ".tmp-entry-1-1") << "a write in progress";
  std::ofstream(dir_ / "notes.txt") << "not an entry";
  EXPECT_EQ(cache->SizeBytes(), 3 * size);
  EXPECT_EQ(cache->Evict(0), 0u);
  EXPECT_EQ(cache->Evict(1), size);
  EXPECT_FALSE(fs::exists(Entry('b')));
  EXPECT_TRUE(fs::exists(Entry('c')));
  EXPECT_EQ(cache->Evict(size + 1), 2 * size);  // c, then a
  EXPECT_EQ(cache->SizeBytes(), 0u);
  EXPECT_EQ(cache->Evict(1), 0u);
  EXPECT_TRUE(fs::exists(dir_ / ".tmp-entry-1-1"));
  EXPECT_TRUE(fs::exists(dir_ / "notes.txt"));
}

// The reserve hook is asked for the entry's exact size after the eviction and before the
// write, its hold is kept until the entry is on disk, and its refusal stores nothing.
TEST_F(BoundedImportCacheTest, ReserveIsAskedBeforeTheWriteAndHeldUntilItIsOnDisk) {
  std::uint64_t size = 0;
  ASSERT_NO_FATAL_FAILURE(EntrySize(50, &size));
  std::vector<std::uint64_t> asked;
  bool on_disk_at_release = false;
  bool refuse = false;
  ImportCacheOptions options;
  options.max_bytes = size;
  options.reserve = [&](std::uint64_t bytes) -> absl::StatusOr<std::shared_ptr<void>> {
    asked.push_back(bytes);
    EXPECT_FALSE(fs::exists(Entry('a'))) << "evicted before the reservation";
    if (refuse) return absl::ResourceExhaustedError("quota");
    return std::shared_ptr<void>(nullptr,
                                 [&](void*) { on_disk_at_release = fs::exists(Entry('b')); });
  };
  auto cache = ImportCache::Open(dir_.string(), options);
  ASSERT_THAT(cache, IsOk());
  refuse = true;
  EXPECT_THAT(cache->Store(Key('b'), Fan(50)),
              StatusIs(absl::StatusCode::kResourceExhausted, "quota"));
  EXPECT_FALSE(fs::exists(Entry('b')));
  refuse = false;
  asked.clear();
  auto plain = ImportCache::Open(dir_.string());  // a stored without the hook
  ASSERT_THAT(plain, IsOk());
  ASSERT_THAT(plain->Store(Key('a'), Fan(50)), IsOk());
  ASSERT_THAT(cache->Store(Key('b'), Fan(50)), IsOk());
  EXPECT_THAT(asked, ::testing::ElementsAre(size));
  EXPECT_TRUE(on_disk_at_release);
  EXPECT_EQ(cache->SizeBytes(), size);
}

class DurableFileTest : public testing::ScratchDirTest {
 protected:
  void TearDown() override {
    internal::SetFsyncForTesting(nullptr);
    testing::ScratchDirTest::TearDown();
  }
  // The names in dir_, sorted.
  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// fsync that fails for folders (EIO), or for files (ENOSPC, as a full disk reports a write
// that only the sync finds no room for; EIO), and counts its calls.
int g_fsync_calls = 0;
int FailOn(int fd, bool folders, int err) {
  ++g_fsync_calls;
  struct stat st {};
  if (fstat(fd, &st) != 0) return -1;
  if (S_ISDIR(st.st_mode) == folders) {
    errno = err;
    return -1;
  }
  return fsync(fd);
}
int FolderSyncFails(int fd) { return FailOn(fd, true, EIO); }
int FileSyncFindsTheDiskFull(int fd) { return FailOn(fd, false, ENOSPC); }
int FileSyncFails(int fd) { return FailOn(fd, false, EIO); }
int FoldersCannotBeSynced(int fd) { return FailOn(fd, true, EINVAL); }

// A file whose content cannot be synced is not put in place: the old content stays, the
// temporary goes, and a full disk is RESOURCE_EXHAUSTED (freeing space helps), other errors
// INTERNAL.
TEST_F(DurableFileTest, AWriteWhoseDataCannotBeSyncedLeavesTheOldContent) {
  const fs::path file = dir_ / "scene.pb";
  ASSERT_THAT(WriteFileAtomically(file.string(), "old"), IsOk());
  g_fsync_calls = 0;
  internal::SetFsyncForTesting(&FileSyncFindsTheDiskFull);
  EXPECT_THAT(WriteFileAtomically(file.string(), "new"),
              StatusIs(absl::StatusCode::kResourceExhausted, "No space left on device"));
  EXPECT_EQ(g_fsync_calls, 1);  // the file's; the rename and the folder's never came
  internal::SetFsyncForTesting(&FileSyncFails);
  bool in_place = true;
  EXPECT_THAT(WriteFileAtomically(file.string(), "new", &in_place),
              StatusIs(absl::StatusCode::kInternal, "Input/output error"));
  EXPECT_FALSE(in_place);
  EXPECT_EQ(ReadFileCapped(file.string(), 100).value_or(""), "old");
  EXPECT_THAT(Names(), ::testing::ElementsAre("scene.pb"));
}

// When only the folder cannot be synced, the rename is done but may not survive a crash: the
// write reports it (INTERNAL) with the new content in place, which a caller undoing its change
// reads back; a removal likewise, with the file gone.
TEST_F(DurableFileTest, AFolderThatCannotBeSyncedIsReported) {
  const fs::path file = dir_ / "scene.pb";
  ASSERT_THAT(WriteFileAtomically(file.string(), "old"), IsOk());
  g_fsync_calls = 0;
  internal::SetFsyncForTesting(&FolderSyncFails);
  bool in_place = false;
  EXPECT_THAT(WriteFileAtomically(file.string(), "new", &in_place),
              StatusIs(absl::StatusCode::kInternal, "may not survive a crash"));
  EXPECT_TRUE(in_place);
  EXPECT_EQ(g_fsync_calls, 2);  // the file's, then the folder's
  EXPECT_EQ(ReadFileCapped(file.string(), 100).value_or(""), "new");
  EXPECT_THAT(Names(), ::testing::ElementsAre("scene.pb"));
  EXPECT_THAT(RemoveFileDurably(file.string()),
              StatusIs(absl::StatusCode::kInternal, "a crash may bring it back"));
  EXPECT_FALSE(fs::exists(file));
  // A file system whose folders cannot be synced at all is taken as it is.
  internal::SetFsyncForTesting(&FoldersCannotBeSynced);
  ASSERT_THAT(WriteFileAtomically(file.string(), "again", &in_place), IsOk());
  EXPECT_TRUE(in_place);
  EXPECT_THAT(RemoveFileDurably(file.string()), IsOk());
  EXPECT_FALSE(fs::exists(file));
}

// A FIFO where a file should be (a hostile worker's result.bin) is refused at once: before, the
// open waited for a writer forever, holding the import's slot. Should the open block again, the
// test opens the FIFO for writing to release it, and fails.
TEST_F(DurableFileTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string path = (dir_ / "result.bin").string();
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto read = std::async(std::launch::async, [&] { return ReadFileCapped(path, 1024); });
  if (read.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    ADD_FAILURE() << "opening a FIFO blocked";
    const int writer = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (writer >= 0) close(writer);
  }
  EXPECT_THAT(read.get().status(), StatusIs(absl::StatusCode::kInternal, "not a regular file"));
}

// RemoveFileDurably removes a file (a missing one is no error) and reports what it cannot
// remove. (That it syncs the folder is not observable without a crash.)
TEST_F(DurableFileTest, RemoveFileDurablyRemovesAndReports) {
  const fs::path file = dir_ / "scene.pb";
  testing::WriteBytes(file, "x");
  EXPECT_THAT(RemoveFileDurably(file.string()), IsOk());
  EXPECT_FALSE(fs::exists(file));
  EXPECT_THAT(RemoveFileDurably(file.string()), IsOk());
  fs::create_directory(dir_ / "folder");
  EXPECT_THAT(RemoveFileDurably((dir_ / "folder").string()),
              StatusIs(absl::StatusCode::kInternal, "cannot remove"));
  EXPECT_TRUE(fs::exists(dir_ / "folder"));
}

// Each folder MakeDirsDurably creates is synced into its parent (a crash cannot lose it with
// the files acknowledged in it); folders that exist already are not synced again; a parent
// that cannot be synced is INTERNAL, the folders being made all the same.
TEST_F(DurableFileTest, MakeDirsDurablySyncsEachFolderItCreates) {
  internal::SetFsyncForTesting(+[](int fd) {
    ++g_fsync_calls;
    return fsync(fd);
  });
  g_fsync_calls = 0;
  EXPECT_THAT(MakeDirsDurably((dir_ / "a" / "b" / "c").string()), IsOk());
  EXPECT_TRUE(fs::is_directory(dir_ / "a" / "b" / "c"));
  EXPECT_EQ(g_fsync_calls, 3);  // dir_ (for a), a (for b), b (for c)
  g_fsync_calls = 0;
  EXPECT_THAT(MakeDirsDurably((dir_ / "a" / "b" / "c").string()), IsOk());
  EXPECT_THAT(MakeDirsDurably((dir_ / "a" / "d").string()), IsOk());
  EXPECT_EQ(g_fsync_calls, 1);
  internal::SetFsyncForTesting(&FolderSyncFails);
  EXPECT_THAT(MakeDirsDurably((dir_ / "e").string()),
              StatusIs(absl::StatusCode::kInternal, "may not survive a crash"));
  EXPECT_TRUE(fs::is_directory(dir_ / "e"));
  testing::WriteBytes(dir_ / "file", "x");
  EXPECT_THAT(MakeDirsDurably((dir_ / "file" / "below").string()),
              StatusIs(absl::StatusCode::kInternal, "cannot create folder"));
}

}  // namespace
}  // namespace clash::cad
