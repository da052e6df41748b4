#!/usr/bin/python3
"""Seed corpora for the libFuzzer targets (tests/fuzz/run_fuzz.sh): valid requests encoded by
protoc from text format, prefixed with the byte that picks the RPC, and valid worker result
files written to the documented layout (geom/cad/src/worker_format.h), prefixed with the byte
that picks the kind. Usage: make_seeds.py --proto-dir DIR --out DIR"""
import argparse
import os
import struct
import subprocess

REQUESTS = [
    (0, "InterferenceRequest", 'scene_id: "s1" tolerances { clearance_mm: 0.5 }'),
    (0, "InterferenceRequest",
     'set_a { groups: "pins" } set_b { path_prefixes: "a/box" } '
     'pose_overrides { instance_id: 3 pose { translation_mm { z: 8 } '
     'quaternion { w: 1 } } } allowed { name: "r" a { instance_ids: 1 } }'),
    (1, "DistanceRequest", 'set_a { instance_ids: 1 } set_b { instance_ids: 3 } '
                           'max_distance_mm: 50'),
    (2, "PickRequest", 'rays { origin_mm { x: 5 y: 5 z: 100 } direction { z: -1 } } '
                       'rays { origin_mm { x: -50 y: 1 z: 1 } direction { x: 1 } '
                       'max_distance_mm: 1000 }'),
    (3, "ValidateSequenceRequest",
     'continue_after_blocked: true steps { name: "pin" moving { groups: "pins" } '
     'motion { linear { direction { z: -1 } distance_mm: 40 } } } '
     'steps { name: "box" moving { path_prefixes: "a/box2" } '
     'motion { screw { axis { z: 1 } angle_rad: 3 pitch_mm: 1 } } }'),
]


def mesh(vertices, triangles):
    out = struct.pack("<7i", 2, 2, 0, 1, 1, 0, 0) + struct.pack("<d", 0.01)
    out += struct.pack("<QQ", len(vertices), len(triangles))
    for v in vertices:
        out += struct.pack("<3d", *v)
    for t in triangles:
        out += struct.pack("<3I", *t)
    out += struct.pack(f"<{len(triangles)}I", *([0] * len(triangles)))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    for i, (kind, message, text) in enumerate(REQUESTS):
        body = subprocess.run(
            ["protoc", "-I", args.proto_dir, f"--encode=clash.v1.{message}",
             "clash/v1/queries.proto", "clash/v1/sequences.proto"],
            input=text.encode(), capture_output=True, check=True).stdout
        with open(os.path.join(args.out, "request", f"seed-{i}"), "wb") as f:
            f.write(bytes([kind]) + body)
    tet = mesh([(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)],
               [(0, 2, 1), (0, 1, 3), (0, 3, 2), (1, 2, 3)])
    head = b"CLSHMSH1" + struct.pack("<II", 1, 0)
    error = b"CLSHMSH1" + struct.pack("<II", 1, 1) + struct.pack("<II", 3, 5) + b"oops!"
    name = b"part"
    assembly = (b"CLSHASM1" + struct.pack("<II", 1, 0) + struct.pack("<5i", 1, 1, 0, 0, 0) +
                struct.pack("<II", 1, 1) + struct.pack("<I", len(name)) + name +
                struct.pack("<Q", len(tet)) + tet +
                struct.pack("<I", 6) + b"a/part" + struct.pack("<I", 4) + b"part" +
                struct.pack("<I", 0) + struct.pack("<9d", 1, 0, 0, 0, 1, 0, 0, 0, 1) +
                struct.pack("<3d", 1, 2, 3) + struct.pack("<B", 1) +
                struct.pack("<3f", 0.5, 0.5, 0.5))
    for i, seed in enumerate([b"\x00" + head + tet, b"\x00" + error, b"\x01" + assembly]):
        with open(os.path.join(args.out, "worker_output", f"seed-{i}"), "wb") as f:
            f.write(seed)


if __name__ == "__main__":
    main()
