// Tests for clash::cad::ImportIsolated and ImportAssemblyIsolated (the clash-cad-worker process;
// its result format is tested in worker_format_test.cc).
//
// Fixtures are written with OCCT in this (trusted) process; every import under test runs in a
// worker. Failure paths use the worker's CLASH_WORKER_TEST_FAULT hook (crash, hang, spin, oom,
// garbage, exit) instead of relying on OCCT bugs. After every test no child process and no temp
// file may remain: each test points TMPDIR at its own empty folder and checks it at the end.
#include "clash/cad/isolated_import.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>  // setenv, unsetenv
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <BRepPrimAPI_MakeBox.hxx>
#include <BRepPrimAPI_MakeCylinder.hxx>
#include <Interface_Static.hxx>
#include <Message.hxx>
#include <Message_Messenger.hxx>
#include <STEPControl_Controller.hxx>
#include <STEPControl_Writer.hxx>
#include <TCollection_ExtendedString.hxx>
#include <TDF_Label.hxx>
#include <TDataStd_Name.hxx>
#include <TopLoc_Location.hxx>
#include <TopoDS_Shape.hxx>
#include <XCAFDoc_ColorTool.hxx>
#include <XCAFDoc_ShapeTool.hxx>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "assembly_fixtures.h"
#include "clash/cad/tessellate.h"
#include "clash/cad/worker_pool.h"
#include "clash/geom/mesh.h"
#include "occt_fixtures.h"
#include "testing/status_matchers.h"

// LeakSanitizer: OCCT 7.6 never frees its one-time registrations; see tessellate_test.cc.
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

namespace clash::cad {
namespace {

namespace fs = std::filesystem;
using clash::testing::IsOk;
using clash::testing::StatusIs;
using Seconds = std::chrono::duration<double>;
using testing::CheckGeneratedAssembly;
using testing::ExpectSameAssembly;
using testing::ExpectSameMesh;
using ::testing::HasSubstr;
using testing::MakeTempDir;
using testing::ReadBytes;
using testing::ScopedEnv;
using testing::WriteAssemblyStep;
using testing::WriteBytes;
using testing::WriteSharedTreeStep;
using testing::WriteStep;

class IsolatedImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path base = fs::temp_directory_path();
    data_ = MakeTempDir(base, "clash_iso_data_");
    tmp_ = MakeTempDir(base, "clash_iso_tmp_");
    ASSERT_FALSE(data_.empty());
    ASSERT_FALSE(tmp_.empty());
    tmpdir_.emplace("TMPDIR", tmp_.string());
    unsetenv("CLASH_WORKER_TEST_FAULT");
    box_ = data_ / "box.step";
    WriteStep(BRepPrimAPI_MakeBox(10, 20, 30).Shape(), box_);
  }

  void TearDown() override {
    // No worker left behind: this process has no child at all.
    errno = 0;
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
    // No temp file left behind.
    std::error_code ec;
    EXPECT_TRUE(fs::is_empty(tmp_, ec)) << "temp files left in " << tmp_;
    tmpdir_.reset();
    fs::remove_all(tmp_, ec);
    fs::remove_all(data_, ec);
  }

  static IsolationLimits Limits() {
    IsolationLimits limits;
    limits.worker_path = CLASH_CAD_WORKER_PATH;
    limits.wall_seconds = 60;
    limits.cpu_seconds = 60;
    return limits;
  }

  // Each injected worker fault (and limit) with `limits` (fresh workers or a pool) maps to its
  // status; shared by the fresh-worker tests and the pooled one.
  void ExpectCrashIsInvalidArgument(const IsolationLimits& limits) {
    ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "crash");
    EXPECT_THAT(ImportIsolated(box_, {}, limits),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         "import worker crashed (signal 11, SIGSEGV) reading box.step"));
  }
  void ExpectExitIsInvalidArgument(const IsolationLimits& limits) {
    ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "exit");
    EXPECT_THAT(ImportIsolated(box_, {}, limits),
                StatusIs(absl::StatusCode::kInvalidArgument, "exited with code 3"));
  }
  void ExpectGarbageIsInternalMalformed(const IsolationLimits& limits) {
    ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "garbage");
    EXPECT_THAT(ImportIsolated(box_, {}, limits),
                StatusIs(absl::StatusCode::kInternal, "malformed worker output"));
  }
  void ExpectHangHitsTheWallClock(IsolationLimits limits) {
    ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "hang");
    limits.wall_seconds = 1;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THAT(ImportIsolated(box_, {}, limits),
                StatusIs(absl::StatusCode::kDeadlineExceeded, "wall-clock"));
    const double elapsed = Seconds(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(elapsed, 1.0);
    // The limit, not something much later, ends it (with room for a loaded machine and ASan).
    EXPECT_LT(elapsed, 5.0);
  }
  void ExpectSpinHitsTheCpuLimit(IsolationLimits limits) {
    ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "spin");
    limits.cpu_seconds = 1;
    limits.wall_seconds = 30;  // the machine may be busy: CPU time can lag the wall clock
    EXPECT_THAT(ImportIsolated(box_, {}, limits),
                StatusIs(absl::StatusCode::kDeadlineExceeded, "CPU limit"));
  }
  void ExpectOutOfMemoryIsResourceExhausted(IsolationLimits limits) {
    ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "oom");
    limits.address_space_bytes = std::size_t{256} << 20;
    EXPECT_THAT(ImportIsolated(box_, {}, limits),
                StatusIs(absl::StatusCode::kResourceExhausted, "out of memory"));
  }
  void ExpectOutputLimitIsResourceExhausted(IsolationLimits limits) {
    limits.max_output_bytes = 200;  // the box needs about 800 bytes
    EXPECT_THAT(ImportIsolated(box_, {}, limits),
                StatusIs(absl::StatusCode::kResourceExhausted, "output limit"));
  }
  // 8 threads x 3 imports of the box with `limits` all succeed with the in-process mesh.
  void ExpectConcurrentImportsAllSucceed(const IsolationLimits& limits) {
    const absl::StatusOr<MeshBuffers> expected = ReadAndTessellate(box_, {});
    ASSERT_THAT(expected, IsOk());
    constexpr int kThreads = 8;
    constexpr int kRounds = 3;
    std::vector<absl::StatusOr<MeshBuffers>> results(kThreads * kRounds);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int r = 0; r < kRounds; ++r) {
          results[t * kRounds + r] = ImportIsolated(box_, {}, limits);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const absl::StatusOr<MeshBuffers>& result : results) {
      ASSERT_THAT(result, IsOk());
      ExpectSameMesh(*result, *expected);
    }
  }
  // Within a second on an idle machine; the bound leaves room for a loaded one and ASan.
  void ExpectCancelKillsTheWorkerWithinASecond(const IsolationLimits& limits) {
    ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "hang");
    std::atomic<bool> cancel{false};
    std::chrono::steady_clock::time_point cancelled_at;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      cancelled_at = std::chrono::steady_clock::now();
      cancel = true;
    });
    const absl::StatusOr<MeshBuffers> result = ImportIsolated(box_, {}, limits, &cancel);
    const auto returned_at = std::chrono::steady_clock::now();
    canceller.join();
    EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled, "cancelled"));
    EXPECT_LT(Seconds(returned_at - cancelled_at).count(), 3.0);
  }

  fs::path data_;
  fs::path tmp_;
  fs::path box_;
  std::optional<ScopedEnv> tmpdir_;
};

TEST_F(IsolatedImportTest, BoxEqualsInProcessResult) {
  const absl::StatusOr<MeshBuffers> local = ReadAndTessellate(box_, {});
  ASSERT_THAT(local, IsOk());
  const absl::StatusOr<MeshBuffers> isolated = ImportIsolated(box_, {}, Limits());
  ASSERT_THAT(isolated, IsOk());
  EXPECT_EQ(isolated->triangles.size(), 3u * 12);
  ExpectSameMesh(*isolated, *local);
}

TEST_F(IsolatedImportTest, OptionsReachTheWorker) {
  const fs::path cylinder = data_ / "cylinder.step";
  WriteStep(BRepPrimAPI_MakeCylinder(7.3, 11).Shape(), cylinder);
  TessellationOptions options;
  options.relative_deflection = 0.000731;  // not representable in 6 digits
  options.angular_deflection_rad = 0.123456789;
  options.parallel = false;
  const absl::StatusOr<MeshBuffers> local = ReadAndTessellate(cylinder, options);
  ASSERT_THAT(local, IsOk());
  const absl::StatusOr<MeshBuffers> isolated = ImportIsolated(cylinder, options, Limits());
  ASSERT_THAT(isolated, IsOk());
  ExpectSameMesh(*isolated, *local);

  options.max_triangles = 10;  // the cylinder needs more
  EXPECT_THAT(ImportIsolated(cylinder, options, Limits()),
              StatusIs(absl::StatusCode::kResourceExhausted, ""));
  options.max_triangles = 1000;
  options.angular_deflection_rad = 4;  // the worker validates the options
  EXPECT_THAT(ImportIsolated(cylinder, options, Limits()),
              StatusIs(absl::StatusCode::kInvalidArgument, "angular_deflection_rad"));
}

TEST_F(IsolatedImportTest, MissingFileIsNotFound) {
  EXPECT_THAT(ImportIsolated((data_ / "missing.step").string(), {}, Limits()),
              StatusIs(absl::StatusCode::kNotFound, "missing.step"));
}

// Changes the working folder for one scope.
class ScopedCwd {
 public:
  explicit ScopedCwd(const fs::path& dir) : previous_(fs::current_path()) { fs::current_path(dir); }
  ~ScopedCwd() {
    std::error_code ec;
    fs::current_path(previous_, ec);
  }
  ScopedCwd(const ScopedCwd&) = delete;
  ScopedCwd& operator=(const ScopedCwd&) = delete;

 private:
  fs::path previous_;
};

// A relative path that starts with "--" is a path to the worker, not a flag: fresh and pooled
// workers, meshes and assemblies.
TEST_F(IsolatedImportTest, PathsThatLookLikeFlagsAreReadAsPaths) {
  fs::copy_file(box_, data_ / "--box.step");
  WriteAssemblyStep(data_ / "--kind=mesh");  // also the form of a real flag
  const absl::StatusOr<MeshBuffers> local = ReadAndTessellate(box_, {});
  ASSERT_THAT(local, IsOk());
  const absl::StatusOr<ImportedAssembly> local_assembly = ReadAssembly(data_ / "--kind=mesh", {});
  ASSERT_THAT(local_assembly, IsOk());

  ScopedCwd cwd(data_);
  const absl::StatusOr<MeshBuffers> fresh = ImportIsolated("--box.step", {}, Limits());
  ASSERT_THAT(fresh, IsOk());
  ExpectSameMesh(*fresh, *local);
  const absl::StatusOr<ImportedAssembly> assembly =
      ImportAssemblyIsolated("--kind=mesh", {}, Limits());
  ASSERT_THAT(assembly, IsOk());
  ExpectSameAssembly(*assembly, *local_assembly);
  EXPECT_THAT(ImportIsolated("--missing.step", {}, Limits()),
              StatusIs(absl::StatusCode::kNotFound, "--missing.step"));

  WorkerPool pool({CLASH_CAD_WORKER_PATH, 1});  // its workers start in data_ too
  ASSERT_TRUE(pool.WaitUntilFull(std::chrono::seconds(60)));
  IsolationLimits pooled = Limits();
  pooled.pool = &pool;
  const absl::StatusOr<MeshBuffers> from_pool = ImportIsolated("--box.step", {}, pooled);
  ASSERT_THAT(from_pool, IsOk());
  ExpectSameMesh(*from_pool, *local);
  EXPECT_EQ(pool.jobs_dispatched(), 1u);
}

TEST_F(IsolatedImportTest, BadFilesAreInvalidArgument) {
  WriteBytes(data_ / "empty.step", "");
  std::mt19937 rng(1234);
  std::string random(4096, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  WriteBytes(data_ / "random.step", random);
  const std::string whole = ReadBytes(box_);
  WriteBytes(data_ / "truncated.step", whole.substr(0, whole.size() / 2));
  for (const char* name : {"empty.step", "random.step", "truncated.step"}) {
    SCOPED_TRACE(name);
    EXPECT_THAT(ImportIsolated((data_ / name).string(), {}, Limits()),
                StatusIs(absl::StatusCode::kInvalidArgument, ""));
  }
}

TEST_F(IsolatedImportTest, CrashIsInvalidArgument) { ExpectCrashIsInvalidArgument(Limits()); }

TEST_F(IsolatedImportTest, ExitWithoutResultIsInvalidArgument) {
  ExpectExitIsInvalidArgument(Limits());
}

TEST_F(IsolatedImportTest, HangHitsTheWallClockLimit) { ExpectHangHitsTheWallClock(Limits()); }

TEST_F(IsolatedImportTest, SpinHitsTheCpuLimit) { ExpectSpinHitsTheCpuLimit(Limits()); }

TEST_F(IsolatedImportTest, OutOfMemoryIsResourceExhausted) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "RLIMIT_AS is not applied in AddressSanitizer builds";
#endif
  ExpectOutOfMemoryIsResourceExhausted(Limits());
}

TEST_F(IsolatedImportTest, GarbageOutputIsInternalMalformed) {
  ExpectGarbageIsInternalMalformed(Limits());
}

TEST_F(IsolatedImportTest, OutputLimitIsResourceExhausted) {
  ExpectOutputLimitIsResourceExhausted(Limits());
}

TEST_F(IsolatedImportTest, CancelKillsTheWorkerWithinASecond) {
  ExpectCancelKillsTheWorkerWithinASecond(Limits());
}

TEST_F(IsolatedImportTest, MissingWorkerIsFailedPrecondition) {
  IsolationLimits limits = Limits();
  limits.worker_path = (data_ / "no-such-worker").string();
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no-such-worker"));
  limits.worker_path = box_.string();  // exists but is not executable
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kFailedPrecondition, "cannot be started"));
}

TEST_F(IsolatedImportTest, WorkerPathComesFromTheEnvironment) {
  IsolationLimits limits = Limits();
  limits.worker_path.clear();
  {
    ScopedEnv env(kWorkerPathEnv, "");
    EXPECT_EQ(fs::path(ResolveWorkerPath(limits)).filename(), "clash-cad-worker");
  }
  ScopedEnv env(kWorkerPathEnv, CLASH_CAD_WORKER_PATH);
  EXPECT_EQ(ResolveWorkerPath(limits), CLASH_CAD_WORKER_PATH);
  EXPECT_THAT(ImportIsolated(box_, {}, limits), IsOk());
}

TEST_F(IsolatedImportTest, InvalidLimitsAreRejected) {
  IsolationLimits limits = Limits();
  limits.wall_seconds = 0;
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, "wall_seconds"));
  limits = Limits();
  limits.cpu_seconds = std::nan("");
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, "cpu_seconds"));
}

TEST_F(IsolatedImportTest, ConcurrentImportsAllSucceed) {
  ExpectConcurrentImportsAllSucceed(Limits());
}

TEST_F(IsolatedImportTest, CorruptedRealFileReportMatchesInProcess) {
  const fs::path path = fs::path(CLASH_CAD_DATA_DIR) / "bug32314_corrupted.stp";
  if (!fs::exists(path)) GTEST_SKIP() << "real CAD data not found at " << path;
  const absl::StatusOr<MeshBuffers> local = ReadAndTessellate(path, {});
  ASSERT_THAT(local, IsOk());
  const absl::StatusOr<MeshBuffers> isolated = ImportIsolated(path, {}, Limits());
  ASSERT_THAT(isolated, IsOk());
  EXPECT_GT(isolated->load_failures, 0);
  EXPECT_LT(isolated->faces_meshed, isolated->faces_total);
  ExpectSameMesh(*isolated, *local);
}

// ---------------------------------------------------------------------------------------------
// Assemblies through the worker.

fs::path DataFile(const char* name) { return fs::path(CLASH_CAD_DATA_DIR) / name; }

TEST_F(IsolatedImportTest, GeneratedAssemblyEqualsInProcessRead) {
  const fs::path path = data_ / "plate_bolts.step";
  WriteAssemblyStep(path);
  const absl::StatusOr<ImportedAssembly> local = ReadAssembly(path, {});
  ASSERT_THAT(local, IsOk());
  const absl::StatusOr<ImportedAssembly> isolated = ImportAssemblyIsolated(path, {}, Limits());
  ASSERT_THAT(isolated, IsOk());
  // The parts, paths, placements and the plate's colour known by construction, and the same
  // result to the bit as in this process.
  CheckGeneratedAssembly(*isolated);
  ExpectSameAssembly(*isolated, *local);
  EXPECT_THAT(CheckImportComplete(*isolated), IsOk());
}

// Colours OCCT cannot take (see AssemblyTest.ColoursOcctCannotTakeAreDroppedAndTheGeometryKept)
// come through the worker as in this process: the geometry, no colour, and the warning.
TEST_F(IsolatedImportTest, DroppedColoursAndTheirWarningsComeThroughTheWorker) {
  const fs::path path = data_ / "coloured.step";
  for (const char* red : {"-0.5", "1.E400"}) {
    SCOPED_TRACE(red);
    testing::WriteColouredBoxStep(path, red);
    const absl::StatusOr<ImportedAssembly> local = ReadAssembly(path, {});
    ASSERT_THAT(local, IsOk());
    ASSERT_EQ(local->warnings.size(), 1u);
    const absl::StatusOr<ImportedAssembly> isolated = ImportAssemblyIsolated(path, {}, Limits());
    ASSERT_THAT(isolated, IsOk());
    ExpectSameAssembly(*isolated, *local);
  }
}

TEST_F(IsolatedImportTest, AssemblyOptionsReachTheWorker) {
  const fs::path path = data_ / "plate_bolts.step";
  WriteAssemblyStep(path, "M");
  const absl::StatusOr<ImportedAssembly> metres = ImportAssemblyIsolated(path, {}, Limits());
  ASSERT_THAT(metres, IsOk());
  CheckGeneratedAssembly(*metres);  // lengths and placements converted to mm in the worker too
  TessellationOptions options;
  options.linear_deflection_mm = 0.05;
  const absl::StatusOr<ImportedAssembly> fine = ImportAssemblyIsolated(path, options, Limits());
  ASSERT_THAT(fine, IsOk());
  std::size_t total = 0;
  for (const AssemblyPart& part : fine->parts) {
    EXPECT_EQ(part.mesh.deflection_mm, 0.05);
    total += part.mesh.triangles.size() / 3;
  }
  options.max_triangles = total - 1;
  EXPECT_THAT(ImportAssemblyIsolated(path, options, Limits()),
              StatusIs(absl::StatusCode::kResourceExhausted, "max_triangles"));
  options.angular_deflection_rad = 4;
  EXPECT_THAT(ImportAssemblyIsolated(path, options, Limits()),
              StatusIs(absl::StatusCode::kInvalidArgument, "angular_deflection_rad"));
}

TEST_F(IsolatedImportTest, AssemblyFailuresMapLikeMeshFailures) {
  // One process machinery serves both kinds of import: the same outcomes, the same codes.
  const fs::path path = data_ / "plate_bolts.step";
  WriteAssemblyStep(path);
  EXPECT_THAT(ImportAssemblyIsolated((data_ / "missing.step").string(), {}, Limits()),
              StatusIs(absl::StatusCode::kNotFound, "missing.step"));
  IsolationLimits small_output = Limits();
  small_output.max_output_bytes = 200;
  EXPECT_THAT(ImportAssemblyIsolated(path, {}, small_output),
              StatusIs(absl::StatusCode::kResourceExhausted, "output limit"));
  IsolationLimits no_worker = Limits();
  no_worker.worker_path = (data_ / "no-such-worker").string();
  EXPECT_THAT(ImportAssemblyIsolated(path, {}, no_worker),
              StatusIs(absl::StatusCode::kFailedPrecondition, "cannot be started"));
  {
    ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "crash");
    EXPECT_THAT(ImportAssemblyIsolated(path, {}, Limits()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         "import worker crashed (signal 11, SIGSEGV) reading plate_bolts.step"));
  }
  {
    ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "garbage");
    EXPECT_THAT(ImportAssemblyIsolated(path, {}, Limits()),
                StatusIs(absl::StatusCode::kInternal, "malformed worker output"));
  }
  {
    ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "hang");
    IsolationLimits limits = Limits();
    limits.wall_seconds = 0.5;
    EXPECT_THAT(ImportAssemblyIsolated(path, {}, limits),
                StatusIs(absl::StatusCode::kDeadlineExceeded, "wall-clock"));
    std::atomic<bool> cancel{true};
    EXPECT_THAT(ImportAssemblyIsolated(path, {}, Limits(), &cancel),
                StatusIs(absl::StatusCode::kCancelled, "cancelled"));
  }
}

TEST_F(IsolatedImportTest, InstanceCapReachesTheCaller) {
  // 17 levels, each placing the level below twice: 2^17 = 131072 instances, past the cap. The
  // worker refuses it before meshing, and its RESOURCE_EXHAUSTED reaches the caller.
  const fs::path path = data_ / "doubling.step";
  WriteSharedTreeStep(path, std::vector<int>(17, 2));
  EXPECT_THAT(ImportAssemblyIsolated(path, {}, Limits()),
              StatusIs(absl::StatusCode::kResourceExhausted, "131072 instances"));
}

TEST_F(IsolatedImportTest, LongNonAsciiNamesStayValidUtf8) {
  // Six nested assemblies named "a" + 6000 x "e acute" (12001 bytes each in UTF-8) above a box.
  // Whole, the path would be 72011 bytes, and 65536 bytes fall inside a character of the sixth
  // name; each segment is cut to kMaxPathSegmentBytes (960), inside a character too, so the cut
  // must back up to "a" + 479 x "e acute". (OCCT 7.6 cannot read back a STEP string of 24 KB.)
  const std::string name = testing::AccentedName(6000);
  const TCollection_ExtendedString occt_name(name.c_str(), true);
  const fs::path path = data_ / "long_names.step";
  testing::WriteXcafStep(
      path,
      [&](const Handle(XCAFDoc_ShapeTool) & shapes, const Handle(XCAFDoc_ColorTool) & /*colors*/) {
        TDF_Label below = shapes->AddShape(BRepPrimAPI_MakeBox(1, 1, 1).Shape(), false);
        TDataStd_Name::Set(below, "box");
        for (int level = 0; level < 6; ++level) {
          const TDF_Label assembly = shapes->NewShape();
          TDataStd_Name::Set(assembly, occt_name);
          shapes->AddComponent(assembly, below, TopLoc_Location());
          below = assembly;
        }
      });
  const absl::StatusOr<ImportedAssembly> local = ReadAssembly(path, {});
  ASSERT_THAT(local, IsOk());
  const absl::StatusOr<ImportedAssembly> isolated = ImportAssemblyIsolated(path, {}, Limits());
  ASSERT_THAT(isolated, IsOk());
  ASSERT_EQ(isolated->parts.size(), 1u);
  ASSERT_EQ(isolated->instances.size(), 1u);
  const AssemblyInstance& instance = isolated->instances[0];
  EXPECT_EQ(instance.name, "box");
  EXPECT_TRUE(testing::IsWellFormedUtf8(instance.path));
  std::string expected_path = "box";
  for (int level = 0; level < 6; ++level) {
    expected_path = absl::StrCat(name.substr(0, 959), "/", expected_path);
  }
  EXPECT_EQ(instance.path, expected_path);
  // The same result in this process and through the worker.
  ExpectSameAssembly(*isolated, *local);
}

// as1-oc-214-mat.stp: 9 products and 13 occurrences expand to 5 parts and 18 instances (see
// assembly_test.cc). Its parts are closed solids and every occurrence has a colour.
TEST_F(IsolatedImportTest, As1ThroughTheWorkerEqualsInProcessRead) {
  const fs::path path = DataFile("as1-oc-214-mat.stp");
  if (!fs::exists(path)) GTEST_SKIP() << "real CAD data not found at " << path;
  const absl::StatusOr<ImportedAssembly> local = ReadAssembly(path, {});
  ASSERT_THAT(local, IsOk());
  const absl::StatusOr<ImportedAssembly> isolated = ImportAssemblyIsolated(path, {}, Limits());
  ASSERT_THAT(isolated, IsOk());
  ASSERT_EQ(isolated->parts.size(), 5u);
  ASSERT_EQ(isolated->instances.size(), 18u);
  ExpectSameAssembly(*isolated, *local);
  EXPECT_THAT(CheckImportComplete(*isolated), IsOk());

  for (const AssemblyPart& part : isolated->parts) {
    const absl::StatusOr<geom::TriangleMesh> mesh =
        geom::TriangleMesh::FromBuffers(part.mesh.xyz, part.mesh.triangles, part.mesh.face_ids);
    ASSERT_THAT(mesh, IsOk()) << part.name;
    EXPECT_TRUE(mesh->IsClosed()) << part.name << " should bound a solid";
  }
  // Colours come through the worker: each product has its own.
  const std::map<std::string, std::array<float, 3>> expected{
      {"nut", {1, 0, 0}}, {"bolt", {0, 0, 1}}, {"l-bracket", {0, 1, 0}}};
  for (const AssemblyInstance& instance : isolated->instances) {
    ASSERT_TRUE(instance.color_rgb.has_value()) << instance.path;
    const std::string& part = isolated->parts[static_cast<std::size_t>(instance.part)].name;
    const auto it = expected.find(part);
    if (it == expected.end()) continue;
    for (std::size_t k = 0; k < 3; ++k) {
      EXPECT_NEAR((*instance.color_rgb)[k], it->second[k], 1e-3) << instance.path << " " << k;
    }
  }
}

TEST_F(IsolatedImportTest, IgesFilesMeshEveryFaceThroughTheWorker) {
  // The files' own B-rep is open (OCCT's sewing leaves 25 free edges in bearing.iges and 2 in
  // hammer.iges even at 0.1 mm), so their meshes have boundary edges; what must hold is that every
  // face is meshed and the surface is consistently oriented.
  for (const char* name : {"bearing.iges", "hammer.iges"}) {
    SCOPED_TRACE(name);
    const fs::path path = DataFile(name);
    if (!fs::exists(path)) GTEST_SKIP() << "real CAD data not found at " << path;
    const absl::StatusOr<ImportedAssembly> assembly = ImportAssemblyIsolated(path, {}, Limits());
    ASSERT_THAT(assembly, IsOk());
    ASSERT_EQ(assembly->parts.size(), 1u);
    ASSERT_EQ(assembly->instances.size(), 1u);
    const MeshBuffers& mesh = assembly->parts[0].mesh;
    EXPECT_GT(mesh.faces_total, 40);
    EXPECT_EQ(mesh.faces_meshed, mesh.faces_total);
    EXPECT_EQ(assembly->load_failures, 0);
    EXPECT_THAT(CheckImportComplete(*assembly), IsOk());
    const absl::StatusOr<geom::TriangleMesh> welded =
        geom::TriangleMesh::FromBuffers(mesh.xyz, mesh.triangles, mesh.face_ids);
    ASSERT_THAT(welded, IsOk());
    EXPECT_EQ(welded->stats().nonmanifold_edges, 0u);
    EXPECT_EQ(welded->stats().misoriented_edges, 0u);
  }
}

TEST_F(IsolatedImportTest, DamagedRealFilesFailCleanlyOrReportTheirLoss) {
  if (!fs::exists(DataFile("bug32314_corrupted.stp"))) {
    GTEST_SKIP() << "real CAD data not found in " << CLASH_CAD_DATA_DIR;
  }
  // Reads with many entities failing to load and one face lost: the import succeeds and the
  // strict check names the loss.
  const absl::StatusOr<ImportedAssembly> corrupted =
      ImportAssemblyIsolated(DataFile("bug32314_corrupted.stp"), {}, Limits());
  ASSERT_THAT(corrupted, IsOk());
  EXPECT_GT(corrupted->load_failures, 0);
  const absl::Status strict = CheckImportComplete(*corrupted);
  EXPECT_THAT(strict, StatusIs(absl::StatusCode::kInvalidArgument, "incomplete import: "));
  EXPECT_THAT(std::string(strict.message()), HasSubstr("entities failed to load"));
  EXPECT_THAT(std::string(strict.message()), HasSubstr("1 of 2 faces of part '"));

  // Nine faces, each its own root: sewn together as one part (as the whole-file path does), all
  // nine mesh. (Sewn one by one, a lone face broke and failed the whole import.)
  const absl::StatusOr<ImportedAssembly> faces =
      ImportAssemblyIsolated(DataFile("bug22566_test_Bad.igs"), {}, Limits());
  ASSERT_THAT(faces, IsOk());
  ASSERT_EQ(faces->parts.size(), 1u);
  EXPECT_EQ(faces->parts[0].mesh.faces_total, 9);
  EXPECT_EQ(faces->parts[0].mesh.faces_meshed, 9);

  // The header lacks its unit name, but its unit flag (inches) is read: one complete face spanning
  // 1.5..7 x 0..6.02 x 6..14.43 in, in mm. Nothing is lost, so strict mode passes.
  const absl::StatusOr<ImportedAssembly> header =
      ImportAssemblyIsolated(DataFile("bad_header.igs"), {}, Limits());
  ASSERT_THAT(header, IsOk());
  ASSERT_EQ(header->parts.size(), 1u);
  ASSERT_EQ(header->instances.size(), 1u);
  EXPECT_EQ(header->parts[0].mesh.faces_meshed, 1);
  EXPECT_THAT(CheckImportComplete(*header), IsOk());
  testing::ExpectBoxNear(testing::WorldBox(*header, header->instances[0]),
                         testing::Box3{{38.1, 0, 152.4}, {177.8, 152.908, 366.504}},
                         header->parts[0].mesh.deflection_mm + 1e-3, "bad_header.igs");
}

// ---------------------------------------------------------------------------------------------
// Pre-started workers (WorkerPool): the same results and the same isolation.

// utime + stime of process `pid` in clock ticks; -1 when it cannot be read.
long long CpuTicks(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const std::size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  long long utime = -1;
  long long stime = -1;
  for (int i = 3; i <= 15 && (fields >> field); ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return utime < 0 || stime < 0 ? -1 : utime + stime;
}

// True while `pid` names a process (zombies included).
bool Exists(int pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

class WorkerPoolTest : public IsolatedImportTest {
 protected:
  static WorkerPoolOptions PoolOptions(int idle) { return {CLASH_CAD_WORKER_PATH, idle}; }
  // Limits that use `pool`, once it is full (so the call cannot fall back to a fresh worker).
  static IsolationLimits PoolLimits(WorkerPool& pool) {
    EXPECT_TRUE(pool.WaitUntilFull(std::chrono::seconds(60)));
    IsolationLimits limits = Limits();
    limits.pool = &pool;
    return limits;
  }
};

TEST_F(WorkerPoolTest, IdleWorkersUseNoCpuAndDieWithThePool) {
  std::vector<int> pids;
  {
    WorkerPool pool(PoolOptions(2));
    ASSERT_TRUE(pool.WaitUntilFull(std::chrono::seconds(60)));
    EXPECT_EQ(pool.idle(), 2);
    EXPECT_EQ(pool.workers_started(), 2u);
    EXPECT_EQ(pool.start_failures(), 0u);
    pids = pool.IdlePids();
    ASSERT_EQ(pids.size(), 2u);
    // Past its ready byte a worker still points fd 1 at /dev/null before it blocks: wait until
    // two readings 100 ms apart agree (a worker that spins never gets there), at most 10 s.
    std::vector<long long> before;
    for (int settle = 0; settle < 100; ++settle) {
      std::vector<long long> now;
      for (int pid : pids) now.push_back(CpuTicks(pid));
      if (now == before) break;
      before = std::move(now);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (std::size_t i = 0; i < pids.size(); ++i) {
      EXPECT_GE(before[i], 0);
      EXPECT_EQ(CpuTicks(pids[i]), before[i]) << "idle worker " << pids[i] << " used CPU";
    }
  }
  // Killed and reaped by the destructor: TearDown also finds no child at all.
  for (int pid : pids) EXPECT_FALSE(Exists(pid)) << pid;
}

TEST_F(WorkerPoolTest, PooledImportEqualsInProcessAndNeverReusesAWorker) {
  const absl::StatusOr<MeshBuffers> local = ReadAndTessellate(box_, {});
  ASSERT_THAT(local, IsOk());
  WorkerPool pool(PoolOptions(1));
  std::vector<int> used;
  for (int round = 0; round < 3; ++round) {
    const IsolationLimits limits = PoolLimits(pool);
    const std::vector<int> idle = pool.IdlePids();
    ASSERT_EQ(idle.size(), 1u);
    for (int pid : used) EXPECT_NE(idle[0], pid) << "a worker ran a second job";
    const absl::StatusOr<MeshBuffers> isolated = ImportIsolated(box_, {}, limits);
    ASSERT_THAT(isolated, IsOk());
    ExpectSameMesh(*isolated, *local);
    EXPECT_EQ(pool.jobs_dispatched(), static_cast<std::uint64_t>(round + 1));
    EXPECT_FALSE(Exists(idle[0])) << "the worker outlived its job";
    used.push_back(idle[0]);
  }
  // Assemblies and options go through the same job.
  const fs::path path = data_ / "plate_bolts.step";
  WriteAssemblyStep(path, "M");
  TessellationOptions options;
  options.linear_deflection_mm = 0.05;
  const absl::StatusOr<ImportedAssembly> local_assembly = ReadAssembly(path, options);
  ASSERT_THAT(local_assembly, IsOk());
  const absl::StatusOr<ImportedAssembly> assembly =
      ImportAssemblyIsolated(path, options, PoolLimits(pool));
  ASSERT_THAT(assembly, IsOk());
  ExpectSameAssembly(*assembly, *local_assembly);
  EXPECT_EQ(pool.jobs_dispatched(), 4u);
}

TEST_F(WorkerPoolTest, PooledFailuresMapLikeFreshOnes) {
  WorkerPool pool(PoolOptions(1));
  std::uint64_t jobs = 0;
  const auto expect_pooled = [&] { EXPECT_EQ(pool.jobs_dispatched(), ++jobs); };
  ExpectCrashIsInvalidArgument(PoolLimits(pool));
  expect_pooled();
  ExpectExitIsInvalidArgument(PoolLimits(pool));
  expect_pooled();
  ExpectGarbageIsInternalMalformed(PoolLimits(pool));
  expect_pooled();
  // The wall clock starts when the job is handed over, not when the worker was started.
  ExpectHangHitsTheWallClock(PoolLimits(pool));
  expect_pooled();
  ExpectSpinHitsTheCpuLimit(PoolLimits(pool));
  expect_pooled();
#if !defined(__SANITIZE_ADDRESS__)
  ExpectOutOfMemoryIsResourceExhausted(PoolLimits(pool));
  expect_pooled();
#endif
  ExpectOutputLimitIsResourceExhausted(PoolLimits(pool));
  expect_pooled();
  ExpectCancelKillsTheWorkerWithinASecond(PoolLimits(pool));
  expect_pooled();
  // The worker's own errors come back as they are.
  EXPECT_THAT(ImportIsolated((data_ / "missing.step").string(), {}, PoolLimits(pool)),
              StatusIs(absl::StatusCode::kNotFound, "missing.step"));
  expect_pooled();
}

TEST_F(WorkerPoolTest, AnotherExecutableOrAnEmptyPoolStartsAFreshWorker) {
  WorkerPool empty(PoolOptions(0));
  IsolationLimits limits = Limits();
  limits.pool = &empty;
  EXPECT_THAT(ImportIsolated(box_, {}, limits), IsOk());
  EXPECT_EQ(empty.jobs_dispatched(), 0u);

  WorkerPool pool(PoolOptions(1));
  limits = PoolLimits(pool);
  limits.worker_path = (data_ / "no-such-worker").string();
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no-such-worker"));
  EXPECT_EQ(pool.jobs_dispatched(), 0u);
  EXPECT_EQ(pool.idle(), 1);
}

TEST_F(WorkerPoolTest, ConcurrentPooledImportsAllSucceed) {
  WorkerPool pool(PoolOptions(2));
  ExpectConcurrentImportsAllSucceed(PoolLimits(pool));
  EXPECT_GE(pool.jobs_dispatched(), 2u);  // the rest may have found the pool empty
}

// Run only by KillingTheOwnerKillsIdleWorkers, in a child process: holds a full pool, writes its
// idle workers' pids to $CLASH_POOL_HELPER_OUT and waits to be killed.
TEST(WorkerPoolHelper, DISABLED_HoldPoolUntilKilled) {
  const char* out = std::getenv("CLASH_POOL_HELPER_OUT");
  if (out == nullptr) GTEST_SKIP() << "only run by WorkerPoolTest.KillingTheOwnerKillsIdleWorkers";
  WorkerPool pool({CLASH_CAD_WORKER_PATH, 2});
  ASSERT_TRUE(pool.WaitUntilFull(std::chrono::seconds(60)));
  std::string text;
  for (int pid : pool.IdlePids()) text += std::to_string(pid) + "\n";
  WriteBytes(std::string(out) + ".tmp", text);
  fs::rename(std::string(out) + ".tmp", out);
  std::this_thread::sleep_for(std::chrono::seconds(120));
}

TEST_F(WorkerPoolTest, KillingTheOwnerKillsIdleWorkers) {
  // Orphans are re-parented to this process, so it can reap them and see that they died.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const std::string out = (data_ / "pids.txt").string();
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const pid_t helper = fork();
  if (helper == 0) {
    setenv("CLASH_POOL_HELPER_OUT", out.c_str(), 1);
    execl(self.c_str(), self.c_str(),
          "--gtest_filter=WorkerPoolHelper.DISABLED_HoldPoolUntilKilled",
          "--gtest_also_run_disabled_tests", static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(helper, 0);
  std::vector<int> pids;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (pids.empty() && std::chrono::steady_clock::now() < give_up) {
    if (fs::exists(out)) {
      std::istringstream in(ReadBytes(out));
      for (int pid = 0; in >> pid;) pids.push_back(pid);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  kill(helper, SIGKILL);
  ASSERT_EQ(waitpid(helper, nullptr, 0), helper);
  ASSERT_EQ(pids.size(), 2u) << "the helper did not report its pool";
  const auto killed_at = std::chrono::steady_clock::now();
  for (int pid : pids) {
    bool reaped = false;
    // A second on an idle machine; three for a loaded one.
    while (!reaped && std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(3)) {
      reaped = waitpid(pid, nullptr, WNOHANG) == pid;
      if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(reaped) << "idle worker " << pid << " outlived its owner by three seconds";
    if (!reaped) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace
}  // namespace clash::cad
