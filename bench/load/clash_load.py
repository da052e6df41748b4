#!/usr/bin/python3
"""clash_load: a bounded load run against clashd (RELIABILITY.md requirement 12).

Many concurrent clients, each a separate process with its own channel (so Python's GIL does not
serialise the clients or inflate one client's latency with another's work), send mixed queries
to a 100-instance scene: CheckInterference with a pose override (a dragged part), ComputeDistance
between two instances, PickRays (16 rays), and a one-step sequence validation. Beside them,
importer processes import CAD files with a new deflection each time (a cache miss, so a worker
process really runs). Every call has a deadline; any call that does not return OK is a failure,
RESOURCE_EXHAUSTED from the admission limiter included (the stubs do not retry).

The scene: the project's sample assembly (clash-sample-assembly, 11 instances) placed 9 times in
a grid, plus one box: 100 instances.

Prints per kind of call: calls, failures, calls/s, p50, p99 and max latency (ms); exits 1 when a
call failed. Reproduce the README figures with:
    bench/load/clash_load.py --bin-dir build --proto-dir proto --clients 16 --seconds 60
Usage: clash_load.py --bin-dir BUILD_DIR --proto-dir PROTO_DIR [--clients N] [--seconds S]
                     [--importers K] [--seed N] [--json FILE] [--server-arg ARG ...]
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "service"))
import clashd_harness as h  # noqa: E402

SCREW = "/usr/share/opencascade/data/step/screw.step"
KINDS = ("interference+override", "distance", "pick 16 rays", "sequence 1 step", "import")
TILES = 9


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def start_together(ready, go, end):
    """Every process connects first; the clock starts when all are ready."""
    ready.put(os.getpid())
    go.wait()
    return end.value


def client(args, port, scene, seed, sync, out):
    """One client process: mixed queries until the end time; puts (kind, seconds, code) lists."""
    pb = h.load_stubs(args.proto_dir)
    grpc = pb.grpc
    ch = h.Channel(pb, port)
    end_time = start_together(*sync)
    rng = random.Random(seed)
    ids, paths = scene["ids"], scene["paths"]
    samples = []
    while time.time() < end_time:
        kind = rng.choices(KINDS[:4], weights=(4, 3, 3, 1))[0]
        start = time.perf_counter()
        code = "OK"
        try:
            if kind == "interference+override":
                tile = rng.randrange(TILES)
                moved = ids[f"t{tile}/sample/pin"]
                ch.queries.CheckInterference(pb.queries_pb2.InterferenceRequest(
                    scene_id=scene["id"],
                    set_a=pb.queries_pb2.InstanceSelector(instance_ids=[moved]),
                    pose_overrides=[pb.scenes_pb2.PoseUpdate(instance_id=moved, pose=h.pose(
                        pb, tile % 3 * 300 + rng.uniform(0, 120), tile // 3 * 300 +
                        rng.uniform(0, 80), rng.uniform(0, 40)))]), timeout=60)
            elif kind == "distance":
                a, b = rng.sample(paths, 2)
                ch.queries.ComputeDistance(pb.queries_pb2.DistanceRequest(
                    scene_id=scene["id"], set_a=pb.queries_pb2.InstanceSelector(
                        instance_ids=[ids[a]]),
                    set_b=pb.queries_pb2.InstanceSelector(instance_ids=[ids[b]])), timeout=60)
            elif kind == "pick 16 rays":
                rays = [pb.queries_pb2.Ray(
                    origin_mm=pb.common_pb2.Vec3(x=rng.uniform(0, 900), y=rng.uniform(0, 900),
                                                 z=500),
                    direction=pb.common_pb2.Vec3(z=-1)) for _ in range(16)]
                ch.queries.PickRays(pb.queries_pb2.PickRequest(scene_id=scene["id"], rays=rays),
                                    timeout=60)
            else:
                tile = rng.randrange(TILES)
                request = pb.sequences_pb2.ValidateSequenceRequest(
                    scene_id=scene["id"], steps=[pb.sequences_pb2.SequenceStep(
                        name="bracket down",
                        moving=pb.queries_pb2.InstanceSelector(
                            path_prefixes=[f"t{tile}/sample/bracket"]),
                        motion=pb.sequences_pb2.Motion(linear=pb.sequences_pb2.LinearMotion(
                            direction=pb.common_pb2.Vec3(z=-1), distance_mm=60)))])
                for _ in ch.sequences.ValidateSequence(request, timeout=120):
                    pass
        except grpc.RpcError as e:
            code = f"{e.code().name}: {e.details()}"
        samples.append((kind, time.perf_counter() - start, code))
    ch.close()
    out.put(samples)


def importer(args, port, seed, sync, out):
    pb = h.load_stubs(args.proto_dir)
    ch = h.Channel(pb, port)
    end_time = start_together(*sync)
    rng = random.Random(seed)
    with open(SCREW, "rb") as f:
        data = f.read()
    samples = []
    while time.time() < end_time:
        t = pb.parts_pb2.TessellationOptions(relative_deflection=rng.uniform(0.002, 0.02))
        start = time.perf_counter()
        code = "OK"
        try:
            ch.import_cad(data, file_name="screw.step", tessellation=t, timeout=300)
        except pb.grpc.RpcError as e:
            code = f"{e.code().name}: {e.details()}"
        samples.append(("import", time.perf_counter() - start, code))
    ch.close()
    out.put(samples)


def build_scene(args, pb, ch, tmp):
    sample = os.path.join(tmp, "sample.step")
    subprocess.run([os.path.join(args.bin_dir, "geom", "cad", "clash-sample-assembly"), sample],
                   check=True, stdout=subprocess.DEVNULL)
    with open(sample, "rb") as f:
        imported = ch.import_cad(f.read(), file_name="sample.step", timeout=300)
    scene_id = ch.scenes.CreateScene(pb.scenes_pb2.CreateSceneRequest(name="load"),
                                     timeout=30).scene_id
    placements = [pb.scenes_pb2.AssemblyPlacement(
        assembly_id=imported.assembly.assembly_id, path_prefix=f"t{k}",
        pose=h.pose(pb, k % 3 * 300, k // 3 * 300, 0)) for k in range(TILES)]
    ch.scenes.AddInstances(pb.scenes_pb2.AddInstancesRequest(scene_id=scene_id,
                                                             assemblies=placements), timeout=60)
    box = h.upload_box(pb, ch, "floor", (900, 900, 5))
    ch.scenes.AddInstances(pb.scenes_pb2.AddInstancesRequest(
        scene_id=scene_id, parts=[pb.scenes_pb2.PartPlacement(
            part_id=box.part_id, path="floor", pose=h.pose(pb, -10, -10, -20))]), timeout=30)
    r = ch.scenes.ListInstances(pb.scenes_pb2.ListInstancesRequest(scene_id=scene_id,
                                                                   page_size=1000), timeout=30)
    ids = {i.path: i.instance_id for i in r.instances}
    return {"id": scene_id, "ids": ids, "paths": sorted(ids)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--importers", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--scaled", action="store_true",
                        help="multiply --seconds by $CLASH_TEST_SCALE (at least 2 s), for ctest")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default="")
    parser.add_argument("--server-arg", action="append", default=[])
    args = parser.parse_args()
    if args.scaled:
        args.seconds = max(2.0, args.seconds * h.scale())

    pb = h.load_stubs(args.proto_dir)
    tmp = tempfile.mkdtemp(prefix="clash-load-")
    server = h.Clashd(args.bin_dir, tmp, list(args.server_arg)).start()
    failed = True
    try:
        ch = h.Channel(pb, server.port)
        scene = build_scene(args, pb, ch, tmp)
        assert len(scene["ids"]) == 100, len(scene["ids"])
        # Spawned, not forked: gRPC's Python channels do not survive a fork of a process that has
        # one. The children reuse the stubs generated here (CLASH_STUBS_DIR).
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        ready, go, end = ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0)
        sync = (ready, go, end)
        procs = [ctx.Process(target=client, args=(args, server.port, scene, args.seed * 1000 + k,
                                                  sync, out)) for k in range(args.clients)]
        procs += [ctx.Process(target=importer, args=(args, server.port, args.seed * 1000 + 500 + k,
                                                     sync, out))
                  for k in range(args.importers)]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=300)
        start = time.time()
        end.value = start + args.seconds
        go.set()
        samples = []
        for _ in procs:
            samples += out.get(timeout=args.seconds + 600)
        for p in procs:
            p.join(timeout=60)
        wall = time.time() - start
        ch.close()
        failed = report(args, samples, wall, server)
    finally:
        code = server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        h.remove_stubs()
    if code != 0:
        print(f"clashd exited with {code}", file=sys.stderr)
        return 1
    return 1 if failed else 0


def report(args, samples, wall, server):
    rows = []
    failures = []
    print(f"{args.clients} query clients + {args.importers} importer(s), {wall:.1f} s, "
          f"scene of 100 instances, clashd pid {server.pid}")
    print(f"{'call':<24}{'calls':>8}{'failed':>8}{'calls/s':>10}{'p50 ms':>10}{'p99 ms':>10}"
          f"{'max ms':>10}")
    for kind in KINDS:
        ok = sorted(s for k, s, c in samples if k == kind and c == "OK")
        bad = [c for k, s, c in samples if k == kind and c != "OK"]
        failures += bad
        n = len(ok) + len(bad)
        row = {"call": kind, "calls": n, "failed": len(bad), "calls_per_s": n / wall,
               "p50_ms": percentile(ok, 50) * 1e3, "p99_ms": percentile(ok, 99) * 1e3,
               "max_ms": (ok[-1] if ok else float("nan")) * 1e3}
        rows.append(row)
        print(f"{kind:<24}{n:>8}{len(bad):>8}{row['calls_per_s']:>10.1f}{row['p50_ms']:>10.1f}"
              f"{row['p99_ms']:>10.1f}{row['max_ms']:>10.1f}")
    queries = sum(r["calls"] for r in rows[:4])
    print(f"queries: {queries / wall:.1f} calls/s in all; failed calls: {len(failures)}")
    for c in sorted(set(failures))[:10]:
        print(f"  failure: {c}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"clients": args.clients, "importers": args.importers, "seconds": wall,
                       "rows": rows, "failures": failures}, f, indent=1)
    return bool(failures) or any(r["calls"] == 0 for r in rows)


if __name__ == "__main__":
    sys.exit(main())
