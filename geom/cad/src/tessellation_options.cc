// ValidateTessellationOptions: the checks of TessellationOptions that need no shape, kept apart
// from OCCT so that the server can refuse bad options before an upload or a worker.
#include <cmath>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "clash/cad/tessellate.h"

namespace clash::cad {

absl::Status ValidateTessellationOptions(const TessellationOptions& options) {
  if (!std::isfinite(options.linear_deflection_mm) || options.linear_deflection_mm < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linear_deflection_mm must be finite and >= 0, got ", options.linear_deflection_mm));
  }
  if (!std::isfinite(options.relative_deflection) ||
      (options.linear_deflection_mm == 0 && options.relative_deflection <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("relative_deflection must be finite and > 0 (used when "
                     "linear_deflection_mm == 0), got ",
                     options.relative_deflection));
  }
  if (options.linear_deflection_mm == 0 && options.relative_deflection < kMinRelativeDeflection) {
    return absl::InvalidArgumentError(absl::StrCat("relative_deflection must be at least ",
                                                   kMinRelativeDeflection, ", got ",
                                                   options.relative_deflection));
  }
  if (!std::isfinite(options.angular_deflection_rad) || options.angular_deflection_rad <= 0 ||
      options.angular_deflection_rad >= std::numbers::pi) {
    return absl::InvalidArgumentError(absl::StrCat(
        "angular_deflection_rad must lie in (0, pi), got ", options.angular_deflection_rad));
  }
  if (options.max_triangles == 0) {
    return absl::InvalidArgumentError("max_triangles must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace clash::cad
