#!/usr/bin/python3
"""RELIABILITY.md requirement 10: SIGTERM while clashd is busy.

On the project's sample assembly (clash-sample-assembly), sequence validations of
client/sample_sequence.json with escape directions for every step (the slowest query here,
~0.5 s each; without the directions under the sanitizers) and interference checks with pose
overrides are in flight, and an import that never ends (a 1.E+400 coordinate makes OCCT loop)
is running in a worker, when clashd gets SIGTERM. Then:
- a health Watch opened before sees NOT_SERVING;
- every in-flight query completes with OK and the same answer as before the signal;
- the endless import is cancelled when the grace period ends (CANCELLED or UNAVAILABLE), and its
  worker is killed;
- the process exits with code 0 after the grace period and within it plus a small slack;
- no clash-cad-worker of this server is left, no temporary file either.

The grace period is sized from a calibration run of one validation, so the test holds under
sanitizers (slower queries, longer grace).

Usage: sigterm_test.py --bin-dir BUILD_DIR --proto-dir PROTO_DIR --sequence SAMPLE_SEQUENCE_JSON
"""
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clashd_harness as h  # noqa: E402

ARGS = None
SCREW = "/usr/share/opencascade/data/step/screw.step"
SLACK_SECONDS = 3.0


class SigtermTest(unittest.TestCase):
    def setUp(self):
        self.pb = h.load_stubs(ARGS.proto_dir)
        self.tmp = tempfile.mkdtemp(prefix="clash-sigterm-")
        self.server = h.Clashd(ARGS.bin_dir, self.tmp)

    def tearDown(self):
        if self.server.proc is not None and self.server.proc.poll() is None:
            self.server.kill9()
        for pid in self.server.workers(include_idle=True):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def validate(self, ch, scene_id):
        from google.protobuf import json_format
        with open(ARGS.sequence) as f:
            request = json_format.Parse(f.read(), self.pb.sequences_pb2.ValidateSequenceRequest())
        request.scene_id = scene_id
        # Escape directions for every step: work enough to be in flight when the signal comes
        # (the sample's moves alone take ~0.1 s). Under the sanitizers the moves alone are slow
        # enough (and the directions would not fit in the test's time).
        request.all_free_directions = h.scale() >= 1
        summary = None
        steps = []
        for event in ch.sequences.ValidateSequence(request, timeout=600):
            if event.HasField("step"):
                steps.append(event.step.ok)
            if event.HasField("summary"):
                summary = event.summary
        return (tuple(steps), summary.steps_ok, summary.steps_blocked)

    def check_with_override(self, ch, scene_id, pin, timeout=120):
        pb = self.pb
        r = ch.queries.CheckInterference(pb.queries_pb2.InterferenceRequest(
            scene_id=scene_id, pose_overrides=[pb.scenes_pb2.PoseUpdate(
                instance_id=pin, pose=h.pose(pb, 200, 200, 200))]), timeout=timeout)
        return (r.summary.hard, r.summary.contact)

    def test_sigterm_drains_queries_cancels_imports_and_exits(self):
        pb, grpc = self.pb, self.pb.grpc
        sample = os.path.join(self.tmp, "sample.step")
        subprocess.run([os.path.join(ARGS.bin_dir, "geom", "cad", "clash-sample-assembly"),
                        sample], check=True, stdout=subprocess.DEVNULL)
        # Calibration: one validation's time sets the grace period.
        self.server.start()
        ch = h.Channel(pb, self.server.port)
        scene_id = ch.scenes.CreateScene(pb.scenes_pb2.CreateSceneRequest(name="sigterm"),
                                         timeout=30).scene_id
        with open(sample, "rb") as f:
            imported = ch.import_cad(f.read(), file_name="sample.step", timeout=300)
        ch.scenes.AddInstances(pb.scenes_pb2.AddInstancesRequest(
            scene_id=scene_id, assemblies=[pb.scenes_pb2.AssemblyPlacement(
                assembly_id=imported.assembly.assembly_id)]), timeout=30)
        pin = [i.instance_id for i in ch.scenes.ListInstances(pb.scenes_pb2.ListInstancesRequest(
            scene_id=scene_id), timeout=30).instances if i.path == "sample/pin"][0]
        start = time.time()
        expected_sequence = self.validate(ch, scene_id)
        one = time.time() - start
        expected_check = self.check_with_override(ch, scene_id, pin)
        self.assertEqual(expected_sequence[1:], (5, 1))
        self.assertEqual(expected_check[0], 0, "the pin moved away: no HARD clash")
        ch.close()
        self.assertEqual(self.server.stop(), 0)

        # Under the sanitizers (a validation takes ~1 min there) two of each suffice.
        validations = checks = 4 if h.scale() >= 1 else 2
        # Two query slots: the validations run two at a time, and all must fit in the grace,
        # with room for the checks and for a machine busier than during the calibration (CI runs
        # other tests beside this one: 3x that time once fell short, the drain cut a check).
        grace = max(4.0, 5.0 * one * validations / 2)
        print(f"one validation {one:.2f} s; --shutdown-grace-seconds {grace:.1f}", file=sys.stderr)
        # The server's own deadlines must not end the calls before the grace period does.
        cap = f"{grace + 300:.0f}"
        self.server.start(["--shutdown-grace-seconds", f"{grace:.1f}", "--max-query-seconds", cap,
                           "--max-sequence-seconds", cap, "--max-import-seconds", cap])
        ch = h.Channel(pb, self.server.port)
        self.assertTrue(ch.serving())

        # A health Watch opened before the signal.
        watch_events = queue.Queue()

        def watch():
            try:
                for r in ch.health.Watch(pb.health_pb2.HealthCheckRequest(service=""),
                                         timeout=grace + 60):
                    watch_events.put(r.status)
            except grpc.RpcError as e:
                watch_events.put(e.code().name)

        results = queue.Queue()

        def run(kind, fn):
            try:
                results.put((kind, "OK", fn()))
            except grpc.RpcError as e:
                results.put((kind, e.code().name, e.details()))

        with open(SCREW, "rb") as f:
            endless = f.read().replace(b"(-27.8196811084,0.423702927757,5.43633)",
                                       b"(1.E+400,0.423702927757,5.43633)", 1)
        threads = [threading.Thread(target=watch)]
        threads += [threading.Thread(target=run, args=(
            "import", lambda: ch.import_cad(endless, file_name="endless.step", timeout=600)))]
        threads += [threading.Thread(target=run, args=(
            "sequence", lambda: self.validate(ch, scene_id))) for _ in range(validations)]
        for t in threads:
            t.start()
        # The checks start once the validations hold both query slots: they wait in the queue.
        time.sleep(0.1)
        checkers = [threading.Thread(target=run, args=(
            "check", lambda: self.check_with_override(ch, scene_id, pin, grace + 120)))
            for _ in range(checks)]
        for t in checkers:
            t.start()
        threads += checkers
        # The import's worker runs and the queries are in flight.
        deadline = time.time() + 30
        while not self.server.workers() and time.time() < deadline:
            time.sleep(0.02)
        self.assertTrue(self.server.workers(), "the endless import's worker did not start")
        time.sleep(0.1)
        self.assertEqual(results.qsize(), 0, "queries finished before the signal: too fast "
                         "to test a drain")
        code, seconds = self.server.terminate(timeout=grace + 60)
        for t in threads:
            t.join(timeout=60)
        got = [results.get() for _ in range(results.qsize())]
        print(f"exit {code} after {seconds:.2f} s: {[(k, c) for k, c, _ in got]}",
              file=sys.stderr)

        self.assertEqual(code, 0, self.server.log()[-3000:])
        self.assertGreaterEqual(seconds, grace - 0.5, "exited before the grace period ended, "
                                "with an import in flight")
        self.assertLessEqual(seconds, grace + SLACK_SECONDS)
        self.assertEqual(len(got), 1 + validations + checks)
        for kind, status, value in got:
            if kind == "import":
                self.assertIn(status, ("CANCELLED", "UNAVAILABLE"), value)
            elif kind == "sequence":
                self.assertEqual((status, value), ("OK", expected_sequence))
            else:
                self.assertEqual((status, value), ("OK", expected_check))
        statuses = []
        while not watch_events.empty():
            statuses.append(watch_events.get())
        self.assertIn(pb.health_pb2.HealthCheckResponse.NOT_SERVING, statuses,
                      f"the health Watch saw {statuses}")
        self.assertEqual(self.server.workers(include_idle=True), [], "import worker left after exit")
        self.assertEqual(self.server.leftover_files(), [])
        log = self.server.log()
        self.assertIn("clashd stopped", log)
        ch.close()

    def test_a_second_signal_stops_at_once(self):
        """A second SIGTERM during the drain ends the process at once, call in flight or not."""
        pb = self.pb
        self.server.start(["--shutdown-grace-seconds", "300"])
        ch = h.Channel(pb, self.server.port)
        release = threading.Event()
        sent = threading.Event()

        def stalled_upload():
            # A header, then nothing: the call stays in flight, so the drain would wait 300 s.
            yield pb.parts_pb2.ImportCadRequest(
                header=pb.parts_pb2.ImportCadHeader(file_name="stalled.step"))
            sent.set()  # (gRPC asks for the next message once the header is on its way)
            release.wait(120)

        errors = []

        def call():
            try:
                ch.parts.ImportCad(stalled_upload(), timeout=120)
            except pb.grpc.RpcError as e:
                errors.append(e.code())

        t = threading.Thread(target=call)
        t.start()
        self.assertTrue(sent.wait(60))
        time.sleep(1.0)  # the server has the call
        self.server.proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        self.assertIsNone(self.server.proc.poll(), "the first signal drains: the call is in flight")
        self.server.proc.send_signal(signal.SIGTERM)
        code = self.server.proc.wait(timeout=30)
        self.assertEqual(code, 2)
        self.assertIn("again: stopping at once", self.server.log())
        release.set()
        t.join(60)
        self.assertEqual(len(errors), 1, "the cut-off call ended with an error")
        ch.close()


if __name__ == "__main__":
    h.main(globals(), ("--sequence", {"required": True}))
