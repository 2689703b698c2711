"""Shared helpers of the process-level tests in Tests/system (crash-test.py, hostile-test.py, ...).

Each script runs real processes: `pushgate mock` (the mock providers, with a plain-HTTP control
port that counts, per bench token, receptions and OK answers) and one or more `pushgate serve`.
Python 3 standard library only.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# The repository (this file is Tests/system/harness.py): .build/ and scripts/ are found from here.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The throwaway PostgreSQL server of the tests (Debian's postgresql package): prints its URL.
START_POSTGRES = os.path.join(ROOT, "scripts", "start-postgres.sh")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http(method, url, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def wait_for(cond, timeout, what, interval=0.1, name="test"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if cond():
                return True
        except Exception:
            pass
        time.sleep(interval)
    raise SystemExit(f"{name}: timed out waiting for {what}")


def bench_token(seq):
    """A 64-hex APNs token the mock recognises as bench token number `seq` (counted per token)."""
    return "bbbbbbbb" + "0" * 40 + format(seq, "016x")


def find_pushgate(path, name):
    exe = path
    if exe is None:
        for c in (".build/release/pushgate", ".build/debug/pushgate"):
            if os.access(os.path.join(ROOT, c), os.X_OK):
                exe = os.path.join(ROOT, c)
                break
    if not exe or not os.access(exe, os.X_OK):
        raise SystemExit(f"{name}: no pushgate executable (swift build --product pushgate, or --pushgate PATH)")
    return os.path.abspath(exe)  # the gateways run with their own working directory


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def metric(text, name, **labels):
    """Sum of the Prometheus samples `name{...}` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        if head != name and not head.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


class Run:
    """A work directory, the processes started in it, and their cleanup."""

    def __init__(self, name, exe, keep=False):
        self.name, self.exe, self.keep = name, exe, keep
        self.work = tempfile.mkdtemp(prefix=f"pushgate-{name}-")
        self.procs = []

    def log(self, msg):
        print(f"{self.name}: {msg}", flush=True)

    def fail(self, msg):
        raise SystemExit(f"{self.name}: FAILED: {msg}")

    def start_on_free_ports(self, what, log_name, start, ready):
        """Starts a process (`start(log_file)` picks free ports and returns the process) until
        `ready()` says it answers. The ports are picked free here and bound by the process a moment
        later: another process may take one in between. One that exits saying so is started again on
        other ports (three tries); one that exits otherwise, or neither answers nor exits within 60 s,
        fails the test with its log."""
        for attempt in range(3):
            log = os.path.join(self.work, log_name)
            proc = start(open(log, "w"))
            self.procs.append(proc)
            try:
                wait_for(lambda: proc.poll() is not None or ready(), 60, what, name=self.name)
            except SystemExit:
                self.dump_log(log_name)
                raise
            if proc.poll() is None:
                return proc
            with open(log) as f:
                lost_port = "Address already in use" in f.read()
            self.dump_log(log_name)
            if not lost_port or attempt == 2:
                self.fail(f"{what} exited with {proc.returncode} before it answered")
            self.log(f"{what}: a port was taken before it bound it; starting it again on other ports")

    def start_mock(self, *extra):
        snippet = os.path.join(self.work, "mock", "gateway-snippet.yml")

        def start(log):
            self.ports = {k: free_port() for k in ("apns", "fcm", "hms", "webpush", "stats")}
            self.control = f"http://127.0.0.1:{self.ports['stats']}"
            if os.path.exists(snippet):
                os.remove(snippet)  # an earlier try's ports
            return subprocess.Popen(
                [self.exe, "mock", "--dir", os.path.join(self.work, "mock"), "--apns-port", str(self.ports["apns"]),
                 "--fcm-port", str(self.ports["fcm"]), "--hms-port", str(self.ports["hms"]),
                 "--webpush-port", str(self.ports["webpush"]),
                 "--stats-port", str(self.ports["stats"]), *extra],
                stdout=log, stderr=subprocess.STDOUT)

        mock = self.start_on_free_ports("the mock providers", "mock.log", start,
                                        lambda: http("GET", self.control + "/__mock/stats", timeout=5)[0] == 200)
        self.snippet = snippet
        wait_for(lambda: os.path.exists(self.snippet), 10, "the mock config snippet", name=self.name)
        return mock

    def stats(self):
        return json.loads(http("GET", self.control + "/__mock/stats")[1])

    def missing(self, below):
        return json.loads(http("GET", self.control + f"/__mock/missing?below={below}")[1])["missing"]

    def start_gateway(self, label, env_overrides):
        url = None

        def start(log):
            nonlocal url
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            env = dict(os.environ)
            env.update({
                "PUSHGATE_CORE_ADDRESS": "127.0.0.1",
                "PUSHGATE_CORE_PORT": str(port),
                "PUSHGATE_LOG_ACCESS_LEVEL": "warning",
            })
            env.update({k: str(v) for k, v in env_overrides.items()})
            return subprocess.Popen([self.exe, "serve", "-c", self.snippet], env=env, cwd=self.work,
                                    stdout=log, stderr=subprocess.STDOUT)

        p = self.start_on_free_ports(f"gateway {label}", f"gateway-{label}.log", start,
                                     lambda: http("GET", url + "/healthz", timeout=5)[0] == 200)
        p.url = url
        return p

    def read_mock_apps(self):
        """After start_mock: the mock's folder, APNs team id and APNs URL, for `app_yaml`."""
        self.mockdir = os.path.join(self.work, "mock")
        snippet = open(self.snippet).read()
        self.team = next(line.split('"')[1] for line in snippet.splitlines() if "team_id" in line)
        ios = snippet.split("\nios:", 1)[1]
        self.apns = next(line.split('"')[1] for line in ios.splitlines() if line.strip().startswith("endpoint:"))
        return snippet

    def app_yaml(self, app, key, n, extra=""):
        """An `apps:` entry on the mock APNs with the mock's app key n (kid MOCKAPP00n), topic com.example.<app>."""
        return (f"  - id: {app}\n    api_keys: [\"{key}\"]\n"
                f"    ios: {{ key_path: \"{self.mockdir}/mock-apns-app{n}.p8\", key_id: \"MOCKAPP00{n}\", team_id: \"{self.team}\", "
                f"topic: com.example.{app}, endpoint: \"{self.apns}\"{extra} }}\n")

    def dump_log(self, file, lines=40):
        try:
            with open(os.path.join(self.work, file)) as f:
                tail = f.readlines()[-lines:]
            print(f"--- last lines of {file}:\n" + "".join(tail), flush=True)
        except OSError:
            pass

    def post_tokens(self, url, seqs, batch, message="test"):
        """Posts bench tokens in requests of `batch`; every request must get 200 (503: wait Retry-After, resend)."""
        seqs = list(seqs)
        i = 0
        while i < len(seqs):
            toks = [bench_token(s) for s in seqs[i:i + batch]]
            body = {"notifications": [{"tokens": toks, "platform": 1, "message": message, "topic": "com.example.app"}]}
            status, text, headers = http("POST", url + "/api/push", body)
            if status == 503:
                time.sleep(float(headers.get("Retry-After", "1")))
                continue
            if status != 200:
                self.fail(f"/api/push answered {status}: {text}")
            i += len(toks)

    def stop_gracefully(self, p, label, timeout=60):
        os.kill(p.pid, signal.SIGTERM)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.fail(f"gateway {label} did not exit within {timeout} s of SIGTERM")
        if rc != 0:
            self.dump_log(f"gateway-{label}.log")
            self.fail(f"gateway {label} exited with {rc} after SIGTERM")
        return rc

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        if self.keep:
            print(f"{self.name}: work directory kept: {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def run_in_venv(path, run, probe_import, pip_spec, child_flag):
    """Makes (once; reused while `probe_import` imports) a venv at `path` with `pip_spec`, then runs
    the calling script again with the venv's Python unless it already runs there (`child_flag`, an
    environment variable, stops a loop). Returns only in the venv's Python."""
    path = os.path.abspath(path)
    python = os.path.join(path, "bin", "python")
    probe = [python, "-c", f"import {probe_import}"]
    if not (os.access(python, os.X_OK) and subprocess.call(probe, stderr=subprocess.DEVNULL) == 0):
        run.log(f"making a venv with {pip_spec} at {path} (pip install '{pip_spec}')")
        subprocess.check_call([sys.executable, "-m", "venv", path])
        subprocess.check_call([python, "-m", "pip", "install", "-q", pip_spec])
    # The venv's python is a link to this one: which one runs is told by sys.prefix.
    if os.path.realpath(sys.prefix) != os.path.realpath(path) and not os.environ.get(child_flag):
        run.close()
        env = dict(os.environ, **{child_flag: "1"})
        sys.exit(subprocess.call([python, os.path.abspath(sys.argv[0])] + sys.argv[1:], env=env))
