// clashctl's HTML sequence report (client/src/clashctl/report.h), without a server: the views'
// choice of instances and poses, escaping, the embedded three.js and the document's structure.
// tests/client/report_render_test.py opens a real report in headless Chromium.
#include "clashctl/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace clash::clashctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Products of a few exactly representable rotations and translations: rounding only.
constexpr double kMatrixTolerance = 1e-12;

v1::Box3 Box(double x0, double y0, double z0, double x1, double y1, double z1) {
  v1::Box3 b;
  b.mutable_min_mm()->set_x(x0), b.mutable_min_mm()->set_y(y0), b.mutable_min_mm()->set_z(z0);
  b.mutable_max_mm()->set_x(x1), b.mutable_max_mm()->set_y(y1), b.mutable_max_mm()->set_z(z1);
  return b;
}

// An instance of part `part` whose part frame is translated to `x` along X; its part is the
// 10 mm cube [0, 10]^3, so its world bounds are [x, x + 10] x [0, 10] x [0, 10].
v1::Instance Inst(uint64_t id, const std::string& path, const std::string& part, double x) {
  v1::Instance inst;
  inst.set_instance_id(id);
  inst.set_path(path);
  inst.set_part_id(part);
  inst.set_enabled(true);
  inst.mutable_pose()->mutable_translation_mm()->set_x(x);
  *inst.mutable_world_bounds() = Box(x, 0, 0, x + 10, 10, 10);
  return inst;
}

v1::SequenceStep Step(const std::string& prefix) {
  v1::SequenceStep step;
  step.mutable_moving()->add_path_prefixes(prefix);
  return step;
}

// A scene: "peg" moved by step 1 and blocked by "block"; "near" stands installed beside them,
// "far" 1 m away, "later" is beside them but moved by step 2 (so absent during step 1).
struct Fixture {
  std::vector<v1::Instance> instances = {
      Inst(1, "asm/peg", "p1", 0),    Inst(2, "asm/block", "p2", 12),
      Inst(3, "asm/near", "p2", -14), Inst(4, "asm/far", "p2", 1000),
      Inst(5, "asm/later", "p1", 24),
  };
  v1::ValidateSequenceRequest request;
  std::vector<v1::StepResult> steps;

  Fixture() {
    *request.add_steps() = Step("asm/peg");
    *request.add_steps() = Step("asm/later");
    v1::StepResult blocked;
    blocked.set_step_index(0);
    blocked.set_name("peg <in> & out");
    blocked.set_ok(false);
    blocked.set_blocked_t(0.25);
    blocked.set_first_contact_t(0.2);
    blocked.add_moving_paths("asm/peg");
    blocked.mutable_blocked_pose()->mutable_translation_mm()->set_z(20);  // 20 mm above
    v1::Blocker* b = blocked.add_blockers();
    b->set_instance_id(2);
    b->set_path("asm/block");
    b->set_clash_class(v1::HARD);
    b->mutable_point_mm()->set_x(11);
    b->mutable_point_mm()->set_z(20);
    for (int i = 0; i <= 4; ++i) {
      v1::ProfileSample* s = blocked.add_profile();
      s->set_t(0.0625 * i);
      s->set_distance_mm(4.0 - i);
    }
    steps.push_back(blocked);
    v1::StepResult ok;
    ok.set_step_index(1);
    ok.set_name("later");
    ok.set_ok(true);
    ok.set_blocked_t(1);
    ok.set_first_contact_t(-1);
    ok.add_moving_paths("asm/later");
    steps.push_back(ok);
  }

  SequenceReportData Data() const {
    SequenceReportData data;
    data.scene_id = "s0123";
    data.sequence_file = "/tmp/<script src=\"http://evil.example/x.js\"></script>&seq.json";
    data.request = request;
    data.steps = steps;
    data.summary.set_steps(2);
    data.summary.set_steps_ok(1);
    data.summary.set_steps_blocked(1);
    data.instances = instances;
    data.views = PlanStepViews(request, steps, instances);
    v1::PartMesh mesh;  // p1: one triangle; p2 is left out (drawn as its box)
    mesh.set_part_id("p1");
    for (double v : {0.0, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0, 10.0, 0.0}) mesh.add_vertices_mm(v);
    for (uint32_t i : {0u, 1u, 2u}) mesh.add_triangles(i);
    data.meshes["p1"] = mesh;
    for (const char* id : {"p1", "p2"}) {
      *data.parts[id].mutable_bounds() = Box(0, 0, 0, 10, 10, 10);
    }
    data.notes.push_back("note with <b>markup</b>");
    return data;
  }
};

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// The JSON in <script id="clash-data">.
nlohmann::json ViewJson(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"clash-data\">";
  const std::size_t begin = html.find(open);
  EXPECT_NE(begin, std::string::npos);
  const std::size_t end = html.find("</script>", begin);
  return nlohmann::json::parse(html.substr(begin + open.size(), end - begin - open.size()));
}

TEST(PoseMatrix, QuaternionAndTranslation) {
  v1::Pose pose;
  pose.mutable_translation_mm()->set_x(5);
  pose.mutable_translation_mm()->set_z(-2);
  v1::Quaternion* q = pose.mutable_quaternion();  // 90 degrees about Z: x -> y, y -> -x
  q->set_w(std::sqrt(0.5));
  q->set_z(std::sqrt(0.5));
  const Matrix4 m = PoseMatrix(pose);
  const Matrix4 expected{0, -1, 0, 5, 1, 0, 0, 0, 0, 0, 1, -2, 0, 0, 0, 1};
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(m[i], expected[i], kMatrixTolerance) << i;
  const Matrix4 identity = PoseMatrix(v1::Pose());
  EXPECT_EQ(identity, (Matrix4{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
}

TEST(PlanStepViews, MovingBlockersAndInstalledNeighbours) {
  const Fixture f;
  const std::vector<StepView> views = PlanStepViews(f.request, f.steps, f.instances);
  ASSERT_EQ(views.size(), 2u);
  // Step 1: "later" is moved by step 2, so it is absent; "far" is out of reach.
  EXPECT_THAT(views[0].moving, ElementsAre(1u));
  EXPECT_THAT(views[0].blockers, ElementsAre(2u));
  EXPECT_THAT(views[0].context, ElementsAre(3u));
  // The peg drawn 20 mm up (blocked pose z = 20 over installed z = 0), kept in the focus box.
  EXPECT_NEAR(views[0].motion[11], 20.0, kMatrixTolerance);
  EXPECT_NEAR(views[0].motion[3], 0.0, kMatrixTolerance);
  EXPECT_NEAR(views[0].focus[5], 30.0, kMatrixTolerance);
  EXPECT_NEAR(views[0].focus[3], 22.0, kMatrixTolerance);  // block's max x
  // Step 2 is ok: installed pose. Its focus box is [24, 34] x [0, 10]^2 (diagonal 17.3 mm,
  // margin 9.3 mm): the block (to x = 22) is near, the peg (to x = 10) is not.
  EXPECT_THAT(views[1].moving, ElementsAre(5u));
  EXPECT_THAT(views[1].blockers, IsEmpty());
  EXPECT_THAT(views[1].context, ElementsAre(2u));
  EXPECT_EQ(views[1].motion, (Matrix4{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  EXPECT_THAT(ViewPartIds(views, f.instances), ElementsAre("p1", "p2"));
}

TEST(SequenceHtmlReport, EscapesHostileText) {
  const std::string html = SequenceHtmlReport(Fixture().Data());
  EXPECT_THAT(html, HasSubstr("/tmp/&lt;script src=&quot;http://evil.example/x.js&quot;&gt;"
                              "&lt;/script&gt;&amp;seq.json"));
  EXPECT_THAT(html, Not(HasSubstr("<script src")));
  EXPECT_THAT(html, HasSubstr("peg &lt;in&gt; &amp; out"));
  EXPECT_THAT(html, HasSubstr("note with &lt;b&gt;markup&lt;/b&gt;"));
}

TEST(SequenceHtmlReport, SelfContainedWithThreeJs) {
  const std::string html = SequenceHtmlReport(Fixture().Data());
  EXPECT_THAT(html, HasSubstr(std::string(ThreeCoreJs())));
  EXPECT_THAT(html, HasSubstr(std::string(ThreeModuleJs())));
  EXPECT_THAT(html, HasSubstr(std::string(ViewerJs())));
  EXPECT_THAT(html, HasSubstr("Permission is hereby granted, free of charge"));  // MIT licence
  // Exactly the four inline scripts (data, two three.js modules as text, the viewer), none
  // loaded from elsewhere, and no other external resource.
  EXPECT_EQ(Count(html, "<script"), 4);
  EXPECT_EQ(Count(html, "</script>"), 4);
  const std::regex external(R"((src|href)\s*=\s*["']?[a-z]*:?//|url\(\s*["']?[a-z]*:?//|@import)",
                            std::regex::icase);
  EXPECT_FALSE(std::regex_search(html, external));
}

TEST(SequenceHtmlReport, OneViewPerStepAndValidStructure) {
  const std::string html = SequenceHtmlReport(Fixture().Data());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>\n<html lang=\"en\">", 0), 0u);
  EXPECT_EQ(html.substr(html.rfind("</script>")), "</script>\n</body>\n</html>\n");
  const std::string markup = html.substr(0, html.find("<script"));  // before the scripts
  for (const char* tag : {"<head>", "</head>", "<body ", "<main>", "</main>", "<footer>"}) {
    EXPECT_EQ(Count(markup, tag), 1) << tag;
  }
  EXPECT_EQ(Count(markup, "<section "), 2);
  EXPECT_EQ(Count(markup, "</section>"), 2);
  EXPECT_EQ(Count(markup, "<canvas class=\"view\""), 2);
  EXPECT_EQ(Count(markup, "<table"), Count(markup, "</table>"));
  EXPECT_EQ(Count(markup, "<tr>"), Count(markup, "</tr>"));
  EXPECT_EQ(Count(markup, "<svg class=\"profile\""), 1);  // only step 1 has profile samples
  EXPECT_THAT(html, HasSubstr("<span class=\"badge\">BLOCKED</span>"));
  EXPECT_THAT(html, HasSubstr("<span class=\"badge\">OK</span>"));

  const nlohmann::json data = ViewJson(html);
  ASSERT_EQ(data["views"].size(), 2u);
  const nlohmann::json& step1 = data["views"][0];
  EXPECT_EQ(step1["witness"], nlohmann::json::parse("[[11.0, 0.0, 20.0]]"));
  ASSERT_EQ(step1["objects"].size(), 3u);  // near (context), block, peg
  EXPECT_EQ(step1["objects"][2]["role"], "moving");
  EXPECT_EQ(step1["objects"][2]["m"][11], 20.0);
  EXPECT_EQ(step1["objects"][1]["role"], "blocker");
  // p1's mesh as little-endian float32 / uint32; p2 without a mesh as its box.
  std::string vertices;
  ASSERT_TRUE(absl::Base64Unescape(data["parts"]["p1"]["v"].get<std::string>(), &vertices));
  ASSERT_EQ(vertices.size(), 9 * sizeof(float));
  float x1 = 0;
  std::memcpy(&x1, vertices.data() + 3 * sizeof(float), sizeof(float));
  EXPECT_EQ(x1, 10.0f);
  EXPECT_EQ(data["parts"]["p2"]["box"], nlohmann::json::parse("[0.0,0.0,0.0,10.0,10.0,10.0]"));
}

// A step shows the τ its sweeps used, and of its allowed pairs the ones listed and how many
// more there are.
TEST(SequenceHtmlReport, ContactToleranceAndSuppressedPairs) {
  Fixture f;
  f.steps[1].set_contact_tolerance_mm(0.02);
  f.steps[1].add_suppressed("asm/later / asm/block (fit)");
  f.steps[1].set_suppressed_pairs(1201);
  const std::string html = SequenceHtmlReport(f.Data());
  EXPECT_THAT(html, HasSubstr("contact tolerance τ</th><td>0.020 mm"));
  EXPECT_THAT(html, HasSubstr("asm/later / asm/block (fit)<br>… and 1200 more pairs"));
  f.steps[1].set_suppressed_pairs(1);
  EXPECT_THAT(SequenceHtmlReport(f.Data()), Not(HasSubstr("more pairs")));
}

TEST(SequenceHtmlReport, DataCannotCloseItsScript) {
  Fixture f;
  f.instances[1].set_path("asm/</script><script>alert(1)</script>");
  SequenceReportData data = f.Data();
  const std::string html = SequenceHtmlReport(data);
  EXPECT_EQ(Count(html, "</script>"), 4);
  EXPECT_EQ(ViewJson(html)["views"][0]["objects"][1]["path"],
            "asm/</script><script>alert(1)</script>");
}

TEST(ReportAssets, ThreeJsAsTheViewerExpects) {
  // The version pinned by client/report/package-lock.json is 0.R.x with REVISION 'R'.
  const std::vector<std::string> version = absl::StrSplit(std::string(ThreeVersion()), '.');
  ASSERT_EQ(version.size(), 3u);
  EXPECT_THAT(std::string(ThreeCoreJs()), HasSubstr("const REVISION = '" + version[1] + "';"));
  // viewer.js rewrites this import to the blob URL of the core module.
  EXPECT_THAT(std::string(ThreeModuleJs()), HasSubstr("from './three.core.js';"));
  for (std::string_view code : {ThreeCoreJs(), ThreeModuleJs(), ViewerJs()}) {
    EXPECT_EQ(std::string(code).find("</script"), std::string::npos);
    EXPECT_EQ(std::string(code).find("<!--"), std::string::npos);
  }
}

}  // namespace
}  // namespace clash::clashctl
