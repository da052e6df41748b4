// Private scratch folders and scoped environment variables for tests. Two runs of the same
// tests on one machine (build and build-asan under ctest -j2) must never share a folder, or
// delete each other's: every folder is made fresh by mkdtemp.
#pragma once

#include <stdlib.h>  // mkdtemp, setenv, unsetenv

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace clash::testing {

/// A new private folder under `base` named `prefix` + 6 random characters ("" on failure).
inline std::string MakeTempDir(const std::filesystem::path& base, const char* prefix) {
  std::string pattern = (base / (std::string(prefix) + "XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) return {};
  return pattern;
}

/// Sets an environment variable for one scope, then restores (or unsets) it. Tests only: never
/// while other threads read the environment (workers starting).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace clash::testing
