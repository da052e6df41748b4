// Helpers shared by the CAD tests that build their fixtures with OCCT itself.
#pragma once

#include <gtest/gtest.h>

#include <IGESControl_Controller.hxx>
#include <IGESControl_Writer.hxx>
#include <Interface_Static.hxx>
#include <Message.hxx>
#include <Message_Messenger.hxx>
#include <Message_SequenceOfPrinters.hxx>
#include <STEPControl_Controller.hxx>
#include <STEPControl_Writer.hxx>
#include <Standard_Handle.hxx>
#include <TopAbs.hxx>
#include <TopExp_Explorer.hxx>
#include <TopoDS_Shape.hxx>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "testing/temp_dir.h"

namespace clash::cad::testing {

/// Detaches OCCT's default messenger printers (the writers print to stdout) for one scope.
class QuietOcct {
 public:
  QuietOcct() : messenger_(Message::DefaultMessenger()) {
    saved_ = messenger_->Printers();
    messenger_->ChangePrinters().Clear();
  }
  ~QuietOcct() { messenger_->ChangePrinters() = saved_; }
  QuietOcct(const QuietOcct&) = delete;
  QuietOcct& operator=(const QuietOcct&) = delete;

 private:
  Handle(Message_Messenger) messenger_;
  Message_SequenceOfPrinters saved_;
};

using ::clash::testing::MakeTempDir;
using ::clash::testing::ScopedEnv;

/// A test fixture with a private scratch folder `dir_`, removed after the test.
class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir(std::filesystem::temp_directory_path(), "clash_cad_test_");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::filesystem::path dir_;
};

/// Writes `shape` (modelled in mm) to STEP with `unit` as the file's length unit. OCCT 7.6
/// captures "write.step.unit" when the writer is constructed: set it before, or the file claims
/// the unit without its coordinates being converted.
inline void WriteStep(const TopoDS_Shape& shape, const std::filesystem::path& path,
                      const char* unit = "MM") {
  QuietOcct quiet;
  STEPControl_Controller::Init();
  const std::string previous = Interface_Static::CVal("write.step.unit");
  ASSERT_TRUE(Interface_Static::SetCVal("write.step.unit", unit));
  STEPControl_Writer writer;
  ASSERT_EQ(writer.Transfer(shape, STEPControl_AsIs), IFSelect_RetDone);
  ASSERT_EQ(writer.Write(path.c_str()), IFSelect_RetDone);
  Interface_Static::SetCVal("write.step.unit", previous.c_str());
}

/// Writes `shape` to IGES; brep_mode false writes loose trimmed surfaces (OCCT's default), true
/// writes MSBO solids.
inline void WriteIges(const TopoDS_Shape& shape, const std::filesystem::path& path,
                      const char* unit = "MM", bool brep_mode = false) {
  QuietOcct quiet;
  IGESControl_Controller::Init();
  IGESControl_Writer writer(unit, brep_mode ? 1 : 0);
  ASSERT_TRUE(writer.AddShape(shape));
  writer.ComputeModel();
  ASSERT_TRUE(writer.Write(path.c_str()));
}

/// Writes each face of `shape` to IGES as a root of its own (loose trimmed surfaces), as many IGES
/// writers store a body.
inline void WriteIgesFacesAsRoots(const TopoDS_Shape& shape, const std::filesystem::path& path) {
  QuietOcct quiet;
  IGESControl_Controller::Init();
  IGESControl_Writer writer("MM", 0);
  for (TopExp_Explorer it(shape, TopAbs_FACE); it.More(); it.Next()) {
    ASSERT_TRUE(writer.AddShape(it.Current()));
  }
  writer.ComputeModel();
  ASSERT_TRUE(writer.Write(path.c_str()));
}

/// The whole file.
inline std::string ReadBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

/// Replaces the file's content.
inline void WriteBytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  ASSERT_TRUE(out.good());
}

}  // namespace clash::cad::testing
