// Tests for clash::cad::ReadAssembly.
//
// The generated fixtures are XCAF documents built with OCCT itself (a plate and a bolt part, a
// sub-assembly holding the bolt twice, a top assembly placing it with a rotation and a
// translation), written to STEP and read back, so the parts, paths and world boxes are known by
// construction. Real files come from CLASH_CAD_DATA_DIR; those tests skip when it is absent.
#include "clash/cad/assembly.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // mkdtemp

#include <BRepPrimAPI_MakeBox.hxx>
#include <BRepPrimAPI_MakeCylinder.hxx>
#include <Interface_Static.hxx>
#include <Message.hxx>
#include <Message_Messenger.hxx>
#include <Quantity_Color.hxx>
#include <STEPCAFControl_Controller.hxx>
#include <STEPCAFControl_Writer.hxx>
#include <STEPControl_Controller.hxx>
#include <STEPControl_Writer.hxx>
#include <TDF_Label.hxx>
#include <TDataStd_Name.hxx>
#include <TDocStd_Document.hxx>
#include <TopLoc_Location.hxx>
#include <XCAFApp_Application.hxx>
#include <XCAFDoc_ColorTool.hxx>
#include <XCAFDoc_DocumentTool.hxx>
#include <XCAFDoc_ShapeTool.hxx>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <gp.hxx>
#include <gp_Trsf.hxx>
#include <gp_Vec.hxx>
#include <limits>
#include <map>
#include <numbers>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "clash/cad/tessellate.h"
#include "clash/geom/aabb.h"
#include "occt_fixtures.h"
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
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::QuietOcct;

// Each test gets a private scratch folder `dir_`.
using AssemblyTest = testing::ScratchDirTest;

// ---------------------------------------------------------------------------------------------
// Geometry helpers.

// Bounds in mm (empty until points are added).
using Box3 = clash::geom::Aabb;

// The box of a part's mesh moved by `placement` into the world frame.
Box3 WorldBox(const MeshBuffers& mesh, const Placement& placement) {
  Box3 box;
  const auto& r = placement.rotation;
  const auto& t = placement.translation_mm;
  for (std::size_t v = 0; v + 2 < mesh.xyz.size(); v += 3) {
    const double x = mesh.xyz[v], y = mesh.xyz[v + 1], z = mesh.xyz[v + 2];
    const std::array<double, 3> w{r[0] * x + r[1] * y + r[2] * z + t[0],
                                  r[3] * x + r[4] * y + r[5] * z + t[1],
                                  r[6] * x + r[7] * y + r[8] * z + t[2]};
    for (int k = 0; k < 3; ++k) {
      box.min[k] = std::min(box.min[k], w[k]);
      box.max[k] = std::max(box.max[k], w[k]);
    }
  }
  return box;
}

Box3 WorldBox(const ImportedAssembly& assembly, const AssemblyInstance& instance) {
  return WorldBox(assembly.parts[static_cast<std::size_t>(instance.part)].mesh, instance.placement);
}

void ExpectBoxNear(const Box3& actual, const Box3& expected, double tol, const std::string& what) {
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(actual.min[k], expected.min[k], tol) << what << " axis " << k;
    EXPECT_NEAR(actual.max[k], expected.max[k], tol) << what << " axis " << k;
  }
}

std::vector<std::string> Paths(const ImportedAssembly& assembly) {
  std::vector<std::string> paths;
  for (const auto& instance : assembly.instances) paths.push_back(instance.path);
  return paths;
}

// ---------------------------------------------------------------------------------------------
// Fixtures.

constexpr double kPlate[3] = {100, 60, 5};
constexpr double kBoltRadius = 4;
constexpr double kBoltHeight = 30;
// Bolt positions inside the "bolted" sub-assembly.
constexpr double kBoltAt[2][3] = {{20, 30, 5}, {80, 30, 5}};
// Placement of "bolted" in the top assembly: 90 degrees about +Z, then this translation.
constexpr double kBoltedShift[3] = {200, 0, 10};

gp_Trsf Translation(const double (&v)[3]) {
  gp_Trsf trsf;
  trsf.SetTranslation(gp_Vec(v[0], v[1], v[2]));
  return trsf;
}

// Writes the plate-and-bolts assembly to `path` with `unit` as the file's length unit; the plate
// part is coloured red.
void WriteAssemblyStep(const fs::path& path, const char* unit) {
  QuietOcct quiet;
  Handle(XCAFApp_Application) app = XCAFApp_Application::GetApplication();
  Handle(TDocStd_Document) doc;
  app->NewDocument("MDTV-XCAF", doc);
  {
    const Handle(XCAFDoc_ShapeTool) shapes = XCAFDoc_DocumentTool::ShapeTool(doc->Main());
    const Handle(XCAFDoc_ColorTool) colors = XCAFDoc_DocumentTool::ColorTool(doc->Main());
    const TDF_Label plate =
        shapes->AddShape(BRepPrimAPI_MakeBox(kPlate[0], kPlate[1], kPlate[2]).Shape(), false);
    TDataStd_Name::Set(plate, "plate");
    colors->SetColor(plate, Quantity_Color(1, 0, 0, Quantity_TOC_sRGB), XCAFDoc_ColorSurf);
    const TDF_Label bolt =
        shapes->AddShape(BRepPrimAPI_MakeCylinder(kBoltRadius, kBoltHeight).Shape(), false);
    TDataStd_Name::Set(bolt, "bolt");

    const TDF_Label bolted = shapes->NewShape();
    TDataStd_Name::Set(bolted, "bolted");
    shapes->AddComponent(bolted, bolt, TopLoc_Location(Translation(kBoltAt[0])));
    shapes->AddComponent(bolted, bolt, TopLoc_Location(Translation(kBoltAt[1])));

    const TDF_Label top = shapes->NewShape();
    TDataStd_Name::Set(top, "top");
    shapes->AddComponent(top, plate, TopLoc_Location());
    gp_Trsf placed;
    placed.SetRotation(gp::OZ(), std::numbers::pi / 2);
    placed.SetTranslationPart(gp_Vec(kBoltedShift[0], kBoltedShift[1], kBoltedShift[2]));
    shapes->AddComponent(top, bolted, TopLoc_Location(placed));
    shapes->UpdateAssemblies();

    // OCCT 7.6 captures "write.step.unit" when the writer is constructed: set it before.
    STEPCAFControl_Controller::Init();
    const std::string previous = Interface_Static::CVal("write.step.unit");
    ASSERT_TRUE(Interface_Static::SetCVal("write.step.unit", unit));
    STEPCAFControl_Writer writer;
    writer.SetNameMode(true);
    writer.SetColorMode(true);
    const bool transferred = writer.Transfer(doc, STEPControl_AsIs);
    const IFSelect_ReturnStatus written = writer.Write(path.c_str());
    Interface_Static::SetCVal("write.step.unit", previous.c_str());
    ASSERT_TRUE(transferred);
    ASSERT_EQ(written, IFSelect_RetDone);
  }
  app->Close(doc);
}

// Expected world boxes of the generated assembly, by instance.
Box3 ExpectedPlate() { return Box3{{0, 0, 0}, {kPlate[0], kPlate[1], kPlate[2]}}; }

Box3 ExpectedBolt(int i) {
  // Local box in "bolted", then (x, y) -> (-y, x) and the shift.
  const double* c = kBoltAt[i];
  return Box3{{-(c[1] + kBoltRadius) + kBoltedShift[0], c[0] - kBoltRadius + kBoltedShift[1],
               c[2] + kBoltedShift[2]},
              {-(c[1] - kBoltRadius) + kBoltedShift[0], c[0] + kBoltRadius + kBoltedShift[1],
               c[2] + kBoltHeight + kBoltedShift[2]}};
}

void CheckGeneratedAssembly(const ImportedAssembly& assembly) {
  // Two part definitions, each meshed once; three instances.
  ASSERT_EQ(assembly.parts.size(), 2u);
  ASSERT_EQ(assembly.instances.size(), 3u);
  EXPECT_THAT(Paths(assembly), ElementsAre("top/plate", "top/bolted/bolt:1", "top/bolted/bolt:2"));
  const AssemblyInstance& plate = assembly.instances[0];
  const AssemblyInstance& bolt1 = assembly.instances[1];
  const AssemblyInstance& bolt2 = assembly.instances[2];
  EXPECT_EQ(plate.name, "plate");
  EXPECT_EQ(bolt1.name, "bolt");
  EXPECT_EQ(bolt1.part, bolt2.part);
  EXPECT_NE(plate.part, bolt1.part);
  EXPECT_EQ(assembly.parts[static_cast<std::size_t>(plate.part)].name, "plate");
  EXPECT_EQ(assembly.parts[static_cast<std::size_t>(bolt1.part)].name, "bolt");
  EXPECT_EQ(assembly.roots_total, 1);
  EXPECT_EQ(assembly.load_failures, 0);
  EXPECT_EQ(assembly.empty_parts, 0);

  // Parts are meshed in their own frame: the bolt's mesh box is the cylinder's at the origin.
  const MeshBuffers& bolt_mesh = assembly.parts[static_cast<std::size_t>(bolt1.part)].mesh;
  const double bolt_tol = bolt_mesh.deflection_mm + 1e-6;
  ExpectBoxNear(WorldBox(bolt_mesh, Placement{}),
                Box3{{-kBoltRadius, -kBoltRadius, 0}, {kBoltRadius, kBoltRadius, kBoltHeight}},
                bolt_tol, "bolt part");
  // Relative deflection is taken on each part's own box, so the bolt is meshed finer.
  EXPECT_LT(bolt_mesh.deflection_mm,
            assembly.parts[static_cast<std::size_t>(plate.part)].mesh.deflection_mm);

  ExpectBoxNear(WorldBox(assembly, plate), ExpectedPlate(), 1e-6, "plate");
  ExpectBoxNear(WorldBox(assembly, bolt1), ExpectedBolt(0), bolt_tol, "bolt 1");
  ExpectBoxNear(WorldBox(assembly, bolt2), ExpectedBolt(1), bolt_tol, "bolt 2");
  // The 90-degree rotation comes through as a rotation matrix.
  for (const AssemblyInstance* bolt : {&bolt1, &bolt2}) {
    const auto& r = bolt->placement.rotation;
    const std::array<double, 9> expected{0, -1, 0, 1, 0, 0, 0, 0, 1};
    for (std::size_t k = 0; k < 9; ++k) EXPECT_NEAR(r[k], expected[k], 1e-9) << k;
  }
  // Colour: the plate's, and none on the bolts.
  ASSERT_TRUE(plate.color_rgb.has_value());
  EXPECT_NEAR((*plate.color_rgb)[0], 1, 1e-3);
  EXPECT_NEAR((*plate.color_rgb)[1], 0, 1e-3);
  EXPECT_NEAR((*plate.color_rgb)[2], 0, 1e-3);
  EXPECT_FALSE(bolt1.color_rgb.has_value());
}

TEST_F(AssemblyTest, GeneratedAssemblyHasKnownPartsPathsAndPlacements) {
  const fs::path path = dir_ / "plate_bolts.step";
  WriteAssemblyStep(path, "MM");
  const absl::StatusOr<ImportedAssembly> assembly = ReadAssembly(path, {});
  ASSERT_THAT(assembly, IsOk());
  CheckGeneratedAssembly(*assembly);
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
