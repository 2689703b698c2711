#!/usr/bin/env python3
"""Crash test for the durable queue (issue 5): 0 tokens lost across kill -9.

1. starts `pushgate mock` (external mock providers with a control port that counts, per bench
   token, whether it was ever answered OK),
2. starts `pushgate serve` on a SQLite queue (queue.engine sqlite, fresh file),
3. sends N (default 20,000) APNs tokens in requests of --batch tokens; every request must get 200
   (a 503 "queue full" is retried after Retry-After),
4. `kill -9`s the gateway once --kill-after deliveries have reached the mock,
5. restarts the gateway on the same store and waits until every token was answered OK,
6. checks /__mock/missing (tokens never delivered) is empty, reports duplicates,
7. sends SIGTERM to the second gateway and checks it exits 0.

Exit status 0 when no token was lost. Python 3 standard library only.

    scripts/crash-test.py [--pushgate .build/debug/pushgate] [--tokens 20000] [--kill-after 5000]
"""
import argparse
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


def wait_for(cond, timeout, what, interval=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if cond():
                return True
        except Exception:
            pass
        time.sleep(interval)
    raise SystemExit(f"crash-test: timed out waiting for {what}")


def bench_token(seq):
    return "bbbbbbbb" + "0" * 40 + format(seq, "016x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None, help="pushgate executable (default: .build/release or .build/debug)")
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=500, help="tokens per /api/push request")
    ap.add_argument("--kill-after", type=int, default=None, help="deliveries at the mock before kill -9 (default: tokens/4)")
    ap.add_argument("--apns-latency-ms", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=32, help="ios.max_concurrent_pushes of the gateway")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--signal", choices=["KILL", "TERM"], default="KILL",
                    help="how to stop gateway 1: KILL (crash) or TERM (graceful: must exit 0 and leave the rest in the store)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    exe = args.pushgate
    if exe is None:
        for c in (".build/release/pushgate", ".build/debug/pushgate"):
            if os.access(os.path.join(root, c), os.X_OK):
                exe = os.path.join(root, c)
                break
    if not exe or not os.access(exe, os.X_OK):
        raise SystemExit("crash-test: no pushgate executable (swift build --product pushgate, or --pushgate PATH)")
    exe = os.path.abspath(exe)  # the gateway runs with its own working directory
    n = args.tokens
    kill_after = args.kill_after if args.kill_after is not None else n // 4

    work = tempfile.mkdtemp(prefix="pushgate-crash-")
    procs = []

    def log(msg):
        print(f"crash-test: {msg}", flush=True)

    try:
        ports = {k: free_port() for k in ("apns", "fcm", "webpush", "stats", "gateway")}
        mock = subprocess.Popen(
            [exe, "mock", "--dir", os.path.join(work, "mock"), "--apns-port", str(ports["apns"]), "--fcm-port", str(ports["fcm"]),
             "--webpush-port", str(ports["webpush"]), "--stats-port", str(ports["stats"]), "--apns-latency-ms", str(args.apns_latency_ms)],
            stdout=open(os.path.join(work, "mock.log"), "w"), stderr=subprocess.STDOUT)
        procs.append(mock)
        control = f"http://127.0.0.1:{ports['stats']}"
        wait_for(lambda: http("GET", control + "/__mock/stats")[0] == 200, 60, "the mock providers")
        snippet = os.path.join(work, "mock", "gateway-snippet.yml")
        wait_for(lambda: os.path.exists(snippet), 10, "the mock config snippet")

        env = dict(os.environ)
        env.update({
            "PUSHGATE_CORE_ADDRESS": "127.0.0.1",
            "PUSHGATE_CORE_PORT": str(ports["gateway"]),
            "PUSHGATE_QUEUE_ENGINE": "sqlite",
            "PUSHGATE_QUEUE_SQLITE_PATH": os.path.join(work, "store", "pushgate.sqlite"),
            "PUSHGATE_IOS_MAX_CONCURRENT_PUSHES": str(args.concurrency),
            "PUSHGATE_QUEUE_MAX_PENDING": str(max(200000, n)),
            "PUSHGATE_LOG_ACCESS_LEVEL": "warning",
            "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": "1",
        })
        gw_url = f"http://127.0.0.1:{ports['gateway']}"

        def start_gateway(i):
            p = subprocess.Popen([exe, "serve", "-c", snippet], env=env, cwd=work,
                                 stdout=open(os.path.join(work, f"gateway{i}.log"), "w"), stderr=subprocess.STDOUT)
            procs.append(p)
            wait_for(lambda: http("GET", gw_url + "/healthz")[0] == 200, 60, f"gateway {i}")
            return p

        def stats():
            return json.loads(http("GET", control + "/__mock/stats")[1])

        gw = start_gateway(1)
        log(f"gateway 1 pid {gw.pid}; sending {n} tokens in requests of {args.batch}")
        sent = 0
        t0 = time.time()
        while sent < n:
            toks = [bench_token(i) for i in range(sent, min(n, sent + args.batch))]
            body = {"notifications": [{"tokens": toks, "platform": 1, "message": "crash test", "topic": "com.example.app"}]}
            status, text, headers = http("POST", gw_url + "/api/push", body)
            if status == 503:
                time.sleep(float(headers.get("Retry-After", "1")))
                continue
            if status != 200:
                raise SystemExit(f"crash-test: /api/push answered {status}: {text}")
            sent += len(toks)
        log(f"all {n} accepted (200) in {time.time() - t0:.2f}s")

        wait_for(lambda: stats()["ok"] >= kill_after, args.timeout, f"{kill_after} deliveries", interval=0.01)
        if args.signal == "KILL":
            os.kill(gw.pid, signal.SIGKILL)
            gw.wait()
        else:
            os.kill(gw.pid, signal.SIGTERM)
            try:
                rc1 = gw.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise SystemExit("crash-test: gateway 1 did not exit within 60 s of SIGTERM")
            if rc1 != 0:
                raise SystemExit(f"crash-test: FAILED: gateway 1 exited with {rc1} after SIGTERM")
        at_kill = stats()
        log(f"SIG{args.signal} after {at_kill['ok']} deliveries reached the mock ({at_kill['bench_tokens']['ok_distinct']} distinct)")
        if at_kill["bench_tokens"]["ok_distinct"] >= n:
            log("warning: everything was delivered before the kill; use more tokens or more --apns-latency-ms")

        gw2 = start_gateway(2)
        log(f"gateway 2 pid {gw2.pid} on the same store")
        wait_for(lambda: stats()["bench_tokens"]["ok_distinct"] >= n, args.timeout, "every token to reach the mock", interval=0.2)
        end = stats()
        missing = json.loads(http("GET", control + f"/__mock/missing?below={n}")[1])["missing"]
        dups = end["ok"] - end["bench_tokens"]["ok_distinct"]
        log(f"delivered distinct {end['bench_tokens']['ok_distinct']}/{n}, answered OK {end['ok']} times, duplicates {dups}, missing {len(missing)}")

        os.kill(gw2.pid, signal.SIGTERM)
        try:
            rc = gw2.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise SystemExit("crash-test: gateway 2 did not exit within 60 s of SIGTERM")
        log(f"gateway 2 exited with {rc} after SIGTERM")
        if missing:
            raise SystemExit(f"crash-test: FAILED: {len(missing)} tokens lost, e.g. {missing[:10]}")
        if rc != 0:
            raise SystemExit(f"crash-test: FAILED: exit status {rc} after SIGTERM")
        log("PASSED: 0 tokens lost")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        if args.keep:
            print(f"crash-test: work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
