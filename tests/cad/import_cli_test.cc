// Tests for the clash-import command: runs the built binary on the generated plate-and-bolts STEP
// (and, when present, a damaged real file) and checks its JSON and text output and exit codes.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "assembly_fixtures.h"
#include "occt_fixtures.h"

// LeakSanitizer: OCCT 7.6 never frees its one-time registrations; see tessellate_test.cc.
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

namespace clash::cad {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// What one run of clash-import gave.
struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Quoted(const fs::path& path) { return "'" + path.string() + "'"; }

// Runs clash-import on the generated assembly `step_`, with a cache folder `cache_`.
class ImportCliTest : public testing::GeneratedAssemblyTest {
 protected:
  void SetUp() override {
    GeneratedAssemblyTest::SetUp();
    cache_ = dir_ / "cache";
  }

  // Runs clash-import with `args` (already quoted for the shell).
  CliRun Import(const std::string& args) const {
    const fs::path err = dir_ / "stderr.txt";
    const std::string command =
        std::string(CLASH_IMPORT_PATH) + " " + args + " 2>" + Quoted(err) + " </dev/null";
    CliRun run;
    std::FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return run;
    std::array<char, 4096> buffer;
    std::size_t n = 0;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
      run.out.append(buffer.data(), n);
    const int status = pclose(pipe);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.err = testing::ReadBytes(err);
    return run;
  }

  // Runs clash-import with --json and parses its output (a test failure if it is not JSON).
  Json ImportJson(const std::string& args, int expected_exit = 0) const {
    const CliRun run = Import(args + " --json");
    EXPECT_EQ(run.exit_code, expected_exit) << run.err;
    return Json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  }

  std::string CacheArgs() const { return Quoted(step_) + " --cache-dir " + Quoted(cache_); }

  fs::path cache_;
};

TEST_F(ImportCliTest, JsonDescribesTheTreeAndTheReport) {
  const Json first = ImportJson(CacheArgs());
  ASSERT_FALSE(first.is_discarded()) << "not JSON";
  EXPECT_EQ(first["file"], step_.string());

  const Json& parts = first["parts"];
  ASSERT_EQ(parts.size(), 2u);
  std::set<std::string> names;
  std::size_t triangles = 0;
  for (const Json& part : parts) {
    names.insert(part["name"].get<std::string>());
    EXPECT_EQ(part["faces_meshed"], part["faces_total"]);
    EXPECT_GT(part["deflection_mm"].get<double>(), 0);
    triangles += part["triangles"].get<std::size_t>();
  }
  EXPECT_EQ(names, (std::set<std::string>{"plate", "bolt"}));

  const Json& instances = first["instances"];
  ASSERT_EQ(instances.size(), 3u);
  EXPECT_EQ(instances[0]["path"], "top/plate");
  EXPECT_EQ(instances[1]["path"], "top/bolted/bolt:1");
  EXPECT_EQ(instances[2]["path"], "top/bolted/bolt:2");
  EXPECT_EQ(parts[instances[0]["part"].get<std::size_t>()]["name"], "plate");
  EXPECT_EQ(parts[instances[1]["part"].get<std::size_t>()]["name"], "bolt");
  // The plate is red; the bolts have no colour.
  ASSERT_TRUE(instances[0]["color_rgb"].is_array());
  EXPECT_NEAR(instances[0]["color_rgb"][0].get<double>(), 1, 1e-3);
  EXPECT_NEAR(instances[0]["color_rgb"][1].get<double>(), 0, 1e-3);
  EXPECT_TRUE(instances[1]["color_rgb"].is_null());
  // Bolt 1 sits at (20, 30, 5) in "bolted", which is turned 90 degrees about z and moved by
  // (200, 0, 10): (-30 + 200, 20, 5 + 10).
  const std::array<double, 3> t{170, 20, 15};
  const std::array<double, 9> r{0, -1, 0, 1, 0, 0, 0, 0, 1};
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(instances[1]["translation_mm"][k].get<double>(), t[k], 1e-9) << k;
  }
  for (std::size_t k = 0; k < 9; ++k) {
    EXPECT_NEAR(instances[1]["rotation"][k].get<double>(), r[k], 1e-9) << k;
  }

  const Json& report = first["report"];
  EXPECT_EQ(report["roots_total"], 1);
  EXPECT_EQ(report["roots_transferred"], 1);
  EXPECT_EQ(report["load_failures"], 0);
  EXPECT_EQ(report["empty_parts"], 0);
  EXPECT_EQ(report["triangles"], triangles);
  EXPECT_EQ(report["complete"], true);
  EXPECT_TRUE(report["incomplete"].is_null());
  EXPECT_EQ(report["warnings"], Json::array());

  EXPECT_EQ(first["cache"]["used"], true);
  EXPECT_EQ(first["cache"]["dir"], cache_.string());
  EXPECT_EQ(first["cache"]["from_cache"], false);
  EXPECT_EQ(first["cache"]["stored"], true);
  EXPECT_EQ(first["cache"]["key"].get<std::string>().size(), 64u);

  // Again: from the cache, the same tree.
  const Json second = ImportJson(CacheArgs());
  ASSERT_FALSE(second.is_discarded());
  EXPECT_EQ(second["cache"]["from_cache"], true);
  EXPECT_EQ(second["cache"]["key"], first["cache"]["key"]);
  EXPECT_EQ(second["parts"], first["parts"]);
  EXPECT_EQ(second["instances"], first["instances"]);

  // Without the cache.
  const Json uncached = ImportJson(Quoted(step_) + " --no-cache");
  ASSERT_FALSE(uncached.is_discarded());
  EXPECT_EQ(uncached["cache"]["used"], false);
  EXPECT_EQ(uncached["cache"]["from_cache"], false);
  EXPECT_TRUE(uncached["cache"]["key"].is_null());
  EXPECT_EQ(uncached["instances"], first["instances"]);
}

// --cache-max-mb bounds the cache folder: with 0 nothing is stored (and the import succeeds);
// with room, the least recently used entry makes way for a new one.
TEST_F(ImportCliTest, TheCacheStaysWithinItsBound) {
  const Json unstored = ImportJson(CacheArgs() + " --cache-max-mb 0");
  ASSERT_FALSE(unstored.is_discarded());
  EXPECT_EQ(unstored["cache"]["used"], true);
  EXPECT_EQ(unstored["cache"]["stored"], false);
  EXPECT_EQ(unstored["parts"].size(), 2u);
  EXPECT_TRUE(fs::is_empty(cache_));
  // A stale entry (used long ago, 1 MiB) makes way for the import's in a cache of 1 MiB.
  const fs::path stale = cache_ / (std::string(64, 'e') + ".clshasm");
  testing::WriteBytes(stale, std::string(1 << 20, 'x'));
  const timespec long_ago[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, stale.c_str(), long_ago, 0), 0);
  const Json stored = ImportJson(CacheArgs() + " --cache-max-mb 1");
  ASSERT_FALSE(stored.is_discarded());
  EXPECT_EQ(stored["cache"]["stored"], true);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(Import(Quoted(step_) + " --no-cache --cache-max-mb 5").exit_code, 2);
}

TEST_F(ImportCliTest, OptionsReachTheImport) {
  const Json fine = ImportJson(Quoted(step_) + " --no-cache --deflection-mm 0.05");
  ASSERT_FALSE(fine.is_discarded());
  for (const Json& part : fine["parts"]) EXPECT_EQ(part["deflection_mm"], 0.05);
  const CliRun capped = Import(Quoted(step_) + " --no-cache --max-triangles 10");
  EXPECT_EQ(capped.exit_code, 1);
  EXPECT_THAT(capped.err, StartsWith("clash-import: RESOURCE_EXHAUSTED: "));
}

TEST_F(ImportCliTest, TextShowsTheTreeAndTheReport) {
  const CliRun run = Import(CacheArgs());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("2 parts, 3 instances"));
  EXPECT_THAT(run.out, HasSubstr("top/plate"));
  EXPECT_THAT(run.out, HasSubstr("#ff0000  (0, 0, 0)\n"));
  EXPECT_THAT(run.out, HasSubstr("top/bolted/bolt:2"));
  EXPECT_THAT(run.out, HasSubstr("(170, 20, 15) rotated"));
  EXPECT_THAT(run.out, HasSubstr("roots transferred  1/1"));
  EXPECT_THAT(run.out, HasSubstr("from cache         no"));
  EXPECT_THAT(run.out, HasSubstr("complete           yes"));
}

TEST_F(ImportCliTest, ImportErrorsExitOneWithTheStatusCode) {
  const fs::path junk = dir_ / "junk.step";
  testing::WriteBytes(junk, "ISO-10303-21;\nthis is not a STEP file\n");
  const CliRun bad = Import(Quoted(junk) + " --no-cache");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, StartsWith("clash-import: INVALID_ARGUMENT: read: "));
  EXPECT_TRUE(bad.out.empty()) << bad.out;
  const CliRun missing = Import(Quoted(dir_ / "missing.step") + " --no-cache");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, StartsWith("clash-import: NOT_FOUND: "));
}

// A file whose name starts with "--" is imported when it follows "--" (CLI11 ends its options
// there), and the worker, which gets it as a relative path, reads it as a path too.
TEST_F(ImportCliTest, AFileNamedLikeAFlagFollowsTheEndOfOptions) {
  fs::copy_file(step_, dir_ / "--plate.step");
  const fs::path previous = fs::current_path();
  fs::current_path(dir_);
  const CliRun run = Import("--no-cache --json -- --plate.step");
  fs::current_path(previous);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Json json = Json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(json.is_discarded()) << run.out;
  EXPECT_EQ(json["file"], "--plate.step");
  EXPECT_EQ(json["instances"].size(), 3u);
  EXPECT_EQ(json["report"]["complete"], true);
}

TEST_F(ImportCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Import("").exit_code, 2);
  EXPECT_EQ(Import(Quoted(step_) + " --bogus").exit_code, 2);
  EXPECT_EQ(Import(Quoted(step_) + " --angular-deflection-rad 5").exit_code, 2);
  EXPECT_EQ(Import(Quoted(step_) + " --timeout-s -1").exit_code, 2);
  EXPECT_EQ(Import(Quoted(step_) + " --no-cache --cache-dir " + Quoted(cache_)).exit_code, 2);
  const CliRun help = Import("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--strict"));
}

TEST_F(ImportCliTest, StrictFailsOnlyAnIncompleteImport) {
  EXPECT_EQ(Import(CacheArgs() + " --strict").exit_code, 0);
  const fs::path corrupted = fs::path(CLASH_CAD_DATA_DIR) / "bug32314_corrupted.stp";
  if (!fs::exists(corrupted)) GTEST_SKIP() << "real CAD data not found at " << corrupted;
  // Without --strict the loss is reported; with it the import fails, and the report still comes.
  const Json lenient = ImportJson(Quoted(corrupted) + " --no-cache");
  ASSERT_FALSE(lenient.is_discarded());
  EXPECT_EQ(lenient["report"]["complete"], false);
  EXPECT_THAT(lenient["report"]["incomplete"].get<std::string>(),
              StartsWith("incomplete import: "));
  const CliRun strict = Import(Quoted(corrupted) + " --no-cache --strict --json");
  EXPECT_EQ(strict.exit_code, 1);
  EXPECT_THAT(strict.err, StartsWith("clash-import: INVALID_ARGUMENT: incomplete import: "));
  EXPECT_EQ(Json::parse(strict.out, nullptr, false)["report"], lenient["report"]);
}

}  // namespace
}  // namespace clash::cad
