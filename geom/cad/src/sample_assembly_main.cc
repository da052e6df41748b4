// clash-sample-assembly OUT.step [--no-clash]: writes the project's sample assembly, built with
// OCCT so that its answers are known by construction (README, "Quick start").
//
// "sample" (mm, Z up):
//   plate       120 x 80 x 10, z in [0, 10], four through holes of radius 4.5 at (20|100, 20|60)
//   bracket     40 x 40 x 30 block standing on the plate, x in [40, 80], y in [20, 60]
//   bolt-set:1..4, a sub-assembly of
//     bolt      head radius 7, z in [10, 15] on the plate; shank radius 4 down to z = -15
//     nut       ring radius 4..7, z in [-6, 0] under the plate, on the shank
//   pin         radius 3, through the bracket where it has no hole (left out with --no-clash)
// At default tolerances: bolt heads and nuts touch the plate and nuts touch their shanks
// (CONTACT); shanks keep 0.5 mm from their holes (CLEARANCE when asked for more); the bracket
// stands on the plate (CONTACT); the pin clashes with the bracket (HARD).
#include <BRepAlgoAPI_Cut.hxx>
#include <BRepAlgoAPI_Fuse.hxx>
#include <BRepPrimAPI_MakeBox.hxx>
#include <BRepPrimAPI_MakeCylinder.hxx>
#include <Interface_Static.hxx>
#include <Message.hxx>
#include <Message_Messenger.hxx>
#include <Quantity_Color.hxx>
#include <STEPCAFControl_Controller.hxx>
#include <STEPCAFControl_Writer.hxx>
#include <TDF_Label.hxx>
#include <TDataStd_Name.hxx>
#include <TDocStd_Document.hxx>
#include <TopLoc_Location.hxx>
#include <XCAFApp_Application.hxx>
#include <XCAFDoc_ColorTool.hxx>
#include <XCAFDoc_DocumentTool.hxx>
#include <XCAFDoc_ShapeTool.hxx>
#include <cstdio>
#include <cstring>
#include <gp_Ax2.hxx>
#include <gp_Trsf.hxx>
#include <gp_Vec.hxx>
#include <string>

// LeakSanitizer: OCCT 7.6 never frees its one-time registrations; suppress leaks allocated inside
// its libTK* modules (as the worker and the CAD tests do).
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

namespace {

constexpr double kHoles[4][2] = {{20, 20}, {100, 20}, {20, 60}, {100, 60}};

TopLoc_Location At(double x, double y, double z) {
  gp_Trsf t;
  t.SetTranslation(gp_Vec(x, y, z));
  return TopLoc_Location(t);
}

TopoDS_Shape Cylinder(double r, double z0, double h, double x = 0, double y = 0) {
  return BRepPrimAPI_MakeCylinder(gp_Ax2(gp_Pnt(x, y, z0), gp::DZ()), r, h).Shape();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::strcmp(argv[2], "--no-clash") != 0)) {
    std::fprintf(stderr, "usage: clash-sample-assembly OUT.step [--no-clash]\n");
    return 2;
  }
  const bool with_clash = argc == 2;
  Message::DefaultMessenger()->RemovePrinters(STANDARD_TYPE(Message_Printer));

  TopoDS_Shape plate = BRepPrimAPI_MakeBox(120, 80, 10).Shape();
  for (const auto& h : kHoles) plate = BRepAlgoAPI_Cut(plate, Cylinder(4.5, -1, 12, h[0], h[1]));
  const TopoDS_Shape bracket = BRepPrimAPI_MakeBox(gp_Pnt(40, 20, 10), 40, 40, 30).Shape();
  // Bolt frame: head on z in [0, 5], shank down to z = -25.
  const TopoDS_Shape bolt = BRepAlgoAPI_Fuse(Cylinder(7, 0, 5), Cylinder(4, -25, 25)).Shape();
  // Nut frame: z in [0, 6].
  const TopoDS_Shape nut = BRepAlgoAPI_Cut(Cylinder(7, 0, 6), Cylinder(4, -1, 8)).Shape();
  const TopoDS_Shape pin = Cylinder(3, 0, 50);

  Handle(XCAFApp_Application) app = XCAFApp_Application::GetApplication();
  Handle(TDocStd_Document) doc;
  app->NewDocument("MDTV-XCAF", doc);
  const Handle(XCAFDoc_ShapeTool) shapes = XCAFDoc_DocumentTool::ShapeTool(doc->Main());
  const Handle(XCAFDoc_ColorTool) colors = XCAFDoc_DocumentTool::ColorTool(doc->Main());
  auto part = [&](const TopoDS_Shape& s, const char* name, double r, double g, double b) {
    const TDF_Label l = shapes->AddShape(s, false);
    TDataStd_Name::Set(l, name);
    colors->SetColor(l, Quantity_Color(r, g, b, Quantity_TOC_sRGB), XCAFDoc_ColorSurf);
    return l;
  };
  const TDF_Label plate_l = part(plate, "plate", 0.6, 0.6, 0.65);
  const TDF_Label bracket_l = part(bracket, "bracket", 0.2, 0.4, 0.8);
  const TDF_Label bolt_l = part(bolt, "bolt", 0.85, 0.7, 0.2);
  const TDF_Label nut_l = part(nut, "nut", 0.5, 0.5, 0.5);
  const TDF_Label pin_l = part(pin, "pin", 0.8, 0.1, 0.1);

  const TDF_Label bolt_set = shapes->NewShape();
  TDataStd_Name::Set(bolt_set, "bolt-set");
  shapes->AddComponent(bolt_set, bolt_l, At(0, 0, 10));
  shapes->AddComponent(bolt_set, nut_l, At(0, 0, -6));

  const TDF_Label top = shapes->NewShape();
  TDataStd_Name::Set(top, "sample");
  shapes->AddComponent(top, plate_l, TopLoc_Location());
  shapes->AddComponent(top, bracket_l, TopLoc_Location());
  for (const auto& h : kHoles) shapes->AddComponent(top, bolt_set, At(h[0], h[1], 0));
  if (with_clash) shapes->AddComponent(top, pin_l, At(60, 40, 15));
  shapes->UpdateAssemblies();

  STEPCAFControl_Controller::Init();
  Interface_Static::SetCVal("write.step.unit", "MM");
  STEPCAFControl_Writer writer;
  writer.SetNameMode(true);
  writer.SetColorMode(true);
  if (!writer.Transfer(doc, STEPControl_AsIs) || writer.Write(argv[1]) != IFSelect_RetDone) {
    std::fprintf(stderr, "clash-sample-assembly: cannot write %s\n", argv[1]);
    return 1;
  }
  std::printf("wrote %s: plate, bracket, 4 bolt-sets (bolt + nut)%s\n", argv[1],
              with_clash ? ", pin through the bracket" : "");
  return 0;
}
