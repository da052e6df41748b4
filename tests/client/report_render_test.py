#!/usr/bin/python3
"""The HTML sequence report opened in headless Chromium: its 3D views are drawn, not blank.

A real clashd (temporary data folder, free loopback port) gets the project's sample assembly;
`clashctl validate --html` checks a two-step sequence on it (the bracket set onto the plate:
ok; the pin pressed in from above: blocked by the bracket) and writes the report under a file
name with `<`, `&` and a space in it. Chromium (SwiftShader software WebGL, no network) loads
the file twice: --dump-dom for the page's own verdict (<body data-render="done">) and the
canvas rectangles, --screenshot for the pixels. The PNG is decoded with zlib (stdlib only) and
each view's rectangle must hold a shaded picture (many colours, not only background) with the
blue moving part; the blocked step's view must show the red blocker and the orange contact
marker, the ok step's view no red at all.

Exits 77 (ctest SKIP_RETURN_CODE) when no Chromium is installed.

Usage: report_render_test.py --bin-dir BUILD_DIR
"""
import argparse
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "service"))
import clashd_harness  # noqa: E402  (the shared clashd process)
import process_test  # noqa: E402  (its ctl helpers)

SKIP = 77
ARGS = None
BACKGROUND = (0xF4, 0xF5, 0xF7)  # scene.background in client/report/viewer.js
WIDTH = 1300

SEQUENCE = {
    "tolerances": {"clearance_mm": 0.4},
    "continue_after_blocked": True,
    "clearance_profile": True,
    "steps": [
        {"name": "bracket onto the plate", "moving": {"path_prefixes": ["sample/bracket"]},
         "motion": {"linear": {"direction": {"z": -1}, "distance_mm": 60}}},
        {"name": "pin pressed in from above", "moving": {"path_prefixes": ["sample/pin"]},
         "motion": {"linear": {"direction": {"z": -1}, "distance_mm": 60}}},
    ],
}


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium(profile, url, *mode, height=1600):
    """Runs headless Chromium on `url` with software WebGL; returns stdout."""
    cmd = [ARGS.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-extensions", "--mute-audio",
           f"--user-data-dir={profile}", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
           "--force-device-scale-factor=1", "--hide-scrollbars",
           f"--window-size={WIDTH},{height}", "--virtual-time-budget=60000", *mode, url]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"chromium failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def read_png(path):
    """(width, height, rows) of an 8-bit RGB or RGBA PNG; rows[y] holds bytes per pixel * width."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unsupported PNG {header}"
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(line)
        prev = line
    return width, height, rows, bpp


def pixels(png, rect):
    """The RGB pixels inside rect [x, y, w, h], 3 px in from its edges (the canvas border)."""
    width, height, rows, bpp = png
    x0, y0 = int(rect[0]) + 3, int(rect[1]) + 3
    x1, y1 = min(width, int(rect[0] + rect[2]) - 3), min(height, int(rect[1] + rect[3]) - 3)
    assert x1 > x0 and y1 > y0, f"view {rect} outside the {width}x{height} screenshot"
    for y in range(y0, y1):
        row = rows[y]
        for x in range(x0, x1):
            yield tuple(row[x * bpp:x * bpp + 3])


def is_red(p):
    return p[0] > 120 and p[0] > 2 * p[1] and p[0] > 2 * p[2]


def is_blue(p):
    return p[2] > 120 and p[2] > p[0] + 60


def is_orange(p):
    return p[0] > 200 and 120 < p[1] < 215 and p[2] < 80


class ReportRenderTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="clash-report-")
        self.server = clashd_harness.Clashd(ARGS.bin_dir, self.tmp).start()

    def tearDown(self):
        if self.server.proc.poll() is None:
            self.assertEqual(self.server.stop(), 0)
        if ARGS.keep:
            print(f"kept {self.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def test_views_are_drawn(self):
        sample = os.path.join(self.tmp, "sample.step")
        subprocess.run([os.path.join(ARGS.bin_dir, "geom", "cad", "clash-sample-assembly"),
                        sample], check=True, stdout=subprocess.DEVNULL)
        _, scene = process_test.ctl(self.server, "-q", "scene", "create", "sample")
        scene = scene.strip()
        code, _ = process_test.ctl(self.server, "import", sample, "--scene", scene)
        self.assertEqual(code, 0)
        sequence = os.path.join(self.tmp, "pin <&> sequence.json")
        with open(sequence, "w") as f:
            json.dump(SEQUENCE, f)
        report = os.path.join(self.tmp, "report.html")
        code, out = process_test.ctl(self.server, "validate", scene, sequence, "--html", report)
        self.assertEqual(code, 1, f"the pin step is blocked:\n{out}")
        with open(report, encoding="utf-8") as f:
            page = f.read()
        self.assertIn(html.escape(sequence, quote=True).replace("&#x27;", "&#39;"), page)
        self.assertEqual(page.count('<canvas class="view"'), 2)

        url = "file://" + report
        dom = chromium(os.path.join(self.tmp, "profile-dom"), url, "--dump-dom")
        body = re.search(r"<body([^>]*)>", dom)
        self.assertIsNotNone(body, dom[:2000])
        render = re.search(r'data-render="([^"]*)"', body.group(1))
        self.assertEqual(html.unescape(render.group(1)) if render else None, "done", body.group(1))
        views = json.loads(html.unescape(re.search(r'data-views="([^"]*)"',
                                                   body.group(1)).group(1)))
        self.assertEqual(len(views), 2)
        bottom = int(max(r[1] + r[3] for r in views)) + 20

        shot = os.path.join(self.tmp, "report.png")
        chromium(os.path.join(self.tmp, "profile-shot"), url, f"--screenshot={shot}",
                 height=bottom)
        if ARGS.screenshot:
            shutil.copyfile(shot, ARGS.screenshot)
        png = read_png(shot)
        for i, rect in enumerate(views):
            px = list(pixels(png, rect))
            colours = len(set(px))
            drawn = sum(1 for p in px if max(abs(a - b) for a, b in zip(p, BACKGROUND)) > 12)
            self.assertGreater(colours, 100, f"view {i}: {colours} colours: blank?")
            self.assertGreater(drawn, len(px) // 50, f"view {i}: {drawn} of {len(px)} drawn")
            self.assertGreater(sum(map(is_blue, px)), 200, f"view {i}: no blue moving part")
            if i == 1:  # the blocked pin: the bracket red, the contact marker orange
                self.assertGreater(sum(map(is_red, px)), 200, "no red blocker in the view")
                self.assertGreater(sum(map(is_orange, px)), 20, "no contact marker")
            else:  # an ok step draws no blocker
                self.assertEqual(sum(map(is_red, px)), 0, "red in a view without blockers")


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--screenshot", help="also copy the screenshot to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ARGS, rest = parser.parse_known_args()
    ARGS.chromium = find_chromium()
    if not ARGS.chromium:
        print("SKIP: no chromium on PATH (Debian package 'chromium', installed by "
              ".ci/install-deps.sh)")
        return SKIP
    process_test.ARGS = argparse.Namespace(bin_dir=ARGS.bin_dir)
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
