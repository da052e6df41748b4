// Tokens, tenant names, listen addresses and per-tenant quotas (server/src/auth.h, tenant.h).
#include "auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "clash/cad/durable_file.h"
#include "clash/cad/import_cache.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage.h"
#include "tenant.h"
#include "testing/temp_dir.h"

namespace clash::server {
namespace {

std::string HashHex(const std::string& token) { return cad::Sha256Hex(token); }

// Writes a file of `bytes` bytes at `path`.
void WriteBlob(const std::string& path, std::size_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  const std::string blob(bytes, 'x');
  std::fwrite(blob.data(), 1, blob.size(), f);
  std::fclose(f);
}

TEST(TokenTable, MapsTokensToTenantsAndNothingElse) {
  const std::string text = absl::StrCat("# comment\n\n", HashHex("alpha-token"), " team-a\n", "  ",
                                        HashHex("beta-token"), "\tteam_b.2  \n");
  absl::StatusOr<TokenTable> table = TokenTable::Parse(text);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 2u);
  EXPECT_EQ(table->TenantOf("alpha-token"), "team-a");
  EXPECT_EQ(table->TenantOf("beta-token"), "team_b.2");
  EXPECT_EQ(table->TenantOf("alpha-token "), std::nullopt);
  EXPECT_EQ(table->TenantOf("ALPHA-TOKEN"), std::nullopt);
  EXPECT_EQ(table->TenantOf(""), std::nullopt);
  // The hash itself is not a token.
  EXPECT_EQ(table->TenantOf(HashHex("alpha-token")), std::nullopt);
}

TEST(TokenTable, RejectsMalformedFilesWithTheLine) {
  const std::string h = HashHex("x");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "no token"},
      {"# only comments\n", "no token"},
      {absl::StrCat(h, "\n"), "line 1"},
      {absl::StrCat(h, " a b\n"), "line 1"},
      {absl::StrCat("\n", h.substr(1), " a\n"), "line 2"},
      {absl::StrCat(std::string(63, 'a'), "g a\n"), "hex"},
      {absl::StrCat(h, " ../etc\n"), "tenant names"},
      {absl::StrCat(h, " .hidden\n"), "tenant names"},
      {absl::StrCat(h, " ", std::string(65, 'a'), "\n"), "tenant names"},
      {absl::StrCat(h, " a\n", h, " b\n"), "twice"},
  };
  for (const auto& [text, why] : bad) {
    absl::StatusOr<TokenTable> table = TokenTable::Parse(text);
    ASSERT_FALSE(table.ok()) << text;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(table.status().message().find(why), absl::string_view::npos)
        << table.status().message() << " for " << text;
  }
  EXPECT_EQ(TokenTable::Load("/nonexistent/tokens").status().code(), absl::StatusCode::kNotFound);
}

TEST(BearerToken, AcceptsOnlyTheBearerScheme) {
  EXPECT_EQ(*BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(*BearerToken("bearer  abc "), "abc");
  EXPECT_EQ(*BearerToken("BEARER abc"), "abc");
  for (const char* bad : {"", "Bearer", "Bearer ", "Bearer    ", "Basic abc", "abc", "Bearerabc"}) {
    absl::StatusOr<absl::string_view> t = BearerToken(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnauthenticated);
  }
  // The message never repeats what was sent.
  EXPECT_EQ(BearerToken("Basic secret-value").status().message().find("secret"),
            absl::string_view::npos);
}

TEST(IsLoopbackListen, OnlyLoopbackHosts) {
  for (const char* yes :
       {"127.0.0.1:50051", "127.0.0.1:0", "127.1.2.3:1", "localhost:50051", "[::1]:50051"}) {
    EXPECT_TRUE(IsLoopbackListen(yes)) << yes;
  }
  for (const char* no : {"0.0.0.0:50051", "[::]:50051", "192.168.1.2:50051", "10.0.0.1:1",
                         "example.com:50051", "127.0.0.1.evil.com:1", "128.0.0.1:1",
                         "127.0.0.256:1", "[::1:1", ":50051", "[::ffff:127.0.0.1]:1"}) {
    EXPECT_FALSE(IsLoopbackListen(no)) << no;
  }
}

TEST(IsTenantName, FolderSafeNames) {
  EXPECT_TRUE(IsTenantName("a"));
  EXPECT_TRUE(IsTenantName("Team-7_x.y"));
  EXPECT_TRUE(IsTenantName(std::string(64, 'z')));
  for (const char* no : {"", ".", "..", ".a", "a/b", "a b", "a\\b", "ä"}) {
    EXPECT_FALSE(IsTenantName(no)) << no;
  }
  EXPECT_FALSE(IsTenantName(std::string(65, 'z')));
}

class TenantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir(std::filesystem::temp_directory_path(), "clash_tenant_test_");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static constexpr std::uint64_t kQuota = 100'000;
  // Opens tenant "a" of registry_, whose tenants have a storage quota of kQuota bytes, into
  // *t; empty_ gets the bytes its new folders take (little of the quota, or a fatal failure).
  void OpenQuotaTenant(std::shared_ptr<Tenant>* t) {
    TenantLimits limits;
    limits.max_storage_bytes = kQuota;
    registry_.emplace(dir_, 1000, limits);
    absl::StatusOr<std::shared_ptr<Tenant>> opened = registry_->Get("a");
    ASSERT_TRUE(opened.ok()) << opened.status();
    *t = *opened;
    const absl::StatusOr<std::uint64_t> bytes = (*t)->StorageBytes();
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    empty_ = *bytes;
    ASSERT_LT(empty_, 5'000u);
  }

  std::string dir_;
  std::optional<TenantRegistry> registry_;
  std::uint64_t empty_ = 0;
};

TEST_F(TenantTest, EachTenantHasItsOwnFolderAndStores) {
  TenantRegistry registry(dir_, 1000, {});
  absl::StatusOr<std::shared_ptr<Tenant>> a = registry.Get("a");
  absl::StatusOr<std::shared_ptr<Tenant>> b = registry.Get("b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->dir(), dir_ + "/tenants/a");
  EXPECT_NE(&(*a)->scenes(), &(*b)->scenes());
  absl::StatusOr<std::shared_ptr<Scene>> scene = (*a)->scenes().Create("mine");
  ASSERT_TRUE(scene.ok());
  EXPECT_TRUE((*a)->scenes().Get((*scene)->id()).ok());
  EXPECT_EQ((*b)->scenes().Get((*scene)->id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Get("a")->get(), a->get());
  EXPECT_EQ(registry.Get("../b").status().code(), absl::StatusCode::kInvalidArgument);
  // Reopened from disk, the scene is still tenant a's.
  TenantRegistry again(dir_, 1000, {});
  EXPECT_TRUE((*again.Get("a"))->scenes().Get((*scene)->id()).ok());
  EXPECT_FALSE((*again.Get("b"))->scenes().Get((*scene)->id()).ok());
}

// A write killed between its temporary and the rename leaves a ".tmp-<name>-<writer>-<n>" file
// behind (the process-level kill -9 test hits this by chance); opening the tenant removes them.
// In the folders only the server writes (parts, assemblies, scenes: it holds the data folder's
// lock), every one goes, whatever its name says: after a crash its pid may belong to another
// running process now, which before kept it, counted by the quota, for good. In the import
// cache, which clash-import may share, a running writer's stay (it may still rename them), and
// so does everything else; there the name tells a writer from a later process with its pid.
TEST_F(TenantTest, OpeningATenantRemovesTheTemporariesOfInterruptedWrites) {
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  const std::optional<std::string> parent = cad::internal::WriterTag(getppid());
  ASSERT_TRUE(parent.has_value());
  const std::vector<std::string> tag = absl::StrSplit(*parent, '.');
  ASSERT_EQ(tag.size(), 3u) << *parent;  // (/proc is there)
  const std::string ours = absl::StrCat(".tmp-entry-", getpid(), "-7");
  const std::string gone = absl::StrCat(".tmp-entry-", dead, "-7");
  const std::string running = absl::StrCat(".tmp-entry-", getppid(), "-7");  // an older name
  const std::string writing = absl::StrCat(".tmp-entry-", *parent, "-7");
  // The parent's pid, but another process's start (the pid reused), or an earlier boot.
  const std::string reused =
      absl::StrCat(".tmp-entry-", tag[0], ".", std::stoull(tag[1]) + 1, ".", tag[2], "-7");
  std::string other_boot = tag[2];
  other_boot[0] = other_boot[0] == '0' ? '1' : '0';
  const std::string before_boot =
      absl::StrCat(".tmp-entry-", tag[0], ".", tag[1], ".", other_boot, "-7");
  const std::string tenant = dir_ + "/tenants/a";
  const std::vector<std::string> all = {ours, gone, running, writing, reused, before_boot, "kept"};
  for (const char* folder : {"parts", "assemblies", "scenes", "import-cache"}) {
    std::filesystem::create_directories(tenant + "/" + folder);
    for (const std::string& name : all) {
      std::ofstream(tenant + "/" + folder + "/" + name) << "half written";
    }
  }
  TenantRegistry registry(dir_, 1000, {});
  ASSERT_TRUE(registry.Get("a").ok());
  for (const char* folder : {"parts", "assemblies", "scenes"}) {
    const std::string in = tenant + "/" + folder + "/";
    for (const std::string& name : all) {
      EXPECT_EQ(std::filesystem::exists(in + name), name == "kept") << folder << "/" << name;
    }
  }
  const std::string cache = tenant + "/import-cache/";
  for (const std::string& name : {ours, gone, reused, before_boot}) {
    EXPECT_FALSE(std::filesystem::exists(cache + name)) << name;
  }
  for (const std::string& name : {running, writing, std::string("kept")}) {
    EXPECT_TRUE(std::filesystem::exists(cache + name)) << name;
  }
}

// The temporaries of this process's writes carry its WriterTag (pid, start, boot), which is
// what lets a later process with the same pid leave them to the cleanup.
std::string g_fsynced;  // the first file FsyncAndName synced
int FsyncAndName(int fd) {
  if (g_fsynced.empty()) {
    std::error_code ec;
    g_fsynced = std::filesystem::read_symlink(absl::StrCat("/proc/self/fd/", fd), ec).string();
  }
  return ::fsync(fd);
}

TEST_F(TenantTest, TemporariesNameTheProcessThatWritesThem) {
  g_fsynced.clear();
  cad::internal::SetFsyncForTesting(&FsyncAndName);
  const absl::Status written = WriteFileAtomically(dir_ + "/file.pb", "bytes");
  cad::internal::SetFsyncForTesting(nullptr);
  ASSERT_TRUE(written.ok()) << written;
  const std::string name = std::filesystem::path(g_fsynced).filename().string();
  const std::string prefix =
      absl::StrCat(".tmp-file.pb-", *cad::internal::WriterTag(getpid()), "-");
  EXPECT_EQ(name.substr(0, prefix.size()), prefix) << name;
  EXPECT_FALSE(std::filesystem::exists(g_fsynced));  // renamed
}

// A scene file that does not parse is moved aside as damaged, named with the time it was set
// aside: the tenant cannot remove it (no call names it), so the quota does not count it;
// damaged_files() counts it for the metrics, and once the retention has passed since the time
// in its name it is removed, at the tenant's open or a sweep. A file of an older version, with
// no time in its name, is counted and kept for an operator. Before, such files were kept for
// good and counted against the quota: a tenant whose scenes were damaged could be held over
// its quota with nothing it could delete.
TEST_F(TenantTest, DamagedSceneFilesAreNotCountedByTheQuotaAndGoAfterTheirRetention) {
  const std::string scenes = dir_ + "/tenants/a/scenes/";
  std::filesystem::create_directories(scenes);
  const std::string id = "s" + std::string(32, '1');
  ASSERT_NO_FATAL_FAILURE(WriteBlob(scenes + id + ".pb", 60'000));  // not a scene
  const absl::Time now = absl::Now();
  const auto aside = [&](const std::string& scene, absl::Duration ago) {
    return absl::StrCat(scene, ".pb.",
                        absl::FormatTime("%Y%m%dT%H%M%SZ", now - ago, absl::UTCTimeZone()),
                        ".damaged");
  };
  const std::string old_one = aside("s" + std::string(32, '2'), absl::Hours(24 * 31));
  const std::string recent = aside("s" + std::string(32, '3'), absl::Hours(24 * 29));
  const std::string untimed = "s" + std::string(32, '4') + ".pb.damaged";
  for (const std::string& name : {old_one, recent, untimed}) {
    ASSERT_NO_FATAL_FAILURE(WriteBlob(scenes + name, 20'000));
  }
  TenantLimits limits;
  limits.max_storage_bytes = kQuota;  // (the damaged files alone, 120 kB, would pass it)
  std::optional<TenantRegistry> registry(std::in_place, dir_, 1000, limits);
  absl::StatusOr<std::shared_ptr<Tenant>> t = registry->Get("a");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(scenes)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 3u) << ::testing::PrintToString(names);
  // Set aside now, under a name that says when (within the seconds this open took).
  EXPECT_EQ(names[0].substr(0, id.size() + 4), id + ".pb.");
  const std::optional<absl::Time> since = DamagedSince(names[0]);
  ASSERT_TRUE(since.has_value()) << names[0];
  EXPECT_LE(absl::AbsDuration(*since - now), absl::Seconds(60));
  EXPECT_EQ(names[1], recent);
  EXPECT_EQ(names[2], untimed);  // (31 days old, but of unknown time: kept)
  EXPECT_EQ((*t)->damaged_files(), 3u);
  const absl::StatusOr<std::uint64_t> bytes = (*t)->StorageBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_LT(*bytes, 5'000u);
  EXPECT_TRUE((*t)->CheckStorage(90'000).ok());
  // Opened with a retention of a day: the 29-day-old one goes.
  limits.damaged_file_retention = absl::Hours(24);
  registry.emplace(dir_, 1000, limits);
  t = registry->Get("a");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(std::filesystem::exists(scenes + recent));
  EXPECT_TRUE(std::filesystem::exists(scenes + names[0]));
  EXPECT_TRUE(std::filesystem::exists(scenes + untimed));
  EXPECT_EQ((*t)->damaged_files(), 2u);
  EXPECT_EQ((*t)->SweepDamagedFiles(), 0u);
}

// Moving a file aside twice in one second never overwrites the first: each damaged copy stays.
TEST(DamagedFiles, MovingAsideNeverOverwritesAnotherDamagedFile) {
  const std::string dir =
      testing::MakeTempDir(std::filesystem::temp_directory_path(), "clash_damaged_test_");
  ASSERT_FALSE(dir.empty());
  const absl::Time at = absl::FromUnixSeconds(1'800'000'000);
  std::vector<std::string> moved;
  for (const char* content : {"first", "second"}) {
    std::ofstream(dir + "/s.pb") << content;
    const absl::StatusOr<std::string> to = MoveAsideDamaged(dir + "/s.pb", at);
    ASSERT_TRUE(to.ok()) << to.status();
    moved.push_back(*to);
  }
  EXPECT_EQ(moved[0], dir + "/s.pb.20270115T080000Z.damaged");
  EXPECT_EQ(moved[1], dir + "/s.pb.20270115T080000Z-2.damaged");
  EXPECT_EQ(DamagedSince("s.pb.20270115T080000Z-2.damaged"), at);
  EXPECT_EQ(DamagedSince("s.pb.damaged"), std::nullopt);
  EXPECT_EQ(DamagedSince("s.pb"), std::nullopt);
  std::string first;
  std::ifstream(moved[0]) >> first;
  EXPECT_EQ(first, "first");
  EXPECT_EQ(PruneDamagedFiles(dir, absl::Hours(1), at + absl::Minutes(59)).kept, 2u);
  const DamagedFiles pruned = PruneDamagedFiles(dir, absl::Hours(1), at + absl::Minutes(61));
  EXPECT_EQ(pruned.removed, 2u);
  EXPECT_EQ(pruned.kept, 0u);
  std::filesystem::remove_all(dir);
}

// A tenant whose folder cannot be used (here a file where its scenes/ folder should be) is not
// served, alone: its Get answers FAILED_PRECONDITION naming the folder and what is wrong, every
// other tenant opens, and nothing in its folder is removed or overwritten (not even its upload
// folder, which an open empties). Once repaired, it opens at the next try. Before, its open
// failed with INTERNAL ("cannot create folder ...: Not a directory"), and the server would not
// start.
TEST_F(TenantTest, ATenantWhoseFolderCannotBeUsedIsRefusedAloneAndLosesNothing) {
  const std::string tenant = dir_ + "/tenants/a";
  for (const char* folder : {"parts", "assemblies", "import-cache", "tmp"}) {
    std::filesystem::create_directories(tenant + "/" + folder);
  }
  ASSERT_NO_FATAL_FAILURE(WriteBlob(tenant + "/scenes", 100));
  ASSERT_NO_FATAL_FAILURE(WriteBlob(tenant + "/tmp/upload", 200));
  const std::string leftover = absl::StrCat(".tmp-p.pb-", getpid() + 1000000, "-1");
  ASSERT_NO_FATAL_FAILURE(WriteBlob(tenant + "/parts/" + leftover, 300));
  TenantRegistry registry(dir_, 1000, {}, nullptr, absl::ZeroDuration());
  const absl::Status refused = registry.Get("a").status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()),
              ::testing::AllOf(::testing::HasSubstr("tenant 'a' is not served"),
                               ::testing::HasSubstr(tenant + "/scenes is a file, where a folder "
                                                             "should be")));
  EXPECT_EQ(registry.unusable(), 1u);
  EXPECT_TRUE(registry.Get("b").ok());
  EXPECT_EQ(registry.Opened().size(), 1u);
  EXPECT_EQ(std::filesystem::file_size(tenant + "/scenes"), 100u);
  EXPECT_EQ(std::filesystem::file_size(tenant + "/tmp/upload"), 200u);
  EXPECT_EQ(std::filesystem::file_size(tenant + "/parts/" + leftover), 300u);
  // Asked again, it answers the same (tried again: nothing changed).
  EXPECT_EQ(registry.Get("a").status(), refused);
  // Other ways a folder cannot be used are named too.
  std::filesystem::remove(tenant + "/scenes");
  std::filesystem::create_symlink(dir_ + "/nowhere", tenant + "/scenes");
  EXPECT_THAT(std::string(registry.Get("a").status().message()),
              ::testing::HasSubstr(tenant + "/scenes is a symbolic link to nothing"));
  std::filesystem::remove(tenant + "/scenes");
  ASSERT_NO_FATAL_FAILURE(WriteBlob(dir_ + "/tenants/c", 10));
  EXPECT_THAT(std::string(registry.Get("c").status().message()),
              ::testing::HasSubstr(dir_ + "/tenants/c is a file, where a folder should be"));
  EXPECT_EQ(registry.unusable(), 2u);
  // Repaired (scenes/ may be made now), it opens.
  absl::StatusOr<std::shared_ptr<Tenant>> a = registry.Get("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(registry.unusable(), 1u);
  EXPECT_FALSE(std::filesystem::exists(tenant + "/parts/" + leftover));  // (now it is opened)
}

TEST_F(TenantTest, RateLimitAllowsTheBurstThenRefuses) {
  TenantLimits limits;
  limits.requests_per_second = 0.001;  // no refill within the test
  limits.burst = 5;
  TenantRegistry registry(dir_, 1000, limits);
  std::shared_ptr<Tenant> t = *registry.Get("a");
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(t->AdmitCall().ok()) << i;
  const absl::Status refused = t->AdmitCall();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  // Another tenant's budget is untouched.
  EXPECT_TRUE((*registry.Get("b"))->AdmitCall().ok());
}

TEST_F(TenantTest, StorageQuotaCountsTheTenantsFiles) {
  std::shared_ptr<Tenant> t;
  ASSERT_NO_FATAL_FAILURE(OpenQuotaTenant(&t));
  const std::uint64_t empty = empty_;
  EXPECT_TRUE(t->CheckStorage(50'000).ok());
  ASSERT_NO_FATAL_FAILURE(WriteBlob(t->tmp_dir() + "/blob", 80'000));
  EXPECT_EQ(t->StorageBytes().value_or(0), empty + 80'000);
  EXPECT_EQ(t->CheckStorage(50'000).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE((*registry_->Get("b"))->CheckStorage(50'000).ok());
}

// Imports make and remove folders under tmp/ all the time: a walk of the tenant's folder that
// meets one just removed skips it and counts everything else. Before, the walk stopped at that
// error and the quota saw only what it had counted so far (no parts, say), so writes passed it.
TEST_F(TenantTest, StorageCountSkipsFoldersRemovedWhileItWalks) {
  std::shared_ptr<Tenant> t;
  ASSERT_NO_FATAL_FAILURE(OpenQuotaTenant(&t));
  const std::uint64_t empty = empty_;
  const std::string base = t->tmp_dir() + "/..";
  for (const char* folder : {"/parts/", "/scenes/", "/assemblies/", "/import-cache/"}) {
    ASSERT_NO_FATAL_FAILURE(WriteBlob(base + folder + "blob", 10'000));
  }
  std::atomic<bool> done{false};
  std::thread churn([&] {
    for (int i = 0; !done; ++i) {  // an import's upload and worker folders, made and removed
      const std::string folder = absl::StrCat(t->tmp_dir(), "/worker-", i % 4);
      std::error_code ec;
      std::filesystem::create_directories(folder + "/a/b", ec);
      std::filesystem::remove_all(folder, ec);
    }
  });
  int short_counts = 0;
  for (int i = 0; i < 3000; ++i) {
    const absl::StatusOr<std::uint64_t> bytes = t->StorageBytes();
    EXPECT_TRUE(bytes.ok()) << bytes.status();  // (an ASSERT would leave `churn` joinable)
    if (!bytes.ok()) break;
    short_counts += *bytes < empty + 40'000;
  }
  done = true;
  churn.join();
  EXPECT_EQ(short_counts, 0);
}

// Reservations of writes in progress count against the quota with the files on disk: what
// one holds, another cannot take; written bytes are no longer held; a reservation that ends
// gives its bytes back; moved, it holds them once.
TEST_F(TenantTest, StorageReservationsOfWritesAtOnceShareTheQuota) {
  std::shared_ptr<Tenant> t;
  ASSERT_NO_FATAL_FAILURE(OpenQuotaTenant(&t));
  const std::uint64_t empty = empty_;
  absl::StatusOr<Tenant::StorageReservation> r1 = t->ReserveStorage(60'000);
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r1->held(), 60'000u);
  const absl::StatusOr<Tenant::StorageReservation> r2 = t->ReserveStorage(60'000);
  EXPECT_EQ(r2.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r2.status().message()),
              ::testing::HasSubstr("60000 set aside for writes in progress"));
  EXPECT_EQ(t->CheckStorage(50'000).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r1->Grow(50'000).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r1->held(), 60'000u);  // a refused growth holds nothing more
  // 10 kB and up to 50 kB if there is room: all that is free (under 40 kB), not 50 kB.
  {
    absl::StatusOr<Tenant::StorageReservation> ahead = t->ReserveStorage(0);
    ASSERT_TRUE(ahead.ok());
    EXPECT_TRUE(ahead->Grow(10'000, 50'000).ok());
    EXPECT_EQ(ahead->held(), 40'000u - empty);
    EXPECT_EQ(ahead->Grow(1, 50'000).code(), absl::StatusCode::kResourceExhausted);
  }
  EXPECT_TRUE(r1->Grow(30'000, 10'000).ok());  // `want` below `more`: just `more`
  EXPECT_EQ(r1->held(), 90'000u);
  // 30 kB written: on disk now, no longer held.
  ASSERT_NO_FATAL_FAILURE(WriteBlob(t->tmp_dir() + "/part", 30'000));
  r1->Written(30'000);
  EXPECT_EQ(r1->held(), 60'000u);
  const std::uint64_t left = 100'000 - empty - 30'000 - 60'000;
  EXPECT_EQ(*t->CheckStorage(0), left);
  EXPECT_EQ(t->CheckStorage(left + 1).status().code(), absl::StatusCode::kResourceExhausted);
  {
    Tenant::StorageReservation moved = std::move(*r1);
    EXPECT_EQ(r1->held(), 0u);
    EXPECT_EQ(moved.held(), 60'000u);
    EXPECT_EQ(*t->CheckStorage(0), left);  // held once
  }
  EXPECT_EQ(*t->CheckStorage(0), left + 60'000);  // given back
  EXPECT_TRUE(t->ReserveStorage(60'000).ok());
  // Sizes from a client cannot wrap the sums around.
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(t->ReserveStorage(kMax).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t->CheckStorage(kMax - 1000).status().code(), absl::StatusCode::kResourceExhausted);
  // Another tenant's quota is its own; without a quota nothing is held or refused.
  EXPECT_TRUE((*registry_->Get("b"))->ReserveStorage(90'000).ok());
  TenantRegistry free_registry(dir_ + "/free", 1000, TenantLimits{});
  absl::StatusOr<Tenant::StorageReservation> any =
      (*free_registry.Get("a"))->ReserveStorage(std::uint64_t{1} << 60);
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->held(), 0u);
}

// A mesh of `n` triangles (a fan) whose import cache entry takes about 40 bytes per triangle.
cad::MeshBuffers FanMesh(int n) {
  cad::MeshBuffers mesh;
  for (int i = 0; i <= n + 1; ++i) mesh.xyz.insert(mesh.xyz.end(), {0.001 * i, 0.5 * (i % 2), 0});
  for (int i = 0; i < n; ++i) {
    mesh.triangles.insert(mesh.triangles.end(), {0u, static_cast<std::uint32_t>(i + 1),
                                                 static_cast<std::uint32_t>(i + 2)});
    mesh.face_ids.push_back(0);
  }
  mesh.faces_total = mesh.faces_meshed = 1;
  return mesh;
}

// The import cache is only a cache: its entries are set aside under the quota like every other
// write (which evicts older entries to make room), are evicted, least recently used first,
// before another write is refused, and stay within --import-cache-max-bytes, also when the bound
// was lowered since they were written.
TEST_F(TenantTest, TheImportCacheYieldsToTheQuotaAndStaysWithinItsBound) {
  std::shared_ptr<Tenant> t;
  ASSERT_NO_FATAL_FAILURE(OpenQuotaTenant(&t));
  const std::uint64_t empty = empty_;
  const std::string a(64, 'a'), b(64, 'b'), c(64, 'c');
  ASSERT_TRUE(t->import_cache().Store(a, FanMesh(500)).ok());
  const std::uint64_t entry = t->import_cache().SizeBytes();
  ASSERT_GT(entry, 15'000u);
  ASSERT_LT(entry, 25'000u);
  // A check with room evicts nothing.
  EXPECT_TRUE(t->CheckStorage(100'000 - empty - entry).ok());
  EXPECT_EQ(t->import_cache().SizeBytes(), entry);
  // 50 kB of other files: a write that would not fit even without the cache evicts nothing;
  // one more entry fits, a third only in place of the oldest.
  ASSERT_NO_FATAL_FAILURE(WriteBlob(t->tmp_dir() + "/blob", 50'000));
  EXPECT_EQ(t->CheckStorage(50'001 - empty).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t->import_cache().SizeBytes(), entry);
  ASSERT_TRUE(t->import_cache().Store(b, FanMesh(500)).ok());
  EXPECT_EQ(t->import_cache().SizeBytes(), 2 * entry);
  const std::string dir = t->import_cache().dir();
  const timespec long_ago[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, (dir + "/" + a + ".clshmesh").c_str(), long_ago, 0), 0);
  ASSERT_TRUE(t->import_cache().Store(c, FanMesh(500)).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + a + ".clshmesh"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + b + ".clshmesh"));
  EXPECT_LE(t->StorageBytes().value_or(kQuota + 1), kQuota);
  // A write that fits only without the cache takes its room.
  absl::StatusOr<Tenant::StorageReservation> room =
      t->ReserveStorage(100'000 - empty - 50'000 - entry / 2);
  ASSERT_TRUE(room.ok()) << room.status();
  EXPECT_EQ(t->import_cache().SizeBytes(), 0u);
  // With no room even so, an entry is not stored, and the import would go on without it.
  EXPECT_EQ(t->import_cache().Store(a, FanMesh(500)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t->import_cache().SizeBytes(), 0u);
  room = Tenant::StorageReservation();
  ASSERT_TRUE(t->import_cache().Store(a, FanMesh(500)).ok());
  ASSERT_TRUE(t->import_cache().Store(b, FanMesh(500)).ok());

  // Reopened with a bound of one entry and a half: the older entry goes at once.
  ASSERT_EQ(utimensat(AT_FDCWD, (dir + "/" + a + ".clshmesh").c_str(), long_ago, 0), 0);
  TenantLimits limits;
  limits.import_cache_max_bytes = entry + entry / 2;
  TenantRegistry bounded(dir_, 1000, limits);
  std::shared_ptr<Tenant> reopened = *bounded.Get("a");
  EXPECT_EQ(reopened->import_cache().SizeBytes(), entry);
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + b + ".clshmesh"));
  // A bound of 0 caches nothing.
  limits.import_cache_max_bytes = 0;
  TenantRegistry uncached(dir_ + "/none", 1000, limits);
  EXPECT_EQ((*uncached.Get("a"))->import_cache().Store(a, FanMesh(10)).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(TenantTest, ConcurrentImportsAreCounted) {
  TenantLimits limits;
  limits.max_concurrent_imports = 2;
  TenantRegistry registry(dir_, 1000, limits);
  std::shared_ptr<Tenant> t = *registry.Get("a");
  {
    absl::StatusOr<Tenant::ImportTicket> one = t->StartImport();
    absl::StatusOr<Tenant::ImportTicket> two = t->StartImport();
    ASSERT_TRUE(one.ok() && two.ok());
    EXPECT_EQ(t->StartImport().status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_TRUE((*registry.Get("b"))->StartImport().ok());
  }
  EXPECT_TRUE(t->StartImport().ok());  // tickets given back
}

// A tenant's queries (running or waiting for a shared query slot) are capped, so that one
// tenant's flood cannot take every slot and place in the queue from another.
TEST_F(TenantTest, ConcurrentQueriesAreCountedPerTenant) {
  TenantLimits limits;
  limits.max_concurrent_queries = 2;
  TenantRegistry registry(dir_, 1000, limits);
  std::shared_ptr<Tenant> t = *registry.Get("a");
  {
    absl::StatusOr<Tenant::QueryTicket> one = t->StartQuery();
    absl::StatusOr<Tenant::QueryTicket> two = t->StartQuery();
    ASSERT_TRUE(one.ok() && two.ok());
    const absl::Status third = t->StartQuery().status();
    EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(third.message().find("2 queries running or waiting"), std::string::npos) << third;
    EXPECT_TRUE((*registry.Get("b"))->StartQuery().ok());
  }
  EXPECT_TRUE(t->StartQuery().ok());  // tickets given back
  TenantRegistry unlimited(dir_ + "/u", 1000, TenantLimits{});
  std::shared_ptr<Tenant> u = *unlimited.Get("a");
  std::vector<Tenant::QueryTicket> many;
  for (int i = 0; i < 100; ++i) many.push_back(*u->StartQuery());
}

}  // namespace
}  // namespace clash::server
