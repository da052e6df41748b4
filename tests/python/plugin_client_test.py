#!/usr/bin/python3
"""A second-language client: drives clashd from Python the way a CAD plugin would.

Stubs are generated at test time: messages with Debian's protoc (protobuf-compiler 3.21, which
matches the python3-protobuf runtime) and service stubs with Debian's python3-grpc-tools. The
test starts clashd on a free port and a private data folder, uploads two meshed boxes, places
them, checks interference, moves one and checks again, and picks a ray.

Usage: plugin_client_test.py --clashd PATH --proto-dir DIR
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None


def box_mesh(size):
    """Vertices and triangles (outward, counter-clockwise) of an axis-aligned box at the origin."""
    sx, sy, sz = size
    v = [(x, y, z) for z in (0, sz) for y in (0, sy) for x in (0, sx)]
    quads = [(0, 2, 3, 1), (4, 5, 7, 6), (0, 1, 5, 4), (2, 6, 7, 3), (0, 4, 6, 2), (1, 3, 7, 5)]
    tris = []
    for a, b, c, d in quads:
        tris += [a, b, c, a, c, d]
    return [c for p in v for c in p], tris


class PluginClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="clash-py-")
        gen = os.path.join(cls.tmp, "gen")
        os.makedirs(gen)
        protos = [os.path.join(ARGS.proto_dir, "clash", "v1", f + ".proto")
                  for f in ("common", "parts", "scenes", "queries")]
        subprocess.run(["protoc", "-I", ARGS.proto_dir, "--python_out", gen] + protos, check=True)
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", ARGS.proto_dir,
                        "--grpc_python_out", gen] + protos, check=True)
        sys.path.insert(0, gen)
        cls.server = subprocess.Popen(
            [ARGS.clashd, "--listen", "127.0.0.1:0", "--metrics-listen", "",
             "--data-dir", os.path.join(cls.tmp, "data")],
            stderr=subprocess.PIPE, text=True)
        port = None
        deadline = time.time() + 30
        while time.time() < deadline and port is None:
            line = cls.server.stderr.readline()
            if not line:
                break
            m = re.search(r"\(port (\d+)\)", line)
            if m:
                port = int(m.group(1))
        if port is None:
            cls.server.kill()
            raise RuntimeError("clashd did not report its port")
        import grpc
        from clash.v1 import parts_pb2_grpc, scenes_pb2_grpc, queries_pb2_grpc
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.parts = parts_pb2_grpc.PartServiceStub(cls.channel)
        cls.scenes = scenes_pb2_grpc.SceneServiceStub(cls.channel)
        cls.queries = queries_pb2_grpc.QueryServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.terminate()
        cls.server.wait(timeout=30)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_upload_place_check_move_pick(self):
        import grpc
        from clash.v1 import common_pb2, parts_pb2, queries_pb2, scenes_pb2
        xyz, tris = box_mesh((10, 10, 10))
        part = self.parts.UploadMesh(parts_pb2.UploadMeshRequest(
            name="cube", vertices_mm=xyz, triangles=tris, face_ids=[i // 2 for i in range(12)]),
            timeout=30)
        self.assertEqual(part.triangle_count, 12)
        self.assertTrue(part.closed)

        scene = self.scenes.CreateScene(scenes_pb2.CreateSceneRequest(name="py"), timeout=30)
        added = self.scenes.AddInstances(scenes_pb2.AddInstancesRequest(
            scene_id=scene.scene_id,
            parts=[scenes_pb2.PartPlacement(part_id=part.part_id, path="a"),
                   scenes_pb2.PartPlacement(
                       part_id=part.part_id, path="b",
                       pose=common_pb2.Pose(translation_mm=common_pb2.Vec3(x=8)))]), timeout=30)
        a, b = [i.instance_id for i in added.instances]

        check = self.queries.CheckInterference(
            queries_pb2.InterferenceRequest(scene_id=scene.scene_id), timeout=30)
        self.assertEqual(len(check.clashes), 1)
        clash = check.clashes[0]
        self.assertEqual(clash.clash_class, queries_pb2.HARD)
        self.assertEqual((clash.path_a, clash.path_b), ("a", "b"))
        self.assertAlmostEqual(clash.depth_mm, 2.0, delta=0.2)

        # Dragging b (a what-if pose, nothing stored) with the depth for the class only: the
        # same class, the estimate echoed, and a depth no deeper than the 0.5 mm overlap.
        drag = self.queries.CheckInterference(queries_pb2.InterferenceRequest(
            scene_id=scene.scene_id, set_a=queries_pb2.InstanceSelector(instance_ids=[b]),
            set_b=queries_pb2.InstanceSelector(),
            pose_overrides=[scenes_pb2.PoseUpdate(instance_id=b, pose=common_pb2.Pose(
                translation_mm=common_pb2.Vec3(x=9.5)))],
            depth_estimate=queries_pb2.DEPTH_ESTIMATE_CLASS_ONLY), timeout=30)
        self.assertEqual(drag.depth_estimate, queries_pb2.DEPTH_ESTIMATE_CLASS_ONLY)
        self.assertEqual([c.clash_class for c in drag.clashes], [queries_pb2.HARD])
        self.assertGreater(drag.clashes[0].depth_mm, 0.0)
        self.assertLessEqual(drag.clashes[0].depth_mm, 0.5 + 1e-9)

        # Move b to touch a face to face: contact, not a clash.
        self.scenes.SetPoses(scenes_pb2.SetPosesRequest(scene_id=scene.scene_id, poses=[
            scenes_pb2.PoseUpdate(instance_id=b, pose=common_pb2.Pose(
                translation_mm=common_pb2.Vec3(x=10)))]), timeout=30)
        check = self.queries.CheckInterference(
            queries_pb2.InterferenceRequest(scene_id=scene.scene_id), timeout=30)
        self.assertEqual([c.clash_class for c in check.clashes], [queries_pb2.CONTACT])

        # A ray down onto b's top face (z = 10, face id 1 by construction above: quad 1 = top).
        pick = self.queries.PickRays(queries_pb2.PickRequest(scene_id=scene.scene_id, rays=[
            queries_pb2.Ray(origin_mm=common_pb2.Vec3(x=15, y=5, z=50),
                            direction=common_pb2.Vec3(z=-1))]), timeout=30)
        hit = pick.hits[0]
        self.assertTrue(hit.hit)
        self.assertEqual(hit.instance_id, b)
        self.assertEqual(hit.face_id, 1)
        self.assertAlmostEqual(hit.distance_mm, 40.0, places=6)
        self.assertAlmostEqual(hit.normal.z, 1.0, places=6)

        # Errors carry the right status codes.
        with self.assertRaises(grpc.RpcError) as e:
            self.scenes.GetScene(scenes_pb2.GetSceneRequest(scene_id="s" + "0" * 32), timeout=30)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(grpc.RpcError) as e:
            self.scenes.SetPoses(scenes_pb2.SetPosesRequest(scene_id=scene.scene_id, poses=[
                scenes_pb2.PoseUpdate(instance_id=a, pose=common_pb2.Pose(
                    translation_mm=common_pb2.Vec3(x=float("nan"))))]), timeout=30)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--clashd", required=True)
    parser.add_argument("--proto-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
