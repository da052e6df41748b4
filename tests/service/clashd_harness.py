"""Shared helpers of the fault and load tests: Python stubs, a clashd process, process and
temp-file checks. Imported by tests/service/*_test.py and bench/load/clash_load.py.

Stubs are generated once per process into a temp folder, as tests/python/plugin_client_test.py
does: messages with Debian's protoc, services with python3-grpc-tools.
"""
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

_GEN = None


def scale():
    """CLASH_TEST_SCALE (0.1 in the ASan pass): how much of each bounded workload to run."""
    try:
        return max(0.01, float(os.environ.get("CLASH_TEST_SCALE", "1")))
    except ValueError:
        return 1.0


def scaled(n, minimum=1):
    return max(minimum, int(round(n * scale())))


def load_stubs(proto_dir):
    """Generates and imports the clash.v1 and grpc.health.v1 stubs; returns a namespace."""
    global _GEN
    if _GEN is None and os.environ.get("CLASH_STUBS_DIR"):
        # A child process of a run that generated them already (see clash_load.py).
        sys.path.insert(0, os.environ["CLASH_STUBS_DIR"])
        _GEN = ""
    if _GEN is None:
        _GEN = tempfile.mkdtemp(prefix="clash-stubs-")
        os.environ["CLASH_STUBS_DIR"] = _GEN
        atexit.register(remove_stubs)
        protos = [os.path.join(proto_dir, "clash", "v1", f + ".proto")
                  for f in ("common", "parts", "scenes", "queries", "sequences")]
        # grpc.health.v1 under another module path: "grpc" is the installed grpc package.
        health_dir = os.path.join(_GEN, "health-proto")
        os.makedirs(os.path.join(health_dir, "clash_health"))
        shutil.copy(os.path.join(proto_dir, "grpc", "health", "v1", "health.proto"),
                    os.path.join(health_dir, "clash_health", "health.proto"))
        for includes, files in ((proto_dir, protos),
                                (health_dir, [os.path.join(health_dir, "clash_health",
                                                           "health.proto")])):
            subprocess.run(["protoc", "-I", includes, "--python_out", _GEN] + files, check=True)
            subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", includes,
                            "--grpc_python_out", _GEN] + files, check=True)
        sys.path.insert(0, _GEN)
    import importlib
    import grpc

    class Stubs:
        pass

    s = Stubs()
    for name in ("common", "parts", "scenes", "queries", "sequences"):
        setattr(s, f"{name}_pb2", importlib.import_module(f"clash.v1.{name}_pb2"))
        setattr(s, f"{name}_pb2_grpc", importlib.import_module(f"clash.v1.{name}_pb2_grpc"))
    s.health_pb2 = importlib.import_module("clash_health.health_pb2")
    s.health_pb2_grpc = importlib.import_module("clash_health.health_pb2_grpc")
    s.grpc = grpc
    return s


def remove_stubs():
    global _GEN
    if _GEN:
        shutil.rmtree(_GEN, ignore_errors=True)
        _GEN = ""


class Channel:
    """One channel with every service stub."""

    def __init__(self, pb, port):
        self.pb = pb
        self.channel = pb.grpc.insecure_channel(
            f"127.0.0.1:{port}",
            options=[("grpc.max_receive_message_length", 256 << 20),
                     ("grpc.max_send_message_length", 256 << 20)])
        pb.grpc.channel_ready_future(self.channel).result(timeout=60)
        self.parts = pb.parts_pb2_grpc.PartServiceStub(self.channel)
        self.scenes = pb.scenes_pb2_grpc.SceneServiceStub(self.channel)
        self.queries = pb.queries_pb2_grpc.QueryServiceStub(self.channel)
        self.sequences = pb.sequences_pb2_grpc.SequenceServiceStub(self.channel)
        self.health = pb.health_pb2_grpc.HealthStub(self.channel)

    def serving(self, service=""):
        r = self.health.Check(self.pb.health_pb2.HealthCheckRequest(service=service), timeout=10)
        return r.status == self.pb.health_pb2.HealthCheckResponse.SERVING

    def import_cad(self, data, file_name="upload.step", chunk=1 << 20, timeout=120, strict=False,
                   size_bytes=None, tessellation=None, wait_for_ready=False):
        """ImportCad with `data` streamed in chunks; returns the response or raises RpcError."""
        pb = self.pb

        def messages():
            header = pb.parts_pb2.ImportCadHeader(
                file_name=file_name, size_bytes=len(data) if size_bytes is None else size_bytes,
                strict=strict)
            if tessellation is not None:
                header.tessellation.CopyFrom(tessellation)
            yield pb.parts_pb2.ImportCadRequest(header=header)
            for i in range(0, len(data), chunk):
                yield pb.parts_pb2.ImportCadRequest(chunk=data[i:i + chunk])

        return self.parts.ImportCad(messages(), timeout=timeout, wait_for_ready=wait_for_ready)

    def close(self):
        self.channel.close()


def wait_for_port(proc, log_path, seconds=120):
    """The port that clashd, started with --listen HOST:0 and its stderr sent to `log_path`,
    logs it bound ("... (port N) ..."): no free port is guessed beforehand, so no other process
    can take it in between. None when `proc` exits or `seconds` pass first."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        with open(log_path, errors="replace") as f:
            m = re.search(r"\(port (\d+)\)", f.read())
        if m:
            return int(m.group(1))
        if proc.poll() is not None:
            return None
        time.sleep(0.02)
    return None


class Clashd:
    """A clashd process on a free loopback port with its own data folder and TMPDIR; stderr goes
    to a log file. The TMPDIR (inherited by clash-cad-worker) tells this server's workers and
    their temp folders from those of any other clashd on the machine."""

    def __init__(self, bin_dir, root, extra_args=()):
        self.bin_dir = bin_dir
        self.root = root
        self.data_dir = os.path.join(root, "data")
        # Without tokens every call is tenant "local", whose stores live here.
        self.store_dir = os.path.join(self.data_dir, "tenants", "local")
        self.tmpdir = os.path.join(root, "worker-tmp")
        os.makedirs(self.tmpdir, exist_ok=True)
        self.extra_args = list(extra_args)
        self.proc = None
        self.port = None
        self.starts = 0
        self.log_path = None

    def start(self, extra_args=()):
        self.starts += 1
        self.log_path = os.path.join(self.root, f"clashd-{self.starts}.log")
        env = dict(os.environ, TMPDIR=self.tmpdir)
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [os.path.join(self.bin_dir, "server", "clashd"), "--listen", "127.0.0.1:0",
                 "--metrics-listen", "", "--data-dir", self.data_dir,
                 *self.extra_args, *extra_args],
                stdout=subprocess.DEVNULL, stderr=log, env=env)
        self.port = wait_for_port(self.proc, self.log_path)
        if self.port is not None:
            return self
        if self.proc.poll() is None:
            self.kill9()
        raise RuntimeError(f"clashd did not start:\n{self.log()}")

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    @property
    def pid(self):
        return self.proc.pid

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=60)

    def terminate(self, timeout=120):
        """SIGTERM; returns (exit code, seconds to exit)."""
        start = time.time()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        return code, time.time() - start

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            return self.terminate()[0]
        return self.proc.returncode if self.proc else None

    def children(self):
        """Processes whose parent is this server."""
        return [p for p, ppid, _ in _processes() if ppid == self.proc.pid]

    def workers(self, include_idle=False):
        """Live clash-cad-worker processes started by this server (found by their TMPDIR, a
        folder under this server's root, so also orphans whose parent died); zombies are not
        counted. Pre-started workers still waiting for a job (named clash-cad-idle in
        /proc/PID/comm) count only with include_idle: a running server keeps a few of them."""
        out = []
        for pid, _, state in _processes():
            if state == "Z":
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{pid}/comm", "rb") as f:
                    idle = f.read().strip() == b"clash-cad-idle"
            except OSError:
                continue
            if not cmd or not cmd[0].endswith(b"clash-cad-worker"):
                continue
            if idle and not include_idle:
                continue
            if any(e.startswith(b"TMPDIR=" + self.root.encode() + b"/") for e in env):
                out.append(pid)
        return out

    def wait_no_workers(self, seconds=10, include_idle=False):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if not self.workers(include_idle):
                return []
            time.sleep(0.05)
        return self.workers(include_idle)

    def leftover_files(self):
        """Temporaries: .tmp-* files of the atomic writer in the stores, uploads and the
        workers' private folders in the tenant's tmp, anything in TMPDIR."""
        left = []
        for sub in ("parts", "assemblies", "scenes", "import-cache"):
            d = os.path.join(self.store_dir, sub)
            if os.path.isdir(d):
                left += [os.path.join(d, n) for n in os.listdir(d) if n.startswith(".tmp-")]
        tmp = os.path.join(self.store_dir, "tmp")
        if os.path.isdir(tmp):
            left += [os.path.join(tmp, n) for n in os.listdir(tmp)]
        left += [os.path.join(self.tmpdir, n) for n in os.listdir(self.tmpdir)]
        return left


def _processes():
    """(pid, ppid, state) of every process."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        out.append((int(name), int(rest[1]), rest[0]))
    return out


def box_mesh(size, origin=(0, 0, 0)):
    """Vertices and triangles (outward, counter-clockwise) of an axis-aligned box."""
    sx, sy, sz = size
    ox, oy, oz = origin
    v = [(ox + x, oy + y, oz + z) for z in (0, sz) for y in (0, sy) for x in (0, sx)]
    quads = [(0, 2, 3, 1), (4, 5, 7, 6), (0, 1, 5, 4), (2, 6, 7, 3), (0, 4, 6, 2), (1, 3, 7, 5)]
    tris = []
    for a, b, c, d in quads:
        tris += [a, b, c, a, c, d]
    return [c for p in v for c in p], tris


def upload_box(pb, ch, name, size, timeout=30):
    xyz, tris = box_mesh(size)
    return ch.parts.UploadMesh(pb.parts_pb2.UploadMeshRequest(
        name=name, vertices_mm=xyz, triangles=tris, face_ids=[i // 2 for i in range(12)]),
        timeout=timeout)


def pose(pb, x=0.0, y=0.0, z=0.0, quat=(1.0, 0.0, 0.0, 0.0)):
    p = pb.common_pb2.Pose(translation_mm=pb.common_pb2.Vec3(x=x, y=y, z=z))
    p.quaternion.w, p.quaternion.x, p.quaternion.y, p.quaternion.z = quat
    return p


def main(module_globals, *options):
    """Parses --bin-dir, --proto-dir and the test's own `options` ((flag, kwargs) pairs) into the
    test module's ARGS and runs its unittest cases."""
    import argparse
    import unittest
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--proto-dir", required=True)
    for flag, kwargs in options:
        parser.add_argument(flag, **kwargs)
    module_globals["ARGS"], rest = parser.parse_known_args()
    unittest.main(module=module_globals["__name__"], argv=[sys.argv[0]] + rest)
