#!/usr/bin/python3
"""RELIABILITY.md requirement 16: nothing acknowledged is lost when clashd is killed with SIGKILL
in the middle of uploads, imports and scene edits.

Each round starts clashd on the same data folder, runs client threads side by side (mesh
uploads, CAD imports, and scene editors that create scenes, add instances and move them), records
every call that returned OK and what it returned, and kills the server with SIGKILL at a seeded
random moment. After a restart on the same folder: the store loads without an error in the log
and without a file moved aside as damaged; every acknowledged part, assembly, scene, instance
and pose is there exactly as acknowledged (a call in flight at the kill may or may not have
happened, but entirely or not at all); queries on the restored scenes answer. No import worker
of the killed server may outlive it, and no temporary file may survive the restart.

Usage: kill9_test.py --bin-dir BUILD_DIR --proto-dir PROTO_DIR
Env: CLASH_TEST_SCALE (rounds and kill moments shrink with it), CLASH_KILL9_SEED.
"""
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clashd_harness as h  # noqa: E402

ARGS = None
SEED = int(os.environ.get("CLASH_KILL9_SEED", "0")) or random.SystemRandom().randrange(1, 1 << 30)
SCREW = "/usr/share/opencascade/data/step/screw.step"
BEARING = "/usr/share/opencascade/data/iges/bearing.iges"


def random_quat(rng):
    q = [rng.gauss(0, 1) for _ in range(4)]
    n = math.sqrt(sum(c * c for c in q))
    q = [c / n for c in q]
    return q if q[0] >= 0 else [-c for c in q]


def same_pose(a, b, tol=1e-9):
    """a, b: (t xyz, quaternion wxyz); q and -q are the same rotation."""
    if any(abs(x - y) > tol * max(1.0, abs(x)) for x, y in zip(a[0], b[0])):
        return False
    d = max(abs(x - y) for x, y in zip(a[1], b[1]))
    s = max(abs(x + y) for x, y in zip(a[1], b[1]))
    return min(d, s) <= tol


def pose_tuple(p):
    t = p.translation_mm
    q = p.quaternion
    return ((t.x, t.y, t.z), (q.w, q.x, q.y, q.z))


class Ledger:
    """What the server acknowledged, and the calls in flight when it died."""

    def __init__(self):
        self.lock = threading.Lock()
        self.parts = {}         # part_id -> (triangle_count, bounds tuple)
        self.assemblies = {}    # assembly_id -> sorted [(path, part_id)]
        self.scenes = {}        # scene_id -> {path: (instance_id, part_id, pose tuple)}
        self.pending = {}       # scene_id -> a function giving the state if the call happened
        self.calls_ok = 0
        self.errors = []        # unexpected (non-UNAVAILABLE) errors before the kill


def bounds_tuple(b):
    return (b.min_mm.x, b.min_mm.y, b.min_mm.z, b.max_mm.x, b.max_mm.y, b.max_mm.z)


class Kill9Test(unittest.TestCase):
    def setUp(self):
        self.pb = h.load_stubs(ARGS.proto_dir)
        self.tmp = tempfile.mkdtemp(prefix="clash-kill9-")
        self.server = h.Clashd(ARGS.bin_dir, self.tmp)
        self.rng = random.Random(SEED)
        print(f"kill9_test seed {SEED} (CLASH_KILL9_SEED={SEED} repeats it)", file=sys.stderr)

    def tearDown(self):
        if self.server.proc is not None and self.server.proc.poll() is None:
            self.server.kill9()
        for pid in self.server.workers(include_idle=True):  # orphans of a failed run: this test's, by TMPDIR
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def fail_with_seed(self, msg):
        self.fail(f"{msg} (seed {SEED}; CLASH_KILL9_SEED={SEED} repeats the run)")

    # --- client threads: each stops at its first error (the kill) ----------------------------
    def uploader(self, ch, ledger, stop, rng):
        pb, grpc = self.pb, self.pb.grpc
        while not stop.is_set():
            size = (rng.uniform(1, 50), rng.uniform(1, 50), rng.uniform(1, 50))
            try:
                part = h.upload_box(pb, ch, f"box{rng.randrange(1 << 30)}", size)
            except grpc.RpcError as e:
                self.note_error(ledger, stop, "UploadMesh", e)
                return
            with ledger.lock:
                ledger.parts[part.part_id] = (part.triangle_count, bounds_tuple(part.bounds))
                ledger.calls_ok += 1

    def importer(self, ch, ledger, stop, rng):
        pb, grpc = self.pb, self.pb.grpc
        files = [(SCREW, "screw.step"), (BEARING, "bearing.iges")]
        while not stop.is_set():
            path, name = rng.choice(files)
            with open(path, "rb") as f:
                data = f.read()
            # A new relative deflection each time: a new cache key, so a worker really runs.
            t = pb.parts_pb2.TessellationOptions(relative_deflection=rng.uniform(0.002, 0.02))
            try:
                r = ch.import_cad(data, file_name=name, tessellation=t, timeout=120)
            except grpc.RpcError as e:
                self.note_error(ledger, stop, "ImportCad", e)
                return
            with ledger.lock:
                ledger.assemblies[r.assembly.assembly_id] = sorted(
                    (i.path, i.part_id) for i in r.assembly.instances)
                for p in r.parts:
                    ledger.parts[p.part_id] = (p.triangle_count, bounds_tuple(p.bounds))
                ledger.calls_ok += 1

    def endless_importer(self, ch, ledger, stop):
        """An import whose worker never ends (a 1.E+400 coordinate makes OCCT loop): in flight
        at the kill, its worker must die with the server."""
        with open(SCREW, "rb") as f:
            endless = f.read().replace(b"(-27.8196811084,0.423702927757,5.43633)",
                                       b"(1.E+400,0.423702927757,5.43633)", 1)
        try:
            ch.import_cad(endless, file_name="endless.step", timeout=120)
            with ledger.lock:
                ledger.errors.append("the endless import returned OK")
        except self.pb.grpc.RpcError as e:
            self.note_error(ledger, stop, "endless ImportCad", e)

    def editor(self, ch, ledger, stop, rng, base_parts):
        pb, grpc = self.pb, self.pb.grpc
        scene_id = None
        state = {}
        serial = 0
        while not stop.is_set():
            try:
                if scene_id is None or rng.random() < 0.05:
                    scene = ch.scenes.CreateScene(pb.scenes_pb2.CreateSceneRequest(
                        name=f"kill9-{rng.randrange(1 << 20)}"), timeout=30)
                    scene_id, state = scene.scene_id, {}
                    with ledger.lock:
                        ledger.scenes[scene_id] = {}
                        ledger.calls_ok += 1
                    continue
                if not state or rng.random() < 0.4:
                    placements = []
                    for _ in range(rng.randint(1, 4)):
                        serial += 1
                        placements.append(pb.scenes_pb2.PartPlacement(
                            part_id=rng.choice(base_parts), path=f"i{serial}",
                            pose=h.pose(pb, *(rng.uniform(-500, 500) for _ in range(3)),
                                        quat=random_quat(rng))))
                    request = pb.scenes_pb2.AddInstancesRequest(scene_id=scene_id,
                                                                parts=placements)
                    after = dict(state)
                    for p in placements:
                        after[p.path] = (None, p.part_id, pose_tuple(p.pose))
                    with ledger.lock:
                        ledger.pending[scene_id] = after
                    r = ch.scenes.AddInstances(request, timeout=30)
                    for inst in r.instances:
                        state[inst.path] = (inst.instance_id, inst.part_id, pose_tuple(inst.pose))
                else:
                    paths = rng.sample(sorted(state), rng.randint(1, min(5, len(state))))
                    updates = []
                    after = dict(state)
                    for path in paths:
                        iid, part_id, _ = state[path]
                        p = h.pose(pb, *(rng.uniform(-500, 500) for _ in range(3)),
                                   quat=random_quat(rng))
                        updates.append(pb.scenes_pb2.PoseUpdate(instance_id=iid, pose=p))
                        after[path] = (iid, part_id, pose_tuple(p))
                    with ledger.lock:
                        ledger.pending[scene_id] = after
                    ch.scenes.SetPoses(pb.scenes_pb2.SetPosesRequest(scene_id=scene_id,
                                                                     poses=updates), timeout=30)
                    state = after
                with ledger.lock:
                    ledger.scenes[scene_id] = dict(state)
                    ledger.pending.pop(scene_id, None)
                    ledger.calls_ok += 1
            except grpc.RpcError as e:
                self.note_error(ledger, stop, "scene edit", e)
                return

    def killed_transport(self, e):
        """Whether e is how a call in flight sees its server die: UNAVAILABLE, or, depending
        on when the connection drops, UNKNOWN "Stream removed", INTERNAL (RST_STREAM) or
        CANCELLED (gRPC Python reports a dead peer so; grpc/grpc issues 14006, 34076)."""
        code = e.code()
        codes = self.pb.grpc.StatusCode
        details = e.details() or ""
        return (code in (codes.UNAVAILABLE, codes.CANCELLED) or
                (code == codes.UNKNOWN and "Stream removed" in details) or
                (code == codes.INTERNAL and "RST_STREAM" in details))

    def note_error(self, ledger, stop, what, e):
        if not stop.is_set() or not self.killed_transport(e):
            with ledger.lock:
                ledger.errors.append(f"{what}: {e.code().name} {e.details()}")

    # --- the checks after a restart ----------------------------------------------------------
    def list_instances(self, ch, scene_id):
        out, token = {}, ""
        while True:
            r = ch.scenes.ListInstances(self.pb.scenes_pb2.ListInstancesRequest(
                scene_id=scene_id, page_size=500, page_token=token), timeout=30)
            for i in r.instances:
                out[i.path] = (i.instance_id, i.part_id, pose_tuple(i.pose))
            token = r.next_page_token
            if not token:
                return out

    def matches(self, restored, expected):
        if set(restored) != set(expected):
            return False
        for path, (iid, part_id, p) in expected.items():
            riid, rpart, rp = restored[path]
            if (iid is not None and riid != iid) or rpart != part_id or not same_pose(rp, p):
                return False
        return True

    def verify(self, ch, ledger, round_no):
        pb = self.pb
        log = self.server.log()
        for bad in ("damaged", "cannot load", "unreadable", "unexpected exception"):
            if bad in log:
                self.fail_with_seed(f"round {round_no}: '{bad}' in the restarted server's log:\n"
                                    f"{log[-3000:]}")
        scenes_dir = os.path.join(self.server.store_dir, "scenes")
        self.assertEqual([n for n in os.listdir(scenes_dir) if not n.endswith(".pb")], [])
        for part_id, (triangles, bounds) in ledger.parts.items():
            p = ch.parts.GetPart(pb.parts_pb2.GetPartRequest(part_id=part_id), timeout=30)
            self.assertEqual((p.triangle_count, bounds_tuple(p.bounds)), (triangles, bounds))
        for assembly_id, instances in ledger.assemblies.items():
            a = ch.parts.GetAssembly(pb.parts_pb2.GetAssemblyRequest(assembly_id=assembly_id),
                                     timeout=30)
            self.assertEqual(sorted((i.path, i.part_id) for i in a.instances), instances)
        for scene_id, expected in ledger.scenes.items():
            restored = self.list_instances(ch, scene_id)
            pending = ledger.pending.get(scene_id)
            if not (self.matches(restored, expected) or
                    (pending is not None and self.matches(restored, pending))):
                self.fail_with_seed(
                    f"round {round_no}: scene {scene_id} restored as {sorted(restored.items())}"
                    f"\nacknowledged: {sorted(expected.items())}\nin flight: {pending}")
            # The restored state becomes the acknowledged one (a half-known call resolved).
            for path, (iid, part_id, p) in restored.items():
                expected[path] = (iid, part_id, p)
            for path in list(expected):
                if path not in restored:
                    del expected[path]
            if restored:
                r = ch.queries.CheckInterference(
                    pb.queries_pb2.InterferenceRequest(scene_id=scene_id), timeout=60)
                self.assertEqual(r.summary.instances, len(restored))
        ledger.pending.clear()

    def test_acknowledged_writes_survive_sigkill(self):
        pb = self.pb
        rounds = h.scaled(4, minimum=2)
        ledger = Ledger()
        self.server.start()
        ch = h.Channel(pb, self.server.port)
        base = [h.upload_box(pb, ch, f"base{k}", (10 + k, 20, 30)).part_id for k in range(3)]
        total_ok = 0
        for round_no in range(rounds):
            stop = threading.Event()
            seeds = [self.rng.randrange(1 << 30) for _ in range(5)]
            threads = [
                threading.Thread(target=self.uploader,
                                 args=(ch, ledger, stop, random.Random(seeds[0]))),
                threading.Thread(target=self.importer,
                                 args=(ch, ledger, stop, random.Random(seeds[1]))),
                threading.Thread(target=self.endless_importer, args=(ch, ledger, stop)),
                threading.Thread(target=self.editor,
                                 args=(ch, ledger, stop, random.Random(seeds[2]), base)),
                threading.Thread(target=self.editor,
                                 args=(ch, ledger, stop, random.Random(seeds[3]), base)),
            ]
            before = ledger.calls_ok
            for t in threads:
                t.start()
            time.sleep(self.rng.uniform(0.5, 3.0))
            stop.set()
            workers_at_kill = self.server.workers()
            self.server.kill9()
            for t in threads:
                t.join(timeout=60)
                self.assertFalse(t.is_alive())
            ch.close()
            print(f"round {round_no}: {ledger.calls_ok - before} calls acknowledged before the "
                  f"kill, {len(workers_at_kill)} import worker(s) running at the kill",
                  file=sys.stderr)
            if ledger.errors:
                self.fail_with_seed(f"round {round_no}: calls failed before the kill: "
                                    f"{ledger.errors}")
            # The killed server's workers must not outlive it (they would hold CPU and memory
            # until their own limits, up to --max-import-seconds).
            orphans = self.server.wait_no_workers(3, include_idle=True)
            if orphans:
                self.fail_with_seed(f"round {round_no}: import workers {orphans} outlived the "
                                    "killed server")
            self.server.start()
            ch = h.Channel(pb, self.server.port)
            self.assertTrue(ch.serving())
            self.verify(ch, ledger, round_no)
            self.assertEqual(self.server.leftover_files(), [],
                             f"temporaries survived the restart (seed {SEED})")
            total_ok += ledger.calls_ok - before
        # Instance ids are never reused: a new instance gets an id above every restored one.
        for scene_id, state in ledger.scenes.items():
            if not state:
                continue
            r = ch.scenes.AddInstances(pb.scenes_pb2.AddInstancesRequest(
                scene_id=scene_id, parts=[pb.scenes_pb2.PartPlacement(part_id=base[0],
                                                                      path="after")]),
                timeout=30)
            self.assertGreater(r.instances[0].instance_id, max(s[0] for s in state.values()))
        ch.close()
        self.assertEqual(self.server.stop(), 0)
        self.assertGreater(total_ok, rounds * 5, "the clients did too little to test anything")
        # Workers keep their folders in the tenant's tmp, which a restart empties: nothing of
        # the killed servers' workers is left anywhere.
        self.assertEqual(os.listdir(self.server.tmpdir), [])


if __name__ == "__main__":
    h.main(globals())
