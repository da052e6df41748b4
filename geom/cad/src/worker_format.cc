// Writer and parser of the worker result file; see worker_format.h for the layout.
#include "worker_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "clash/cad/durable_file.h"
#include "utf8.h"

namespace clash::cad::internal {
namespace {

constexpr uint32_t kKindPayload = 0;
constexpr uint32_t kKindError = 1;
// magic + version + kind
constexpr std::size_t kPreambleBytes = 8 + 4 + 4;
// 7 x i32 + f64 + 2 x u64
constexpr std::size_t kMeshHeaderBytes = 7 * 4 + 8 + 8 + 8;
constexpr std::size_t kBytesPerVertex = 3 * 8;
constexpr std::size_t kBytesPerTriangle = 3 * 4 + 4;
// 5 x i32 + 2 x u32
constexpr std::size_t kAssemblyHeaderBytes = 5 * 4 + 2 * 4;
// The warning count that ends an assembly.
constexpr std::size_t kWarningCountBytes = 4;
// An empty name, the mesh length and an empty mesh.
constexpr std::size_t kMinPartBytes = 4 + 8 + kMeshHeaderBytes;
// Everything but the two strings: part, rotation, translation, colour flag, colour.
constexpr std::size_t kInstanceFixedBytes = 4 + 9 * 8 + 3 * 8 + 1 + 3 * 4;
// Two empty strings and the fixed fields.
constexpr std::size_t kMinInstanceBytes = 4 + 4 + kInstanceFixedBytes;

// The magic of a file holding a T.
template <typename T>
constexpr std::string_view kMagic = kWorkerOutputMagic;
template <>
constexpr std::string_view kMagic<ImportedAssembly> = kAssemblyOutputMagic;
// Flush the file writer's buffer when it reaches this size.
constexpr std::size_t kChunkBytes = 1 << 20;

// Appends little-endian values to a buffer; flushes the buffer to `file` when one is given.
class ByteWriter {
 public:
  explicit ByteWriter(std::FILE* file) : file_(file) {}

  void U8(uint8_t value) { Le(value, 1); }
  void U32(uint32_t value) { Le(value, 4); }
  void I32(int32_t value) { Le(static_cast<uint32_t>(value), 4); }
  void U64(uint64_t value) { Le(value, 8); }
  void F32(float value) { Le(std::bit_cast<uint32_t>(value), 4); }
  void F64(double value) { Le(std::bit_cast<uint64_t>(value), 8); }
  void Bytes(std::string_view bytes) {
    buffer_.append(bytes);
    MaybeFlush();
  }

  // Writes out the buffer (file mode); false on a write error.
  bool Flush() {
    if (file_ == nullptr || buffer_.empty()) return ok_;
    if (ok_ && std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) ok_ = false;
    buffer_.clear();
    return ok_;
  }

  std::string& buffer() { return buffer_; }

 private:
  void Le(uint64_t value, int bytes) {
    char out[8];
    for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
    buffer_.append(out, static_cast<std::size_t>(bytes));
    MaybeFlush();
  }
  void MaybeFlush() {
    if (file_ != nullptr && buffer_.size() >= kChunkBytes) Flush();
  }

  std::FILE* file_;
  std::string buffer_;
  bool ok_ = true;
};

// Bytes of a <mesh> record.
std::size_t MeshBytes(const MeshBuffers& mesh) {
  return kMeshHeaderBytes + (mesh.xyz.size() / 3) * kBytesPerVertex +
         (mesh.triangles.size() / 3) * kBytesPerTriangle;
}

// A name as stored: cut to kMaxWorkerStringBytes on a character boundary.
std::string_view Stored(const std::string& s) { return Utf8Prefix(s, kMaxWorkerStringBytes); }

std::size_t StringBytes(const std::string& s) { return 4 + Stored(s).size(); }

// The warnings of `assembly` that are stored: the first kMaxWorkerWarnings.
std::size_t StoredWarnings(const ImportedAssembly& assembly) {
  return std::min(assembly.warnings.size(), kMaxWorkerWarnings);
}

void EncodeString(const std::string& s, ByteWriter& out) {
  const std::string_view stored = Stored(s);
  out.U32(static_cast<uint32_t>(stored.size()));
  out.Bytes(stored);
}

void EncodePayload(const MeshBuffers& mesh, ByteWriter& out) {
  out.I32(mesh.faces_total);
  out.I32(mesh.faces_meshed);
  out.I32(mesh.faces_reversed);
  out.I32(mesh.roots_total);
  out.I32(mesh.roots_transferred);
  out.I32(mesh.load_failures);
  out.I32(mesh.load_warnings);
  out.F64(mesh.deflection_mm);
  out.U64(mesh.xyz.size() / 3);
  out.U64(mesh.triangles.size() / 3);
  for (double v : mesh.xyz) out.F64(v);
  for (uint32_t i : mesh.triangles) out.U32(i);
  for (uint32_t f : mesh.face_ids) out.U32(f);
}

void EncodePayload(const ImportedAssembly& assembly, ByteWriter& out) {
  out.I32(assembly.roots_total);
  out.I32(assembly.roots_transferred);
  out.I32(assembly.load_failures);
  out.I32(assembly.load_warnings);
  out.I32(assembly.empty_parts);
  out.U32(static_cast<uint32_t>(assembly.parts.size()));
  out.U32(static_cast<uint32_t>(assembly.instances.size()));
  for (const AssemblyPart& part : assembly.parts) {
    EncodeString(part.name, out);
    out.U64(MeshBytes(part.mesh));
    EncodePayload(part.mesh, out);
  }
  for (const AssemblyInstance& instance : assembly.instances) {
    EncodeString(instance.path, out);
    EncodeString(instance.name, out);
    out.U32(static_cast<uint32_t>(instance.part));
    for (double r : instance.placement.rotation) out.F64(r);
    for (double t : instance.placement.translation_mm) out.F64(t);
    out.U8(instance.color_rgb.has_value() ? 1 : 0);
    for (float c : instance.color_rgb.value_or(std::array<float, 3>{})) out.F32(c);
  }
  out.U32(static_cast<uint32_t>(StoredWarnings(assembly)));
  for (std::size_t i = 0; i < StoredWarnings(assembly); ++i) {
    EncodeString(assembly.warnings[i], out);
  }
}

template <typename T>
void Encode(const absl::StatusOr<T>& result, ByteWriter& out) {
  out.Bytes(kMagic<T>);
  out.U32(kWorkerOutputVersion);
  if (!result.ok()) {
    // Messages quote names and OCCT's own text: repair them, then cut on a character boundary.
    const absl::string_view full = result.status().message();
    const std::string valid = ToValidUtf8(std::string_view(full.data(), full.size()));
    const std::string_view message = Utf8Prefix(valid, kMaxWorkerMessageBytes);
    out.U32(kKindError);
    out.U32(static_cast<uint32_t>(result.status().code()));
    out.U32(static_cast<uint32_t>(message.size()));
    out.Bytes(message);
    return;
  }
  out.U32(kKindPayload);
  EncodePayload(*result, out);
}

// Reads little-endian values from an untrusted buffer; every read is bounds-checked.
class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}

  std::size_t remaining() const { return bytes_.size() - pos_; }

  bool U8(uint8_t* value) {
    uint64_t v = 0;
    if (!Le(1, &v)) return false;
    *value = static_cast<uint8_t>(v);
    return true;
  }
  bool U32(uint32_t* value) {
    uint64_t v = 0;
    if (!Le(4, &v)) return false;
    *value = static_cast<uint32_t>(v);
    return true;
  }
  bool I32(int32_t* value) {
    uint32_t v = 0;
    if (!U32(&v)) return false;
    *value = static_cast<int32_t>(v);
    return true;
  }
  bool U64(uint64_t* value) { return Le(8, value); }
  bool F32(float* value) {
    uint32_t v = 0;
    if (!U32(&v)) return false;
    *value = std::bit_cast<float>(v);
    return true;
  }
  bool F64(double* value) {
    uint64_t v = 0;
    if (!Le(8, &v)) return false;
    *value = std::bit_cast<double>(v);
    return true;
  }
  bool Bytes(std::size_t n, std::string_view* out) {
    if (remaining() < n) return false;
    *out = bytes_.substr(pos_, n);
    pos_ += n;
    return true;
  }

 private:
  bool Le(int n, uint64_t* value) {
    if (remaining() < static_cast<std::size_t>(n)) return false;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) {
      v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i);
    }
    pos_ += static_cast<std::size_t>(n);
    *value = v;
    return true;
  }

  std::string_view bytes_;
  std::size_t pos_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::InternalError(absl::StrCat("malformed worker output: ", what));
}

// The worker's error status, or a malformed-output error: never OK.
absl::Status ParseError(ByteReader& in) {
  uint32_t code = 0;
  uint32_t length = 0;
  if (!in.U32(&code) || !in.U32(&length)) return Malformed("truncated error record");
  if (code > 16 || !IsWorkerErrorCode(static_cast<absl::StatusCode>(code))) {
    return Malformed(absl::StrCat("invalid status code ", code, " in error record"));
  }
  if (length > kMaxWorkerMessageBytes) {
    return Malformed(absl::StrCat("error message of ", length, " bytes"));
  }
  if (in.remaining() != length) return Malformed("error record size does not match the file");
  std::string_view message;
  if (!in.Bytes(length, &message)) return Malformed("truncated error message");
  if (!IsValidUtf8(message)) return Malformed("error message is not valid UTF-8");
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::string_view(message.data(), message.size()));
}

// A <mesh> record that fills all of `in`.
absl::StatusOr<MeshBuffers> ParseMesh(ByteReader& in) {
  MeshBuffers mesh;
  uint64_t vertex_count = 0;
  uint64_t triangle_count = 0;
  if (!in.I32(&mesh.faces_total) || !in.I32(&mesh.faces_meshed) || !in.I32(&mesh.faces_reversed) ||
      !in.I32(&mesh.roots_total) || !in.I32(&mesh.roots_transferred) ||
      !in.I32(&mesh.load_failures) || !in.I32(&mesh.load_warnings) ||
      !in.F64(&mesh.deflection_mm) || !in.U64(&vertex_count) || !in.U64(&triangle_count)) {
    return Malformed("truncated mesh header");
  }
  if (mesh.faces_total < 0 || mesh.faces_meshed < 0 || mesh.faces_meshed > mesh.faces_total ||
      mesh.faces_reversed < 0 || mesh.faces_reversed > mesh.faces_total) {
    return Malformed(absl::StrCat("inconsistent face counts (total ", mesh.faces_total, ", meshed ",
                                  mesh.faces_meshed, ", reversed ", mesh.faces_reversed, ")"));
  }
  if (mesh.roots_total < 0 || mesh.roots_transferred < 0 ||
      mesh.roots_transferred > mesh.roots_total || mesh.load_failures < 0 ||
      mesh.load_warnings < 0) {
    return Malformed("inconsistent root or load counts");
  }
  if (!std::isfinite(mesh.deflection_mm) || mesh.deflection_mm < 0) {
    return Malformed("deflection is not a finite value >= 0");
  }
  // Divide before multiplying so that a huge count cannot overflow the size check.
  const std::size_t left = in.remaining();
  if (vertex_count > left / kBytesPerVertex || triangle_count > left / kBytesPerTriangle ||
      vertex_count * kBytesPerVertex + triangle_count * kBytesPerTriangle != left) {
    return Malformed(absl::StrCat(vertex_count, " vertices and ", triangle_count,
                                  " triangles do not match the ", left, " bytes left"));
  }
  if (vertex_count > std::numeric_limits<uint32_t>::max()) {
    return Malformed("more vertices than 32-bit indices can address");
  }
  if (triangle_count > 0 && mesh.faces_meshed == 0) {
    return Malformed("triangles but no meshed face");
  }
  mesh.xyz.resize(3 * vertex_count);
  for (double& v : mesh.xyz) {
    if (!in.F64(&v)) return Malformed("truncated coordinates");
    if (!std::isfinite(v) || std::fabs(v) > kMaxAbsCoordinateMm) {
      return Malformed("coordinate not finite or out of range");
    }
  }
  mesh.triangles.resize(3 * triangle_count);
  for (uint32_t& i : mesh.triangles) {
    if (!in.U32(&i)) return Malformed("truncated triangles");
    if (i >= vertex_count) return Malformed(absl::StrCat("vertex index ", i, " out of range"));
  }
  mesh.face_ids.resize(triangle_count);
  for (uint32_t& f : mesh.face_ids) {
    if (!in.U32(&f)) return Malformed("truncated face ids");
    if (f >= static_cast<uint32_t>(mesh.faces_total)) {
      return Malformed(absl::StrCat("face id ", f, " out of range"));
    }
  }
  if (in.remaining() != 0) return Malformed("trailing bytes");
  return mesh;
}

// A <string>, named `what` in errors.
absl::Status ParseString(ByteReader& in, const char* what, std::string* out) {
  uint32_t length = 0;
  if (!in.U32(&length)) return Malformed(absl::StrCat("truncated ", what));
  if (length > kMaxWorkerStringBytes) {
    return Malformed(absl::StrCat(what, " of ", length, " bytes"));
  }
  std::string_view bytes;
  if (!in.Bytes(length, &bytes)) return Malformed(absl::StrCat("truncated ", what));
  if (!IsValidUtf8(bytes)) return Malformed(absl::StrCat(what, " is not valid UTF-8"));
  out->assign(bytes);
  return absl::OkStatus();
}

absl::StatusOr<AssemblyPart> ParsePart(ByteReader& in, uint32_t index) {
  AssemblyPart part;
  if (absl::Status s = ParseString(in, "part name", &part.name); !s.ok()) return s;
  uint64_t length = 0;
  std::string_view record;
  if (!in.U64(&length) || !in.Bytes(length, &record)) {
    return Malformed(absl::StrCat("truncated mesh of part ", index));
  }
  ByteReader mesh_in(record);
  absl::StatusOr<MeshBuffers> mesh = ParseMesh(mesh_in);
  if (!mesh.ok()) {
    return absl::Status(mesh.status().code(),
                        absl::StrCat(mesh.status().message(), " (part ", index, ")"));
  }
  part.mesh = *std::move(mesh);
  return part;
}

absl::StatusOr<AssemblyInstance> ParseInstance(ByteReader& in, uint32_t part_count) {
  AssemblyInstance instance;
  if (absl::Status s = ParseString(in, "instance path", &instance.path); !s.ok()) return s;
  if (absl::Status s = ParseString(in, "instance name", &instance.name); !s.ok()) return s;
  uint32_t part = 0;
  if (!in.U32(&part)) return Malformed("truncated instance");
  if (part >= part_count) {
    return Malformed(absl::StrCat("instance part index ", part, " out of range"));
  }
  instance.part = static_cast<int>(part);
  for (double& r : instance.placement.rotation) {
    if (!in.F64(&r)) return Malformed("truncated instance placement");
  }
  for (double& t : instance.placement.translation_mm) {
    if (!in.F64(&t)) return Malformed("truncated instance placement");
  }
  if (!IsValidPlacement(instance.placement)) {
    return Malformed("instance placement not finite or out of range");
  }
  uint8_t has_color = 0;
  std::array<float, 3> rgb{};
  if (!in.U8(&has_color) || !in.F32(&rgb[0]) || !in.F32(&rgb[1]) || !in.F32(&rgb[2])) {
    return Malformed("truncated instance colour");
  }
  if (has_color > 1) return Malformed(absl::StrCat("colour flag ", has_color));
  for (float c : rgb) {
    // Written as !(in range) so that NaN fails too.
    if (has_color == 1 ? !(c >= 0 && c <= 1) : c != 0) {
      return Malformed("instance colour out of range");
    }
  }
  if (has_color == 1) instance.color_rgb = rgb;
  return instance;
}

absl::StatusOr<ImportedAssembly> ParseAssembly(ByteReader& in) {
  ImportedAssembly assembly;
  uint32_t part_count = 0;
  uint32_t instance_count = 0;
  if (!in.I32(&assembly.roots_total) || !in.I32(&assembly.roots_transferred) ||
      !in.I32(&assembly.load_failures) || !in.I32(&assembly.load_warnings) ||
      !in.I32(&assembly.empty_parts) || !in.U32(&part_count) || !in.U32(&instance_count)) {
    return Malformed("truncated assembly header");
  }
  if (assembly.roots_total < 0 || assembly.roots_transferred < 0 ||
      assembly.roots_transferred > assembly.roots_total || assembly.load_failures < 0 ||
      assembly.load_warnings < 0 || assembly.empty_parts < 0) {
    return Malformed("inconsistent root, load or empty-part counts");
  }
  if (part_count == 0 || instance_count == 0) {
    return Malformed("an assembly without parts or instances");
  }
  // Check the counts against the smallest record sizes before reserving anything.
  const std::size_t left = in.remaining();
  if (part_count > left / kMinPartBytes || instance_count > left / kMinInstanceBytes ||
      part_count * kMinPartBytes + instance_count * kMinInstanceBytes + kWarningCountBytes > left) {
    return Malformed(absl::StrCat(part_count, " parts and ", instance_count,
                                  " instances do not fit the ", left, " bytes left"));
  }
  if (instance_count > kMaxAssemblyInstances) {
    return Malformed(absl::StrCat(instance_count, " instances exceed the cap of ",
                                  kMaxAssemblyInstances, " (kMaxAssemblyInstances)"));
  }
  assembly.parts.reserve(part_count);
  for (uint32_t i = 0; i < part_count; ++i) {
    absl::StatusOr<AssemblyPart> part = ParsePart(in, i);
    if (!part.ok()) return part.status();
    assembly.parts.push_back(*std::move(part));
  }
  assembly.instances.reserve(instance_count);
  for (uint32_t i = 0; i < instance_count; ++i) {
    absl::StatusOr<AssemblyInstance> instance = ParseInstance(in, part_count);
    if (!instance.ok()) return instance.status();
    assembly.instances.push_back(*std::move(instance));
  }
  uint32_t warning_count = 0;
  if (!in.U32(&warning_count)) return Malformed("truncated warning count");
  if (warning_count > kMaxWorkerWarnings) {
    return Malformed(absl::StrCat(warning_count, " warnings exceed the cap of ", kMaxWorkerWarnings,
                                  " (kMaxWorkerWarnings)"));
  }
  assembly.warnings.resize(warning_count);
  for (std::string& warning : assembly.warnings) {
    if (absl::Status s = ParseString(in, "warning", &warning); !s.ok()) return s;
  }
  if (in.remaining() != 0) return Malformed("trailing bytes");
  return assembly;
}

}  // namespace

bool IsWorkerErrorCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kInternal:
      return true;
    default:
      return false;
  }
}

bool IsValidPlacement(const Placement& placement) {
  for (double r : placement.rotation) {
    if (!std::isfinite(r) || std::fabs(r) > kMaxAbsRotationEntry) return false;
  }
  for (double t : placement.translation_mm) {
    if (!std::isfinite(t) || std::fabs(t) > kMaxAbsCoordinateMm) return false;
  }
  return true;
}

template <>
std::size_t EncodedSize(const MeshBuffers& mesh) {
  return kPreambleBytes + MeshBytes(mesh);
}

template <>
std::size_t EncodedSize(const ImportedAssembly& assembly) {
  std::size_t size = kPreambleBytes + kAssemblyHeaderBytes;
  for (const AssemblyPart& part : assembly.parts) {
    size += StringBytes(part.name) + 8 + MeshBytes(part.mesh);
  }
  for (const AssemblyInstance& instance : assembly.instances) {
    size += StringBytes(instance.path) + StringBytes(instance.name) + kInstanceFixedBytes;
  }
  size += kWarningCountBytes;
  for (std::size_t i = 0; i < StoredWarnings(assembly); ++i) {
    size += StringBytes(assembly.warnings[i]);
  }
  return size;
}

template <typename T>
std::string EncodeWorkerOutput(const absl::StatusOr<T>& result) {
  ByteWriter out(nullptr);
  Encode(result, out);
  return std::move(out.buffer());
}

template <typename T>
absl::Status WriteWorkerOutput(const std::string& path, const absl::StatusOr<T>& result) {
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file(std::fopen(path.c_str(), "wb"));
  if (file == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create worker output ", path, ": ", std::strerror(errno)));
  }
  ByteWriter out(file.get());
  Encode(result, out);
  bool ok = out.Flush();
  ok = std::fflush(file.get()) == 0 && ok;
  ok = std::fclose(file.release()) == 0 && ok;
  if (!ok) return absl::InternalError(absl::StrCat("cannot write worker output ", path));
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<T> ParseWorkerOutput(std::string_view bytes, std::size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    return Malformed(absl::StrCat(bytes.size(), " bytes exceed the limit of ", max_bytes));
  }
  ByteReader in(bytes);
  std::string_view magic;
  if (!in.Bytes(kMagic<T>.size(), &magic) || magic != kMagic<T>) return Malformed("bad magic");
  uint32_t version = 0;
  uint32_t kind = 0;
  if (!in.U32(&version) || !in.U32(&kind)) return Malformed("truncated preamble");
  if (version != kWorkerOutputVersion) return Malformed(absl::StrCat("version ", version));
  if (kind == kKindError) return ParseError(in);
  if (kind != kKindPayload) return Malformed(absl::StrCat("unknown record kind ", kind));
  if constexpr (std::is_same_v<T, MeshBuffers>) {
    return ParseMesh(in);
  } else {
    return ParseAssembly(in);
  }
}

template std::string EncodeWorkerOutput(const absl::StatusOr<MeshBuffers>&);
template std::string EncodeWorkerOutput(const absl::StatusOr<ImportedAssembly>&);
template absl::Status WriteWorkerOutput(const std::string&, const absl::StatusOr<MeshBuffers>&);
template absl::Status WriteWorkerOutput(const std::string&,
                                        const absl::StatusOr<ImportedAssembly>&);
template absl::StatusOr<MeshBuffers> ParseWorkerOutput(std::string_view, std::size_t);
template absl::StatusOr<ImportedAssembly> ParseWorkerOutput(std::string_view, std::size_t);

absl::StatusOr<std::string> ReadEncodedFile(const std::string& path, std::size_t max_bytes) {
  absl::StatusOr<std::string> bytes = ReadFileCapped(path, max_bytes);
  if (!bytes.ok()) {
    return absl::InternalError(
        absl::StrCat("malformed worker output: ", std::string(bytes.status().message())));
  }
  return bytes;
}

}  // namespace clash::cad::internal
