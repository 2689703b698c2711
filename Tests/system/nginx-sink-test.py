#!/usr/bin/env python3
"""The gateway against nginx (Debian package) as a neutral HTTP/2 server in place of APNs.

nginx answers `location /3/device/ { return 200; }` as soon as it has a request's HEADERS and then
resets the stream (RST_STREAM NO_ERROR), without reading the body: a server behaviour nobody here
wrote. Every delivery must be sent exactly once on the gateway's `ios.connections` connections: no
connection torn down for the resets (swift-nio-http2's default guard against a client's rapid resets
closes a connection after 200 RST_STREAM in 30 s), no request sent twice, none failed.

nginx's access log counts what it received: one line per request, with its connection number.

    Tests/system/nginx-sink-test.py [--pushgate .build/debug/pushgate] [--count 3000]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Run, bench_token, find_pushgate, free_port, http, wait_for  # noqa: E402

NGINX_CONF = """worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
events {{ worker_connections 256; }}
http {{
  log_format deliveries '$connection $status $request_uri';
  access_log {work}/nginx-access.log deliveries;
  client_body_temp_path {work}; proxy_temp_path {work}; fastcgi_temp_path {work};
  uwsgi_temp_path {work}; scgi_temp_path {work};
  keepalive_requests 100000000;
  server {{
    listen 127.0.0.1:{port} ssl http2;
    ssl_certificate {mock}/mock-server-cert.pem;
    ssl_certificate_key {mock}/mock-server-key.pem;
    location /3/device/ {{ add_header apns-id $http_apns_id always; return 200; }}
  }}
}}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    exe = find_pushgate(args.pushgate, "nginx-sink-test")
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if nginx is None:
        print("nginx-sink-test: SKIPPED: no nginx (apt-get install nginx)")
        return
    run = Run("nginx-sink-test", exe)
    try:
        run.start_mock()
        port = free_port()
        mockdir = os.path.join(run.work, "mock")
        conf = os.path.join(run.work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(work=run.work, port=port, mock=mockdir))
        if os.geteuid() == 0:
            # The worker (user nobody by default) reads nothing but what the master opened; the
            # work directory stays root's.
            with open(conf) as f:
                text = f.read()
            with open(conf, "w") as f:
                f.write("user root;\n" + text)
        ng = subprocess.Popen([nginx, "-c", conf, "-e", os.path.join(run.work, "nginx-error.log")],
                              stdout=open(os.path.join(run.work, "nginx.log"), "w"), stderr=subprocess.STDOUT)
        run.procs.append(ng)
        wait_for(lambda: subprocess.run(["curl", "-sk", "--http2", "-o", "/dev/null", "-w", "%{http_code}",
                                         f"https://127.0.0.1:{port}/3/device/x"], capture_output=True, text=True).stdout == "200",
                 30, "nginx", name=run.name)
        with open(os.path.join(run.work, "nginx-access.log"), "w"):
            pass  # the readiness probe's line is not a delivery
        os.kill(ng.pid, 10)  # SIGUSR1: reopen the log file

        apns = f"https://127.0.0.1:{run.ports['apns']}"
        with open(run.snippet) as f:
            snippet = f.read()
        if apns not in snippet:
            run.fail(f"the mock's snippet has no {apns}")
        run.snippet = os.path.join(run.work, "gateway-nginx.yml")
        with open(run.snippet, "w") as f:
            f.write(snippet.replace(apns, f"https://127.0.0.1:{port}"))
        gw = run.start_gateway("nginx", {"PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_IOS_CONNECTIONS": 2,
                                         "PUSHGATE_IOS_MAX_CONNECTIONS": 2, "PUSHGATE_IOS_MAX_CONCURRENT_PUSHES": 100})
        t0 = time.time()
        run.post_tokens(gw.url, range(args.count), 100)

        def ended():
            d = json.loads(http("GET", gw.url + "/api/stat/app")[1])["ios"]
            return d["push_success"], d["push_error"]
        wait_for(lambda: sum(ended()) >= args.count, args.timeout, f"{args.count} deliveries to end", name=run.name)
        ok, failed = ended()
        time.sleep(0.5)
        with open(os.path.join(run.work, "nginx-access.log")) as f:
            lines = [ln.split() for ln in f if ln.strip()]
        conns = sorted({ln[0] for ln in lines})
        statuses = sorted({ln[1] for ln in lines})
        paths = [ln[2] for ln in lines]
        run.log(f"{ok} delivered, {failed} failed in {time.time() - t0:.1f}s; nginx received {len(lines)} requests "
                f"on {len(conns)} connection(s), statuses {statuses}")
        if failed:
            run.dump_log("gateway-nginx.log")
            run.fail(f"{failed} deliveries failed")
        if ok != args.count:
            run.fail(f"{ok} delivered, {args.count} posted")
        if len(lines) != args.count:
            run.fail(f"nginx received {len(lines)} requests for {args.count} deliveries (each is to be sent once)")
        want = sorted(f"/3/device/{bench_token(s)}" for s in range(args.count))
        if sorted(paths) != want:
            run.fail("nginx did not receive each token exactly once")
        if len(conns) > 2:
            run.fail(f"{len(conns)} connections for ios.connections 2: connections were torn down and made again")
        run.log("PASSED: each delivery sent once, the connections kept through nginx's resets")
    finally:
        run.close()


if __name__ == "__main__":
    main()
