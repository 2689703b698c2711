#!/usr/bin/env python3
"""How cost grows.

1. Tokens per notification: delivered/s and peak RSS at 1, 10, 100 and 1,000 tokens per
   notification, memory and sqlite engines, the same number of APNs deliveries per point. One
   `pushgate mock`; per point a fresh `pushgate serve` (sqlite: a fresh file) and `pushgate bench
   --tokens T --notifications max(1, 100 // T)`: every request carries max(100, T) deliveries, so
   the 1-token point measures the per-notification cost and not the bench's HTTP/1.1 request rate.
   Peak RSS = VmHWM of the gateway process (/proc) after the run; delivered/s is the bench's
   (distinct bench tokens answered 200 at the mock / (last 200 - bench start)).
2. Status lookups with R retained delivery rows: the gateway makes the schema on a fresh SQLite file
   and stops; this script then fills `notifications` and `jobs` (the gateway's own tables, exact
   columns of Sources/QueueStore/Schema.swift) with R finished deliveries (K per notification,
   state 1 = delivered, created/finished now so queue.status_retention keeps them), sets the id
   counters in `pushgate_meta`, starts the gateway on the file and times L random
   `GET /api/push/<notif_id>` (Sources/HTTPIngest/StatusRoutes.swift) from C threads on keep-alive
   connections: p50/p90/p99/max. The client is Python: its own overhead is in the figures.

Writes the results as JSON and a PNG (bench/plot-cost-growth.py).

Usage: bench/cost-growth.py [--deliveries D] [--rows R] [--lookups L] [--concurrency C]
                              [--tokens 1,10,100,1000] [--engines memory,sqlite] [--out FILE.json] [--png FILE.png]
  full scale:  bench/cost-growth.py --deliveries 1000000 --rows 10000000 --lookups 20000 --out docs/cost-growth.json --png docs/cost-growth.png
  small scale: nice -n 19 bench/cost-growth.py --deliveries 20000 --rows 100000 --lookups 3000
Env: PUSHGATE_BIN (default .build-release/release/pushgate); the plot needs matplotlib
  (.venv-bench/bin/python, or set PLOT_PYTHON). Ports: mock 28643-28647, gateway 28287.
"""
import argparse, json, os, platform, random, shutil, signal, sqlite3, subprocess, sys, tempfile, threading, time, urllib.request, uuid
import http.client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("PUSHGATE_BIN", os.path.join(ROOT, ".build-release/release/pushgate"))
CTL = "http://127.0.0.1:28646"
GWPORT = 28287


def wait_for(url, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if 200 <= r.status < 300:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    raise SystemExit("timeout waiting for " + url)


def gateway_config(snippet, port):
    return open(snippet).read().replace("core:\n", "core:\n  port: %d\n" % port, 1)


def proc_status(pid):
    out = {}
    for line in open("/proc/%d/status" % pid):
        k = line.split(":")[0]
        if k in ("VmRSS", "VmHWM", "RssAnon"):
            out[k] = int(line.split()[1]) / 1024
    return out


class Gateway:
    def __init__(self, work, engine, db=None, extra_env=None):
        cfg = os.path.join(work, "gw.yml")
        open(cfg, "w").write(gateway_config(os.path.join(work, "m", "gateway-snippet.yml"), GWPORT))
        env = dict(os.environ, PUSHGATE_QUEUE_ENGINE=engine, **(extra_env or {}))
        if db:
            env["PUSHGATE_QUEUE_SQLITE_PATH"] = db
        self.t0 = time.time()
        self.log = open(os.path.join(work, "gw.log"), "a")
        self.p = subprocess.Popen([BIN, "serve", "--config", cfg], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("http://127.0.0.1:%d/healthz" % GWPORT, 300)
        self.start_seconds = time.time() - self.t0

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(40)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def bench(args_list):
    r = subprocess.run([BIN, "bench"] + args_list, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return json.loads(r.stdout)


def tokens_point(work, engine, t, deliveries):
    db = os.path.join(work, "tp.sqlite")
    for f in (db, db + "-wal", db + "-shm"):
        if os.path.exists(f):
            os.remove(f)
    gw = Gateway(work, engine, db if engine == "sqlite" else None, {"PUSHGATE_QUEUE_MAX_PENDING": str(deliveries + 100000)})
    time.sleep(1)
    idle = proc_status(gw.p.pid)["VmRSS"]
    notifs = max(1, 100 // t)
    b = bench(["--gateway-url", "http://127.0.0.1:%d" % GWPORT, "--mock-url", CTL, "--count", str(deliveries), "--tokens", str(t),
               "--notifications", str(notifs), "--concurrency", "4", "--quiet", "--json"])
    st = proc_status(gw.p.pid)
    gw.stop()
    point = {
        "engine": engine, "tokens_per_notification": t, "notifications_per_request": notifs, "deliveries": deliveries,
        "delivered": b.get("delivered"), "missing": b.get("missing"), "delivered_per_sec": b.get("delivered_per_sec"),
        "accepted_per_sec": b.get("accepted_per_sec"), "http_statuses": b.get("http_statuses"),
        "idle_rss_mb": round(idle, 1), "peak_rss_mb": round(st["VmHWM"], 1), "rss_end_mb": round(st["VmRSS"], 1),
        "rss_anon_end_mb": round(st["RssAnon"], 1),
    }
    print("  %-6s %4d tokens/notification (%3d notifications/request): %7.0f delivered/s, accepted %7.0f/s, peak RSS %6.1f MB (idle %.1f), missing %s"
          % (engine, t, notifs, point["delivered_per_sec"] or 0, point["accepted_per_sec"] or 0, point["peak_rss_mb"], idle, point["missing"]), flush=True)
    return point


def notif_key(nid):
    return str(uuid.UUID(int=(7 << 120) + nid)) + "-0"


def populate(db, rows, per_notif):
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    cols = {r[1] for r in con.execute("PRAGMA table_info(jobs)")}
    assert {"notif_row", "target_kind", "finished_at", "lease_owner", "state"} <= cols, cols
    now = time.time()
    n_notifs = (rows + per_notif - 1) // per_notif
    # Rows shaped like the gateway's own (checked against a row it wrote for one APNs push): ids
    # from 1, notif_id "<uuid>-<index>", body = the notification's gorush JSON, lower-case UUIDs,
    # max_attempts 4, apns-id as provider_id.
    batch = 20000
    job = 1
    for start in range(1, n_notifs + 1, batch):
        nrows, jrows = [], []
        for nid in range(start, min(n_notifs + 1, start + batch)):
            toks = ["%064x" % (job + k) for k in range(per_notif)]
            body = json.dumps({"message": "x" * 32, "tokens": toks, "platform": 1, "title": "Bench", "topic": "com.example.app"},
                              separators=(",", ":"))
            nrows.append((nid, notif_key(nid), 1, body, now, "default", None))
            for tok in toks:
                if job > rows:
                    break
                mid = str(uuid.UUID(int=(1 << 100) + job))
                jrows.append((job, nid, 1, 0, tok, None, mid, 1, 4, 0, now, now, None, 1, mid, now, None))
                job += 1
        con.execute("BEGIN")
        con.executemany("INSERT INTO notifications (id, notif_id, platform, body, created_at, app, fallback) VALUES (?,?,?,?,?,?,?)", nrows)
        con.executemany(
            "INSERT INTO jobs (id, notif_row, platform, target_kind, target, target_keys, message_id, attempts, max_attempts, cred_retry,"
            " not_before, enqueued_at, last_error, state, provider_id, finished_at, lease_owner) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", jrows)
        con.execute("COMMIT")
    # The gateway allocates ids from these counters (UPDATE pushgate_meta SET value = value + n ... RETURNING value).
    con.execute("UPDATE pushgate_meta SET value = ? WHERE key = 'next_notif_id'", (n_notifs,))
    con.execute("UPDATE pushgate_meta SET value = ? WHERE key = 'next_job_id'", (rows,))
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return n_notifs


def lookups(n_notifs, count, concurrency):
    ids = [notif_key(1 + random.randrange(n_notifs)) for _ in range(count)]
    lat, errors, lock = [], [], threading.Lock()

    def worker(chunk):
        c = http.client.HTTPConnection("127.0.0.1", GWPORT, timeout=60)
        mine = []
        for i in chunk:
            t = time.perf_counter()
            try:
                c.request("GET", "/api/push/" + i)
                r = c.getresponse()
                body = r.read()
                ok = r.status == 200 and b'"state":"delivered"' in body
            except Exception as e:
                ok = False
                c = http.client.HTTPConnection("127.0.0.1", GWPORT, timeout=60)
            mine.append(time.perf_counter() - t)
            if not ok:
                with lock:
                    errors.append(i)
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=worker, args=(ids[k::concurrency],)) for k in range(concurrency)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    lat.sort()
    pct = lambda p: round(lat[min(len(lat) - 1, int(len(lat) * p / 100))] * 1000, 3)
    return {"p50_ms": pct(50), "p90_ms": pct(90), "p99_ms": pct(99), "max_ms": round(lat[-1] * 1000, 3),
            "lookups_per_sec": round(len(lat) / wall), "errors": len(errors)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deliveries", type=int, default=1000000)
    ap.add_argument("--tokens", default="1,10,100,1000")
    ap.add_argument("--engines", default="memory,sqlite")
    ap.add_argument("--rows", type=int, default=10000000, help="retained delivery rows for the status lookups (0: skip)")
    ap.add_argument("--rows-per-notification", type=int, default=1)
    ap.add_argument("--lookups", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--out", default="cost-growth.json")
    ap.add_argument("--png", default="cost-growth.png")
    a = ap.parse_args()
    if not os.access(BIN, os.X_OK):
        raise SystemExit("no pushgate binary at %s (scripts/build-release.sh, or set PUSHGATE_BIN)" % BIN)
    work = tempfile.mkdtemp(prefix="cost-growth-")
    mock = subprocess.Popen([BIN, "mock", "--dir", os.path.join(work, "m"), "--apns-port", "28643", "--fcm-port", "28644", "--webpush-port", "28645",
                             "--stats-port", "28646", "--hms-port", "28647"], stdout=open(os.path.join(work, "mock.log"), "w"), stderr=subprocess.STDOUT)
    results = {"machine": {"nproc": os.cpu_count(), "kernel": platform.release(), "binary": BIN}, "deliveries_per_point": a.deliveries,
               "points": [], "status": None, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        wait_for(CTL + "/__mock/stats")
        print("== delivered/s and peak RSS by tokens per notification, %d APNs deliveries per point" % a.deliveries, flush=True)
        for engine in a.engines.split(","):
            for t in [int(x) for x in a.tokens.split(",")]:
                results["points"].append(tokens_point(work, engine, t, a.deliveries))
        if a.rows > 0:
            print("== status lookups with %d retained delivery rows (%d per notification), sqlite" % (a.rows, a.rows_per_notification), flush=True)
            db = os.path.join(work, "status.sqlite")
            Gateway(work, "sqlite", db).stop()  # the gateway makes its schema
            t = time.time()
            n_notifs = populate(db, a.rows, a.rows_per_notification)
            fill = time.time() - t
            size = sum(os.path.getsize(db + s) for s in ("", "-wal") if os.path.exists(db + s))
            gw = Gateway(work, "sqlite", db, {"PUSHGATE_QUEUE_STATUS_MAX_RECORDS": str(max(1, a.rows) + 1000)})  # keep all R rows
            time.sleep(1)
            lookups(n_notifs, min(500, a.lookups), a.concurrency)  # warm-up
            s = lookups(n_notifs, a.lookups, a.concurrency)
            st = proc_status(gw.p.pid)
            gw.stop()
            s.update({"rows": a.rows, "notifications": n_notifs, "rows_per_notification": a.rows_per_notification, "lookups": a.lookups,
                      "concurrency": a.concurrency, "sqlite_mb": round(size / 1048576, 1), "fill_seconds": round(fill, 1),
                      "gateway_start_seconds": round(gw.start_seconds, 2), "gateway_rss_mb": round(st["VmRSS"], 1)})
            results["status"] = s
            print("  %d rows (%.1f MB SQLite, filled in %.0f s, gateway up in %.2f s): %d lookups from %d threads: p50 %.2f ms p90 %.2f ms p99 %.2f ms max %.2f ms, %d/s, %d errors, gateway RSS %.1f MB"
                  % (a.rows, s["sqlite_mb"], fill, s["gateway_start_seconds"], a.lookups, a.concurrency, s["p50_ms"], s["p90_ms"], s["p99_ms"],
                     s["max_ms"], s["lookups_per_sec"], s["errors"], s["gateway_rss_mb"]), flush=True)
    finally:
        mock.send_signal(signal.SIGTERM)
        mock.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    json.dump(results, open(a.out, "w"), indent=1)
    print("wrote", a.out)
    py = os.environ.get("PLOT_PYTHON") or (os.path.join(ROOT, ".venv-bench/bin/python") if os.path.exists(os.path.join(ROOT, ".venv-bench/bin/python")) else sys.executable)
    subprocess.run([py, os.path.join(ROOT, "bench/plot-cost-growth.py"), a.out, a.png], check=False)


if __name__ == "__main__":
    main()
