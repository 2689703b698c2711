#!/usr/bin/env python3
"""Store faults are answered, never dropped: a full disk under the SQLite queue and a stopped
PostgreSQL server under the shared one.

Disk full (`--case disk`):
1. starts `pushgate mock` and `pushgate serve` on a SQLite queue whose directory is a 3 MB tmpfs
   (`mount -t tmpfs`; needs root: without it the case is skipped, saying so),
2. posts requests of --batch APNs tokens (each with its own notif_id, plus one delivery that fails
   before sending) until the disk has refused --refusals of them: every answer must be 200, 503 or
   507, every refusal with `Retry-After` and a JSON message naming the cause; /readyz answers 503
   while the store refuses writes,
3. frees space (the tmpfs is grown), waits until every accepted token reached the mock, stops the
   gateway with SIGTERM and compares the count of deliveries its log says it left with what the
   next start finds,
4. restarts the gateway on the same store, waits, and checks: every accepted token delivered, none
   twice (the mock counts OK answers per token), each accepted notif_id's status readable and
   right (every token delivered, the early failure failed), each refused one unknown (404).

PostgreSQL down (`--case postgres`), twice: the server stopped (pg_ctl stop), then frozen (SIGSTOP:
its connections stay open and nothing answers):
1. starts its own throwaway server (scripts/start-postgres.sh with its own directory and port, so
   the server other tests share is left alone) and a gateway on it (queue.store_timeout 2s),
2. takes the server down: every request answers 503 + Retry-After within queue.store_timeout (plus
   a small margin), /readyz answers 503,
3. brings it back: requests are answered 200 again within 15 s, /readyz 200, and every accepted
   token reaches the mock exactly once.

Exit status 0 on success. Python 3 standard library only.

    Tests/system/store-fault-test.py [--pushgate .build/debug/pushgate] [--case disk|postgres|all]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import START_POSTGRES, Run, bench_token, find_pushgate, http, wait_for  # noqa: E402


def request_body(notif_id, seqs):
    """One notification of bench tokens, and one delivery that fails before sending (a payload over
    APNs' 4 KB): its status must be stored with the request, or the request not answered 200."""
    return {"notifications": [
        {"notif_id": notif_id, "tokens": [bench_token(s) for s in seqs], "platform": 1, "message": "store fault",
         "topic": "com.example.app"},
        {"notif_id": notif_id + "-early", "tokens": [bench_token(10_000_000 + seqs[0])], "platform": 1, "message": "x" * 5000,
         "topic": "com.example.app"},
    ]}


def check_refusal(run, status, text, headers, allowed):
    """A refusal: one of `allowed`, with Retry-After and gorush's error JSON naming the store."""
    if status not in allowed:
        run.fail(f"/api/push answered {status} (allowed: 200, {sorted(allowed)}): {text[:300]}")
    if not headers.get("Retry-After"):
        run.fail(f"a {status} without Retry-After: {text[:300]}")
    try:
        body = json.loads(text)
    except ValueError:
        run.fail(f"a {status} whose body is not JSON: {text[:300]}")
    if body.get("code") != status or "store" not in body.get("message", ""):
        run.fail(f"a {status} whose JSON does not name the store: {text[:300]}")


def status_of(url, notif_id):
    s, text, _ = http("GET", url + "/api/push/" + urllib.parse.quote(notif_id, safe=""))
    return s, (json.loads(text) if s == 200 else None)


def states(doc):
    """The delivery states of a status answer (any nesting of objects with a "state" key)."""
    out = []

    def walk(v):
        if isinstance(v, dict):
            if isinstance(v.get("state"), str):
                out.append(v["state"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(doc)
    return out


def left_at_shutdown(run, label):
    with open(os.path.join(run.work, f"gateway-{label}.log")) as f:
        text = f.read()
    m = re.findall(r"(\d+) deliveries left in the store for the next start", text)
    return int(m[-1]) if m else None


def found_at_start(run, label):
    with open(os.path.join(run.work, f"gateway-{label}.log")) as f:
        text = f.read()
    m = re.search(r"queue: (?:sqlite|postgres)[^\n]*\((\d+) pending\)", text)
    return int(m.group(1)) if m else None


def disk_case(args, exe):
    if os.geteuid() != 0:
        print("store-fault-test: disk case SKIPPED: mounting a small tmpfs needs root (run as root, as CI does)")
        return
    run = Run("store-fault-disk", exe, keep=args.keep)
    store = os.path.join(run.work, "store")
    os.makedirs(store)
    mounted = False
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.disk_mb}m", "tmpfs", store], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"store-fault-test: disk case SKIPPED: mount -t tmpfs failed ({r.stderr.strip()})")
            return
        mounted = True
        run.start_mock("--apns-latency-ms", str(args.apns_latency_ms))
        env = {
            "PUSHGATE_QUEUE_ENGINE": "sqlite",
            "PUSHGATE_QUEUE_SQLITE_PATH": os.path.join(store, "pushgate.sqlite"),
            "PUSHGATE_IOS_MAX_CONCURRENT_PUSHES": 32,
            "PUSHGATE_QUEUE_MAX_PENDING": 1000000,
            "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": 5,
            # The queue's counts at shutdown and start are info lines.
            "PUSHGATE_LOG_ACCESS_LEVEL": "info",
        }
        gw = run.start_gateway("1", env)
        accepted, refused, codes = [], [], {}
        ready_503 = False
        seq = 0
        t0 = time.time()
        i = 0
        while len(refused) < args.refusals and i < args.max_requests:
            notif_id = f"disk-{i}"
            seqs = list(range(seq, seq + args.batch))
            seq += args.batch
            s, text, headers = http("POST", gw.url + "/api/push", request_body(notif_id, seqs))
            codes[s] = codes.get(s, 0) + 1
            if s == 200:
                accepted.append((notif_id, seqs))
            else:
                check_refusal(run, s, text, headers, {503, 507})
                refused.append(notif_id)
                if not ready_503:
                    rs = http("GET", gw.url + "/readyz")[0]
                    ready_503 = ready_503 or rs == 503
            i += 1
        run.log(f"{i} requests of {args.batch} tokens in {time.time() - t0:.1f}s: answers {dict(sorted(codes.items()))}")
        if not refused:
            run.fail(f"the {args.disk_mb} MB store never refused a request")
        if not ready_503:
            run.fail("/readyz never answered 503 while the store refused writes")
        run.log("every refusal had Retry-After and a JSON message naming the store; /readyz answered 503")

        # Space freed, and at once a graceful stop: the outcomes kept while the disk was full are
        # written, and what is left is counted as the next start will find it.
        subprocess.run(["mount", "-o", f"remount,size={args.freed_mb}m", store], check=True)
        n_acc = sum(len(s) for _, s in accepted)
        at_stop = run.stats()["bench_tokens"]["ok_distinct"]
        run.stop_gracefully(gw, "1")
        left = left_at_shutdown(run, "1")
        gw2 = run.start_gateway("2", env)
        found = found_at_start(run, "2")
        run.log(f"space freed, SIGTERM after {at_stop} of {n_acc} accepted deliveries: shutdown said {left} deliveries left; "
                f"the next start found {found}")
        if left is None or found is None or left != found:
            run.fail(f"the shutdown's count ({left}) is not what the next start found ({found})")
        if found == 0 and at_stop < n_acc:
            run.log("warning: everything was sent before the stop; use more --apns-latency-ms to leave some in the store")
        wait_for(lambda: run.stats()["bench_tokens"]["ok_distinct"] >= n_acc, args.timeout,
                 f"the {n_acc} accepted tokens to reach the mock", interval=0.2, name=run.name)
        if http("GET", gw2.url + "/readyz")[0] != 200:
            run.fail("/readyz is not 200 once the store takes writes")
        # Whatever would be sent twice reaches the mock within this time.
        time.sleep(args.settle)
        end = run.stats()
        dups = end["ok"] - end["bench_tokens"]["ok_distinct"]
        below = set(run.missing(seq))
        missing = [s for _, seqs in accepted for s in seqs if s in below]
        run.log(f"accepted {len(accepted)} requests ({n_acc} tokens): delivered distinct {end['bench_tokens']['ok_distinct']}, "
                f"OK answers {end['ok']}, duplicates {dups}, missing {len(missing)}")
        if missing:
            run.fail(f"{len(missing)} accepted tokens never delivered, e.g. {missing[:5]}")
        if dups:
            run.fail(f"{dups} deliveries sent twice")
        if end["bench_tokens"]["ok_distinct"] != n_acc:
            run.fail(f"{end['bench_tokens']['ok_distinct']} distinct tokens delivered, {n_acc} accepted (a refused request was sent?)")
        for notif_id, seqs in accepted:
            s, doc = status_of(gw2.url, notif_id)
            st = states(doc) if doc else []
            if s != 200 or len(st) != len(seqs) or any(x != "delivered" for x in st):
                run.fail(f"status of accepted {notif_id}: {s}, states {sorted(set(st))} x{len(st)} (want {len(seqs)} delivered)")
            s, doc = status_of(gw2.url, notif_id + "-early")
            if s != 200 or states(doc) != ["failed"]:
                run.fail(f"status of the early failure of accepted {notif_id}: {s} {doc}")
        for notif_id in refused:
            s, _ = status_of(gw2.url, notif_id)
            if s != 404:
                run.fail(f"status of refused {notif_id}: {s} (want 404: nothing of it was stored)")
        run.log(f"status: {len(accepted)} accepted ids delivered (their early failures failed), {len(refused)} refused ids unknown")
        # Everything sent by the same process: a restart finds nothing and sends nothing again.
        run.stop_gracefully(gw2, "2")
        before = run.stats()["ok"]
        gw3 = run.start_gateway("3", env)
        left, found = left_at_shutdown(run, "2"), found_at_start(run, "3")
        time.sleep(2)
        again = run.stats()["ok"] - before
        run.log(f"second restart: shutdown said {left} left, the start found {found}, {again} sent again")
        if left != 0 or found != 0 or again:
            run.fail(f"after everything was delivered: shutdown {left}, start {found}, sent again {again}")
        run.stop_gracefully(gw3, "3")
        run.log("PASSED (disk full)")
    finally:
        run.close()
        if mounted:
            subprocess.run(["umount", "-l", store], capture_output=True)


def postgres_case(args, exe, fault):
    pg_dir = args.postgres_dir or f"/tmp/pushgate-pg-storefault-{os.getpid()}"
    pg_env = dict(os.environ, PUSHGATE_PG_DIR=pg_dir, PUSHGATE_PG_PORT=str(args.postgres_port),
                  PUSHGATE_PG_DB="pushgate_storefault")

    def pg(*a):
        return subprocess.run([START_POSTGRES, *a], env=pg_env, capture_output=True, text=True)

    r = pg()
    if r.returncode != 0:
        print(f"store-fault-test: postgres case SKIPPED: no PostgreSQL server could be started ({r.stderr.strip()[-300:]})")
        return
    url = next((ln.split("=", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("export PUSHGATE_TEST_POSTGRES_URL=")), None)
    run = Run(f"store-fault-postgres-{fault}", exe, keep=args.keep)
    frozen = []
    try:
        run.start_mock("--apns-latency-ms", "1")
        store_timeout = 2.0
        env = {
            "PUSHGATE_QUEUE_ENGINE": "postgres",
            "PUSHGATE_QUEUE_POSTGRES_URL": url,
            "PUSHGATE_QUEUE_STORE_TIMEOUT": f"{store_timeout:g}s",
            "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": 5,
        }
        gw = run.start_gateway("1", env)
        accepted = []
        seq = 0

        def post(i):
            nonlocal seq
            seqs = list(range(seq, seq + args.pg_batch))
            seq += args.pg_batch
            t = time.time()
            s, text, headers = http("POST", gw.url + "/api/push", request_body(f"pg-{i}", seqs), timeout=60)
            took = time.time() - t
            if s == 200:
                accepted.append((f"pg-{i}", seqs))
            return s, text, headers, took

        for i in range(5):
            s, text, _, _ = post(i)
            if s != 200:
                run.fail(f"before the outage /api/push answered {s}: {text[:300]}")
        if http("GET", gw.url + "/readyz")[0] != 200:
            run.fail("/readyz is not 200 before the outage")
        if fault == "freeze":
            # The server and its backends stopped with SIGSTOP: connections stay open, nothing answers.
            with open(os.path.join(pg_dir, "data", "postmaster.pid")) as f:
                postmaster = int(f.readline())
            children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
            frozen = [postmaster] + [int(c) for c in children]
            for p in frozen:
                os.kill(p, signal.SIGSTOP)
            run.log(f"PostgreSQL frozen (SIGSTOP to {len(frozen)} processes)")
        else:
            r = pg("stop")
            run.log(f"PostgreSQL stopped ({'ok' if r.returncode == 0 else r.stderr.strip()[-200:]})")

        # Concurrent and sequential requests while it is down: 503 + Retry-After within store_timeout.
        results = []
        lock = threading.Lock()

        def worker(k):
            out = post(100 + k)
            with lock:
                results.append(out)
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k in range(6):
            results.append(post(200 + k))
        worst = 0.0
        for s, text, headers, took in results:
            check_refusal(run, s, text, headers, {503})
            worst = max(worst, took)
        if worst > store_timeout + args.margin:
            run.fail(f"a refusal took {worst:.2f}s, more than queue.store_timeout {store_timeout}s + {args.margin}s")
        rs = http("GET", gw.url + "/readyz")
        if rs[0] != 503:
            run.fail(f"/readyz answered {rs[0]} with PostgreSQL down: {rs[1][:200]}")
        run.log(f"PostgreSQL down: {len(results)} requests all 503 + Retry-After, slowest {worst:.2f}s "
                f"(queue.store_timeout {store_timeout:g}s); /readyz 503 ({json.loads(rs[1]).get('detail')})")

        if fault == "freeze":
            for p in frozen:
                os.kill(p, signal.SIGCONT)
            frozen = []
        else:
            r = pg()
            if r.returncode != 0:
                run.fail(f"PostgreSQL did not start again: {r.stderr.strip()[-300:]}")
        t_up = time.time()
        back = None
        k = 300
        while time.time() - t_up < 30:
            s, text, headers, _ = post(k)
            k += 1
            if s == 200:
                back = time.time() - t_up
                break
            check_refusal(run, s, text, headers, {503})
            time.sleep(0.2)
        if back is None or back > 15:
            run.fail(f"not answering 200 within 15 s of PostgreSQL's return ({back})")
        wait_for(lambda: http("GET", gw.url + "/readyz")[0] == 200, 15, "/readyz 200 after the restart", name=run.name)
        run.log(f"PostgreSQL back: 200 after {back:.2f}s, /readyz 200")
        n_acc = sum(len(s) for _, s in accepted)
        wait_for(lambda: run.stats()["bench_tokens"]["ok_distinct"] >= n_acc, args.timeout,
                 f"the {n_acc} accepted tokens to reach the mock", interval=0.2, name=run.name)
        time.sleep(1)
        end = run.stats()
        dups = end["ok"] - end["bench_tokens"]["ok_distinct"]
        run.log(f"accepted {len(accepted)} requests ({n_acc} tokens): delivered distinct {end['bench_tokens']['ok_distinct']}, duplicates {dups}")
        if end["bench_tokens"]["ok_distinct"] != n_acc:
            run.fail(f"{end['bench_tokens']['ok_distinct']} distinct tokens delivered, {n_acc} accepted")
        if dups:
            run.fail(f"{dups} deliveries sent twice")
        run.stop_gracefully(gw, "1")
        run.log(f"PASSED (PostgreSQL {'stopped' if fault == 'stop' else 'frozen'})")
    finally:
        for p in frozen:
            os.kill(p, signal.SIGCONT)
        run.close()
        pg("stop")
        if not args.postgres_dir and not args.keep:
            shutil.rmtree(pg_dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--case", choices=["disk", "postgres", "all"], default="all")
    ap.add_argument("--batch", type=int, default=500, help="tokens per request (disk case)")
    ap.add_argument("--disk-mb", type=int, default=3, help="size of the full file system")
    ap.add_argument("--freed-mb", type=int, default=256, help="its size once space is freed")
    ap.add_argument("--refusals", type=int, default=20, help="refused requests to see before space is freed")
    ap.add_argument("--max-requests", type=int, default=400)
    ap.add_argument("--apns-latency-ms", type=int, default=20, help="the mock's answer time (disk case): leaves work in the store at the stop")
    ap.add_argument("--settle", type=float, default=5, help="seconds the restarted gateway is watched for duplicates")
    ap.add_argument("--pg-batch", type=int, default=100, help="tokens per request (postgres case)")
    ap.add_argument("--postgres-dir", default=None, help="data directory of the case's own server")
    ap.add_argument("--postgres-port", type=int, default=31347)
    ap.add_argument("--pg-fault", choices=["stop", "freeze", "both"], default="both",
                    help="stop: the server shut down (pg_ctl stop); freeze: SIGSTOP to it, connections left open; both: one then the other")
    ap.add_argument("--margin", type=float, default=1.0, help="seconds allowed beyond queue.store_timeout")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    exe = find_pushgate(args.pushgate, "store-fault-test")
    if args.case in ("disk", "all"):
        disk_case(args, exe)
    if args.case in ("postgres", "all"):
        for fault in (["stop", "freeze"] if args.pg_fault == "both" else [args.pg_fault]):
            postgres_case(args, exe, fault)


if __name__ == "__main__":
    main()
