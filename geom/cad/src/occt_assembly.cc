// Reading a STEP or IGES file as an assembly through OCCT 7.6's XCAF document (XDE).
//
// The reader fills a TDocStd_Document; XCAFDoc_ShapeTool's free shapes are the roots. An assembly
// label's components (GetComponents) each refer to a shape label (GetReferredShape) and carry a
// location (GetLocation); placements are composed from the root down. Every referred simple-shape
// label is a part definition: it is tessellated once, in its own frame (its shape with the location
// stripped, which is folded into the instance's placement), and shared by all its instances.
//
// OCCT pitfalls (mutex, unit guard, silent messenger, mesh extraction, exception mapping) are
// handled by occt_common.cc. Extra ones here:
// - The unit guard ("xstep.cascade.unit" = MM) spans reading and Transfer(doc): OCCT 7.6 scales
//   shapes and the NAUO placements together at transfer time, so translations come out in mm.
// - The XCAF document registers itself with the process-wide XCAFApp_Application; it is closed on
//   every path, or each call would leak a document.
// - A triangulation left in a face by meshing another part (shared sub-shape) would be reused at
//   that part's deflection, so each part's triangulations are cleared before meshing it.
// - STEPCAFControl_Reader::Transfer reads every file a STEP file refers to (external references)
//   from the host's file system: such files are refused before transfer
//   (internal::RefuseExternalReferences).
// - OCCT decodes a file's colours inside Transfer, and a colour it cannot take fails the whole
//   transfer: in OCCT 7.6 a STEP COLOUR_RGB with a negative component raises Standard_OutOfRange
//   ("Color out"; a component above 1 is scaled down instead), and one too large for a double
//   comes out as NaN. Colours are not worth the geometry: such a transfer is done again, with a
//   fresh reader and document, without colours, and a colour that is not finite in [0, 1] is left
//   out; both are said in the import's warnings (ImportTransferred, ColorOf).
// - IGES has no product structure that IGESCAFControl_Reader turns into an assembly: it makes
//   every root entity a free shape, and IGES writers commonly store each trimmed surface as its own
//   root. Parts made root by root would be single faces: sewn alone they never close into shells
//   (so no containment test), adjacent faces of one body would touch along every edge as separate
//   parts, and sewing a lone face can break it. So an IGES file is one part: the faces of all roots
//   sewn together, exactly the shape the whole-file path (ReadAndTessellate) meshes, placed at
//   the identity (ImportIgesAsOnePart).
#include <BRepTools.hxx>
#include <BRep_Builder.hxx>
#include <IFSelect_ReturnStatus.hxx>
#include <IGESCAFControl_Reader.hxx>
#include <Quantity_Color.hxx>
#include <STEPCAFControl_Reader.hxx>
#include <STEPControl_Reader.hxx>
#include <Standard_Failure.hxx>
#include <Standard_OutOfRange.hxx>
#include <TCollection_AsciiString.hxx>
#include <TCollection_ExtendedString.hxx>
#include <TDF_Label.hxx>
#include <TDF_LabelSequence.hxx>
#include <TDF_Tool.hxx>
#include <TDataStd_Name.hxx>
#include <TDocStd_Document.hxx>
#include <TopAbs.hxx>
#include <TopExp_Explorer.hxx>
#include <TopLoc_Location.hxx>
#include <TopoDS_Compound.hxx>
#include <TopoDS_Shape.hxx>
#include <XCAFApp_Application.hxx>
#include <XCAFDoc_ColorTool.hxx>
#include <XCAFDoc_ColorType.hxx>
#include <XCAFDoc_DocumentTool.hxx>
#include <XCAFDoc_ShapeTool.hxx>
#include <XSControl_WorkSession.hxx>
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <gp_Trsf.hxx>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "clash/cad/assembly.h"
#include "clash/cad/tessellate.h"
#include "occt_common.h"
#include "utf8.h"
#include "worker_format.h"

namespace clash::cad {
namespace {

using internal::Phase;

// Deepest assembly nesting accepted; deeper (or cyclic) references mean a broken file.
constexpr int kMaxDepth = 64;
// Instance counts saturate here (far above kMaxAssemblyInstances; two of them cannot overflow).
constexpr uint64_t kCountSaturation = uint64_t{1} << 62;

using Color = std::optional<std::array<float, 3>>;

// Creates an XCAF document and closes it on destruction.
class ScopedXcafDocument {
 public:
  ScopedXcafDocument() : app_(XCAFApp_Application::GetApplication()) {
    app_->NewDocument("MDTV-XCAF", doc_);
  }
  ~ScopedXcafDocument() {
    try {
      if (!doc_.IsNull() && doc_->IsOpened()) app_->Close(doc_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }
  ScopedXcafDocument(const ScopedXcafDocument&) = delete;
  ScopedXcafDocument& operator=(const ScopedXcafDocument&) = delete;

  const Handle(TDocStd_Document) & doc() const { return doc_; }

 private:
  Handle(XCAFApp_Application) app_;
  Handle(TDocStd_Document) doc_;
};

// The transfer report of a reader.
struct TransferReport {
  int roots_total = 0;
  int roots_transferred = 0;
  internal::LoadChecks checks;
};

// Reads `path` with an XCAF reader into `doc`. `base` is the reader's plain STEP/IGES reader.
// Colours are read when `colors` is true.
template <typename CafReader, typename BaseReader>
absl::StatusOr<TransferReport> TransferInto(CafReader& reader, BaseReader& base,
                                            const std::string& path, const char* format,
                                            bool colors, const Handle(TDocStd_Document) & doc,
                                            Phase* phase) {
  reader.SetNameMode(Standard_True);
  reader.SetColorMode(colors ? Standard_True : Standard_False);
  reader.SetLayerMode(Standard_False);
  // Constructing the reader registered the translator's statics, so the guard can set them now.
  internal::ScopedInterfaceStatic unit("xstep.cascade.unit", "MM");
  if (!unit.active()) {
    return absl::InternalError("read: cannot set OCCT parameter xstep.cascade.unit to MM");
  }
  *phase = Phase::kRead;
  const IFSelect_ReturnStatus read_status = reader.ReadFile(path.c_str());
  if (read_status != IFSelect_RetDone) {
    return absl::InvalidArgumentError(absl::StrCat("read: OCCT cannot parse the ", format,
                                                   " file (IFSelect status ",
                                                   static_cast<int>(read_status), ")"));
  }
  if constexpr (std::is_same_v<BaseReader, STEPControl_Reader>) {
    if (absl::Status refused = internal::RefuseExternalReferences(base.WS()); !refused.ok()) {
      return refused;
    }
  }
  TransferReport report;
  report.checks = internal::CountLoadChecks(base.WS());
  *phase = Phase::kTransfer;
  report.roots_total = base.NbRootsForTransfer();
  if (report.roots_total <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer: the ", format, " file has no transferable roots"));
  }
  Handle(TDocStd_Document) target = doc;  // Transfer takes a non-const handle
  if (!reader.Transfer(target)) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer: OCCT could not transfer the ", format, " file into a document"));
  }
  report.roots_transferred = base.NbShapes();
  return report;
}

// The label's TDataStd_Name as well-formed UTF-8, or "" when it has none.
std::string NameOf(const TDF_Label& label) {
  Handle(TDataStd_Name) name;
  if (label.IsNull() || !label.FindAttribute(TDataStd_Name::GetID(), name)) return "";
  // With no replacement character, OCCT converts the extended (UTF-16) string to UTF-8. OCCT 7.6
  // drops lone surrogates and reads raw non-UTF-8 bytes in a file as Latin-1, but nothing in its
  // contract promises well-formed UTF-8, which protobuf requires of the names downstream: repair.
  return internal::ToValidUtf8(TCollection_AsciiString(name->Get()).ToCString());
}

// `text` cut to what the worker's result can hold (kMaxWorkerStringBytes), on a character
// boundary, so that ReadAssembly and the isolated import give the same names.
std::string StoredName(const std::string& text) {
  return std::string(internal::Utf8Prefix(text, internal::kMaxWorkerStringBytes));
}

// The name of an occurrence (component) label, or "" when it has none of its own. OCCT's STEP
// writer names an unnamed component's NEXT_ASSEMBLY_USAGE_OCCURRENCE after the referred label's
// entry ("=>[0:1:1:2]"), and its reader gives that back as the component's name: not a name.
std::string OccurrenceNameOf(const TDF_Label& label) {
  std::string name = NameOf(label);
  if (name.rfind("=>[", 0) == 0 && name.back() == ']') name.clear();
  return name;
}

// The label's surface or generic colour as sRGB, if it has one. A colour that is not finite in
// [0, 1] (OCCT makes NaN of a component too large for a double) is left out, and the label's
// entry added to `*dropped`: the worker's result, and the wire, carry only colours in that range.
Color ColorOf(const Handle(XCAFDoc_ColorTool) & colors, const TDF_Label& label,
              std::set<std::string>* dropped) {
  if (colors.IsNull() || label.IsNull()) return std::nullopt;
  Quantity_Color color;
  if (!colors->GetColor(label, XCAFDoc_ColorSurf, color) &&
      !colors->GetColor(label, XCAFDoc_ColorGen, color)) {
    return std::nullopt;
  }
  double r = 0, g = 0, b = 0;
  color.Values(r, g, b, Quantity_TOC_sRGB);
  const std::array<float, 3> rgb{static_cast<float>(r), static_cast<float>(g),
                                 static_cast<float>(b)};
  for (float c : rgb) {
    if (!(c >= 0 && c <= 1)) {  // NaN too
      TCollection_AsciiString entry;
      TDF_Tool::Entry(label, entry);
      dropped->insert(entry.ToCString());
      return std::nullopt;
    }
  }
  return rgb;
}

// The warning for the labels whose colours ColorOf left out (at least one).
std::string DroppedColorsWarning(const std::set<std::string>& dropped) {
  return absl::StrCat(dropped.size(), dropped.size() == 1 ? " colour" : " colours",
                      " of the file left out: not finite sRGB values in [0, 1]");
}

Placement ToPlacement(const gp_Trsf& trsf) {
  Placement placement;
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 3; ++col) {
      placement.rotation[static_cast<std::size_t>(3 * row + col)] = trsf.Value(row + 1, col + 1);
    }
    placement.translation_mm[static_cast<std::size_t>(row)] = trsf.Value(row + 1, 4);
  }
  return placement;
}

// One node of the tree about to be visited: an occurrence (component or free-shape root label) and
// the shape label it refers to.
struct Node {
  TDF_Label occurrence;
  TDF_Label definition;
  TopLoc_Location location;  // occurrence location composed with the definition shape's own
};

// Longest path segment: a name cut to kMaxPathSegmentBytes, then ":" and an int suffix.
constexpr std::size_t kMaxSegmentWithSuffixBytes = kMaxPathSegmentBytes + 1 + 10;
// A path has at most kMaxDepth + 1 segments, so no path is cut when stored.
static_assert((kMaxDepth + 1) * (kMaxSegmentWithSuffixBytes + 1) <=
              internal::kMaxWorkerStringBytes);

// The path segments of siblings named `names`, distinct from each other: each name with '/' made
// '_' and cut to kMaxPathSegmentBytes on a character boundary; a segment shared by several
// siblings gets ":<n>" on each (1-based, in order), skipping any n that gives a segment another
// sibling already has (siblings "nut", "nut", "nut:1" give "nut:2", "nut:3", "nut:1").
std::vector<std::string> UniqueSegments(const std::vector<std::string>& names) {
  std::vector<std::string> segments;
  segments.reserve(names.size());
  std::map<std::string, int> repeats;
  for (const std::string& name : names) {
    std::string segment(internal::Utf8Prefix(name, kMaxPathSegmentBytes));
    std::replace(segment.begin(), segment.end(), '/', '_');
    ++repeats[segment];
    segments.push_back(std::move(segment));
  }
  std::set<std::string> used;
  for (const std::string& segment : segments) {
    if (repeats[segment] == 1) used.insert(segment);
  }
  std::map<std::string, int> last_suffix;
  for (std::string& segment : segments) {
    if (repeats[segment] == 1) continue;
    int& suffix = last_suffix[segment];
    std::string numbered;
    do {
      numbered = absl::StrCat(segment, ":", ++suffix);
    } while (!used.insert(numbered).second);
    segment = std::move(numbered);
  }
  return segments;
}

// Walks the XCAF tree and fills an ImportedAssembly.
class Walker {
 public:
  Walker(Handle(XCAFDoc_ShapeTool) shapes, Handle(XCAFDoc_ColorTool) colors,
         const TessellationOptions& options, ImportedAssembly* out)
      : shapes_(std::move(shapes)),
        colors_(std::move(colors)),
        options_(options),
        triangles_left_(options.max_triangles),
        out_(out) {}

  // The number of instances the occurrences `nodes` expand to, through every path of shared
  // sub-assemblies: as many as the walk would give, found without meshing. Each label is counted
  // once (memoised), so this costs one visit per label and component even when the expansion is
  // huge; the count saturates at kCountSaturation.
  absl::StatusOr<uint64_t> CountInstances(const std::vector<Node>& nodes) {
    uint64_t total = 0;
    for (const Node& node : nodes) {
      absl::StatusOr<uint64_t> count = InstancesOf(node.definition, 0);
      if (!count.ok()) return count.status();
      total = std::min(total + *count, kCountSaturation);
    }
    return total;
  }

  // Visits the children `nodes` of the node at `parent_path`, placed by `parent`.
  absl::Status VisitSiblings(const std::vector<Node>& nodes, const gp_Trsf& parent,
                             const std::string& parent_path, const Color& inherited, int depth) {
    if (depth > kMaxDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat("assemble: assembly nesting deeper than ", kMaxDepth, " at ", parent_path));
    }
    // Names first, so that sibling path segments can be made unique.
    std::vector<std::string> names;
    std::vector<int> parts;
    names.reserve(nodes.size());
    parts.reserve(nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const Node& node = nodes[i];
      int part = -1;
      if (!shapes_->IsAssembly(node.definition)) {
        absl::StatusOr<int> found = PartOf(node.definition);
        if (!found.ok()) return found.status();
        part = *found;
      }
      parts.push_back(part);
      std::string name = OccurrenceNameOf(node.occurrence);
      if (name.empty()) name = NameOf(node.definition);
      if (name.empty()) {
        name = part >= 0 ? out_->parts[static_cast<std::size_t>(part)].name
                         : absl::StrCat("assembly", i + 1);
      }
      names.push_back(std::move(name));
    }
    const std::vector<std::string> segments = UniqueSegments(names);

    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const Node& node = nodes[i];
      if (!shapes_->IsAssembly(node.definition) && parts[i] < 0) continue;  // no geometry
      const std::string& segment = segments[i];
      const std::string path =
          parent_path.empty() ? segment : absl::StrCat(parent_path, "/", segment);
      gp_Trsf world = parent;
      world.Multiply(node.location.Transformation());
      Color color = ColorOf(colors_, node.occurrence, &colors_dropped_);
      if (!color) color = ColorOf(colors_, node.definition, &colors_dropped_);
      if (!color) color = inherited;

      if (parts[i] >= 0) {
        // CountInstances refuses such files before the walk; this keeps the walk bounded anyway.
        if (out_->instances.size() >= kMaxAssemblyInstances) {
          return absl::ResourceExhaustedError(
              absl::StrCat("assemble: more than ", kMaxAssemblyInstances,
                           " instances (the cap, kMaxAssemblyInstances) at ", path));
        }
        AssemblyInstance instance;
        instance.path = path;  // within kMaxWorkerStringBytes (see kMaxSegmentWithSuffixBytes)
        instance.name = StoredName(names[i]);
        instance.part = parts[i];
        instance.placement = ToPlacement(world);
        if (!internal::IsValidPlacement(instance.placement)) {
          return absl::InvalidArgumentError(
              absl::StrCat("assemble: the placement of ", path, " is not finite or out of range"));
        }
        instance.color_rgb = color;
        out_->instances.push_back(std::move(instance));
        continue;
      }
      // A sub-assembly with no part below it (CountInstances counted them all) is not walked, so
      // a huge expansion of empty sub-assemblies costs nothing either.
      absl::StatusOr<uint64_t> below = InstancesOf(node.definition, depth);
      if (!below.ok()) return below.status();
      if (*below == 0) continue;
      TDF_LabelSequence components;
      shapes_->GetComponents(node.definition, components, /*getsubchilds=*/Standard_False);
      std::vector<Node> children;
      for (int c = 1; c <= components.Length(); ++c) {
        Node child;
        child.occurrence = components.Value(c);
        if (!XCAFDoc_ShapeTool::GetReferredShape(child.occurrence, child.definition)) continue;
        child.location = XCAFDoc_ShapeTool::GetLocation(child.occurrence) *
                         XCAFDoc_ShapeTool::GetShape(child.definition).Location();
        children.push_back(child);
      }
      if (absl::Status status = VisitSiblings(children, world, path, color, depth + 1);
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }

  // The labels whose colours ColorOf left out so far.
  const std::set<std::string>& colors_dropped() const { return colors_dropped_; }

 private:
  // The instances the shape label `definition`, met at nesting `depth`, expands to: 1 for a shape
  // with faces, 0 for one without, the sum over its components for an assembly.
  absl::StatusOr<uint64_t> InstancesOf(const TDF_Label& definition, int depth) {
    // A cycle recurses here until it is too deep: labels still being counted are not memoised.
    if (depth > kMaxDepth) {
      return absl::InvalidArgumentError(absl::StrCat("assemble: assembly nesting deeper than ",
                                                     kMaxDepth, " under \"", NameOf(definition),
                                                     "\""));
    }
    TCollection_AsciiString entry;
    TDF_Tool::Entry(definition, entry);
    const std::string key = entry.ToCString();
    if (auto it = instances_of_label_.find(key); it != instances_of_label_.end()) {
      return it->second;
    }
    uint64_t count = 0;
    if (!shapes_->IsAssembly(definition)) {
      const TopoDS_Shape shape = XCAFDoc_ShapeTool::GetShape(definition);
      count = !shape.IsNull() && TopExp_Explorer(shape, TopAbs_FACE).More() ? 1 : 0;
    } else {
      TDF_LabelSequence components;
      shapes_->GetComponents(definition, components, /*getsubchilds=*/Standard_False);
      for (int c = 1; c <= components.Length(); ++c) {
        TDF_Label referred;
        if (!XCAFDoc_ShapeTool::GetReferredShape(components.Value(c), referred)) continue;
        absl::StatusOr<uint64_t> below = InstancesOf(referred, depth + 1);
        if (!below.ok()) return below.status();
        count = std::min(count + *below, kCountSaturation);
      }
    }
    instances_of_label_[key] = count;
    return count;
  }

  // The part index of a simple-shape label, meshing it on first use; -1 when it has no faces.
  absl::StatusOr<int> PartOf(const TDF_Label& label) {
    TCollection_AsciiString entry;
    TDF_Tool::Entry(label, entry);
    const std::string key = entry.ToCString();
    if (auto it = part_of_label_.find(key); it != part_of_label_.end()) return it->second;

    TopoDS_Shape shape = XCAFDoc_ShapeTool::GetShape(label).Located(TopLoc_Location());
    if (shape.IsNull() || !TopExp_Explorer(shape, TopAbs_FACE).More()) {
      ++out_->empty_parts;
      part_of_label_[key] = -1;
      return -1;
    }
    const int index = static_cast<int>(out_->parts.size());
    std::string name = NameOf(label);
    if (name.empty()) name = absl::StrCat("part", index);
    if (triangles_left_ == 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "mesh: max_triangles (", options_.max_triangles, ") reached before part \"", name, "\""));
    }
    BRepTools::Clean(shape);
    TessellationOptions part_options = options_;
    part_options.max_triangles = triangles_left_;
    absl::StatusOr<MeshBuffers> mesh = internal::MeshOwnedShape(shape, part_options);
    if (!mesh.ok()) {
      return absl::Status(mesh.status().code(),
                          absl::StrCat(mesh.status().message(), " (part \"", name, "\")"));
    }
    triangles_left_ -= mesh->triangles.size() / 3;
    out_->parts.push_back(AssemblyPart{StoredName(name), *std::move(mesh)});
    part_of_label_[key] = index;
    return index;
  }

  Handle(XCAFDoc_ShapeTool) shapes_;
  Handle(XCAFDoc_ColorTool) colors_;
  TessellationOptions options_;
  std::size_t triangles_left_;
  std::set<std::string> colors_dropped_;  // label entries, see ColorOf
  ImportedAssembly* out_;
  std::map<std::string, int> part_of_label_;  // label entry -> part index, -1 for no geometry
  std::map<std::string, uint64_t> instances_of_label_;  // label entry -> InstancesOf
};

// An IGES file's free shapes as one part with one instance at the identity (see the file comment):
// the faces of all roots, in their places, sewn together as MeshLooseFaces does. The part takes
// the roots' name and colour when they all agree (else "part0" and none); roots without faces
// count as empty parts.
absl::Status ImportIgesAsOnePart(const Handle(XCAFDoc_ColorTool) & colors,
                                 const TDF_LabelSequence& free_shapes,
                                 const TessellationOptions& options, ImportedAssembly* out) {
  BRep_Builder builder;
  TopoDS_Compound all;
  builder.MakeCompound(all);
  std::optional<std::string> name;
  bool names_agree = true;
  std::optional<Color> color;
  std::set<std::string> colors_dropped;
  for (int i = 1; i <= free_shapes.Length(); ++i) {
    const TDF_Label& label = free_shapes.Value(i);
    const TopoDS_Shape shape = XCAFDoc_ShapeTool::GetShape(label);  // with its location
    if (shape.IsNull() || !TopExp_Explorer(shape, TopAbs_FACE).More()) {
      ++out->empty_parts;
      continue;
    }
    builder.Add(all, shape);
    const std::string root_name = NameOf(label);
    if (!name) name = root_name;
    names_agree = names_agree && *name == root_name;
    const Color root_color = ColorOf(colors, label, &colors_dropped);
    if (!color) color = root_color;
    if (*color != root_color) color = Color();  // they differ: none
  }
  if (!name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assemble: no part with geometry among the file's ", free_shapes.Length(), " root shapes"));
  }
  const std::string part_name = names_agree && !name->empty() ? *name : "part0";
  absl::StatusOr<MeshBuffers> mesh = internal::MeshLooseFaces(all, options);
  if (!mesh.ok()) {
    return absl::Status(mesh.status().code(),
                        absl::StrCat(mesh.status().message(), " (part \"", part_name, "\")"));
  }
  out->parts.push_back(AssemblyPart{StoredName(part_name), *std::move(mesh)});
  AssemblyInstance instance;
  instance.path = UniqueSegments({part_name}).front();
  instance.name = StoredName(part_name);
  instance.part = 0;
  instance.placement = ToPlacement(gp_Trsf());
  instance.color_rgb = *color;
  out->instances.push_back(std::move(instance));
  if (!colors_dropped.empty()) out->warnings.push_back(DroppedColorsWarning(colors_dropped));
  return absl::OkStatus();
}

// Reads and transfers the file into `*document`, a fresh one (with a fresh reader), colours read
// or not.
absl::StatusOr<TransferReport> TransferIntoNewDocument(const std::string& path, CadFormat format,
                                                       bool colors,
                                                       std::optional<ScopedXcafDocument>* document,
                                                       Phase* phase) {
  *phase = Phase::kRead;
  document->emplace();
  if ((*document)->doc().IsNull()) {
    return absl::InternalError("read: OCCT could not create an XCAF document");
  }
  if (format == CadFormat::kStep) {
    STEPCAFControl_Reader reader;
    return TransferInto(reader, reader.ChangeReader(), path, "STEP", colors, (*document)->doc(),
                        phase);
  }
  IGESCAFControl_Reader reader;
  return TransferInto(reader, reader, path, "IGES", colors, (*document)->doc(), phase);
}

// TransferIntoNewDocument with colours; when OCCT raises its colour failure during that transfer
// (Standard_OutOfRange "Color out", see the file comment), once more without colours, saying so
// in `*warnings` when that one succeeds. Other failures are not retried: reading the file again
// would double the time of every file that fails (and could pass the import's time limit).
absl::StatusOr<TransferReport> ImportTransferred(const std::string& path, CadFormat format,
                                                 std::optional<ScopedXcafDocument>* document,
                                                 std::vector<std::string>* warnings, Phase* phase) {
  absl::Status with_colors;
  try {
    return TransferIntoNewDocument(path, format, /*colors=*/true, document, phase);
  } catch (const Standard_Failure& e) {
    const char* what = e.GetMessageString();
    if (*phase != Phase::kTransfer || !e.IsKind(STANDARD_TYPE(Standard_OutOfRange)) ||
        what == nullptr || std::string_view(what).find("Color") == std::string_view::npos) {
      throw;
    }
    with_colors = internal::StatusFromCurrentException(*phase);
  }
  absl::StatusOr<TransferReport> report =
      TransferIntoNewDocument(path, format, /*colors=*/false, document, phase);
  if (report.ok()) {
    warnings->push_back(
        absl::StrCat("colours dropped: the file's transfer failed with its colours (",
                     internal::ToValidUtf8(std::string(with_colors.message())),
                     ") and succeeded without them, so no instance has one"));
  }
  return report;
}

// Read, transfer, walk and mesh; `phase` tracks progress for the exception handler.
absl::StatusOr<ImportedAssembly> ImportLocked(const std::string& path, CadFormat format,
                                              const TessellationOptions& options, Phase* phase) {
  std::optional<ScopedXcafDocument> document;
  ImportedAssembly out;
  absl::StatusOr<TransferReport> report =
      ImportTransferred(path, format, &document, &out.warnings, phase);
  if (!report.ok()) return report.status();

  *phase = Phase::kAssemble;
  out.roots_total = report->roots_total;
  out.roots_transferred = report->roots_transferred;
  out.load_failures = report->checks.failures;
  out.load_warnings = report->checks.warnings;

  const Handle(TDocStd_Document)& doc = document->doc();
  const Handle(XCAFDoc_ShapeTool) shapes = XCAFDoc_DocumentTool::ShapeTool(doc->Main());
  const Handle(XCAFDoc_ColorTool) colors = XCAFDoc_DocumentTool::ColorTool(doc->Main());
  TDF_LabelSequence free_shapes;
  shapes->GetFreeShapes(free_shapes);
  if (free_shapes.IsEmpty()) {
    return absl::InvalidArgumentError("transfer: the file gave no shapes");
  }
  std::vector<Node> roots;
  for (int i = 1; i <= free_shapes.Length(); ++i) {
    Node root;
    root.occurrence = free_shapes.Value(i);
    root.definition = root.occurrence;
    root.location = XCAFDoc_ShapeTool::GetShape(root.definition).Location();
    roots.push_back(root);
  }
  if (format == CadFormat::kIges) {
    if (absl::Status status = ImportIgesAsOnePart(colors, free_shapes, options, &out);
        !status.ok()) {
      return status;
    }
    return out;
  }
  Walker walker(shapes, colors, options, &out);
  // Refuse an expansion past the cap before meshing anything or building any instance.
  absl::StatusOr<uint64_t> instances = walker.CountInstances(roots);
  if (!instances.ok()) return instances.status();
  if (*instances > kMaxAssemblyInstances) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "assemble: the assembly expands to ", *instances == kCountSaturation ? "at least " : "",
        *instances, " instances, more than the cap of ", kMaxAssemblyInstances,
        " (shared sub-assemblies are expanded along every path)"));
  }
  if (absl::Status status = walker.VisitSiblings(roots, gp_Trsf(), "", std::nullopt, 0);
      !status.ok()) {
    return status;
  }
  if (!walker.colors_dropped().empty()) {
    out.warnings.push_back(DroppedColorsWarning(walker.colors_dropped()));
  }
  if (out.parts.empty() || out.instances.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assemble: no part with geometry among the file's ", free_shapes.Length(), " root shapes"));
  }
  return out;
}

}  // namespace

absl::StatusOr<ImportedAssembly> ReadAssembly(const std::string& path,
                                              const TessellationOptions& options) {
  return internal::RunLockedImport<ImportedAssembly>(
      path, options,
      [&](CadFormat format, Phase* phase) { return ImportLocked(path, format, options, phase); });
}

}  // namespace clash::cad
