// The generated plate-and-bolts assembly shared by the CAD tests, and comparisons of import
// results.
//
// The fixture is an XCAF document built with OCCT itself (a plate and a bolt part, a sub-assembly
// holding the bolt twice, a top assembly placing it with a rotation and a translation), written to
// STEP, so the parts, paths and world boxes are known by construction.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <BRepPrimAPI_MakeBox.hxx>
#include <BRepPrimAPI_MakeCylinder.hxx>
#include <Interface_Static.hxx>
#include <Quantity_Color.hxx>
#include <STEPCAFControl_Controller.hxx>
#include <STEPCAFControl_Writer.hxx>
#include <TCollection_ExtendedString.hxx>
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
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <gp.hxx>
#include <gp_Trsf.hxx>
#include <gp_Vec.hxx>
#include <numbers>
#include <string>
#include <string_view>
#include <vector>

#include "clash/cad/assembly.h"
#include "clash/cad/tessellate.h"
#include "clash/geom/aabb.h"
#include "occt_fixtures.h"

namespace clash::cad::testing {

// ---------------------------------------------------------------------------------------------
// Geometry helpers.

/// Bounds in mm (empty until points are added).
using Box3 = clash::geom::Aabb;

/// The box of a part's mesh moved by `placement` into the world frame.
inline Box3 WorldBox(const MeshBuffers& mesh, const Placement& placement) {
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

/// The world box of one instance.
inline Box3 WorldBox(const ImportedAssembly& assembly, const AssemblyInstance& instance) {
  return WorldBox(assembly.parts[static_cast<std::size_t>(instance.part)].mesh, instance.placement);
}

/// Expects every bound of `actual` within `tol` of `expected`.
inline void ExpectBoxNear(const Box3& actual, const Box3& expected, double tol,
                          const std::string& what) {
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(actual.min[k], expected.min[k], tol) << what << " axis " << k;
    EXPECT_NEAR(actual.max[k], expected.max[k], tol) << what << " axis " << k;
  }
}

/// The instance paths in order.
inline std::vector<std::string> Paths(const ImportedAssembly& assembly) {
  std::vector<std::string> paths;
  for (const auto& instance : assembly.instances) paths.push_back(instance.path);
  return paths;
}

// ---------------------------------------------------------------------------------------------
// The generated assembly.

constexpr double kPlate[3] = {100, 60, 5};
constexpr double kBoltRadius = 4;
constexpr double kBoltHeight = 30;
// Bolt positions inside the "bolted" sub-assembly.
constexpr double kBoltAt[2][3] = {{20, 30, 5}, {80, 30, 5}};
// Placement of "bolted" in the top assembly: 90 degrees about +Z, then this translation.
constexpr double kBoltedShift[3] = {200, 0, 10};

inline gp_Trsf Translation(const double (&v)[3]) {
  gp_Trsf trsf;
  trsf.SetTranslation(gp_Vec(v[0], v[1], v[2]));
  return trsf;
}

/// Builds an XCAF document with `fill(shapes, colors)` and writes it to STEP at `path`, with names
/// and colours, and `unit` as the file's length unit. With `extern_prefix` (OCCT's multi-file
/// mode), each part goes to a file of its own beside `path`, named `extern_prefix` + the part's
/// name + ".stp", and `path` holds the assembly structure with external references to them.
template <typename Fill>
inline void WriteXcafStep(const std::filesystem::path& path, Fill fill, const char* unit = "MM",
                          const char* extern_prefix = nullptr) {
  QuietOcct quiet;
  Handle(XCAFApp_Application) app = XCAFApp_Application::GetApplication();
  Handle(TDocStd_Document) doc;
  app->NewDocument("MDTV-XCAF", doc);
  {
    const Handle(XCAFDoc_ShapeTool) shapes = XCAFDoc_DocumentTool::ShapeTool(doc->Main());
    const Handle(XCAFDoc_ColorTool) colors = XCAFDoc_DocumentTool::ColorTool(doc->Main());
    fill(shapes, colors);
    shapes->UpdateAssemblies();

    // OCCT 7.6 captures "write.step.unit" when the writer is constructed: set it before.
    STEPCAFControl_Controller::Init();
    const std::string previous = Interface_Static::CVal("write.step.unit");
    ASSERT_TRUE(Interface_Static::SetCVal("write.step.unit", unit));
    STEPCAFControl_Writer writer;
    writer.SetNameMode(true);
    writer.SetColorMode(true);
    const bool transferred = writer.Transfer(doc, STEPControl_AsIs, extern_prefix);
    const IFSelect_ReturnStatus written = writer.Write(path.c_str());
    Interface_Static::SetCVal("write.step.unit", previous.c_str());
    ASSERT_TRUE(transferred);
    ASSERT_EQ(written, IFSelect_RetDone);
  }
  app->Close(doc);
}

/// Writes the plate-and-bolts assembly to `path` with `unit` as the file's length unit; the plate
/// part is coloured red.
inline void WriteAssemblyStep(const std::filesystem::path& path, const char* unit = "MM") {
  WriteXcafStep(
      path,
      [](const Handle(XCAFDoc_ShapeTool) & shapes, const Handle(XCAFDoc_ColorTool) & colors) {
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
      },
      unit);
}

/// Writes a tree of shared sub-assemblies: level 0 is a unit box part "box"; level k >= 1 is an
/// assembly "l<k>" with fan_outs[k-1] components, all referring to level k-1 (placed side by side
/// along one axis), and the last level, the top, also holds `extra_boxes` more boxes. The file
/// has one label per level, a few KB, yet expands to prod(fan_outs) + extra_boxes instances: 17
/// levels of 2 give 131 072.
inline void WriteSharedTreeStep(const std::filesystem::path& path, const std::vector<int>& fan_outs,
                                int extra_boxes = 0) {
  WriteXcafStep(
      path,
      [&](const Handle(XCAFDoc_ShapeTool) & shapes, const Handle(XCAFDoc_ColorTool) & /*colors*/) {
        const TDF_Label box = shapes->AddShape(BRepPrimAPI_MakeBox(1, 1, 1).Shape(), false);
        TDataStd_Name::Set(box, "box");
        TDF_Label below = box;
        double size = 1;  // extent of one copy of the level below along each axis
        for (std::size_t k = 1; k <= fan_outs.size(); ++k) {
          const TDF_Label level = shapes->NewShape();
          TDataStd_Name::Set(level, TCollection_ExtendedString(("l" + std::to_string(k)).c_str()));
          const int axis = static_cast<int>(k % 3);
          for (int j = 0; j < fan_outs[k - 1]; ++j) {
            double shift[3] = {0, 0, 0};
            shift[axis] = 2 * size * j;
            shapes->AddComponent(level, below, TopLoc_Location(Translation(shift)));
          }
          if (k == fan_outs.size()) {
            for (int j = 1; j <= extra_boxes; ++j) {
              const double shift[3] = {-2.0 * j, -2.0 * j, -2.0 * j};
              shapes->AddComponent(level, box, TopLoc_Location(Translation(shift)));
            }
          }
          size *= 2 * fan_outs[k - 1];
          below = level;
        }
      });
}

/// Expected world boxes of the generated assembly, by instance.
inline Box3 ExpectedPlate() { return Box3{{0, 0, 0}, {kPlate[0], kPlate[1], kPlate[2]}}; }

inline Box3 ExpectedBolt(int i) {
  // Local box in "bolted", then (x, y) -> (-y, x) and the shift.
  const double* c = kBoltAt[i];
  return Box3{{-(c[1] + kBoltRadius) + kBoltedShift[0], c[0] - kBoltRadius + kBoltedShift[1],
               c[2] + kBoltedShift[2]},
              {-(c[1] - kBoltRadius) + kBoltedShift[0], c[0] + kBoltRadius + kBoltedShift[1],
               c[2] + kBoltHeight + kBoltedShift[2]}};
}

/// Checks an import of the generated assembly against its construction.
inline void CheckGeneratedAssembly(const ImportedAssembly& assembly) {
  // Two part definitions, each meshed once; three instances.
  ASSERT_EQ(assembly.parts.size(), 2u);
  ASSERT_EQ(assembly.instances.size(), 3u);
  EXPECT_THAT(Paths(assembly),
              ::testing::ElementsAre("top/plate", "top/bolted/bolt:1", "top/bolted/bolt:2"));
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

/// The size of the box WriteColouredBoxStep writes, in mm.
constexpr double kColouredBox[3] = {10, 20, 30};

/// Writes a box part "box" of kColouredBox, coloured (0.25, 0.5, 0.75) in linear RGB, to STEP, then
/// replaces the first component of its COLOUR_RGB with the text `red` (e.g. "-0.5"), unless
/// `red` is empty. OCCT writes that colour as one COLOUR_RGB('',r,g,b) entity (black, white and
/// the primaries would be DRAUGHTING_PRE_DEFINED_COLOURs instead).
inline void WriteColouredBoxStep(const std::filesystem::path& path, const std::string& red) {
  WriteXcafStep(
      path, [](const Handle(XCAFDoc_ShapeTool) & shapes, const Handle(XCAFDoc_ColorTool) & colors) {
        const TDF_Label box = shapes->AddShape(
            BRepPrimAPI_MakeBox(kColouredBox[0], kColouredBox[1], kColouredBox[2]).Shape(), false);
        TDataStd_Name::Set(box, "box");
        colors->SetColor(box, Quantity_Color(0.25, 0.5, 0.75, Quantity_TOC_RGB), XCAFDoc_ColorSurf);
      });
  if (red.empty()) return;
  std::string text = ReadBytes(path);
  const std::string entity = "COLOUR_RGB('',";
  const std::size_t first = text.find(entity);
  ASSERT_NE(first, std::string::npos) << "no COLOUR_RGB in\n" << text;
  ASSERT_EQ(text.find(entity, first + 1), std::string::npos) << "more than one COLOUR_RGB";
  const std::size_t begin = first + entity.size();
  const std::size_t end = text.find(',', begin);
  ASSERT_NE(end, std::string::npos);
  text.replace(begin, end - begin, red);
  WriteBytes(path, text);
}

/// A scratch folder `dir_` holding the generated assembly as `step_` (in mm).
class GeneratedAssemblyTest : public ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    step_ = dir_ / "plate_bolts.step";
    WriteAssemblyStep(step_);
  }

  std::filesystem::path step_;
};

// ---------------------------------------------------------------------------------------------
// Text.

/// True when `s` is well-formed UTF-8 (what protobuf requires of a `string` field): each character
/// decodes to a scalar value (not a surrogate, at most U+10FFFF) in its shortest form. Written
/// apart from the code under test, by decoding.
inline bool IsWellFormedUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char lead = static_cast<unsigned char>(s[i]);
    std::size_t length = 0;
    uint32_t code = 0;
    uint32_t smallest = 0;
    if (lead < 0x80) {
      length = 1, code = lead;
    } else if ((lead & 0xe0) == 0xc0) {
      length = 2, code = lead & 0x1f, smallest = 0x80;
    } else if ((lead & 0xf0) == 0xe0) {
      length = 3, code = lead & 0x0f, smallest = 0x800;
    } else if ((lead & 0xf8) == 0xf0) {
      length = 4, code = lead & 0x07, smallest = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i < length) return false;
    for (std::size_t k = 1; k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(s[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    if (code < smallest || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += length;
  }
  return true;
}

/// "a" followed by `n` times "é" (two bytes each in UTF-8).
inline std::string AccentedName(std::size_t n) {
  std::string name = "a";
  for (std::size_t k = 0; k < n; ++k) name += "\xc3\xa9";
  return name;
}

// ---------------------------------------------------------------------------------------------
// Comparisons.

/// Expects two meshes to be the same to the bit (the worker format stores the doubles' bits).
inline void ExpectSameMesh(const MeshBuffers& a, const MeshBuffers& b) {
  EXPECT_EQ(a.xyz, b.xyz);
  EXPECT_EQ(a.triangles, b.triangles);
  EXPECT_EQ(a.face_ids, b.face_ids);
  EXPECT_EQ(a.faces_total, b.faces_total);
  EXPECT_EQ(a.faces_meshed, b.faces_meshed);
  EXPECT_EQ(a.faces_reversed, b.faces_reversed);
  EXPECT_EQ(a.roots_total, b.roots_total);
  EXPECT_EQ(a.roots_transferred, b.roots_transferred);
  EXPECT_EQ(a.load_failures, b.load_failures);
  EXPECT_EQ(a.load_warnings, b.load_warnings);
  EXPECT_EQ(a.deflection_mm, b.deflection_mm);
}

/// Expects two assemblies to be the same: report (with its warnings), parts (names and meshes to
/// the bit) and instances (paths, names, parts, placements to the bit, colours).
inline void ExpectSameAssembly(const ImportedAssembly& a, const ImportedAssembly& b) {
  EXPECT_EQ(a.roots_total, b.roots_total);
  EXPECT_EQ(a.roots_transferred, b.roots_transferred);
  EXPECT_EQ(a.load_failures, b.load_failures);
  EXPECT_EQ(a.load_warnings, b.load_warnings);
  EXPECT_EQ(a.empty_parts, b.empty_parts);
  EXPECT_EQ(a.warnings, b.warnings);
  ASSERT_EQ(a.parts.size(), b.parts.size());
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "part " << i << " '" << a.parts[i].name << "'");
    EXPECT_EQ(a.parts[i].name, b.parts[i].name);
    ExpectSameMesh(a.parts[i].mesh, b.parts[i].mesh);
  }
  ASSERT_EQ(a.instances.size(), b.instances.size());
  for (std::size_t i = 0; i < a.instances.size(); ++i) {
    const AssemblyInstance& x = a.instances[i];
    const AssemblyInstance& y = b.instances[i];
    SCOPED_TRACE(::testing::Message() << "instance " << i << " " << x.path);
    EXPECT_EQ(x.path, y.path);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.part, y.part);
    EXPECT_EQ(x.placement.rotation, y.placement.rotation);
    EXPECT_EQ(x.placement.translation_mm, y.placement.translation_mm);
    EXPECT_EQ(x.color_rgb, y.color_rgb);
  }
}

}  // namespace clash::cad::testing
