// Start-up work a pre-started worker does before it receives a job (internal to clash_cad).
#ifndef CLASH_CAD_SRC_OCCT_WARM_UP_H_
#define CLASH_CAD_SRC_OCCT_WARM_UP_H_

namespace clash::cad::internal {

/// Registers OCCT's STEP, IGES and XCAF translators (the one-time set-up the first read of a
/// process pays) without reading any file. Never throws; a failure is left for the real read to
/// report.
void WarmUpOcct();

}  // namespace clash::cad::internal

#endif  // CLASH_CAD_SRC_OCCT_WARM_UP_H_
