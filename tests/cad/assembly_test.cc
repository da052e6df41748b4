// Tests for clash::cad::ReadAssembly and CheckImportComplete.
//
// The generated fixture (assembly_fixtures.h) is an XCAF document built with OCCT itself, written
// to STEP and read back, so the parts, paths and world boxes are known by construction. Real files
// come from CLASH_CAD_DATA_DIR; those tests skip when it is absent.
#include "clash/cad/assembly.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <BRepPrimAPI_MakeBox.hxx>
#include <STEPControl_Controller.hxx>
#include <STEPControl_Writer.hxx>
#include <TCollection_ExtendedString.hxx>
#include <TDF_Label.hxx>
#include <TDataStd_Name.hxx>
#include <TopLoc_Location.hxx>
#include <XCAFDoc_ColorTool.hxx>
#include <XCAFDoc_ShapeTool.hxx>
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <gp_Pnt.hxx>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "assembly_fixtures.h"
#include "clash/cad/tessellate.h"
#include "testing/status_matchers.h"

// LeakSanitizer: OCCT 7.6 never frees its one-time registrations (Interface_Static parameters,
// IFSelect editors, translator controllers), so suppress leaks allocated inside OCCT's libTK*
// modules. Leaks allocated by clashd code still fail a sanitizer build.
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

namespace clash::cad {
namespace {

namespace fs = std::filesystem;
using clash::testing::IsOk;
using clash::testing::StatusIs;
using testing::Box3;
using testing::CheckGeneratedAssembly;
using testing::ExpectBoxNear;
using ::testing::HasSubstr;
using testing::IsWellFormedUtf8;
using testing::Paths;
using testing::QuietOcct;
using testing::WorldBox;
using testing::WriteAssemblyStep;
using testing::WriteSharedTreeStep;

// Each test gets a private scratch folder `dir_`.
using AssemblyTest = testing::ScratchDirTest;

std::string ReadBytesOf(const fs::path& path) { return testing::ReadBytes(path); }

TEST_F(AssemblyTest, GeneratedAssemblyHasKnownPartsPathsAndPlacements) {
  const fs::path path = dir_ / "plate_bolts.step";
  WriteAssemblyStep(path, "MM");
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  CheckGeneratedAssembly(*assembly);
}

// Colours OCCT 7.6 cannot take never cost the geometry. A negative COLOUR_RGB component makes
// OCCT raise Standard_OutOfRange in the transfer: the file is read again without colours, and a
// warning says so. A component too large for a double comes out of OCCT as NaN: that colour is
// left out, with a warning. A component above 1 is no failure: OCCT scales the colour down.
TEST_F(AssemblyTest, ColoursOcctCannotTakeAreDroppedAndTheGeometryKept) {
  const fs::path path = dir_ / "coloured.step";
  const auto expect_box = [](const ImportedAssembly& assembly) {
    ASSERT_EQ(assembly.parts.size(), 1u);
    ASSERT_EQ(assembly.instances.size(), 1u);
    EXPECT_EQ(assembly.parts[0].name, "box");
    EXPECT_EQ(assembly.instances[0].path, "box");
    EXPECT_EQ(assembly.parts[0].mesh.faces_meshed, 6);
    const Box3 box = Box3::FromPoints(
        {0, 0, 0}, {testing::kColouredBox[0], testing::kColouredBox[1], testing::kColouredBox[2]});
    ExpectBoxNear(WorldBox(assembly, assembly.instances[0]), box, 1e-6, "box");
    EXPECT_THAT(CheckImportComplete(assembly), IsOk());  // colours are no geometry
  };

  testing::WriteColouredBoxStep(path, "");
  const absl::StatusOr<ImportedAssembly> intact = ReadAssembly(path, {});
  ASSERT_THAT(intact, IsOk());
  expect_box(*intact);
  ASSERT_TRUE(intact->instances[0].color_rgb.has_value());
  EXPECT_THAT(intact->warnings, ::testing::IsEmpty());

  testing::WriteColouredBoxStep(path, "-0.5");
  const absl::StatusOr<ImportedAssembly> negative = ReadAssembly(path, {});
  ASSERT_THAT(negative, IsOk());
  expect_box(*negative);
  EXPECT_FALSE(negative->instances[0].color_rgb.has_value());
  EXPECT_THAT(negative->warnings, ::testing::ElementsAre(::testing::AllOf(
                                      ::testing::StartsWith("colours dropped: "),
                                      HasSubstr("transfer: OCCT raised Standard_OutOfRange"),
                                      HasSubstr("succeeded without them"))));

  testing::WriteColouredBoxStep(path, "1.E400");
  const absl::StatusOr<ImportedAssembly> infinite = ReadAssembly(path, {});
  ASSERT_THAT(infinite, IsOk());
  expect_box(*infinite);
  EXPECT_FALSE(infinite->instances[0].color_rgb.has_value());
  EXPECT_THAT(
      infinite->warnings,
      ::testing::ElementsAre("1 colour of the file left out: not finite sRGB values in [0, 1]"));

  testing::WriteColouredBoxStep(path, "2.5");
  const absl::StatusOr<ImportedAssembly> above = ReadAssembly(path, {});
  ASSERT_THAT(above, IsOk());
  expect_box(*above);
  ASSERT_TRUE(above->instances[0].color_rgb.has_value());
  for (float c : *above->instances[0].color_rgb) {
    EXPECT_GE(c, 0);
    EXPECT_LE(c, 1);
  }
  EXPECT_THAT(above->warnings, ::testing::IsEmpty());
}

TEST_F(AssemblyTest, AssemblyInMetresComesBackInMillimetres) {
  // Both the part geometry and the placements' translations are converted to mm.
  const fs::path path = dir_ / "plate_bolts_m.step";
  WriteAssemblyStep(path, "M");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text_stream;
  text_stream << in.rdbuf();
  const std::string text = text_stream.str();
  ASSERT_THAT(text, HasSubstr("SI_UNIT($,.METRE.)"));
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  CheckGeneratedAssembly(*assembly);
}

TEST_F(AssemblyTest, AbsoluteDeflectionAppliesToEveryPart) {
  const fs::path path = dir_ / "plate_bolts.step";
  WriteAssemblyStep(path, "MM");
  TessellationOptions options;
  options.linear_deflection_mm = 0.05;
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, options);
  ASSERT_THAT(assembly, IsOk());
  for (const AssemblyPart& part : assembly->parts) EXPECT_EQ(part.mesh.deflection_mm, 0.05);
}

TEST_F(AssemblyTest, TriangleCapCountsAllParts) {
  const fs::path path = dir_ / "plate_bolts.step";
  WriteAssemblyStep(path, "MM");
  const absl::StatusOr<ImportedAssembly> full = ReadAssembly(path, {});
  ASSERT_THAT(full, IsOk());
  std::size_t total = 0;
  for (const AssemblyPart& part : full->parts) total += part.mesh.triangles.size() / 3;
  TessellationOptions options;
  options.max_triangles = total - 1;
  EXPECT_THAT(ReadAssembly(path, options), StatusIs(absl::StatusCode::kResourceExhausted, ""));
  options.max_triangles = total;
  EXPECT_THAT(ReadAssembly(path, options), IsOk());
}

TEST_F(AssemblyTest, SingleSolidGivesOnePartAndOneIdentityInstance) {
  const fs::path path = dir_ / "box.step";
  {
    QuietOcct quiet;
    STEPControl_Controller::Init();
    STEPControl_Writer writer;
    ASSERT_EQ(writer.Transfer(BRepPrimAPI_MakeBox(gp_Pnt(10, 20, 30), 40, 50, 60).Shape(),
                              STEPControl_AsIs),
              IFSelect_RetDone);
    ASSERT_EQ(writer.Write(path.c_str()), IFSelect_RetDone);
  }
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  ASSERT_EQ(assembly->parts.size(), 1u);
  ASSERT_EQ(assembly->instances.size(), 1u);
  const AssemblyInstance& instance = assembly->instances[0];
  EXPECT_EQ(instance.part, 0);
  EXPECT_FALSE(instance.path.empty());
  EXPECT_EQ(instance.path.find('/'), std::string::npos);
  const Placement identity;
  EXPECT_EQ(instance.placement.rotation, identity.rotation);
  EXPECT_EQ(instance.placement.translation_mm, identity.translation_mm);
  EXPECT_EQ(assembly->parts[0].mesh.triangles.size(), 3u * 12);
  ExpectBoxNear(WorldBox(*assembly, instance), Box3{{10, 20, 30}, {50, 70, 90}}, 1e-6, "box");
}

// Signed volume enclosed by a part's triangles (divergence theorem): the solid's volume when the
// surface is closed and wound counter-clockwise seen from outside.
double SignedVolume(const MeshBuffers& mesh) {
  double six_volume = 0;
  const auto at = [&](uint32_t v) { return &mesh.xyz[3 * static_cast<std::size_t>(v)]; };
  for (std::size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    const double* a = at(mesh.triangles[t]);
    const double* b = at(mesh.triangles[t + 1]);
    const double* c = at(mesh.triangles[t + 2]);
    six_volume += a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0]) +
                  a[2] * (b[0] * c[1] - b[1] * c[0]);
  }
  return six_volume / 6;
}

TEST_F(AssemblyTest, StepWithExternalReferencesIsRefused) {
  // OCCT's multi-file mode writes the part to a file of its own beside the main file, which refers
  // to it by name. STEPCAFControl_Reader would read that file (or any other on the host the name
  // points at, relative names against the input's folder) and merge it into the result.
  const fs::path main = dir_ / "assembly.step";
  testing::WriteXcafStep(
      main,
      [](const Handle(XCAFDoc_ShapeTool) & shapes, const Handle(XCAFDoc_ColorTool) & /*colors*/) {
        const TDF_Label part = shapes->AddShape(BRepPrimAPI_MakeBox(10, 20, 30).Shape(), false);
        TDataStd_Name::Set(part, "ext_part");
        const TDF_Label top = shapes->NewShape();
        TDataStd_Name::Set(top, "top");
        shapes->AddComponent(top, part, TopLoc_Location());
      },
      "MM", /*extern_prefix=*/"");
  const fs::path part = dir_ / "ext_part.stp";
  ASSERT_TRUE(fs::exists(part)) << "OCCT wrote no referenced file";
  // The referenced file is a good part on its own: without the refusal, the main file would import
  // with its geometry.
  ASSERT_THAT(ReadAssembly(part, {}), IsOk());
  EXPECT_THAT(ReadBytesOf(main), HasSubstr("ext_part.stp"));

  EXPECT_THAT(ReadAssembly(main, {}), StatusIs(absl::StatusCode::kInvalidArgument,
                                               "read: the STEP file refers to 1 "
                                               "external file (first: \"ext_part.stp\")"));
  // The whole-file path refuses it the same way.
  EXPECT_THAT(ReadAndTessellate(main, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "external file"));

  // An absolute path reaches any STEP file on the host: refused too.
  const fs::path elsewhere = dir_ / "elsewhere";
  fs::create_directories(elsewhere);
  fs::rename(part, elsewhere / "secret.stp");
  std::string text = ReadBytesOf(main);
  for (std::size_t at = text.find("'ext_part.stp'"); at != std::string::npos;
       at = text.find("'ext_part.stp'")) {
    text.replace(at, 14, "'" + (elsewhere / "secret.stp").string() + "'");
  }
  testing::WriteBytes(main, text);
  const absl::StatusOr<ImportedAssembly> absolute = ReadAssembly(main, {});
  EXPECT_THAT(absolute, StatusIs(absl::StatusCode::kInvalidArgument, "external file"));
  EXPECT_THAT(std::string(absolute.status().message()), HasSubstr("secret.stp"));
}

TEST_F(AssemblyTest, IgesLooseFacesOfAllRootsAreOneClosedPart) {
  // The box's faces as trimmed surfaces, each its own root (as many IGES writers store a body):
  // taken root by root they would be six one-face parts, never sewn into the closed box.
  const fs::path path = dir_ / "box_faces.igs";
  testing::WriteIgesFacesAsRoots(BRepPrimAPI_MakeBox(10, 20, 30).Shape(), path);
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  EXPECT_EQ(assembly->roots_total, 6) << "the fixture has a root per face";
  ASSERT_EQ(assembly->parts.size(), 1u);
  ASSERT_EQ(assembly->instances.size(), 1u);
  const MeshBuffers& mesh = assembly->parts[0].mesh;
  EXPECT_EQ(mesh.faces_total, 6);
  EXPECT_EQ(mesh.faces_meshed, 6);
  EXPECT_THAT(CheckImportComplete(*assembly), IsOk());
  // Sewn into a solid oriented outwards: the triangles enclose the box's volume (exact corners;
  // only the rounding of a 6000 mm^3 sum remains).
  EXPECT_NEAR(SignedVolume(mesh), 10 * 20 * 30, 1e-6);
  ExpectBoxNear(WorldBox(*assembly, assembly->instances[0]), Box3{{0, 0, 0}, {10, 20, 30}}, 1e-9,
                "box");
  // The same mesh as the whole-file path gives.
  const absl::StatusOr<MeshBuffers> whole = ReadAndTessellate(path, {});
  ASSERT_THAT(whole, IsOk());
  EXPECT_EQ(whole->triangles.size(), mesh.triangles.size());
  EXPECT_NEAR(SignedVolume(*whole), SignedVolume(mesh), 1e-6);
}

TEST_F(AssemblyTest, MissingFileIsNotFound) {
  EXPECT_THAT(ReadAssembly((dir_ / "absent.step").string(), {}),
              StatusIs(absl::StatusCode::kNotFound, ""));
}

TEST_F(AssemblyTest, RandomBytesAreInvalidArgument) {
  const fs::path path = dir_ / "random.step";
  std::mt19937 rng(7);
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  EXPECT_THAT(ReadAssembly(path, {}), StatusIs(absl::StatusCode::kInvalidArgument, ""));
  // The same garbage behind a valid STEP magic reaches OCCT's parser.
  {
    std::ofstream out(path, std::ios::binary);
    out << "ISO-10303-21;\n" << bytes;
  }
  EXPECT_THAT(ReadAssembly(path, {}), StatusIs(absl::StatusCode::kInvalidArgument, ""));
}

TEST_F(AssemblyTest, InvalidOptionsAreRejected) {
  TessellationOptions options;
  options.angular_deflection_rad = 0;
  EXPECT_THAT(ReadAssembly((dir_ / "absent.step").string(), options),
              StatusIs(absl::StatusCode::kInvalidArgument, ""));
}

// ---------------------------------------------------------------------------------------------
// Instance cap.

TEST_F(AssemblyTest, SharedSubAssembliesCannotExpandPastTheInstanceCap) {
  // 17 levels, each placing the level below twice: a few KB of STEP, 2^17 = 131072 instances.
  const fs::path path = dir_ / "doubling.step";
  WriteSharedTreeStep(path, std::vector<int>(17, 2));
  EXPECT_LT(fs::file_size(path), 100'000u);
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  EXPECT_THAT(assembly, StatusIs(absl::StatusCode::kResourceExhausted, "131072 instances"));
  EXPECT_THAT(assembly, StatusIs(absl::StatusCode::kResourceExhausted,
                                 absl::StrCat("cap of ", kMaxAssemblyInstances)));
}

TEST_F(AssemblyTest, InstanceCapIsExact) {
  // 5^5 * 2^5 = 100000 instances of one part: exactly the cap, accepted.
  const std::vector<int> fan_outs{5, 5, 5, 5, 5, 2, 2, 2, 2, 2};
  static_assert(kMaxAssemblyInstances == 100'000);
  const fs::path at_cap = dir_ / "at_cap.step";
  WriteSharedTreeStep(at_cap, fan_outs);
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(at_cap, {});
  ASSERT_THAT(assembly, IsOk());
  EXPECT_EQ(assembly->parts.size(), 1u);
  EXPECT_EQ(assembly->instances.size(), kMaxAssemblyInstances);
  // One more box in the top assembly: refused.
  const fs::path over_cap = dir_ / "over_cap.step";
  WriteSharedTreeStep(over_cap, fan_outs, /*extra_boxes=*/1);
  EXPECT_THAT(ReadAssembly(over_cap, {}),
              StatusIs(absl::StatusCode::kResourceExhausted, "100001 instances"));
}

// ---------------------------------------------------------------------------------------------
// Unique paths.

TEST_F(AssemblyTest, SiblingPathsAreUniqueAfterSanitisingAndCutting) {
  // Siblings whose names collide only once made into path segments: "nut" twice beside "nut:1"
  // (the numbering of the repeated name must skip it), "x/y" beside "x_y" ('/' becomes '_'), and
  // two names that differ only past the first kMaxPathSegmentBytes bytes.
  const std::string long_name = testing::AccentedName(600);  // 1201 bytes
  const std::vector<std::string> names{"nut", "nut",           "nut:1",        "x/y",
                                       "x_y", long_name + "1", long_name + "2"};
  const fs::path path = dir_ / "siblings.step";
  testing::WriteXcafStep(path, [&](const Handle(XCAFDoc_ShapeTool) & shapes,
                                   const Handle(XCAFDoc_ColorTool) &
                                   /*colors*/) {
    const TDF_Label top = shapes->NewShape();
    TDataStd_Name::Set(top, "top");
    for (std::size_t i = 0; i < names.size(); ++i) {
      // A distinct part per sibling, each named in the file.
      const double size = 1.0 + static_cast<double>(i);
      const TDF_Label part = shapes->AddShape(BRepPrimAPI_MakeBox(size, size, size).Shape(), false);
      TDataStd_Name::Set(part, TCollection_ExtendedString(names[i].c_str(), true));
      shapes->AddComponent(
          top, part, TopLoc_Location(testing::Translation({10.0 * static_cast<double>(i), 0, 0})));
    }
  });
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  ASSERT_EQ(assembly->instances.size(), names.size());
  std::set<std::string> paths;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const AssemblyInstance& instance = assembly->instances[i];
    EXPECT_EQ(instance.name, names[i]);
    EXPECT_TRUE(paths.insert(instance.path).second) << "repeated path " << instance.path;
  }
  // The long names' segments are cut on a character boundary ("a" and 479 "e acute") and then
  // numbered like any repeated name.
  const std::string cut = long_name.substr(0, 959);
  static_assert(kMaxPathSegmentBytes == 960);
  EXPECT_THAT(Paths(*assembly),
              ::testing::ElementsAre("top/nut:2", "top/nut:3", "top/nut:1", "top/x_y:1",
                                     "top/x_y:2", "top/" + cut + ":1", "top/" + cut + ":2"));
  // The generated assembly and the real one keep their paths (checked by their own tests).
}

// ---------------------------------------------------------------------------------------------
// Names as UTF-8.

// Writes an assembly "top" holding a box part named `name` (UTF-16 code units) twice.
void WriteNamedBoxStep(const fs::path& path, const TCollection_ExtendedString& name) {
  testing::WriteXcafStep(
      path,
      [&](const Handle(XCAFDoc_ShapeTool) & shapes, const Handle(XCAFDoc_ColorTool) & /*colors*/) {
        const TDF_Label box = shapes->AddShape(BRepPrimAPI_MakeBox(1, 1, 1).Shape(), false);
        TDataStd_Name::Set(box, name);
        const TDF_Label top = shapes->NewShape();
        TDataStd_Name::Set(top, "top");
        shapes->AddComponent(top, box, TopLoc_Location());
        shapes->AddComponent(top, box, TopLoc_Location(testing::Translation({5, 0, 0})));
      });
}

// Expects every name and path of `assembly` to be well-formed UTF-8.
void ExpectUtf8Names(const ImportedAssembly& assembly) {
  for (const AssemblyPart& part : assembly.parts) EXPECT_TRUE(IsWellFormedUtf8(part.name));
  for (const AssemblyInstance& instance : assembly.instances) {
    EXPECT_TRUE(IsWellFormedUtf8(instance.path)) << instance.path;
    EXPECT_TRUE(IsWellFormedUtf8(instance.name)) << instance.name;
  }
}

TEST_F(AssemblyTest, NonAsciiNamesComeBackAsUtf8) {
  const fs::path path = dir_ / "accented.step";
  WriteNamedBoxStep(path, TCollection_ExtendedString("\xc3\xa9"
                                                     "crou \xe2\x80\x94 M8",
                                                     true));
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  ASSERT_EQ(assembly->parts.size(), 1u);
  EXPECT_EQ(assembly->parts[0].name,
            "\xc3\xa9"
            "crou \xe2\x80\x94 M8");
  ExpectUtf8Names(*assembly);
}

TEST_F(AssemblyTest, NamesThatAreNotUnicodeBecomeValidUtf8) {
  // Names in the file that have no UTF-8 form: a lone surrogate written by OCCT, the same through
  // STEP's own escape (\X2\D800\X0\), and raw bytes that are not UTF-8. (OCCT 7.6 drops
  // surrogates and cut characters and reads other raw bytes as Latin-1; the reader repairs what
  // is left, whatever OCCT version gives it.)
  const Standard_ExtCharacter units[] = {u'n', u'u', 0xd800, u't', 0};
  const fs::path written = dir_ / "surrogate.step";
  WriteNamedBoxStep(written, TCollection_ExtendedString(units));
  const fs::path plain = dir_ / "plain.step";
  WriteNamedBoxStep(plain, TCollection_ExtendedString("nutXYZ"));
  const std::string text = testing::ReadBytes(plain);
  ASSERT_NE(text.find("nutXYZ"), std::string::npos);
  std::vector<fs::path> files{written};
  for (const char* replacement :
       {"nut\\X2\\D800\\X0\\", "nut\xff\xfe", "nut\xc3", "nut\xed\xa0\x80"}) {
    std::string patched = text;
    for (std::size_t at = patched.find("nutXYZ"); at != std::string::npos;
         at = patched.find("nutXYZ", at)) {
      patched.replace(at, 6, replacement);
    }
    files.push_back(dir_ / ("patched" + std::to_string(files.size()) + ".step"));
    testing::WriteBytes(files.back(), patched);
  }
  for (const fs::path& path : files) {
    SCOPED_TRACE(path.filename().string());
    const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
    ASSERT_THAT(assembly, IsOk());
    ASSERT_EQ(assembly->parts.size(), 1u);
    ExpectUtf8Names(*assembly);
    EXPECT_EQ(assembly->parts[0].name.substr(0, 2), "nu");
  }
}

// ---------------------------------------------------------------------------------------------
// Strict mode.

TEST_F(AssemblyTest, CompleteImportPassesTheStrictCheck) {
  const fs::path path = dir_ / "plate_bolts.step";
  WriteAssemblyStep(path);
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  EXPECT_THAT(CheckImportComplete(*assembly), IsOk());
  // Warnings and part definitions without faces are reported, not losses.
  ImportedAssembly warned = *assembly;
  warned.load_warnings = 4;
  warned.empty_parts = 2;
  EXPECT_THAT(CheckImportComplete(warned), IsOk());
}

TEST_F(AssemblyTest, StrictCheckNamesWhatWasLost) {
  const fs::path path = dir_ / "plate_bolts.step";
  WriteAssemblyStep(path);
  const absl::StatusOr<ImportedAssembly> complete = ReadAssembly(path, {});
  ASSERT_THAT(complete, IsOk());
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const std::size_t bolt = static_cast<std::size_t>(complete->instances[1].part);
  const int bolt_faces = complete->parts[bolt].mesh.faces_total;
  ASSERT_GE(bolt_faces, 3);

  ImportedAssembly lost_faces = *complete;
  lost_faces.parts[bolt].mesh.faces_meshed = bolt_faces - 2;
  EXPECT_THAT(CheckImportComplete(lost_faces),
              StatusIs(kInvalid, absl::StrCat("incomplete import: 2 of ", bolt_faces,
                                              " faces of part 'bolt' not meshed")));

  ImportedAssembly lost_root = *complete;
  lost_root.roots_total = 3;
  EXPECT_THAT(CheckImportComplete(lost_root),
              StatusIs(kInvalid, "incomplete import: 2 of 3 roots not transferred"));

  ImportedAssembly failed = *complete;
  failed.load_failures = 1;
  EXPECT_THAT(CheckImportComplete(failed),
              StatusIs(kInvalid, "incomplete import: 1 entity failed to load"));

  // Everything at once, in a fixed order; past five parts the rest are counted.
  ImportedAssembly all = lost_faces;
  all.roots_total = 3;
  all.load_failures = 57;
  const AssemblyPart bolt_part = all.parts[bolt];
  for (int i = 0; i < 6; ++i) all.parts.push_back(bolt_part);
  const absl::Status status = CheckImportComplete(all);
  EXPECT_THAT(status, StatusIs(kInvalid,
                               "incomplete import: 2 of 3 roots not transferred; 57 "
                               "entities failed to load; 2 of "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("; 2 more parts with faces not meshed"));
}

TEST(StrictCheck, SingleMesh) {
  MeshBuffers mesh;
  mesh.roots_total = 1;
  mesh.roots_transferred = 1;
  mesh.faces_total = 40;
  mesh.faces_meshed = 40;
  mesh.load_warnings = 3;
  EXPECT_THAT(CheckImportComplete(mesh), IsOk());
  mesh.faces_meshed = 38;
  mesh.load_failures = 2;
  EXPECT_THAT(CheckImportComplete(mesh),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "incomplete import: 2 entities failed to load; 2 of 40 faces not meshed"));
}

// ---------------------------------------------------------------------------------------------
// Real files.

fs::path DataFile(const char* name) { return fs::path(CLASH_CAD_DATA_DIR) / name; }

// The truth for as1-oc-214-mat.stp, from its PRODUCT and NEXT_ASSEMBLY_USAGE_OCCURRENCE entities:
// as1 holds rod-assembly (nut x2, rod), l-bracket-assembly x2 and plate; l-bracket-assembly holds
// nut-bolt-assembly x3 and l-bracket; nut-bolt-assembly holds bolt and nut. That is 9 products,
// 13 occurrences, 5 parts with geometry (nut, rod, bolt, l-bracket, plate) and 18 leaf instances:
// 8 nuts, 6 bolts, 2 l-brackets, 1 rod, 1 plate.
TEST(RealAssemblies, As1HasFivePartsAndEighteenInstances) {
  const fs::path path = DataFile("as1-oc-214-mat.stp");
  if (!fs::exists(path)) GTEST_SKIP() << "real CAD data not found at " << path;
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  ASSERT_EQ(assembly->parts.size(), 5u);
  ASSERT_EQ(assembly->instances.size(), 18u);
  EXPECT_EQ(assembly->load_failures, 0);
  EXPECT_THAT(CheckImportComplete(*assembly), IsOk());

  std::set<std::string> part_names;
  for (const AssemblyPart& part : assembly->parts) part_names.insert(part.name);
  EXPECT_EQ(part_names, (std::set<std::string>{"bolt", "l-bracket", "nut", "plate", "rod"}));

  std::map<std::string, int> per_product;
  std::set<std::string> paths;
  for (const AssemblyInstance& instance : assembly->instances) {
    const std::string& part = assembly->parts[static_cast<std::size_t>(instance.part)].name;
    EXPECT_THAT(instance.name, HasSubstr(part));
    EXPECT_EQ(instance.path.rfind("as1/", 0), 0u) << instance.path;
    paths.insert(instance.path);
    ++per_product[part];
  }
  EXPECT_EQ(paths.size(), 18u) << "paths must be unique";
  EXPECT_EQ(per_product, (std::map<std::string, int>{
                             {"bolt", 6}, {"l-bracket", 2}, {"nut", 8}, {"plate", 1}, {"rod", 1}}));

  // Every instance lies inside the whole file's box (the file meshed as one shape).
  const absl::StatusOr<MeshBuffers> whole = ReadAndTessellate(path, {});
  ASSERT_THAT(whole, IsOk());
  Box3 outer = WorldBox(*whole, Placement{});
  for (const AssemblyInstance& instance : assembly->instances) {
    const Box3 box = WorldBox(*assembly, instance);
    const double tol = whole->deflection_mm +
                       assembly->parts[static_cast<std::size_t>(instance.part)].mesh.deflection_mm +
                       1e-6;
    for (int k = 0; k < 3; ++k) {
      EXPECT_GE(box.min[k], outer.min[k] - tol) << instance.path << " axis " << k;
      EXPECT_LE(box.max[k], outer.max[k] + tol) << instance.path << " axis " << k;
    }
  }
}

TEST(RealAssemblies, DamagedIgesMeshesEveryFaceTheWholeFilePathMeshes) {
  // OCCT's bug 22566 file: 9 faces, each its own root. Sewn one by one, a lone face broke and the
  // whole import failed ("mesh: none of the 1 faces produced triangles (part "FACE")"); the
  // whole-file path, which sews them together, meshes all 9.
  const fs::path path = DataFile("bug22566_test_Bad.igs");
  if (!fs::exists(path)) GTEST_SKIP() << "real CAD data not found at " << path;
  const absl::StatusOr<MeshBuffers> whole = ReadAndTessellate(path, {});
  ASSERT_THAT(whole, IsOk());
  EXPECT_EQ(whole->faces_meshed, whole->faces_total);
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  ASSERT_EQ(assembly->parts.size(), 1u);
  ASSERT_EQ(assembly->instances.size(), 1u);
  EXPECT_EQ(assembly->parts[0].mesh.faces_total, whole->faces_total);
  EXPECT_EQ(assembly->parts[0].mesh.faces_meshed, whole->faces_meshed);
  EXPECT_EQ(assembly->parts[0].mesh.triangles.size(), whole->triangles.size());
}

TEST(RealAssemblies, MotorDeflectionIsPerPart) {
  const fs::path path = DataFile("as1_motor.step");
  if (!fs::exists(path)) GTEST_SKIP() << "real CAD data not found at " << path;
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  ASSERT_GT(assembly->parts.size(), 1u);
  EXPECT_GT(assembly->instances.size(), assembly->parts.size());
  double smallest = std::numeric_limits<double>::infinity();
  double largest = 0;
  for (const AssemblyPart& part : assembly->parts) {
    EXPECT_GE(part.mesh.triangles.size() / 3, 12u) << part.name;
    smallest = std::min(smallest, part.mesh.deflection_mm);
    largest = std::max(largest, part.mesh.deflection_mm);
  }
  EXPECT_LE(smallest, largest / 100);
}

}  // namespace
}  // namespace clash::cad
