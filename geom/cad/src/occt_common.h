// Internal OCCT helpers shared by the CAD readers (occt_tessellate.cc, occt_assembly.cc). Not a
// public header: it includes OCCT types and is only used inside clash_cad.
//
// Pitfalls handled here (STYLE.md section 7, items 11 and 12):
// - One process-wide mutex (OcctMutex) serialises all OCCT work: Interface_Static and the reader
//   sessions are global state, and concurrent readers crash.
// - Interface_Static parameters change only through ScopedInterfaceStatic, which restores them.
// - Tessellation parameters are always explicit (absolute deflection, angle, Relative = false).
// - Each face's triangulation is moved by its TopLoc_Location, its 1-based node indices are made
//   0-based, and TopAbs_REVERSED faces get their winding flipped (MeshOwnedShape).
// - OCCT's messenger printers are detached while OCCT runs: a library never prints.
// - Standard_Failure and std::exception become absl::Status (StatusFromCurrentException).
#ifndef CLASH_CAD_SRC_OCCT_COMMON_H_
#define CLASH_CAD_SRC_OCCT_COMMON_H_

#include <Message_Messenger.hxx>
#include <Message_SequenceOfPrinters.hxx>
#include <Standard_Handle.hxx>
#include <TopoDS_Shape.hxx>
#include <XSControl_WorkSession.hxx>
#include <cstddef>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "clash/cad/tessellate.h"

namespace clash::cad::internal {

/// Which step of an import is running; error messages start with its name.
enum class Phase { kRead, kTransfer, kAssemble, kMesh };

/// The lower-case name of `phase` ("read", "transfer", "assemble", "mesh").
const char* PhaseName(Phase phase);

/// Serialises every use of OCCT in this process (one mutex shared by all readers).
std::mutex& OcctMutex();

/// Sets an Interface_Static parameter and restores its previous value on destruction. The static
/// must already exist (a reader's constructor registers its translator's statics).
class ScopedInterfaceStatic {
 public:
  /// Sets `name` to `value` when the parameter exists; check active() for success.
  ScopedInterfaceStatic(const char* name, const char* value);
  /// Restores the previous value when this object changed it.
  ~ScopedInterfaceStatic();
  ScopedInterfaceStatic(const ScopedInterfaceStatic&) = delete;
  ScopedInterfaceStatic& operator=(const ScopedInterfaceStatic&) = delete;

  /// True when the parameter now holds the requested value.
  bool active() const { return active_; }

 private:
  const char* name_;
  std::string previous_;
  bool active_ = false;
};

/// Detaches the printers of OCCT's default messenger and puts them back on destruction.
class ScopedSilentMessenger {
 public:
  /// Detaches the printers.
  ScopedSilentMessenger();
  /// Puts the printers back.
  ~ScopedSilentMessenger();
  ScopedSilentMessenger(const ScopedSilentMessenger&) = delete;
  ScopedSilentMessenger& operator=(const ScopedSilentMessenger&) = delete;

 private:
  Handle(Message_Messenger) messenger_;
  Message_SequenceOfPrinters saved_;
};

/// Bytes read from the head of a file for SniffFormat.
inline constexpr std::size_t kSniffBytes = 512;

/// Opens the file and returns its first kSniffBytes bytes; NOT_FOUND when it does not exist,
/// INVALID_ARGUMENT when it is not a readable regular file.
absl::StatusOr<std::string> ReadHead(const std::string& path);

/// Load checks of a parsed file: entities with failures and entities with only warnings.
struct LoadChecks {
  /// Entities the parser reported failures for.
  int failures = 0;
  /// Entities the parser reported only warnings for.
  int warnings = 0;
};

/// Counts the entities flagged by the parser of `session`'s current model.
LoadChecks CountLoadChecks(const Handle(XSControl_WorkSession) & session);

/// Refuses a STEP model (read into `session`, not yet transferred) that refers to other files:
/// INVALID_ARGUMENT naming the first one. STEPCAFControl_Reader::Transfer reads every file such a
/// model names (DOCUMENT_FILE / APPLIED_EXTERNAL_IDENTIFICATION_ASSIGNMENT, or the documents of a
/// PRODUCT_DEFINITION_WITH_ASSOCIATED_DOCUMENTS): relative names against the input's folder,
/// absolute paths as given, anywhere on the host, and merges them into the result. Reading other
/// files than the one given is never wanted (the cache key covers only that file's bytes), and
/// OCCT has no switch to turn it off, so such files are refused. The check finds the references
/// with the same STEPConstruct_ExternRefs::LoadExternRefs that Transfer uses, so a file it passes
/// makes Transfer read no other file.
absl::Status RefuseExternalReferences(const Handle(XSControl_WorkSession) & session);

/// IGES often carries loose trimmed surfaces: sews the faces that are in no shell into shells and
/// turns closed shells into solids oriented outwards; solids and shells are kept as they are. A
/// shape without loose faces is returned unchanged.
TopoDS_Shape SewLooseFaces(const TopoDS_Shape& shape);

/// Meshes loose IGES faces: sews them (SewLooseFaces) and meshes the sewn shape, but when sewing
/// lost or broke a face (the sewn shape meshes fewer faces than `shape` has, or fails), meshes
/// `shape` as read too and keeps whichever meshes more faces (the sewn one on a tie; the sewn
/// one's error when both fail). Sewing a lone or damaged face can leave it with no triangles.
/// `shape` must be owned by the caller as for MeshOwnedShape.
absl::StatusOr<MeshBuffers> MeshLooseFaces(const TopoDS_Shape& shape,
                                           const TessellationOptions& options);

/// Meshes `shape` in place (deflection from `options` and the shape's own bounding box) and
/// copies every face's triangles into MeshBuffers (the report counters are left at 0). The shape
/// must not be shared with anyone else: meshing stores triangulations inside it.
absl::StatusOr<MeshBuffers> MeshOwnedShape(const TopoDS_Shape& shape,
                                           const TessellationOptions& options);

/// Maps the exception being handled to a Status whose message starts with the phase name:
/// RESOURCE_EXHAUSTED for Standard_OutOfMemory and std::bad_alloc, INVALID_ARGUMENT for any other
/// Standard_Failure, and for any other exception in the read and transfer phases (the file's
/// content caused it), INTERNAL for any other exception in the later phases. Call only inside a
/// catch block.
absl::Status StatusFromCurrentException(Phase phase);

/// The one way into OCCT for a file: validates the options, sniffs the format from the file's
/// head, then runs `locked(format, &phase)` under OcctMutex with OCCT's output silenced, turning
/// any exception into a Status named after the phase `locked` last set.
template <typename T, typename Locked>
absl::StatusOr<T> RunLockedImport(const std::string& path, const TessellationOptions& options,
                                  Locked&& locked) {
  if (absl::Status valid = ValidateTessellationOptions(options); !valid.ok()) return valid;
  absl::StatusOr<std::string> head = ReadHead(path);
  if (!head.ok()) return head.status();
  absl::StatusOr<CadFormat> format = SniffFormat(*head);
  if (!format.ok()) return format.status();

  std::lock_guard<std::mutex> lock(OcctMutex());
  Phase phase = Phase::kRead;
  try {
    ScopedSilentMessenger silent;
    return locked(*format, &phase);
  } catch (...) {
    return StatusFromCurrentException(phase);
  }
}

}  // namespace clash::cad::internal

#endif  // CLASH_CAD_SRC_OCCT_COMMON_H_
