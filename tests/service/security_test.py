#!/usr/bin/python3
"""Security of clashd as deployed: TLS, bearer tokens, tenants and per-tenant quotas.

Runs real clashd processes on loopback with certificates made for the test by the openssl
command (a CA, a server certificate for 127.0.0.1, client certificates from that CA and from a
stranger's CA) and a token file, and checks from Python (python3-grpcio) and through clashctl:
- every RPC of every service answers UNAUTHENTICATED without a token and with a wrong one;
  health answers without a token (the default), and needs one with --health-requires-token;
- tenant B never reads, lists, queries, edits or deletes tenant A's objects, also with random
  ids, and tenant A's objects are intact afterwards;
- a plaintext client against the TLS port fails; clashd refuses plaintext on a non-loopback
  address and TLS without authentication there;
- mutual TLS: no client certificate or one from another CA is refused, the certificate's
  common name is the tenant;
- per-tenant rate limit, storage quota and concurrent-import limit answer RESOURCE_EXHAUSTED;
- one tenant flooding the shared query slots and queue is refused beyond its concurrent-query
  limit, and another tenant's query is still served (refused without the limit);
- clashctl with --tls-ca and $CLASH_TOKEN (or --token-file) works, and without a token fails.

Usage: security_test.py --bin-dir DIR --proto-dir DIR
"""
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clashd_harness as h  # noqa: E402

ARGS = None
TOKEN_A = "token-of-tenant-a-" + "x" * 20
TOKEN_B = "token-of-tenant-b-" + "y" * 20


def sphere_mesh(r, n):
    """A closed UV sphere: n rings of 2n segments, poles shared."""
    import math
    v = [(0.0, 0.0, r)]
    for i in range(1, n):
        th = math.pi * i / n
        for j in range(2 * n):
            ph = 2 * math.pi * j / (2 * n)
            v.append((r * math.sin(th) * math.cos(ph), r * math.sin(th) * math.sin(ph),
                      r * math.cos(th)))
    v.append((0.0, 0.0, -r))
    south = len(v) - 1
    ring = lambda i, j: 1 + (i - 1) * 2 * n + (j % (2 * n))
    tris = []
    for j in range(2 * n):
        tris += [0, ring(1, j), ring(1, j + 1)]
        tris += [south, ring(n - 1, j + 1), ring(n - 1, j)]
    for i in range(1, n - 1):
        for j in range(2 * n):
            a, b2, c, d = ring(i, j), ring(i, j + 1), ring(i + 1, j), ring(i + 1, j + 1)
            tris += [a, c, d, a, d, b2]
    return [x for p in v for x in p], tris


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1/localhost, client certificates."""
    def ca(name):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)

    def leaf(name, cn, ca_name, server):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        ext = os.path.join(d, f"{name}.ext")
        with open(ext, "w") as f:
            if server:
                f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                        "extendedKeyUsage=serverAuth\n")
            else:
                f.write("extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca_name}.pem",
                "-CAkey", f"{ca_name}.key", "-CAcreateserial", "-days", "2",
                "-extfile", ext, "-out", f"{name}.pem", cwd=d)

    ca("ca")
    ca("stranger-ca")
    leaf("server", "clashd", "ca", True)
    leaf("client-b", "tenant-b", "ca", False)
    leaf("client-stranger", "tenant-b", "stranger-ca", False)


def start_clashd(tmp, *flags):
    """A clashd of the shared harness, in its own folder under `tmp`."""
    return h.Clashd(ARGS.bin_dir, tempfile.mkdtemp(prefix="clashd-", dir=tmp), flags).start()


class SecurityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="clash-sec-")
        cls.pb = h.load_stubs(ARGS.proto_dir)
        cls.pki = os.path.join(cls.tmp, "pki")
        os.makedirs(cls.pki)
        make_pki(cls.pki)
        cls.tokens = os.path.join(cls.tmp, "tokens")
        with open(cls.tokens, "w") as f:
            f.write("# sha256 of the token, tenant\n")
            for token, tenant in ((TOKEN_A, "tenant-a"), (TOKEN_B, "tenant-b")):
                f.write(f"{hashlib.sha256(token.encode()).hexdigest()} {tenant}\n")
        cls.server = start_clashd(cls.tmp, *cls.tls_flags(), "--tokens", cls.tokens)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tls_flags(cls):
        return ["--tls-cert", os.path.join(cls.pki, "server.pem"),
                "--tls-key", os.path.join(cls.pki, "server.key")]

    def channel(self, server=None, cert=None, tls=True):
        import grpc
        server = server or self.server
        target = f"127.0.0.1:{server.port}"
        if not tls:
            return grpc.insecure_channel(target)
        with open(os.path.join(self.pki, "ca.pem"), "rb") as f:
            root = f.read()
        key = chain = None
        if cert:
            with open(os.path.join(self.pki, cert + ".key"), "rb") as f:
                key = f.read()
            with open(os.path.join(self.pki, cert + ".pem"), "rb") as f:
                chain = f.read()
        creds = grpc.ssl_channel_credentials(root_certificates=root, private_key=key,
                                             certificate_chain=chain)
        return grpc.secure_channel(target, creds)

    def stubs(self, channel):
        pb = self.pb
        return {"parts": pb.parts_pb2_grpc.PartServiceStub(channel),
                "scenes": pb.scenes_pb2_grpc.SceneServiceStub(channel),
                "queries": pb.queries_pb2_grpc.QueryServiceStub(channel),
                "sequences": pb.sequences_pb2_grpc.SequenceServiceStub(channel),
                "health": pb.health_pb2_grpc.HealthStub(channel)}

    @staticmethod
    def md(token):
        return [("authorization", f"Bearer {token}")] if token is not None else []

    def every_method(self):
        """(path, request class, client streaming, server streaming) of every RPC."""
        from clash.v1 import parts_pb2, queries_pb2, scenes_pb2, sequences_pb2
        from google.protobuf import symbol_database
        db = symbol_database.Default()
        out = []
        for module in (parts_pb2, scenes_pb2, queries_pb2, sequences_pb2):
            for service in module.DESCRIPTOR.services_by_name.values():
                for m in service.methods:
                    req = db.GetSymbol(m.input_type.full_name)
                    out.append((f"/{service.full_name}/{m.name}", req,
                                m.client_streaming if hasattr(m, "client_streaming") else
                                m.name == "ImportCad",
                                m.server_streaming if hasattr(m, "server_streaming") else
                                m.name == "ValidateSequence"))
        return out

    def call_raw(self, channel, path, req_cls, client_stream, server_stream, metadata):
        import grpc
        ser = req_cls.SerializeToString
        if client_stream:
            fn = channel.stream_unary(path, request_serializer=ser,
                                      response_deserializer=lambda b: b)
            return fn(iter([req_cls()]), metadata=metadata, timeout=30)
        if server_stream:
            fn = channel.unary_stream(path, request_serializer=ser,
                                      response_deserializer=lambda b: b)
            return list(fn(req_cls(), metadata=metadata, timeout=30))
        fn = channel.unary_unary(path, request_serializer=ser, response_deserializer=lambda b: b)
        return fn(req_cls(), metadata=metadata, timeout=30)

    def test_every_rpc_needs_a_valid_token(self):
        import grpc
        ch = self.channel()
        methods = self.every_method()
        self.assertGreaterEqual(len(methods), 19)  # every RPC of the four clash.v1 services
        for path, req, cs, ss in methods:
            for label, md in (("no token", []), ("wrong token", self.md("wrong")),
                              ("not bearer", [("authorization", "Basic " + TOKEN_A)]),
                              ("empty bearer", [("authorization", "Bearer ")])):
                with self.subTest(rpc=path, case=label):
                    with self.assertRaises(grpc.RpcError) as e:
                        self.call_raw(ch, path, req, cs, ss, md)
                    self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                    self.assertNotIn(TOKEN_A, e.exception.details() or "")
        # The tokens never reach the log.
        self.server.proc.poll()
        self.assertIsNone(self.server.proc.returncode)
        self.assertNotIn(TOKEN_A, self.server.log())
        ch.close()

    def test_health_is_open_by_default_and_closed_on_request(self):
        import grpc
        ch = self.channel()
        health = self.stubs(ch)["health"]
        r = health.Check(self.pb.health_pb2.HealthCheckRequest(), timeout=10)
        self.assertEqual(r.status, self.pb.health_pb2.HealthCheckResponse.SERVING)
        r = health.Check(self.pb.health_pb2.HealthCheckRequest(service="clash.v1.QueryService"),
                         timeout=10)
        self.assertEqual(r.status, self.pb.health_pb2.HealthCheckResponse.SERVING)
        with self.assertRaises(grpc.RpcError) as e:
            health.Check(self.pb.health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        ch.close()

        # (Set in a config file: its keys are the long flags' names.)
        config = os.path.join(self.tmp, "closed-health.toml")
        with open(config, "w") as f:
            f.write("health-requires-token = true\n")
        closed = start_clashd(self.tmp, *self.tls_flags(), "--tokens", self.tokens,
                              "--config", config)
        try:
            ch = self.channel(closed)
            health = self.stubs(ch)["health"]
            with self.assertRaises(grpc.RpcError) as e:
                health.Check(self.pb.health_pb2.HealthCheckRequest(), timeout=10)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            r = health.Check(self.pb.health_pb2.HealthCheckRequest(), metadata=self.md(TOKEN_B),
                             timeout=10)
            self.assertEqual(r.status, self.pb.health_pb2.HealthCheckResponse.SERVING)
            ch.close()
        finally:
            closed.stop()

    def test_tenants_never_see_each_other(self):
        import grpc
        from clash.v1 import (common_pb2, parts_pb2, queries_pb2, scenes_pb2,
                              sequences_pb2)
        ch = self.channel()
        s = self.stubs(ch)
        a, b = self.md(TOKEN_A), self.md(TOKEN_B)
        v, t = h.box_mesh((10, 10, 10))
        part = s["parts"].UploadMesh(parts_pb2.UploadMeshRequest(name="a-box", vertices_mm=v,
                                                                 triangles=t), metadata=a,
                                     timeout=30)
        scene = s["scenes"].CreateScene(scenes_pb2.CreateSceneRequest(name="a-scene"),
                                        metadata=a, timeout=30)
        placed = s["scenes"].AddInstances(scenes_pb2.AddInstancesRequest(
            scene_id=scene.scene_id,
            parts=[scenes_pb2.PartPlacement(part_id=part.part_id, name="one"),
                   scenes_pb2.PartPlacement(part_id=part.part_id, name="two")]),
            metadata=a, timeout=30)
        ids = [i.instance_id for i in placed.instances]

        rng = random.Random(7)
        random_scene = "s" + "".join(rng.choice("0123456789abcdef") for _ in range(32))
        random_part = "p" + "".join(rng.choice("0123456789abcdef") for _ in range(32))
        nf = grpc.StatusCode.NOT_FOUND
        for scene_id in (scene.scene_id, random_scene):
            calls = {
                "GetScene": lambda: s["scenes"].GetScene(
                    scenes_pb2.GetSceneRequest(scene_id=scene_id), metadata=b, timeout=30),
                "ListInstances": lambda: s["scenes"].ListInstances(
                    scenes_pb2.ListInstancesRequest(scene_id=scene_id), metadata=b, timeout=30),
                "SetPoses": lambda: s["scenes"].SetPoses(scenes_pb2.SetPosesRequest(
                    scene_id=scene_id, poses=[scenes_pb2.PoseUpdate(instance_id=ids[0])]),
                    metadata=b, timeout=30),
                "RemoveInstances": lambda: s["scenes"].RemoveInstances(
                    scenes_pb2.RemoveInstancesRequest(scene_id=scene_id, instance_ids=ids),
                    metadata=b, timeout=30),
                "AddInstances": lambda: s["scenes"].AddInstances(scenes_pb2.AddInstancesRequest(
                    scene_id=scene_id, parts=[scenes_pb2.PartPlacement(part_id=part.part_id)]),
                    metadata=b, timeout=30),
                "CheckInterference": lambda: s["queries"].CheckInterference(
                    queries_pb2.InterferenceRequest(scene_id=scene_id), metadata=b, timeout=30),
                "ComputeDistance": lambda: s["queries"].ComputeDistance(
                    queries_pb2.DistanceRequest(scene_id=scene_id), metadata=b, timeout=30),
                "PickRays": lambda: s["queries"].PickRays(
                    queries_pb2.PickRequest(scene_id=scene_id), metadata=b, timeout=30),
                "ValidateSequence": lambda: list(s["sequences"].ValidateSequence(
                    sequences_pb2.ValidateSequenceRequest(scene_id=scene_id), metadata=b,
                    timeout=30)),
                "DeleteScene": lambda: s["scenes"].DeleteScene(
                    scenes_pb2.DeleteSceneRequest(scene_id=scene_id), metadata=b, timeout=30),
            }
            for name, call in calls.items():
                with self.subTest(rpc=name, scene=scene_id):
                    with self.assertRaises(grpc.RpcError) as e:
                        call()
                    self.assertEqual(e.exception.code(), nf, e.exception.details())
        # An unused part of A's is out of B's reach too, and so are assemblies.
        v2, t2 = h.box_mesh((3, 3, 3))
        unused = s["parts"].UploadMesh(parts_pb2.UploadMeshRequest(name="a-spare",
                                                                   vertices_mm=v2,
                                                                   triangles=t2),
                                       metadata=a, timeout=30)
        random_assembly = "a" + "".join(rng.choice("0123456789abcdef") for _ in range(32))
        with self.assertRaises(grpc.RpcError) as e:
            s["parts"].DeleteAssembly(parts_pb2.DeleteAssemblyRequest(
                assembly_id=random_assembly), metadata=b, timeout=30)
        self.assertEqual(e.exception.code(), nf)
        for part_id in (part.part_id, unused.part_id, random_part):
            with self.assertRaises(grpc.RpcError) as e:
                s["parts"].GetPart(parts_pb2.GetPartRequest(part_id=part_id), metadata=b,
                                   timeout=30)
            self.assertEqual(e.exception.code(), nf)
            with self.assertRaises(grpc.RpcError) as e:
                s["parts"].DeletePart(parts_pb2.DeletePartRequest(part_id=part_id), metadata=b,
                                      timeout=30)
            self.assertEqual(e.exception.code(), nf)
        self.assertEqual(len(s["scenes"].ListScenes(scenes_pb2.ListScenesRequest(), metadata=b,
                                                    timeout=30).scenes), 0)
        self.assertEqual(len(s["parts"].ListParts(parts_pb2.ListPartsRequest(), metadata=b,
                                                  timeout=30).parts), 0)
        self.assertEqual(s["parts"].GetPart(parts_pb2.GetPartRequest(part_id=unused.part_id),
                                            metadata=a, timeout=30).name, "a-spare")

        # Tenant A's objects are intact and answer; the boxes overlap fully (same pose).
        got = s["scenes"].ListInstances(scenes_pb2.ListInstancesRequest(scene_id=scene.scene_id),
                                        metadata=a, timeout=30)
        self.assertEqual(sorted(i.instance_id for i in got.instances), sorted(ids))
        check = s["queries"].CheckInterference(
            queries_pb2.InterferenceRequest(scene_id=scene.scene_id), metadata=a, timeout=30)
        self.assertEqual(len(check.clashes), 1)
        listed = s["scenes"].ListScenes(scenes_pb2.ListScenesRequest(), metadata=a, timeout=30)
        self.assertIn(scene.scene_id, [x.scene_id for x in listed.scenes])
        # Tenant B uploading the same mesh gets its own copy (same content id, own store).
        part_b = s["parts"].UploadMesh(parts_pb2.UploadMeshRequest(name="b-box", vertices_mm=v,
                                                                   triangles=t), metadata=b,
                                       timeout=30)
        self.assertEqual(part_b.part_id, part.part_id)
        self.assertEqual(s["parts"].GetPart(parts_pb2.GetPartRequest(part_id=part.part_id),
                                            metadata=a, timeout=30).name, "a-box")
        # On disk, each tenant has its own folder.
        tenants = os.path.join(self.server.data_dir, "tenants")
        self.assertTrue(os.path.isdir(os.path.join(tenants, "tenant-a")))
        self.assertTrue(os.path.isdir(os.path.join(tenants, "tenant-b")))
        ch.close()

    def test_plaintext_client_against_the_tls_port_fails(self):
        import grpc
        from clash.v1 import scenes_pb2
        ch = self.channel(tls=False)
        with self.assertRaises(grpc.RpcError) as e:
            self.stubs(ch)["scenes"].ListScenes(scenes_pb2.ListScenesRequest(),
                                                metadata=self.md(TOKEN_A), timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        ch.close()

    def test_clashd_refuses_unsafe_listeners(self):
        clashd = os.path.join(ARGS.bin_dir, "server", "clashd")
        data = tempfile.mkdtemp(prefix="refuse-", dir=self.tmp)
        for flags, why in ((["--listen", "0.0.0.0:0"], "not a loopback address"),
                           (["--listen", "0.0.0.0:0"] + self.tls_flags(), "without authentication"),
                           (["--tls-cert", os.path.join(self.pki, "server.pem")],
                            "both --tls-cert and --tls-key")):
            with self.subTest(flags=flags):
                listen = [] if "--listen" in flags else ["--listen", "127.0.0.1:0"]
                r = subprocess.run([clashd, "--metrics-listen", "", "--data-dir", data,
                                    *listen, *flags],
                                   capture_output=True, text=True, timeout=60)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(why, r.stderr)
        # A config file's misspelt key (which would leave health open) is refused, not ignored.
        typo = os.path.join(self.tmp, "typo.toml")
        with open(typo, "w") as f:
            f.write("health-requires-tokn = true\n")
        r = subprocess.run([clashd, "--metrics-listen", "", "--data-dir", data, "--listen",
                            "127.0.0.1:0", "--config", typo],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("health-requires-tokn", r.stderr)
        bad_tokens = os.path.join(self.tmp, "bad-tokens")
        with open(bad_tokens, "w") as f:
            f.write("not-a-hash tenant\n")
        r = subprocess.run([clashd, "--metrics-listen", "", "--data-dir", data, "--tokens",
                            bad_tokens], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("line 1", r.stderr)

    def test_mutual_tls_names_the_tenant(self):
        import grpc
        from clash.v1 import scenes_pb2
        mtls = start_clashd(self.tmp, *self.tls_flags(), "--tls-client-ca",
                      os.path.join(self.pki, "ca.pem"))
        try:
            for cert in (None, "client-stranger"):
                ch = self.channel(mtls, cert=cert)
                with self.subTest(cert=cert):
                    with self.assertRaises(grpc.RpcError) as e:
                        self.stubs(ch)["scenes"].ListScenes(scenes_pb2.ListScenesRequest(),
                                                            timeout=5)
                    self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
                ch.close()
            ch = self.channel(mtls, cert="client-b")
            scene = self.stubs(ch)["scenes"].CreateScene(
                scenes_pb2.CreateSceneRequest(name="by-cert"), timeout=30)
            self.assertTrue(scene.scene_id.startswith("s"))
            self.assertTrue(os.path.isdir(os.path.join(mtls.data_dir, "tenants", "tenant-b")))
            ch.close()
        finally:
            mtls.stop()

    def test_rate_storage_and_import_quotas(self):
        import grpc
        from clash.v1 import parts_pb2, scenes_pb2
        q = start_clashd(self.tmp, *self.tls_flags(), "--tokens", self.tokens,
                   "--tenant-requests-per-second", "2", "--tenant-burst", "5",
                   "--tenant-max-storage-bytes", "200000",
                   "--tenant-max-concurrent-imports", "1")
        try:
            ch = self.channel(q)
            s = self.stubs(ch)
            a, b = self.md(TOKEN_A), self.md(TOKEN_B)
            codes = []
            for _ in range(12):
                try:
                    s["scenes"].ListScenes(scenes_pb2.ListScenesRequest(), metadata=a, timeout=10)
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as e:
                    codes.append(e.code())
            self.assertGreaterEqual(codes.count(grpc.StatusCode.OK), 5)
            self.assertIn(grpc.StatusCode.RESOURCE_EXHAUSTED, codes)
            self.assertEqual(set(codes), {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED})
            # Tenant B's budget is its own.
            s["scenes"].ListScenes(scenes_pb2.ListScenesRequest(), metadata=b, timeout=10)
            time.sleep(3)  # tenant A's bucket refills

            # Storage: a mesh of ~30 kB fits, enough of them do not.
            results = []
            for i in range(12):
                v, t = sphere_mesh(10 + i, 40)  # 3120 triangles, distinct per i
                try:
                    s["parts"].UploadMesh(parts_pb2.UploadMeshRequest(
                        name=f"m{i}", vertices_mm=v, triangles=t), metadata=b, timeout=10)
                    results.append(grpc.StatusCode.OK)
                except grpc.RpcError as e:
                    results.append(e.code())
                time.sleep(0.5)
            self.assertIn(grpc.StatusCode.OK, results)
            self.assertIn(grpc.StatusCode.RESOURCE_EXHAUSTED, results, results)

            # Imports: a second import of the same tenant while one is open is refused.
            gate = threading.Event()

            def slow_upload():
                yield parts_pb2.ImportCadRequest(header=parts_pb2.ImportCadHeader(
                    file_name="slow.step"))
                gate.wait(20)
                yield parts_pb2.ImportCadRequest(chunk=b"ISO-10303-21;\n")

            first = s["parts"].ImportCad.future(slow_upload(), metadata=a, timeout=30)
            # Until the first holds the tenant's import, a second one is admitted (and fails
            # on its empty file): try until it is refused for the import, rather than trust one
            # sleep, spaced to stay under the tenant's 2 calls per second.
            refused = None
            for _ in range(25):
                time.sleep(0.6)
                try:
                    s["parts"].ImportCad(iter([parts_pb2.ImportCadRequest(
                        header=parts_pb2.ImportCadHeader(file_name="x.step"))]), metadata=a,
                        timeout=10)
                except grpc.RpcError as err:
                    if (err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and
                            "imports running" in err.details()):
                        refused = err
                        break
            self.assertIsNotNone(refused, "a second import of the tenant was never refused")
            gate.set()
            with self.assertRaises(grpc.RpcError) as e:
                first.result()  # a one-line "STEP file" does not import
            self.assertNotIn(e.exception.code(), (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                  grpc.StatusCode.UNAUTHENTICATED))
            ch.close()
        finally:
            q.stop()

    def test_one_tenants_query_flood_does_not_starve_another(self):
        """--tenant-max-concurrent-queries: tenant A flooding the shared query pool (one slot,
        six waiting) with long interference checks is refused beyond its own 2 queries, and
        tenant B's check still gets a place. The same flood against a clashd without the
        per-tenant cap (0) fills the pool, and B's check is refused there: the test would fail
        without the cap."""
        import grpc
        from clash.v1 import common_pb2, parts_pb2, queries_pb2, scenes_pb2
        exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
        a, b = self.md(TOKEN_A), self.md(TOKEN_B)
        tolerance = iter(range(1, 1 << 20))  # a fresh contact tolerance per check: no pair cache

        def request(scene_id):
            return queries_pb2.InterferenceRequest(
                scene_id=scene_id, page_size=10, tolerances=queries_pb2.Tolerances(
                    contact_tolerance_mm=0.01 * next(tolerance)))

        def check(stub, scene_id, md, **kwargs):
            return stub.CheckInterference(request(scene_id), metadata=md, **kwargs)

        def setup(server, instances):
            """Tenant A's scene of overlapping spheres, grown until its whole-scene check takes
            half a second or more, and tenant B's of two boxes."""
            ch = self.channel(server)
            s = self.stubs(ch)
            v, t = sphere_mesh(20, 40)
            part = s["parts"].UploadMesh(parts_pb2.UploadMeshRequest(
                name="ball", vertices_mm=v, triangles=t), metadata=a, timeout=60).part_id
            scene = s["scenes"].CreateScene(scenes_pb2.CreateSceneRequest(name="flood"),
                                            metadata=a, timeout=30).scene_id
            placed = 0
            for _ in range(4):
                s["scenes"].AddInstances(scenes_pb2.AddInstancesRequest(
                    scene_id=scene, parts=[scenes_pb2.PartPlacement(
                        part_id=part, name=f"ball{k}", pose=common_pb2.Pose(
                            translation_mm=common_pb2.Vec3(x=1.5 * (k % 8), y=1.5 * (k // 8),
                                                           z=0.7 * (k % 3))))
                        for k in range(placed, instances)]), metadata=a, timeout=30)
                placed = instances
                start = time.time()
                r = check(s["queries"], scene, a, timeout=120)
                seconds = time.time() - start
                print(f"\n  tenant A: {instances} instances, {r.summary.candidate_pairs} pairs, "
                      f"whole-scene check {seconds:.2f} s", file=sys.stderr)
                self.assertEqual(r.summary.cached_pairs, 0)
                if seconds >= 0.5:
                    break
                instances = min(160, int(instances * min(2.0, (0.5 / max(seconds, 0.01))
                                                         ** 0.5 * 1.5)) + 1)
            v, t = h.box_mesh((10, 10, 10))
            box = s["parts"].UploadMesh(parts_pb2.UploadMeshRequest(
                name="box", vertices_mm=v, triangles=t), metadata=b, timeout=60).part_id
            b_scene = s["scenes"].CreateScene(scenes_pb2.CreateSceneRequest(name="small"),
                                              metadata=b, timeout=30).scene_id
            s["scenes"].AddInstances(scenes_pb2.AddInstancesRequest(
                scene_id=b_scene, parts=[scenes_pb2.PartPlacement(part_id=box, name="one"),
                                         scenes_pb2.PartPlacement(part_id=box, name="two")]),
                metadata=b, timeout=30)
            ch.close()
            return scene, b_scene, seconds, placed

        def flood(server, scene, b_scene, calls):
            """A's `calls` checks at once; once one of them is refused (the pool or A's share is
            full), one check of B. Returns A's futures, B's response or RpcError, B's seconds."""
            ch_a, ch_b = self.channel(server), self.channel(server)
            qa, qb = self.stubs(ch_a)["queries"], self.stubs(ch_b)["queries"]
            futures = [qa.CheckInterference.future(request(scene), metadata=a, timeout=120)
                       for _ in range(calls)]
            deadline = time.time() + 60
            while time.time() < deadline and not any(
                    f.done() and f.exception() is not None and f.exception().code() == exhausted
                    for f in futures):
                time.sleep(0.002)
            start = time.time()
            try:
                got_b = check(qb, b_scene, b, timeout=120)
            except grpc.RpcError as e:
                got_b = e
            return futures, got_b, time.time() - start, (ch_a, ch_b)

        # With the cap: A has 2 queries running or waiting, B's check is served.
        capped = start_clashd(self.tmp, *self.tls_flags(), "--tokens", self.tokens,
                              "--query-slots", "1", "--query-queue", "6", "--query-helpers", "0",
                              "--max-query-seconds", "600",
                              "--tenant-max-concurrent-queries", "2")
        try:
            # (Fewer to start with under the sanitizers, where each pair takes ~100x longer.)
            scene, b_scene, seconds, instances = setup(capped, h.scaled(24, minimum=3))
            self.assertGreaterEqual(seconds, 0.2, "tenant A's check is too quick to flood with")
            start = time.time()
            futures, got_b, b_seconds, channels = flood(capped, scene, b_scene, 10)
            self.assertNotIsInstance(got_b, grpc.RpcError,
                                     f"tenant B refused with the per-tenant cap: {got_b}")
            self.assertEqual(len(got_b.clashes), 1)
            codes = []
            for f in futures:
                try:
                    r = f.result(timeout=120)
                    self.assertEqual(r.summary.instances, instances)
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as e:
                    codes.append(e.code())
                    self.assertEqual(e.code(), exhausted, e.details())
                    self.assertIn("queries running or waiting", e.details())
            print(f"  with the cap: tenant B's check {b_seconds:.2f} s; tenant A's 10 checks: "
                  f"{codes.count(grpc.StatusCode.OK)} served, {codes.count(exhausted)} refused, "
                  f"all done in {time.time() - start:.2f} s", file=sys.stderr)
            # 2 at once; a third only if one finished before the last of the 10 arrived.
            self.assertGreaterEqual(codes.count(grpc.StatusCode.OK), 2, codes)
            self.assertGreaterEqual(codes.count(exhausted), 5, codes)
            for ch in channels:
                ch.close()
        finally:
            capped.stop()

        # Without it (0): A's flood fills the slot and the queue, and B's check is refused.
        open_pool = start_clashd(self.tmp, *self.tls_flags(), "--tokens", self.tokens,
                                 "--query-slots", "1", "--query-queue", "6",
                                 "--max-query-seconds", "600",
                                 "--query-helpers", "0", "--tenant-max-concurrent-queries", "0")
        try:
            scene, b_scene, seconds, instances = setup(open_pool, instances)
            futures, got_b, b_seconds, channels = flood(open_pool, scene, b_scene, 10)
            self.assertIsInstance(got_b, grpc.RpcError,
                                  "tenant B was served although tenant A filled the pool")
            self.assertEqual(got_b.code(), exhausted, got_b.details())
            self.assertIn("queue full", got_b.details())
            refused = [f for f in futures if f.done() and f.exception() is not None]
            self.assertTrue(refused)
            for f in refused:
                self.assertIn("queue full", f.exception().details())
            print(f"  without the cap: tenant B refused in {b_seconds:.2f} s "
                  f"({got_b.details()}); tenant A had {len(refused)} refused", file=sys.stderr)
            for f in futures:
                f.cancel()
            for ch in channels:
                ch.close()
        finally:
            open_pool.stop()

    def test_clashctl_with_tls_and_token(self):
        ctl = os.path.join(ARGS.bin_dir, "client", "clashctl")
        base = [ctl, "--server", f"127.0.0.1:{self.server.port}", "--tls-ca",
                os.path.join(self.pki, "ca.pem")]
        env = dict(os.environ)
        env.pop("CLASH_TOKEN", None)
        env.pop("CLASH_TOKEN_FILE", None)
        r = subprocess.run(base + ["scene", "list"], capture_output=True, text=True, env=env,
                           timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("UNAUTHENTICATED", r.stderr)
        r = subprocess.run(base + ["health"], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("SERVING", r.stdout)
        r = subprocess.run(base + ["scene", "create", "from-ctl"], capture_output=True, text=True,
                           env=dict(env, CLASH_TOKEN=TOKEN_A), timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        token_file = os.path.join(self.tmp, "token-a")
        with open(token_file, "w") as f:
            f.write(TOKEN_A + "\n")
        r = subprocess.run(base + ["--token-file", token_file, "scene", "list"],
                           capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("from-ctl", r.stdout)
        # A token is never sent in plaintext to a non-loopback address.
        r = subprocess.run([ctl, "--server", "192.0.2.1:50051", "scene", "list"],
                           capture_output=True, text=True, env=dict(env, CLASH_TOKEN=TOKEN_A),
                           timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("plaintext", r.stderr)


if __name__ == "__main__":
    if shutil.which("openssl") is None:
        print("openssl not installed: skipping")
        sys.exit(77)
    h.main(globals())
