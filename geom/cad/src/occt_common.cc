// OCCT helpers shared by the CAD readers; see occt_common.h.
#include "occt_common.h"

#include <BRepBndLib.hxx>
#include <BRepBuilderAPI_MakeSolid.hxx>
#include <BRepBuilderAPI_Sewing.hxx>
#include <BRepLib.hxx>
#include <BRepMesh_IncrementalMesh.hxx>
#include <BRepTools.hxx>
#include <BRep_Builder.hxx>
#include <BRep_Tool.hxx>
#include <Bnd_Box.hxx>
#include <IGESControl_Reader.hxx>
#include <IMeshTools_Parameters.hxx>
#include <Interface_Check.hxx>
#include <Interface_CheckIterator.hxx>
#include <Interface_Static.hxx>
#include <Message.hxx>
#include <Poly_Triangulation.hxx>
#include <STEPCAFControl_Reader.hxx>
#include <STEPConstruct_ExternRefs.hxx>
#include <STEPControl_Reader.hxx>
#include <Standard_Failure.hxx>
#include <Standard_OutOfMemory.hxx>
#include <TopAbs.hxx>
#include <TopExp.hxx>
#include <TopExp_Explorer.hxx>
#include <TopLoc_Location.hxx>
#include <TopTools_IndexedMapOfShape.hxx>
#include <TopoDS.hxx>
#include <TopoDS_Compound.hxx>
#include <TopoDS_Face.hxx>
#include <TopoDS_Shell.hxx>
#include <TopoDS_Solid.hxx>
#include <XCAFApp_Application.hxx>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <gp_Pnt.hxx>
#include <gp_Trsf.hxx>
#include <limits>
#include <new>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "occt_warm_up.h"
#include "utf8.h"

namespace clash::cad::internal {
namespace {

// Sewing tolerance for loose IGES faces, in mm. IGES writers commonly use 1e-3..1e-2 mm model
// tolerances; 1e-3 mm closes their gaps and stays far below any useful mesh deflection.
constexpr double kIgesSewingToleranceMm = 1e-3;

// Longest quote of a referenced file name in an error message, in bytes.
constexpr std::size_t kMaxQuotedNameBytes = 256;

int CountFaces(const TopoDS_Shape& shape) {
  TopTools_IndexedMapOfShape faces;
  TopExp::MapShapes(shape, TopAbs_FACE, faces);
  return faces.Extent();
}

// The chordal deflection to mesh with, from the options and the shape's bounding box.
absl::StatusOr<double> ChooseDeflection(const TopoDS_Shape& shape,
                                        const TessellationOptions& options) {
  Bnd_Box box;
  BRepBndLib::AddOptimal(shape, box, /*useTriangulation=*/false, /*useShapeTolerance=*/false);
  if (box.IsVoid()) {
    return absl::InvalidArgumentError("mesh: the shape has no geometry (empty bounding box)");
  }
  if (box.IsOpenXmin() || box.IsOpenXmax() || box.IsOpenYmin() || box.IsOpenYmax() ||
      box.IsOpenZmin() || box.IsOpenZmax()) {
    return absl::InvalidArgumentError("mesh: the shape is unbounded (infinite bounding box)");
  }
  double x0 = 0, y0 = 0, z0 = 0, x1 = 0, y1 = 0, z1 = 0;
  box.Get(x0, y0, z0, x1, y1, z1);
  const double diagonal = std::hypot(x1 - x0, y1 - y0, z1 - z0);
  if (!std::isfinite(diagonal) || !std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(z0)) {
    return absl::InvalidArgumentError("mesh: the shape's bounding box is not finite");
  }
  if (diagonal <= 0) {
    return absl::InvalidArgumentError("mesh: the shape's bounding box has zero size");
  }
  const double deflection = options.linear_deflection_mm > 0
                                ? options.linear_deflection_mm
                                : options.relative_deflection * diagonal;
  if (deflection < kMinRelativeDeflection * diagonal) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh: deflection ", deflection, " mm is below the floor of ",
                     kMinRelativeDeflection, " x the bounding-box diagonal (", diagonal, " mm)"));
  }
  return deflection;
}

// True in the phases where OCCT's STEP/IGES translators parse and translate the file's content:
// an exception thrown there comes out of reading that content, so it is the file's fault
// (INVALID_ARGUMENT), as a Standard_Failure is. In the later phases this module's own code runs
// on what was read, and an exception other than Standard_Failure may be a bug: INTERNAL.
bool IsParsingTheFile(Phase phase) { return phase == Phase::kRead || phase == Phase::kTransfer; }

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kRead:
      return "read";
    case Phase::kTransfer:
      return "transfer";
    case Phase::kAssemble:
      return "assemble";
    case Phase::kMesh:
      return "mesh";
  }
  return "unknown phase";
}

std::mutex& OcctMutex() {
  static std::mutex mutex;
  return mutex;
}

ScopedInterfaceStatic::ScopedInterfaceStatic(const char* name, const char* value) : name_(name) {
  if (!Interface_Static::IsPresent(name)) return;
  const char* previous = Interface_Static::CVal(name);
  previous_ = previous != nullptr ? previous : "";
  active_ = Interface_Static::SetCVal(name, value) &&
            std::strcmp(Interface_Static::CVal(name), value) == 0;
}

ScopedInterfaceStatic::~ScopedInterfaceStatic() {
  if (active_) Interface_Static::SetCVal(name_, previous_.c_str());
}

ScopedSilentMessenger::ScopedSilentMessenger() : messenger_(Message::DefaultMessenger()) {
  if (messenger_.IsNull()) return;
  saved_ = messenger_->Printers();
  messenger_->ChangePrinters().Clear();
}

ScopedSilentMessenger::~ScopedSilentMessenger() {
  if (!messenger_.IsNull()) messenger_->ChangePrinters() = saved_;
}

// Opens the file and returns its first bytes; NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadHead(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    return absl::NotFoundError(absl::StrCat("read: no such file: ", path));
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat("read: ", path, ": ", ec.message()));
  if (status.type() != std::filesystem::file_type::regular) {
    return absl::InvalidArgumentError(absl::StrCat("read: not a regular file: ", path));
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;  // ifstream does not promise to set it
    // A worker reports only the codes IsWorkerErrorCode names (absl::ErrnoToStatus would make
    // e.g. EAGAIN a retryable UNAVAILABLE): RESOURCE_EXHAUSTED when the host ran out of file
    // descriptors or memory, which is no fault of the file; INVALID_ARGUMENT otherwise.
    const std::string message = absl::StrCat(
        "read: cannot open ", path, error != 0 ? absl::StrCat(": ", std::strerror(error)) : "");
    if (error == EMFILE || error == ENFILE || error == ENOMEM) {
      return absl::ResourceExhaustedError(message);
    }
    return absl::InvalidArgumentError(message);
  }
  std::string head(kSniffBytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head;
}

LoadChecks CountLoadChecks(const Handle(XSControl_WorkSession) & session) {
  LoadChecks result;
  // Entities the parser flagged: a file can "read" while losing some of its content.
  const Interface_CheckIterator checks = session->ModelCheckList(/*complete=*/Standard_False);
  for (checks.Start(); checks.More(); checks.Next()) {
    const Handle(Interface_Check)& check = checks.Value();
    if (check.IsNull()) continue;
    if (check->HasFailed()) {
      ++result.failures;
    } else if (check->HasWarnings()) {
      ++result.warnings;
    }
  }
  return result;
}

absl::Status RefuseExternalReferences(const Handle(XSControl_WorkSession) & session) {
  STEPConstruct_ExternRefs refs(session);
  refs.LoadExternRefs();
  const int count = refs.NbExternRefs();
  if (count <= 0) return absl::OkStatus();
  const char* first = refs.FileName(1);
  const std::string name = ToValidUtf8(first != nullptr ? first : "");
  return absl::InvalidArgumentError(absl::StrCat(
      "read: the STEP file refers to ", count, " external file", count == 1 ? "" : "s",
      " (first: \"", std::string(Utf8Prefix(name, kMaxQuotedNameBytes)),
      "\"); files with external references are not imported: reading them would read other "
      "files on this host. Export the assembly as a single file"));
}

// IGES often carries loose trimmed surfaces: sew them into shells, and turn closed shells into
// solids oriented outwards so that face orientation means "outside". Solids and shells are kept
// as they are (a file may mix them with loose faces); a shape without loose faces is returned
// unchanged.
TopoDS_Shape SewLooseFaces(const TopoDS_Shape& shape) {
  BRep_Builder builder;
  TopoDS_Compound loose;
  builder.MakeCompound(loose);
  bool any_loose = false;
  for (TopExp_Explorer it(shape, TopAbs_FACE, TopAbs_SHELL); it.More(); it.Next()) {
    builder.Add(loose, it.Current());
    any_loose = true;
  }
  if (!any_loose) return shape;
  BRepBuilderAPI_Sewing sewing(kIgesSewingToleranceMm);
  sewing.Add(loose);
  sewing.Perform();
  const TopoDS_Shape sewn = sewing.SewedShape();
  if (sewn.IsNull()) return shape;

  TopoDS_Compound result;
  builder.MakeCompound(result);
  // What was whole already: the solids, and the shells outside them.
  for (TopExp_Explorer it(shape, TopAbs_SOLID); it.More(); it.Next()) {
    builder.Add(result, it.Current());
  }
  for (TopExp_Explorer it(shape, TopAbs_SHELL, TopAbs_SOLID); it.More(); it.Next()) {
    builder.Add(result, it.Current());
  }
  for (TopExp_Explorer it(sewn, TopAbs_SHELL); it.More(); it.Next()) {
    const TopoDS_Shell& shell = TopoDS::Shell(it.Current());
    if (BRep_Tool::IsClosed(shell)) {
      BRepBuilderAPI_MakeSolid make_solid(shell);
      if (make_solid.IsDone()) {
        TopoDS_Solid solid = make_solid.Solid();
        BRepLib::OrientClosedSolid(solid);
        builder.Add(result, solid);
        continue;
      }
    }
    builder.Add(result, shell);
  }
  for (TopExp_Explorer it(sewn, TopAbs_FACE, TopAbs_SHELL); it.More(); it.Next()) {
    builder.Add(result, it.Current());
  }
  return result;
}

absl::StatusOr<MeshBuffers> MeshLooseFaces(const TopoDS_Shape& shape,
                                           const TessellationOptions& options) {
  const TopoDS_Shape sewn = SewLooseFaces(shape);
  if (sewn.IsSame(shape)) return MeshOwnedShape(shape, options);
  absl::StatusOr<MeshBuffers> from_sewn = MeshOwnedShape(sewn, options);
  // A cap or a size limit is not what sewing breaks: meshing again would only double the time.
  if (!from_sewn.ok() && !absl::IsInvalidArgument(from_sewn.status())) return from_sewn;
  if (from_sewn.ok() && from_sewn->faces_meshed == from_sewn->faces_total &&
      from_sewn->faces_total >= CountFaces(shape)) {
    return from_sewn;
  }
  // Sewing may share faces with `shape`: clear what meshing the sewn shape stored in them.
  BRepTools::Clean(shape);
  absl::StatusOr<MeshBuffers> from_read = MeshOwnedShape(shape, options);
  if (!from_read.ok()) return from_sewn;
  if (from_sewn.ok() && from_sewn->faces_meshed >= from_read->faces_meshed) return from_sewn;
  return from_read;
}

// Meshes `shape` in place and copies every face's triangles into MeshBuffers. The shape must not
// be shared with anyone else: meshing stores triangulations inside it.
absl::StatusOr<MeshBuffers> MeshOwnedShape(const TopoDS_Shape& shape,
                                           const TessellationOptions& options) {
  absl::StatusOr<double> deflection = ChooseDeflection(shape, options);
  if (!deflection.ok()) return deflection.status();

  IMeshTools_Parameters parameters;
  parameters.Deflection = *deflection;
  parameters.DeflectionInterior = *deflection;
  parameters.Angle = options.angular_deflection_rad;
  parameters.AngleInterior = options.angular_deflection_rad;
  parameters.Relative = Standard_False;
  parameters.InParallel = options.parallel ? Standard_True : Standard_False;
  BRepMesh_IncrementalMesh mesher(shape, parameters);

  TopTools_IndexedMapOfShape faces;
  TopExp::MapShapes(shape, TopAbs_FACE, faces);

  MeshBuffers out;
  out.deflection_mm = *deflection;
  out.faces_total = faces.Extent();
  if (out.faces_total == 0) {
    return absl::InvalidArgumentError("mesh: the shape has no faces");
  }

  // First pass: sizes, so that the caps are checked before any allocation.
  std::size_t node_count = 0;
  std::size_t triangle_count = 0;
  for (int i = 1; i <= faces.Extent(); ++i) {
    TopLoc_Location location;
    const Handle(Poly_Triangulation)& mesh =
        BRep_Tool::Triangulation(TopoDS::Face(faces(i)), location);
    if (mesh.IsNull() || mesh->NbTriangles() <= 0) continue;
    node_count += static_cast<std::size_t>(mesh->NbNodes());
    triangle_count += static_cast<std::size_t>(mesh->NbTriangles());
  }
  if (triangle_count > options.max_triangles) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "mesh: ", triangle_count, " triangles exceed max_triangles (", options.max_triangles, ")"));
  }
  if (node_count > std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mesh: ", node_count, " vertices do not fit 32-bit indices"));
  }
  out.xyz.reserve(3 * node_count);
  out.triangles.reserve(3 * triangle_count);
  out.face_ids.reserve(triangle_count);

  for (int i = 1; i <= faces.Extent(); ++i) {
    const TopoDS_Face& face = TopoDS::Face(faces(i));
    TopLoc_Location location;
    const Handle(Poly_Triangulation)& mesh = BRep_Tool::Triangulation(face, location);
    if (mesh.IsNull() || mesh->NbTriangles() <= 0) continue;

    const int nodes = mesh->NbNodes();
    const auto first_vertex = static_cast<uint32_t>(out.xyz.size() / 3);
    const bool moved = !location.IsIdentity();
    const gp_Trsf& trsf = location.Transformation();
    for (int n = 1; n <= nodes; ++n) {
      gp_Pnt p = mesh->Node(n);
      if (moved) p.Transform(trsf);
      if (!std::isfinite(p.X()) || !std::isfinite(p.Y()) || !std::isfinite(p.Z())) {
        return absl::InvalidArgumentError(
            absl::StrCat("mesh: face ", i - 1, " has a non-finite vertex"));
      }
      out.xyz.insert(out.xyz.end(), {p.X(), p.Y(), p.Z()});
    }

    const bool reversed = face.Orientation() == TopAbs_REVERSED;
    out.faces_reversed += reversed ? 1 : 0;
    for (int t = 1; t <= mesh->NbTriangles(); ++t) {
      std::array<int, 3> v{};
      mesh->Triangle(t).Get(v[0], v[1], v[2]);
      for (int k : v) {
        if (k < 1 || k > nodes) {
          return absl::InvalidArgumentError(
              absl::StrCat("mesh: face ", i - 1, " has a triangle node index out of range: ", k));
        }
      }
      if (reversed) std::swap(v[1], v[2]);
      for (int k : v) out.triangles.push_back(first_vertex + static_cast<uint32_t>(k - 1));
      out.face_ids.push_back(static_cast<uint32_t>(i - 1));
    }
    ++out.faces_meshed;
  }
  if (out.faces_meshed == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh: none of the ", out.faces_total, " faces produced triangles (BRepMesh status flags ",
        mesher.GetStatusFlags(), ")"));
  }
  return out;
}

void WarmUpOcct() {
  std::lock_guard<std::mutex> lock(OcctMutex());
  try {
    ScopedSilentMessenger silent;
    // Constructing a reader registers its translator's protocol, parameters and messages.
    STEPControl_Reader step;
    IGESControl_Reader iges;
    STEPCAFControl_Reader step_caf;
    (void)XCAFApp_Application::GetApplication();
  } catch (...) {
    // Nothing read yet: the first real read meets the same failure and reports it.
  }
}

absl::Status StatusFromCurrentException(Phase phase) {
  try {
    throw;
  } catch (const Standard_Failure& e) {
    const char* what = e.GetMessageString();
    const std::string message =
        absl::StrCat(PhaseName(phase), ": OCCT raised ", e.DynamicType()->Name(),
                     (what != nullptr && *what != '\0') ? absl::StrCat(": ", what) : "");
    if (e.IsKind(STANDARD_TYPE(Standard_OutOfMemory))) {
      return absl::ResourceExhaustedError(message);
    }
    return absl::InvalidArgumentError(message);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(PhaseName(phase), ": out of memory"));
  } catch (const std::exception& e) {
    const std::string message =
        absl::StrCat(PhaseName(phase), ": unexpected exception: ", e.what());
    return IsParsingTheFile(phase) ? absl::InvalidArgumentError(message)
                                   : absl::InternalError(message);
  } catch (...) {
    const std::string message =
        absl::StrCat(PhaseName(phase), ": unexpected non-standard exception");
    return IsParsingTheFile(phase) ? absl::InvalidArgumentError(message)
                                   : absl::InternalError(message);
  }
}

}  // namespace clash::cad::internal
