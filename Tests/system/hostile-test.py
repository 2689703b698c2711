#!/usr/bin/env python3
"""Hostile input: no request can crash, stall or balloon the gateway.

Starts `pushgate mock` and two real `pushgate serve` processes on loopback:

- "main": the mock's config, UnifiedPush disabled through the environment (the disabled platform),
  short ingest timeouts (core.idle_timeout / core.read_timeout 3 s), fast retries;
- "ssrf": the same, but Web Push private endpoints refused (webpush.allow_private_endpoints false)
  and a core.feedback_hook_url carrying userinfo and a query secret (for the /api/config check).

Then fires hostile cases at them (huge and odd numbers, many keys, deep nesting, long strings, too
many tokens / notifications / deliveries, malformed bodies and HTTP, slow and idle clients, SSRF
endpoints, odd routes). For EVERY case it asserts:
  * both gateways are still alive,
  * the answer came within the case's time bound and is 200, 4xx or 503 (never 5xx, never a
    connection closed without an answer unless the case breaks the connection on purpose),
  * 4xx answers of /api/push are gorush's JSON error, with `detail` naming the field or the limit
    where the case says so,
  * RSS (VmRSS, sampled every 20 ms during the case) stays under baseline + --rss-slack-mb.
A case that kills a gateway fails, and the gateway is restarted (fresh store) for the next cases.

Prints one line per case (PASS/FAIL, name, status, ms, RSS) and a final `N passed, M failed`;
exit status 1 when any case failed. Python 3 standard library only, loopback addresses only.

    Tests/system/hostile-test.py [--pushgate .build/debug/pushgate] [--only SUBSTRING] [--keep]
"""
import argparse
import json
import os
import re
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Run, find_pushgate, http, rss_bytes  # noqa: E402

MB = 1024 * 1024
IOS_TOKEN = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
TOPIC = "com.example.app"
IDLE_TIMEOUT = 3   # core.idle_timeout / core.read_timeout given to the gateways (seconds)
SYNC_TIMEOUT = 3   # core.sync_timeout
# A config key naming a limit, e.g. core.max_object_keys, android.max_tokens.
LIMIT_KEY = re.compile(r"[a-z_]+\.max_[a-z_]+")


# ---------------------------------------------------------------------------------------------
# A small HTTP/1.1 client on raw sockets: exact bytes out, exact timing, no retries, no surprises.

class Answer:
    def __init__(self):
        self.status = None      # int, or None when no answer came
        self.headers = {}
        self.body = b""
        self.ms = 0.0
        self.error = None       # why no (complete) answer came
        self.note = ""          # what the case measured, printed on its line

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def short(self):
        if self.status is None:
            return f"no answer ({self.error})"
        t = self.text
        return f"{self.status} {t[:300]}{'…' if len(t) > 300 else ''}"


def _parse_head(head):
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().decode("latin-1").lower()] = v.strip().decode("latin-1")
    return status, headers


def _read_answer(sock, deadline, ans, head_only=False):
    """Reads one response into `ans` (status line, headers, body by length / chunks / close)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            ans.error = "timed out waiting for the answer"
            return
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            ans.error = "timed out waiting for the answer"
            return
        except OSError as e:
            ans.error = f"connection error before an answer: {e.__class__.__name__}"
            return
        if not chunk:
            ans.error = "connection closed without an answer" + (f" (got {buf[:60]!r})" if buf else "")
            return
        buf += chunk
        if len(buf) > 1 * MB:
            ans.error = "response head over 1 MB"
            return
    head, _, rest = buf.partition(b"\r\n\r\n")
    try:
        ans.status, ans.headers = _parse_head(head)
    except (ValueError, IndexError):
        ans.error = f"unparsable status line {head[:80]!r}"
        return
    if head_only or ans.status in (204, 304) or 100 <= ans.status < 200:
        ans.body = rest
        return
    chunked = "chunked" in ans.headers.get("transfer-encoding", "").lower()
    length = ans.headers.get("content-length")
    body = rest
    cap = 64 * MB
    while True:
        if length is not None and len(body) >= int(length):
            body = body[:int(length)]
            break
        if chunked and _chunked_complete(body):
            body = _dechunk(body)
            break
        left = deadline - time.monotonic()
        if left <= 0:
            ans.error = f"timed out reading the body ({len(body)} bytes so far)"
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 << 20)
        except socket.timeout:
            ans.error = f"timed out reading the body ({len(body)} bytes so far)"
            break
        except OSError as e:
            ans.error = f"connection error reading the body: {e.__class__.__name__}"
            break
        if not chunk:
            if length is not None or chunked:
                ans.error = f"connection closed in the body ({len(body)} bytes)"
            break
        body += chunk
        if len(body) > cap:
            ans.error = "body over 64 MB, stopped reading"
            break
    ans.body = body


def _chunked_complete(b):
    return b.endswith(b"0\r\n\r\n") and _dechunk(b) is not None


def _dechunk(b):
    out, i = b"", 0
    while True:
        j = b.find(b"\r\n", i)
        if j < 0:
            return None
        try:
            n = int(b[i:j].split(b";")[0], 16)
        except ValueError:
            return None
        if n == 0:
            return out
        out += b[j + 2:j + 2 + n]
        i = j + 2 + n + 2


def request(port, method, path, body=None, headers=None, timeout=10.0, raw=None, host="127.0.0.1"):
    """One request on a fresh connection (Connection: close). `raw`: the exact bytes to send instead."""
    ans = Answer()
    if raw is None:
        hs = {"Host": "localhost", "Connection": "close"}
        if body is not None:
            hs["Content-Type"] = "application/json"
            hs["Content-Length"] = str(len(body))
        hs.update(headers or {})
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hs.items() if v is not None) + "\r\n"
        raw = head.encode("latin-1") + (body or b"")
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        ans.error = f"connect failed: {e}"
        return ans
    try:
        try:
            sock.sendall(raw)
        except OSError as e:
            # The server may answer early (413) and stop reading: the answer can still be there.
            ans.error = f"send failed: {e.__class__.__name__}"
        err = ans.error
        ans.error = None
        _read_answer(sock, deadline, ans, head_only=(method == "HEAD"))
        if ans.status is None and err:
            ans.error = f"{err}; {ans.error}"
    finally:
        ans.ms = (time.monotonic() - t0) * 1000
        sock.close()
    return ans


def push(port, body, timeout=10.0, headers=None):
    if isinstance(body, (dict, list)):
        body = json.dumps(body, separators=(",", ":")).encode()
    elif isinstance(body, str):
        body = body.encode()
    return request(port, "POST", "/api/push", body, headers=headers, timeout=timeout)


# ---------------------------------------------------------------------------------------------

class RSSSampler(threading.Thread):
    """Samples a process's VmRSS every 20 ms; peak() since the last reset()."""

    def __init__(self):
        super().__init__(daemon=True)
        self.pids = set()
        self.lock = threading.Lock()
        self.peaks = {}
        self.stopped = threading.Event()

    def watch(self, pid):
        with self.lock:
            self.pids.add(pid)
            self.peaks[pid] = 0

    def reset(self):
        with self.lock:
            for pid in self.pids:
                self.peaks[pid] = 0

    def peak(self, pid):
        with self.lock:
            return self.peaks.get(pid, 0)

    def run(self):
        while not self.stopped.wait(0.02):
            with self.lock:
                pids = list(self.pids)
            for pid in pids:
                try:
                    r = rss_bytes(pid)
                except OSError:
                    continue
                with self.lock:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), r)


class Gateway:
    """A `pushgate serve` that is restarted (fresh store) when a case killed it."""

    def __init__(self, run, label, env, sampler):
        self.run, self.label, self.env, self.sampler = run, label, env, sampler
        self.starts = 0
        self.start()

    def start(self):
        self.starts += 1
        env = dict(self.env)
        env["PUSHGATE_QUEUE_SQLITE_PATH"] = os.path.join(self.run.work, f"store-{self.label}-{self.starts}", "pushgate.sqlite")
        self.proc = self.run.start_gateway(f"{self.label}-{self.starts}", env)
        self.port = int(self.proc.url.rsplit(":", 1)[1])
        # warm up: one delivery through each enabled provider path, then the baseline
        push(self.port, {"notifications": [{"platform": 1, "tokens": [IOS_TOKEN], "topic": TOPIC, "message": "warm"}], "sync": True}, timeout=30)
        push(self.port, {"notifications": [{"platform": 2, "tokens": ["warm"], "message": "warm"}], "sync": True}, timeout=30)
        time.sleep(0.3)
        self.baseline = rss_bytes(self.proc.pid)
        self.sampler.watch(self.proc.pid)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def exit_description(self):
        rc = self.proc.poll()
        if rc is None:
            return "running"
        return f"killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"

    def rss(self):
        try:
            return rss_bytes(self.proc.pid)
        except OSError:
            return 0


class Tester:
    def __init__(self, args, run, main, ssrf, sampler):
        self.args, self.run, self.main, self.ssrf, self.sampler = args, run, main, ssrf, sampler
        self.passed, self.failed = 0, 0
        self.failures = []

    def case(self, name, fn, gw=None, bound_ms=5000):
        """Runs fn(gw) -> (Answer or None, [problems]); applies the checks every case shares."""
        if self.args.only and not any(o in name for o in self.args.only):
            return
        gw = gw or self.main
        self.sampler.reset()
        t0 = time.monotonic()
        ans, problems = None, []
        try:
            ans, problems = fn(gw)
            problems = list(problems)
        except Exception as e:  # a bug in the case itself counts as a failure too
            problems = [f"test error: {e.__class__.__name__}: {e}"]
        wall = (time.monotonic() - t0) * 1000
        time.sleep(0.05)  # let a crash land before the liveness check
        for g in (self.main, self.ssrf):
            if not g.alive():
                problems.insert(0, f"gateway {g.label} DIED ({g.exit_description()})")
        if ans is not None:
            if ans.status is None:  # cases that break a connection on purpose return the answer of a request made after it
                problems.append(f"no answer: {ans.error}")
            elif ans.status is not None and not (ans.status == 200 or 400 <= ans.status < 500 or ans.status == 503):
                problems.append(f"status {ans.status} is not 200/4xx/503: {ans.short()}")
            if ans.status is not None and ans.ms > bound_ms:
                problems.append(f"answered in {ans.ms:.0f} ms (bound {bound_ms} ms)")
        peak = max(self.sampler.peak(gw.pid), gw.rss())
        if gw.alive() and peak - gw.baseline > self.args.rss_slack_mb * MB:
            problems.append(f"RSS peaked at {peak / MB:.0f} MB, {(peak - gw.baseline) / MB:.0f} MB over the baseline "
                            f"{gw.baseline / MB:.0f} MB (slack {self.args.rss_slack_mb} MB)")
        status = "-" if ans is None else (str(ans.status) if ans.status is not None else "none")
        ms = wall if ans is None else ans.ms
        ok = not problems
        line = f"{'PASS' if ok else 'FAIL'} {name:<44} {status:>5} {ms:8.0f} ms  RSS {gw.rss() / MB:6.1f} MB (peak {peak / MB:6.1f})"
        if ans is not None and ans.note:
            line += f"  ({ans.note})"
        if problems:
            line += "  -- " + "; ".join(problems)
        elif self.args.verbose and ans is not None:
            line += f"  [{len(ans.body)} B] {ans.short()[:240]}"
        print(line, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append(name)
        for g in (self.main, self.ssrf):
            if not g.alive():
                self.run.dump_log(f"gateway-{g.label}-{g.starts}.log", lines=15)
                print(f"  (restarting gateway {g.label})", flush=True)
                g.start()


# ---------------------------------------------------------------------------------------------
# Answer checks

def api_error(ans, statuses, names=None, limit=False):
    """An error answer of /api/push: status in `statuses`, gorush's JSON, and (for 4xx) a detail that
    contains one of `names`, or (limit=True) a config key naming a limit."""
    p = []
    if ans.status is None:
        return p  # reported by the shared checks
    if ans.status not in statuses:
        p.append(f"expected {'/'.join(map(str, sorted(statuses)))}, got {ans.short()}")
        return p
    if 400 <= ans.status < 500:
        j = ans.json()
        if not isinstance(j, dict) or j.get("code") != ans.status or not isinstance(j.get("message"), str):
            p.append(f"not a JSON error {{code,message,detail}}: {ans.short()}")
            return p
        detail = j.get("detail") or ""
        wanted = list(names or [])
        if wanted or limit:
            hit = any(n in detail for n in wanted) or (limit and LIMIT_KEY.search(detail))
            if not hit:
                what = " or ".join(repr(n) for n in wanted) + (" or a limit key (x.max_y)" if limit else "")
                p.append(f"detail should name {what}: {ans.short()}")
    return p


def ok_push(ans, max_body=None):
    p = []
    if ans.status != 200:
        return [f"expected 200, got {ans.short()}"] if ans.status is not None else []
    j = ans.json()
    if not isinstance(j, dict) or j.get("success") != "ok":
        p.append(f"200 without gorush's body: {ans.short()}")
    if max_body is not None and len(ans.body) > max_body:
        p.append(f"answer body {len(ans.body) / MB:.1f} MB (cap {max_body / MB:.0f} MB)")
    return p


def accepted_or_error(ans, names=None, limit=False, max_body=None):
    """200 (gorush's body), or a 4xx JSON error naming the field / limit."""
    if ans.status == 200:
        return ok_push(ans, max_body)
    return api_error(ans, set(range(400, 500)), names, limit)


def body_bytes(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def with_literal(obj, literal):
    """JSON of `obj` with the string "__V__" replaced by a raw literal (1e309, -0, ...)."""
    return json.dumps(obj, separators=(",", ":")).replace('"__V__"', literal).encode()


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--rss-slack-mb", type=float, default=100)
    ap.add_argument("--idle-connections", type=int, default=800)
    ap.add_argument("--only", action="append", help="run only cases whose name contains this (repeatable)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print the answer of passing cases too")
    args = ap.parse_args()

    try:  # 800 client sockets here; the gateways inherit the limit
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(hard, max(soft, 4096)) if hard != resource.RLIM_INFINITY else max(soft, 4096)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):
        pass

    started = time.monotonic()
    run = Run("hostile-test", find_pushgate(args.pushgate, "hostile-test"), keep=args.keep)
    sampler = RSSSampler()
    sampler.start()
    t = None
    try:
        run.start_mock()
        hook_port = _closed_port()
        common = {
            "PUSHGATE_UNIFIEDPUSH_ENABLED": "false",      # the disabled platform
            "PUSHGATE_CORE_IDLE_TIMEOUT": IDLE_TIMEOUT,
            "PUSHGATE_CORE_READ_TIMEOUT": IDLE_TIMEOUT,
            "PUSHGATE_CORE_MAX_DELIVERIES_PER_REQUEST": 20000,
            "PUSHGATE_CORE_RETRY_BACKOFF_MS": 200,
            "PUSHGATE_CORE_RETRY_BACKOFF_MAX_MS": 1000,
            "PUSHGATE_CORE_SYNC_TIMEOUT": SYNC_TIMEOUT,
            "PUSHGATE_IOS_MAX_RETRY": 10,                 # a failing APNs keeps a sync request retrying ~10 s
            # Every case here connects from 127.0.0.1, the idle-connections case with --idle-connections
            # of them at once: the per-address cap (Tests/system/edge-limits-test.py tests it) must not cut them.
            "PUSHGATE_CORE_MAX_CONNECTIONS_PER_ADDRESS": 4096,
        }
        main_gw = Gateway(run, "main", common, sampler)
        ssrf_env = dict(common)
        ssrf_env.update({
            "PUSHGATE_WEBPUSH_ALLOW_PRIVATE_ENDPOINTS": "false",
            "PUSHGATE_CORE_FEEDBACK_HOOK_URL": f"https://hookuser:hookpw-S3cr3t@127.0.0.1:{hook_port}/x?secret=abc-S3cr3t",
            "PUSHGATE_CORE_FEEDBACK_TIMEOUT": 2,
        })
        ssrf_gw = Gateway(run, "ssrf", ssrf_env, sampler)
        run.log(f"mock ready, gateways main (pid {main_gw.pid}, :{main_gw.port}, RSS {main_gw.baseline / MB:.1f} MB) and "
                f"ssrf (pid {ssrf_gw.pid}, :{ssrf_gw.port}, RSS {ssrf_gw.baseline / MB:.1f} MB) in {time.monotonic() - started:.1f}s")
        t = Tester(args, run, main_gw, ssrf_gw, sampler)
        cases(t, run, args)
    finally:
        sampler.stopped.set()
        run.close()
    elapsed = time.monotonic() - started
    if t is None:
        print("0 passed, 1 failed")
        sys.exit(1)
    if t.failures:
        print(f"failed cases: {', '.join(t.failures)}")
    print(f"(ran in {elapsed:.0f}s)")
    print(f"{t.passed} passed, {t.failed} failed")
    sys.exit(1 if t.failed else 0)


def _closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()  # nothing listens there: a feedback POST fails fast
    return p


def subscriptions(run, n):
    status, text, _ = http("POST", run.control + f"/__mock/webpush/subscribe?count={n}")
    if status != 200:
        raise RuntimeError(f"mock subscribe answered {status}")
    return json.loads(text)


def cases(t, run, args):
    ios = {"platform": 1, "tokens": [IOS_TOKEN], "topic": TOPIC, "message": "hostile"}
    android = {"platform": 2, "tokens": ["x"], "message": "m"}
    subs = subscriptions(run, 4)

    def one(n, sync=True):
        return {"notifications": [n], "sync": sync}

    # --- 1. an out-of-range TTL as a minimal body; fallbacks ------------------------------------
    # android.ttl 1e19 does not fit an Int: a 400 naming the field, never a trapping conversion.
    ttl_1e19 = b'{"notifications":[{"platform":2,"tokens":["x"],"message":"m","android":{"ttl":1e19}}]}'
    t.case("android.ttl 1e19, minimal body", lambda g: (lambda a: (a, api_error(a, {400}, ["notifications[0].android.ttl"])))(push(g.port, ttl_1e19)))

    # oversize fallback: merged and checked as a notification, errors named under it
    fb_nested = one({"platform": 1, "tokens": ["ab" * 32], "message": "m", "fallback": {"badge": 1, "fallback": {"badge": 2}}})
    t.case("fallback inside a fallback", lambda g: (lambda a: (a, api_error(a, {400}, ["notifications[0].fallback.fallback"])))(
        push(g.port, fb_nested)))
    fb_range = one({"platform": 2, "tokens": ["x"], "fallback": {"android": {"ttl": 1e19}, "tokens": None}})
    t.case("fallback: android.ttl 1e19 and tokens", lambda g: (lambda a: (a, api_error(a, {400}, ["notifications[0].fallback."])))(
        push(g.port, fb_range)))
    fb_keys = one({"platform": 1, "tokens": ["ab" * 32], "data": {f"k{i}": i for i in range(900)},
                   "fallback": {"data": {f"f{i}": i for i in range(900)}, "content_available": True}})
    t.case("fallback of 900 keys over 900 keys", lambda g: (lambda a: (a, accepted_or_error(a, limit=True)))(push(g.port, fb_keys)))

    # --- 2. huge and odd numbers ----------------------------------------------------------------
    out_of_range = ["1e19", "-1e19", "1e309", "9223372036854775808", "-9223372036854775809"]
    fields = [
        # (label, notification with "__V__", JSON path, integer field?)
        ("badge", dict(ios, badge="__V__"), "notifications[0].badge", True),
        ("expiration", dict(ios, expiration="__V__"), "notifications[0].expiration", True),
        ("retry", dict(ios, retry="__V__"), "notifications[0].retry", True),
        ("relevance-score", dict(ios, **{"relevance-score": "__V__"}), "notifications[0].relevance-score", False),
        ("webpush time_to_live", {"platform": 4, "subscriptions": [subs[0]], "message": "m", "time_to_live": "__V__"},
         "notifications[0].time_to_live", True),
        ("android.ttl", dict(android, android={"ttl": "__V__"}), "notifications[0].android.ttl", True),
        ("apns.headers.apns-expiration (fcm)", dict(android, apns={"headers": {"apns-expiration": "__V__"}}),
         "notifications[0].apns", False),
    ]
    for label, n, path, integer in fields:
        for lit in out_of_range + ["-0", '"NaN"']:
            body = with_literal(one(n), lit)

            def check(a, path=path, lit=lit, integer=integer, label=label):
                if lit == "-0":
                    return accepted_or_error(a, [path])
                if label.startswith("apns.headers"):
                    # pass-through object for FCM: FCM checks it; no conversion may trap
                    if lit == "1e309":
                        return api_error(a, {400}, [path])
                    return accepted_or_error(a, [path])
                if label == "android.ttl" and lit == '"NaN"':
                    return accepted_or_error(a, [path])
                if not integer and lit in ("1e19", "-1e19", "9223372036854775808", "-9223372036854775809"):
                    return accepted_or_error(a, [path])  # a Double: in range, may be refused as out of 0...1
                return api_error(a, {400}, [path])
            t.case(f"number {label} = {lit}", lambda g, body=body, check=check: (lambda a: (a, check(a)))(push(g.port, body)))

    # --- 3. decoding: many keys, deep nesting, long strings ------------------------------------
    def many_keys(g):
        n = 150_000
        data = "{" + ",".join(f'"k{i:06d}":"v"' for i in range(n)) + "}"
        body = ('{"notifications":[{"platform":2,"tokens":["x"],"message":"m","data":' + data + '}]}').encode()
        a = push(g.port, body, timeout=30)
        return a, accepted_or_error(a, ["notifications[0].data"], limit=True)
    t.case("data with 150,000 keys (2.5 MB)", many_keys, bound_ms=1000)

    def nested(open_, close, depth, leaf="1"):
        inner = open_ * depth + leaf + close * depth
        return ('{"notifications":[{"platform":1,"tokens":["' + IOS_TOKEN + '"],"topic":"' + TOPIC +
                '","message":"m","data":{"d":' + inner + '}}],"sync":true}').encode()
    t.case("data nested 10,000 arrays deep", lambda g: (lambda a: (a, api_error(
        a, {400}, ["notifications[0].data", "depth", "nest"], limit=True)))(push(g.port, nested("[", "]", 10_000))))
    t.case("data nested 10,000 objects deep", lambda g: (lambda a: (a, api_error(
        a, {400}, ["notifications[0].data", "depth", "nest"], limit=True)))(push(g.port, nested('{"a":', "}", 10_000))))
    t.case("data nested 400 arrays deep", lambda g: (lambda a: (a, accepted_or_error(
        a, ["notifications[0].data", "depth", "nest"], limit=True)))(push(g.port, nested("[", "]", 400))))

    big = "A" * MB
    t.case("token of 1 MB", lambda g: (lambda a: (a, api_error(a, {400, 413}, ["notifications[0].tokens"], limit=True)))(
        push(g.port, one(dict(ios, tokens=[big[:-2] + "00"])))))
    t.case("topic of 1 MB", lambda g: (lambda a: (a, api_error(a, {400, 413}, ["notifications[0].topic"], limit=True)))(
        push(g.port, one(dict(ios, topic=big)))))
    t.case("notif_id of 1 MB", lambda g: (lambda a: (a, api_error(a, {400, 413}, ["notifications[0].notif_id"], limit=True)))(
        push(g.port, one(dict(ios, notif_id=big)))))
    t.case("message of 1 MB (sync)", lambda g: (lambda a: (a, accepted_or_error(a, ["notifications[0].message"], limit=True, max_body=64 * 1024)))(
        push(g.port, one(dict(ios, message=big)))))
    t.case("data key of 1 MB", lambda g: (lambda a: (a, accepted_or_error(a, ["notifications[0].data"], limit=True, max_body=64 * 1024)))(
        push(g.port, one(dict(android, data={big: "v"})))))
    # HarmonyOS (platform 6): push_type picks a header, harmony_payload is passed through.
    harmony = {"platform": 6, "tokens": ["harmony-hostile"], "title": "t", "message": "m"}
    t.case("harmony push_type of 1 MB", lambda g: (lambda a: (a, api_error(a, {400, 413}, ["notifications[0].push_type"], limit=True)))(
        push(g.port, one(dict(harmony, push_type=big)))))
    t.case("harmony push_type 1e19", lambda g: (lambda a: (a, api_error(a, {400}, ["push_type"])))(
        push(g.port, one(dict(harmony, push_type="10000000000000000000")))))
    deep = {"a": 1}
    for _ in range(200):
        deep = {"n": deep}
    t.case("harmony_payload nested 200 deep", lambda g: (lambda a: (a, api_error(a, {400, 413}, limit=True)))(
        push(g.port, one(dict(harmony, push_type="liveview", harmony_payload=deep)))))
    t.case("harmony_payload of 1 MB (sync)", lambda g: (lambda a: (a, accepted_or_error(a, ["notifications[0].harmony_payload"], limit=True, max_body=64 * 1024)))(
        push(g.port, one(dict(harmony, push_type="liveview", harmony_payload={"activityId": 1, "x": big})))))

    # --- 4. limits: tokens, notifications, deliveries -------------------------------------------
    def disabled_5000(g):
        msg = "M" * 100_000
        # A UnifiedPush message over 4096 bytes is refused at ingest (AND_3) unless it has a fallback
        # to send instead: with one, the 100 KB message reaches every failed entry of the answer.
        notifs = [{"platform": 5, "message": msg, "fallback": {"message": "short"},
                   "tokens": [f"https://127.0.0.1:9/up/{k}-{i}" for i in range(500)]} for k in range(10)]
        a = push(g.port, {"notifications": notifs, "sync": True}, timeout=30)
        p = ok_push(a, max_body=4 * MB)
        a.note = f"answer {len(a.body) / MB:.2f} MB"
        if a.status == 200 and not p and (a.json() or {}).get("counts") != 0:
            p.append(f"counts should be 0 for a disabled platform, got {(a.json() or {}).get('counts')}")
        return a, p
    t.case("5,000 sync tokens of a disabled platform, 100 KB message", disabled_5000, bound_ms=10000)

    t.case("10,000 tokens in one android notification", lambda g: (lambda a: (a, api_error(a, {400, 413}, limit=True)))(
        push(g.port, one(dict(android, tokens=[f"t{i}" for i in range(10_000)]), sync=False))))

    def too_many_notifications(g):
        a = push(g.port, {"notifications": [dict(ios) for _ in range(101)]})
        p = api_error(a, {400})
        j = a.json() or {}
        if a.status == 400 and "core.max_notification" not in (j.get("detail") or "") and "over limit(" not in (j.get("message") or ""):
            p.append(f"should name the limit core.max_notification: {a.short()}")
        return a, p
    t.case("101 notifications (core.max_notification 100)", too_many_notifications)

    def too_many_deliveries(g):
        notifs = [{"platform": 5, "message": "m", "tokens": [f"https://127.0.0.1:9/u/{k}-{i}" for i in range(500)]} for k in range(100)]
        a = push(g.port, {"notifications": notifs}, timeout=30)
        return a, api_error(a, {400, 413}, ["max_deliveries"], limit=True)
    t.case("50,000 deliveries in one request (limit 20,000)", too_many_deliveries, bound_ms=10000)

    # --- 5. malformed bodies --------------------------------------------------------------------
    tok = IOS_TOKEN.encode()
    malformed = [
        ("empty body", b"", {400}, None),
        ("whitespace body", b" \r\n\t ", {400}, None),
        ("truncated JSON", b'{"notifications":[{"platform":1,"tokens":["' + tok + b'"],"mess', {400}, None),
        ("invalid UTF-8 in a string", b'{"notifications":[{"platform":1,"tokens":["' + tok + b'"],"topic":"com.example.app","message":"\xff\xfe\xc3"}]}', {400}, None),
        ("invalid UTF-8 in a data key", b'{"notifications":[{"platform":2,"tokens":["x"],"message":"m","data":{"\xc0\xaf":"v"}}]}', {400}, None),
        ("raw NUL byte in a token", b'{"notifications":[{"platform":1,"tokens":["ab\x00cd"],"message":"m"}]}', {400}, None),
        ("escaped NUL in a token", b'{"notifications":[{"platform":1,"tokens":["' + tok + b'\\u0000"],"topic":"com.example.app","message":"m"}],"sync":true}',
         {400}, ["notifications[0].tokens"]),
        ("escaped NUL in an android token", b'{"notifications":[{"platform":2,"tokens":["x\\u0000y"],"message":"m"}],"sync":true}',
         {400}, ["notifications[0].tokens"]),
        ("wrong type: badge \"1\"", b'{"notifications":[{"platform":1,"tokens":["' + tok + b'"],"badge":"1"}]}', {400}, ["notifications[0].badge"]),
        ("wrong type: tokens a string", b'{"notifications":[{"platform":1,"tokens":"' + tok + b'"}]}', {400}, ["notifications[0].tokens"]),
        ("wrong type: notifications an object", b'{"notifications":{"platform":1}}', {400}, ["notifications"]),
        ("wrong type: platform true", b'{"notifications":[{"platform":true,"tokens":["x"],"message":"m"}]}', {400}, ["notifications[0].platform"]),
        ("wrong type: data an array", b'{"notifications":[{"platform":2,"tokens":["x"],"message":"m","data":[1,2]}]}', {400}, ["notifications[0].data"]),
        ("top level an array", b'[{"platform":1}]', {400}, None),
        ("top level null", b"null", {400}, None),
        ("NaN literal", b'{"notifications":[{"platform":1,"tokens":["' + tok + b'"],"badge":NaN}]}', {400}, None),
    ]
    for name, body, statuses, names in malformed:
        t.case(name, lambda g, body=body, statuses=statuses, names=names: (lambda a: (a, api_error(a, statuses, names)))(push(g.port, body)))

    odd_but_valid = [
        ("escaped NUL in message and notif_id", b'{"notifications":[{"platform":1,"tokens":["' + tok + b'"],"topic":"com.example.app","notif_id":"n\\u0000id","message":"a\\u0000b"}],"sync":true}',
         ["notifications[0].message", "notifications[0].notif_id"]),
        ("lone surrogate \\ud800 in message", b'{"notifications":[{"platform":1,"tokens":["' + tok + b'"],"topic":"com.example.app","message":"x\\ud800y"}],"sync":true}',
         ["notifications[0].message"]),
        ("UTF-8 BOM before the body", b'\xef\xbb\xbf{"notifications":[{"platform":1,"tokens":["' + tok + b'"],"topic":"com.example.app","message":"bom"}],"sync":true}', None),
        ("duplicate keys", b'{"notifications":[{"platform":1,"tokens":["' + tok + b'"],"topic":"com.example.app","message":"a","message":"b","badge":1,"badge":"x"}],"notifications":[]}', None),
    ]
    for name, body, names in odd_but_valid:
        t.case(name, lambda g, body=body, names=names: (lambda a: (a, accepted_or_error(a, names)))(push(g.port, body)))

    # gorush's router skips a notification without a known platform: 200,
    # not counted, the valid notification of the same request delivered.
    def unknown_platform(g):
        a = push(g.port, {"notifications": [{"platform": 99, "tokens": ["x"], "message": "m"}, {"tokens": ["y"], "message": "m"},
                                            {"platform": 0, "tokens": ["z"]}, dict(ios, message="kept")], "sync": True}, timeout=30)
        p = ok_push(a)
        counts = (a.json() or {}).get("counts")
        if a.status == 200 and not p and counts != 2:
            p.append(f"counts should be 2 (the iOS token and its topic, as gorush counts), got {counts}")
        return a, p
    t.case("platform 99, missing and 0 skipped beside a valid notification", unknown_platform)

    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        t.case(f"content-type {ctype.split(';')[0]}", lambda g, ctype=ctype: (lambda a: (a, accepted_or_error(a)))(
            push(g.port, one(ios), headers={"Content-Type": ctype})))

    # --- 6. body size and HTTP framing ----------------------------------------------------------
    def over_limit(g):
        body = b'{"notifications":[{"platform":2,"tokens":["x"],"message":"' + b"x" * (6 * MB) + b'"}]}'
        a = push(g.port, body, timeout=20)
        return a, api_error(a, {413}, ["core.max_body_bytes"])
    t.case("body of 6 MB (core.max_body_bytes 5 MB)", over_limit)

    def declared_huge(g):
        raw = (b"POST /api/push HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n"
               b"Content-Length: 1000000000000\r\n\r\n{\"notifications\":")
        a = request(g.port, "POST", "/api/push", raw=raw, timeout=5)
        return a, api_error(a, {413}, ["core.max_body_bytes"])
    t.case("Content-Length 10^12, 17 bytes sent", declared_huge, bound_ms=2000)

    def chunked_over(g):
        chunk = b"x" * 65536
        body = b'{"notifications":[{"platform":2,"tokens":["x"],"message":"'
        raw = (b"POST /api/push HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n" +
               (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 96 + b"0\r\n\r\n")
        a = request(g.port, "POST", "/api/push", raw=raw, timeout=20)
        return a, api_error(a, {413}, ["core.max_body_bytes"])
    t.case("chunked body of 6 MB", chunked_over)

    def bad_length(g):
        raw = b"POST /api/push HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: -1\r\n\r\n{}"
        a = request(g.port, "POST", "/api/push", raw=raw, timeout=5)
        return a, ([] if a.status is None or 400 <= a.status < 500 else [f"expected 4xx, got {a.short()}"])
    t.case("Content-Length -1", bad_length)

    def both_lengths(g):
        body = body_bytes(one(ios))
        raw = (b"POST /api/push HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\n"
               b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        a = request(g.port, "POST", "/api/push", raw=raw, timeout=5)
        return a, ([] if a.status in (200, 400) else [f"expected 200 or 400, got {a.short()}"])
    t.case("Content-Length and chunked together", both_lengths)

    def long_url(g):
        a = request(g.port, "GET", "/api/push/" + "a" * 100_000, timeout=5)
        return a, ([] if a.status is not None and 400 <= a.status < 500 else [f"expected 4xx, got {a.short()}"])
    t.case("GET with a 100 KB path", long_url)

    def many_headers(g):
        a = request(g.port, "GET", "/healthz", headers={f"X-H{i}": "v" * 100 for i in range(2000)}, timeout=5)
        return a, ([] if a.status is not None and (a.status == 200 or 400 <= a.status < 500) else [f"expected 200 or 4xx, got {a.short()}"])
    t.case("2,000 request headers (200 KB)", many_headers)

    def aborted(g):
        s = socket.create_connection(("127.0.0.1", g.port), timeout=5)
        s.sendall(b"POST /api/push HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n{\"notifications\":[")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
        s.close()
        time.sleep(0.2)
        a = request(g.port, "GET", "/healthz", timeout=5)
        return a, ([] if a.status == 200 else [f"/healthz after the reset: {a.short()}"])
    t.case("client resets mid-body, then /healthz", aborted)

    def injected_header(g):
        a = push(g.port, one(dict(ios, notif_id="n1\r\nX-Injected: yes\r\n\r\nHTTP/1.1 200 OK")))
        p = accepted_or_error(a, ["notifications[0].notif_id"])
        if "x-injected" in a.headers:
            p.append(f"a CR LF in notif_id injected a response header: {a.headers}")
        return a, p
    t.case("notif_id with CR LF (header injection)", injected_header)
    t.case("notif_id with non-ASCII and commas", lambda g: (lambda a: (a, accepted_or_error(a, ["notifications[0].notif_id"])))(
        push(g.port, one(dict(ios, notif_id="ü,%,\u2028,\U0001F4A9".encode().decode("unicode_escape"))))))

    def pipelined(g):
        n = 50
        one_req = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
        s = socket.create_connection(("127.0.0.1", g.port), timeout=5)
        t0 = time.monotonic()
        got = b""
        a = Answer()
        try:
            s.sendall(one_req * (n - 1) + b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            while got.count(b"HTTP/1.1 ") < n and time.monotonic() - t0 < 5:
                s.settimeout(max(0.01, 5 - (time.monotonic() - t0)))
                try:
                    chunk = s.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                got += chunk
        finally:
            s.close()
        a.ms = (time.monotonic() - t0) * 1000
        answers = got.count(b"HTTP/1.1 ")
        a.status = 200 if answers else None
        a.error = "no answer"
        ok = got.count(b"HTTP/1.1 200")
        return a, ([] if ok == n else [f"{ok} of {n} pipelined requests answered 200 ({answers} answers)"])
    t.case("50 pipelined requests on one connection", pipelined)

    def sync_timeout(g):
        # APNs answers 503 for the whole test: retries would run ~10 s, core.sync_timeout is 3 s
        http("POST", run.control + "/__mock/failures?provider=apns&rate=1&status=503")
        try:
            a = push(g.port, one(dict(ios, message="slow")), timeout=20)
        finally:
            http("POST", run.control + "/__mock/failures?provider=apns&rate=0&status=503")
        return a, ok_push(a)
    t.case(f"sync request to a failing APNs (core.sync_timeout {SYNC_TIMEOUT} s)", sync_timeout, bound_ms=(SYNC_TIMEOUT + 2) * 1000)

    # --- 7. Web Push ----------------------------------------------------------------------------
    def webpush_expiration(g):
        # APNs-style relative expiration on Web Push: retried after a 503
        http("POST", run.control + "/__mock/failures?provider=webpush&rate=1&status=503")
        try:
            before = json.loads(http("GET", run.control + "/__mock/stats")[1])["webpush"]["injected"]
            nid = f"hostile-exp-{time.time_ns()}"
            a = push(g.port, one({"platform": 4, "notif_id": nid, "subscriptions": [subs[1]], "message": "exp", "expiration": 3600}, sync=False))
            p = ok_push(a)
            deadline = time.monotonic() + 6
            injected = 0
            while time.monotonic() < deadline:
                injected = json.loads(http("GET", run.control + "/__mock/stats")[1])["webpush"]["injected"] - before
                if injected >= 2:
                    break
                time.sleep(0.1)
        finally:
            http("POST", run.control + "/__mock/failures?provider=webpush&rate=0&status=503")
        a.note = f"{injected} attempt(s) answered 503"
        if a.status == 200 and injected < 2:
            p.append(f"Web Push \"expiration\": 3600 was not retried after a 503 ({injected} attempt(s) in 6 s)")
        if a.status == 200 and injected >= 2:
            state = None
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                st = request(g.port, "GET", f"/api/push/{nid}", timeout=5)
                state = ((st.json() or {}).get("deliveries") or [{}])[0].get("state")
                if state in ("delivered", "failed"):
                    break
                time.sleep(0.2)
            if state != "delivered":
                p.append(f"not delivered after the 503s ended (state {state})")
        return a, p
    t.case("webpush expiration 3600 retried after 503", webpush_expiration, bound_ms=5000)

    def listener(family, addr):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, 0))
        s.listen(16)
        s.setblocking(False)
        return s, s.getsockname()[1]

    def never_connected(s):
        try:
            c, _ = s.accept()
            c.close()
            return False
        except (BlockingIOError, OSError):
            return True

    def ssrf(endpoint_for, family=socket.AF_INET, addr="127.0.0.1"):
        def fn(g):
            try:
                s, port = listener(family, addr)
            except OSError:  # no IPv6 loopback here: still sent, to a port nothing listens on
                s, port = None, _closed_port()
            try:
                sub = {"endpoint": endpoint_for(port), "keys": subs[2]["keys"]}
                a = push(g.port, one({"platform": 4, "subscriptions": [sub], "message": "ssrf"}), timeout=10)
                p = []
                if a.status == 200:
                    j = a.json() or {}
                    logs = j.get("logs") or []
                    if not logs:
                        p.append(f"200 without a failed entry for a refused endpoint: {a.short()}")
                elif a.status is not None:
                    p += api_error(a, {400}, ["notifications[0].subscriptions[0]"])
                time.sleep(0.2)
                if s is not None and not never_connected(s):
                    p.append(f"the gateway CONNECTED to {addr}:{port}")
                return a, p
            finally:
                if s is not None:
                    s.close()
        return fn
    t.case("webpush endpoint https://127.0.0.1", ssrf(lambda p: f"https://127.0.0.1:{p}/push/x"), gw=t.ssrf)
    t.case("webpush endpoint https://user:pass@127.0.0.1", ssrf(lambda p: f"https://user:pass@127.0.0.1:{p}/push/x"), gw=t.ssrf)
    t.case("webpush endpoint https://[::1]", ssrf(lambda p: f"https://[::1]:{p}/push/x", socket.AF_INET6, "::1"), gw=t.ssrf)
    t.case("webpush endpoint http://[::1]", ssrf(lambda p: f"http://[::1]:{p}/push/x", socket.AF_INET6, "::1"), gw=t.ssrf)
    t.case("webpush endpoint https://0x7f.1 (hex IPv4)", ssrf(lambda p: f"https://0x7f.1:{p}/push/x"), gw=t.ssrf)
    t.case("webpush endpoint https://[::ffff:127.0.0.1]", ssrf(lambda p: f"https://[::ffff:127.0.0.1]:{p}/push/x"), gw=t.ssrf)

    def wp(sub, names, gw_name="ssrf"):
        def fn(g):
            a = push(g.port, one({"platform": 4, "subscriptions": [sub], "message": "m"}), timeout=10)
            if a.status == 200:
                j = a.json() or {}
                return a, ([] if j.get("logs") else [f"200 without a failed entry: {a.short()}"])
            return a, api_error(a, set(range(400, 500)), names)
        return fn
    keys = subs[3]["keys"]
    t.case("webpush endpoint of 10 KB", wp({"endpoint": "https://push.invalid/" + "e" * 10_000, "keys": keys},
                                           ["notifications[0].subscriptions[0].endpoint"]), gw=t.ssrf)
    t.case("webpush endpoint file:///etc/passwd", wp({"endpoint": "file:///etc/passwd", "keys": keys},
                                                    ["notifications[0].subscriptions[0].endpoint"]), gw=t.ssrf)
    t.case("webpush keys not base64url", wp({"endpoint": subs[3]["endpoint"], "keys": {"p256dh": "!!!*", "auth": "%%"}},
                                            ["notifications[0].subscriptions[0].keys"]))
    t.case("webpush p256dh not a curve point", wp({"endpoint": subs[3]["endpoint"], "keys": {"p256dh": "BA" + "A" * 85, "auth": keys["auth"]}},
                                                  ["notifications[0].subscriptions[0].keys"]))
    t.case("webpush auth of 1 MB", wp({"endpoint": subs[3]["endpoint"], "keys": {"p256dh": keys["p256dh"], "auth": "A" * MB}},
                                      ["notifications[0].subscriptions[0].keys"]))
    # Declarative Web Push: hostile navigate URLs and members on the wrong platform
    decl = {"platform": 4, "subscriptions": [subs[2]], "declarative": True, "title": "t"}
    for label, extra, names in [
        ("navigate javascript:", {"navigate": "javascript:alert(1)"}, ["notifications[0].navigate"]),
        ("navigate with CR LF", {"navigate": "https://a.example/\r\nx: y"}, ["notifications[0].navigate"]),
        ("navigate with user info", {"navigate": "https://user:pw@a.example/"}, ["notifications[0].navigate"]),
        ("navigate of 1 MB", {"navigate": "https://a.example/" + "n" * MB}, ["notifications[0].navigate"]),
        ("no navigate, data.url an object", {"data": {"url": {"u": 1}}}, ["notifications[0].data.url"]),
        ("badge -1", {"navigate": "https://a.example/", "badge": -1}, ["notifications[0].badge"]),
        ("declarative \"true\"", {"declarative": "true", "navigate": "https://a.example/"}, ["notifications[0].declarative"]),
        ("fallback navigate relative", {"navigate": "https://a.example/", "fallback": {"navigate": "/x"}},
         ["notifications[0].fallback.navigate"]),
    ]:
        t.case(f"declarative webpush: {label}", lambda g, n=dict(decl, **extra), names=names: (lambda a: (a, api_error(a, {400}, names)))(
            push(g.port, one(n))))
    t.case("declarative on iOS", lambda g: (lambda a: (a, api_error(a, {400}, ["notifications[0].declarative"])))(
        push(g.port, one(dict(ios, declarative=True)))))

    closed = _closed_port()
    t.case("webpush 1,000 refused subscriptions (async)", lambda g: (lambda a: (a, accepted_or_error(a, limit=True)))(
        push(g.port, one({"platform": 4, "message": "m", "subscriptions": [{"endpoint": f"https://127.0.0.1:{closed}/p/{i}", "keys": keys}
                                                                          for i in range(1000)]}, sync=False), timeout=20)), gw=t.ssrf)

    # --- 8. routes and methods -----------------------------------------------------------------
    def route(method, path, allowed):
        def fn(g):
            a = request(g.port, method, path, timeout=5)
            return a, ([] if a.status in allowed else [f"expected {sorted(allowed)}, got {a.short()}"])
        return fn
    four = set(range(400, 500))
    t.case("GET /api/push/<10 KB id>", route("GET", "/api/push/" + "i" * 10_000, four))
    t.case("GET /api/push/<id with %00 and ..>", route("GET", "/api/push/%00..%2F..%2Fetc", four))
    t.case("GET /nope", route("GET", "/nope", {404}))
    t.case("GET /api/push/a/b/c", route("GET", "/api/push/a/b/c", {404, 405}))
    t.case("GET /api/push", route("GET", "/api/push", {404, 405}))
    for method in ("HEAD", "OPTIONS", "PUT", "DELETE", "PATCH"):
        t.case(f"{method} /api/push", route(method, "/api/push", {404, 405}))
    t.case("TRACE /", route("TRACE", "/", four))
    t.case("absolute-form request target", route("GET", "http://evil.example/healthz", {200} | four))

    def config_secrets(g):
        a = request(g.port, "GET", "/api/config", timeout=5)
        p = [] if a.status == 200 else [f"expected 200, got {a.short()}"]
        leaked = [s for s in ("S3cr3t", "hookpw", "hookuser") if s in a.text]
        if leaked:
            lines = [ln.strip() for ln in a.text.splitlines() if any(s in ln for s in leaked)]
            p.append(f"/api/config shows {leaked}: {lines[:3]}")
        snippet = open(run.snippet).read()
        m = re.search(r"vapid_private_key:\s*\"?([A-Za-z0-9_-]{20,})", snippet)
        if m and m.group(1) in a.text:
            p.append("/api/config shows webpush.vapid_private_key")
        return a, p
    t.case("/api/config hides hook userinfo and query", config_secrets, gw=t.ssrf)

    # --- 9. slow and idle clients --------------------------------------------------------------
    def slowloris(kind):
        def fn(g):
            body = body_bytes(one(ios, sync=False))
            if kind == "body":
                head = (b"POST /api/push HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n")
                trickle = b"".join(b"1\r\n" + body[i:i + 1] + b"\r\n" for i in range(len(body))) + b"0\r\n\r\n"
            else:
                head = b""
                trickle = b"POST /api/push HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            s = socket.create_connection(("127.0.0.1", g.port), timeout=5)
            if head:
                s.sendall(head)
            t0 = time.monotonic()
            p, normal, closed_after = [], None, None
            try:
                for i in range(min(len(trickle), 12)):  # 1 byte/s, at most 12 s
                    try:
                        s.sendall(trickle[i:i + 1])
                    except OSError:
                        closed_after = time.monotonic() - t0
                        break
                    if i == 1:
                        normal = push(g.port, one(ios), timeout=5)
                    r, _, _ = select.select([s], [], [], 1.0)
                    if r:
                        try:
                            got = s.recv(65536)
                        except OSError:
                            got = b""
                        closed_after = time.monotonic() - t0
                        if got and got.split(b" ")[1:2] and got.split(b" ")[1].startswith(b"5"):
                            p.append(f"the slow request got a 5xx: {got[:80]!r}")
                        break
            finally:
                s.close()
            if normal is None:
                p.append("no normal request was made")
            elif normal.status != 200 or normal.ms > 1000:
                p.append(f"a normal request during the slow one: {normal.short()} in {normal.ms:.0f} ms (want 200 in < 1000 ms)")
            if closed_after is None:
                p.append(f"the slow request was not closed within 12 s (core.read_timeout {IDLE_TIMEOUT} s)")
            elif closed_after > IDLE_TIMEOUT + 3:
                p.append(f"the slow request was closed only after {closed_after:.1f} s (core.read_timeout {IDLE_TIMEOUT} s)")
            if normal is not None:
                normal.note = "slow request " + (f"closed after {closed_after:.1f} s" if closed_after is not None else "never closed")
            return normal, p
        return fn
    t.case("slowloris: chunked body 1 byte/s", slowloris("body"), bound_ms=1000)
    t.case("slowloris: request head 1 byte/s", slowloris("head"), bound_ms=1000)

    def idle_connections(g):
        n = args.idle_connections
        socks, p = [], []
        t0 = time.monotonic()
        try:
            for i in range(n):
                if time.monotonic() - t0 > 15:
                    p.append(f"only {i} connections opened in 15 s")
                    break
                try:
                    s = socket.create_connection(("127.0.0.1", g.port), timeout=5)
                except OSError as e:
                    p.append(f"connection {i} refused: {e}")
                    break
                if i % 2:
                    s.sendall(b"POST /api/pu")  # half a request line
                socks.append(s)
            opened = time.monotonic() - t0
            time.sleep(0.2)
            normal = push(g.port, one(ios), timeout=5)
            if normal.status != 200 or normal.ms > 1000:
                p.append(f"a normal request with {len(socks)} idle connections open: {normal.short()} in {normal.ms:.0f} ms (want 200 in < 1000 ms)")
            # the gateway must close the idle ones (idle / read timeout)
            open_ = {s.fileno(): s for s in socks}
            poller = select.poll()
            for fd in open_:
                poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            deadline = t0 + opened + IDLE_TIMEOUT + 5
            while open_ and time.monotonic() < deadline:
                for fd, _ in poller.poll(250):
                    s = open_.get(fd)
                    if s is None:
                        continue
                    try:
                        data = s.recv(4096)
                    except OSError:
                        data = b""
                    if not data or data.startswith(b"HTTP/1.1 4"):
                        open_.pop(fd, None)
                        poller.unregister(fd)
            normal.note = f"{len(socks) - len(open_)} of {len(socks)} closed by the gateway {time.monotonic() - t0:.1f} s after opening"
            if open_:
                p.append(f"{len(open_)} of {len(socks)} idle connections still open {time.monotonic() - t0:.1f} s after opening "
                         f"(core.idle_timeout {IDLE_TIMEOUT} s)")
            return normal, p
        finally:
            for s in socks:
                s.close()
    t.case(f"{args.idle_connections} idle half-open connections", idle_connections, bound_ms=1000)

    # --- 10. after everything -----------------------------------------------------------------
    # counts 2: gorush's router counts the token and the topic of the iOS notification.
    for g in (t.main, t.ssrf):
        t.case(f"normal push still 200 ({g.label})", lambda g: (lambda a: (a, ok_push(a) + (
            [] if (a.json() or {}).get("counts") == 2 and not (a.json() or {}).get("logs") else [f"not delivered: {a.short()}"])))(
            push(g.port, one(ios))), gw=g)
        t.case(f"/healthz 200 ({g.label})", lambda g: (lambda a: (a, [] if a.status == 200 else [f"got {a.short()}"]))(
            request(g.port, "GET", "/healthz")), gw=g)
        t.case(f"/api/stat/app and /metrics 200 ({g.label})", lambda g: (lambda a, b: (a, [] if a.status == 200 and b.status == 200 else [f"stat {a.short()}; metrics {b.short()}"]))(
            request(g.port, "GET", "/api/stat/app"), request(g.port, "GET", "/metrics")), gw=g)


if __name__ == "__main__":
    main()
