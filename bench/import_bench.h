// Import benchmarks: a cold import through the isolated worker, OCCT's own in-process read +
// mesh of the same file, and the cached import, all checked to give the same mesh.
#pragma once

#include <string>

namespace clash::bench {

/// Registers BM_Import/{clash-cold,occt,clash-cached}/<part> for a part dataset.
void RegisterImport(const std::string& dataset);

}  // namespace clash::bench
