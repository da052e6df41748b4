#!/usr/bin/python3
"""The Docker deployment without a Docker engine (CI has none).

Checks docker/Dockerfile and docker/compose.yaml against the repository, then runs the image's
build and runtime steps through the same scripts the Dockerfile runs:
- every COPY source and every script a RUN names exists; both stages are debian:bookworm-slim;
  the runtime stage runs as a non-root USER, has a VOLUME, a HEALTHCHECK and STOPSIGNAL SIGTERM;
- compose builds that Dockerfile, passes only flags clashd knows, mounts a named volume, sets
  resource limits and a stop grace period at least 10 s above clashd's shutdown grace;
- docker/build.sh --install-only installs the executables, entrypoint and health check into a
  prefix; docker/runtime-deps.sh check finds every shared library they need in the packages
  the runtime stage installs;
- the installed entrypoint starts clashd, the installed health check answers SERVING, and
  SIGTERM stops it with exit code 0 within the grace period.

Usage: docker_check.py --repo DIR --build-dir DIR
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "service"))
from clashd_harness import wait_for_port  # noqa: E402

ARGS = None


def dockerfile_instructions(path):
    """(instruction, arguments) with continuation lines joined and comments dropped."""
    out, cur = [], ""
    with open(path) as f:
        for line in f:
            s = line.rstrip("\n")
            if not cur and (not s.strip() or s.lstrip().startswith("#")):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    return out


class DockerCheck(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = os.path.abspath(ARGS.repo)
        cls.dockerfile = os.path.join(cls.repo, "docker", "Dockerfile")
        cls.compose = os.path.join(cls.repo, "docker", "compose.yaml")
        cls.ins = dockerfile_instructions(cls.dockerfile)
        with open(cls.compose) as f:
            cls.compose_text = f.read()
        cls.tmp = tempfile.mkdtemp(prefix="clash-docker-")
        cls.prefix = os.path.join(cls.tmp, "opt-clashd")
        r = subprocess.run(["bash", os.path.join(cls.repo, "docker", "build.sh"), "--build-dir",
                            ARGS.build_dir, "--prefix", cls.prefix, "--install-only"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("docker/build.sh --install-only failed:\n" + r.stdout + r.stderr)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_dockerfile_names_only_what_exists(self):
        stages = [a for i, a in self.ins if i == "FROM"]
        self.assertEqual(len(stages), 2)
        for s in stages:
            self.assertTrue(s.startswith("debian:bookworm-slim"), s)
        scripts = 0
        for ins, arg in self.ins:
            if ins == "COPY" and "--from=" not in arg:
                for src in shlex.split(arg)[:-1]:
                    self.assertTrue(os.path.exists(os.path.join(self.repo, src)), src)
            if ins == "RUN":
                for script in re.findall(r"(?:bash|sh)\s+([\w./-]+\.sh)", arg):
                    if script.startswith("/tmp/"):  # copied there by a COPY checked above
                        continue
                    scripts += 1
                    self.assertTrue(os.path.isfile(os.path.join(self.repo, script)), script)
        self.assertGreaterEqual(scripts, 2)  # the CI install script and docker/build.sh
        with open(self.dockerfile) as f:
            self.assertIn(".ci/install-deps.sh", f.read())
        runtime = self.ins[[i for i, (w, _) in enumerate(self.ins) if w == "FROM"][1]:]
        words = {w: a for w, a in runtime}
        self.assertIn("USER", words)
        self.assertNotIn(words["USER"].split(":")[0], ("root", "0"))
        self.assertIn("VOLUME", words)
        self.assertEqual(words.get("STOPSIGNAL"), "SIGTERM")
        self.assertIn("HEALTHCHECK", words)
        # The paths the runtime stage runs are what docker/build.sh installs.
        for w in ("HEALTHCHECK", "ENTRYPOINT"):
            for path in re.findall(r"/opt/clashd/bin/[\w-]+", words[w]):
                local = os.path.join(self.prefix, os.path.relpath(path, "/opt/clashd"))
                self.assertTrue(os.access(local, os.X_OK), f"{w}: {path} not installed")

    def test_compose_matches_the_image_and_clashd(self):
        c = self.compose_text
        self.assertRegex(c, r"dockerfile:\s*docker/Dockerfile")
        context = re.search(r"context:\s*(\S+)", c).group(1)
        self.assertTrue(os.path.isfile(os.path.join(self.repo, "docker", context, "docker",
                                                    "Dockerfile")))
        help_text = subprocess.run([os.path.join(self.prefix, "bin", "clashd"), "--help"],
                                   capture_output=True, text=True).stdout
        flags = re.findall(r"^\s*-\s*(--[\w-]+)", c, re.M)
        self.assertGreaterEqual(len(flags), 5)
        for flag in flags:
            self.assertIn(flag, help_text, f"compose passes {flag}, which clashd does not know")
        for needed in ("--tls-cert", "--tls-key", "--tokens"):
            self.assertIn(needed, flags)
        self.assertRegex(c, r"clashd-data:/var/lib/clashd/data")
        self.assertRegex(c, r"memory:\s*\S+")
        self.assertRegex(c, r"pids:\s*\d+")
        grace = float(re.search(r'CLASHD_SHUTDOWN_GRACE_SECONDS:\s*"?(\d+)', c).group(1))
        stop = float(re.search(r"stop_grace_period:\s*(\d+)s", c).group(1))
        self.assertGreaterEqual(stop, grace + 10)
        self.assertIn("/opt/clashd/bin/clashd-healthcheck", c)

    def test_runtime_stage_has_every_library(self):
        r = subprocess.run(["bash", os.path.join(self.repo, "docker", "runtime-deps.sh"), "check",
                            self.prefix], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def start_entrypoint(self, args, env, log_name):
        """clashd through the entrypoint on a port of its own choosing, which it logs
        (tests/service/clashd_harness.py); sets env's CLASHD_HEALTH_ADDRESS to it. The process is
        killed at the end of the test if it still runs."""
        log_path = os.path.join(self.tmp, log_name)
        with open(log_path, "w") as log:
            proc = subprocess.Popen([os.path.join(self.prefix, "bin", "clashd-entrypoint"),
                                     "--listen", "127.0.0.1:0", "--metrics-listen", ""] + args,
                                    env=env, stdout=subprocess.DEVNULL, stderr=log)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        port = wait_for_port(proc, log_path, seconds=60)
        with open(log_path, errors="replace") as f:
            self.assertIsNotNone(port, "clashd logged no port:\n" + f.read())
        env["CLASHD_HEALTH_ADDRESS"] = f"127.0.0.1:{port}"
        return proc

    def healthcheck(self, env):
        return subprocess.run([os.path.join(self.prefix, "bin", "clashd-healthcheck")], env=env,
                              capture_output=True, text=True)

    def test_entrypoint_healthcheck_and_sigterm(self):
        env = dict(os.environ, CLASHD_DATA_DIR=os.path.join(self.tmp, "data"),
                   CLASHD_SHUTDOWN_GRACE_SECONDS="5")
        proc = self.start_entrypoint([], env, "clashd.log")
        healthy = False
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            r = self.healthcheck(env)
            if r.returncode == 0:
                healthy = "SERVING" in r.stdout
                break
            time.sleep(0.3)
        self.assertTrue(healthy, "the health check never saw SERVING")
        self.assertTrue(os.path.isdir(os.path.join(self.tmp, "data", "tenants")))
        start = time.time()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        self.assertEqual(code, 0)
        self.assertLess(time.time() - start, 5 + 5)
        # Stopped: the health check fails.
        self.assertNotEqual(self.healthcheck(env).returncode, 0)

    def test_healthcheck_fails_while_imports_cannot_run(self):
        # A server up but unable to import CAD (here: no worker) is unhealthy, and a --data-dir
        # given to the container replaces the entrypoint's default instead of doubling it.
        data = os.path.join(self.tmp, "own-data")
        env = dict(os.environ, CLASHD_DATA_DIR=os.path.join(self.tmp, "unused"))
        self.start_entrypoint(["--data-dir", data, "--worker", "/nonexistent/clash-cad-worker"],
                              env, "clashd-noworker.log")
        r = self.healthcheck(env)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("NOT_SERVING", r.stdout + r.stderr)
        self.assertTrue(os.path.isdir(os.path.join(data, "tenants")))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "unused")))

    def test_dockerignore_keeps_secrets_and_builds_out(self):
        path = os.path.join(self.repo, ".dockerignore")
        self.assertTrue(os.path.isfile(path), "no .dockerignore: COPY . takes everything")
        with open(path) as f:
            patterns = [l.strip() for l in f if l.strip() and not l.startswith("#")]
        for needed in ("build*/", "docker/secrets/", ".git/", "**/clashd-data/"):
            self.assertIn(needed, patterns)
        # Nothing the build stage uses is ignored (patterns as Docker matches them, trailing /
        # dropped; ** spans folders).
        import fnmatch
        kept = ["docker/build.sh", "docker/runtime-deps.sh", "docker/entrypoint.sh",
                "docker/healthcheck.sh", ".ci/install-deps.sh", "CMakeLists.txt",
                "client/report/package-lock.json"]
        for f in kept:
            for p in patterns:
                p = p.rstrip("/")
                hit = fnmatch.fnmatch(f, p) or (p.startswith("**/") and any(
                    fnmatch.fnmatch("/".join(f.split("/")[i:]), p[3:])
                    for i in range(len(f.split("/")))))
                self.assertFalse(hit, f"{p} in .dockerignore drops {f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--build-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
