#!/usr/bin/env bash
# CPU per delivery against provider stand-ins nobody here wrote: nginx (HTTP/2 + TLS, `return 200`
# on /3/device/) and a bare Go net/http HTTP/2 server (bench/gosink), beside the project's own mock
# APNs. For each sink, in one run: the bare Go client (bench/goclient, gorush's transport) posting
# COUNT APNs requests straight at it, then the gateway (gorush JSON in, queue, rendering, HTTP/2 out;
# memory and sqlite engines) delivering COUNT notifications to it. Reported: CPU-seconds per 100k
# deliveries of the sending process (client or gateway; /proc/<pid>/stat and /usr/bin/time) and
# deliveries per CPU-second as ratios. Deliveries through the gateway are counted by its own
# /api/stat/app (ios push_success): nginx and the Go server keep no counts.
# Needs Go (apt-get install golang-go), nginx (apt-get install nginx) and /usr/bin/time; h2load
# (apt-get install nghttp2-client) optional, printed as the floor (C, nghttp2, no JSON, no queue); run as root
# (nginx's worker runs as root to read the work directory).
# Usage: bench/neutral-sinks.sh [pushgate binary]   Env: COUNT (100000), ROUNDS (2), INFLIGHT (100),
# SINKS (the sinks to run, of "mock nginx go-h2": all by default)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-.build-release/release/pushgate}
COUNT=${COUNT:-100000}; ROUNDS=${ROUNDS:-2}; INFLIGHT=${INFLIGHT:-100}; SINKS=${SINKS:-mock nginx go-h2}
[ -x "$BIN" ] || scripts/build-release.sh
source bench/bench-lib.sh
GOCLIENT="$W/goclient"; (cd bench/goclient && go build -o "$GOCLIENT" .)
GOSINK="$W/gosink"; (cd bench/gosink && go build -o "$GOSINK" .)
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

# The mock makes the certificate (for 127.0.0.1, signed by its CA, which the gateway trusts through
# core.ca_file) that nginx and the Go server present too.
"$BIN" mock --dir "$W/m" --apns-port 18543 --fcm-port 18544 --webpush-port 18545 --stats-port 18546 --hms-port 18547 >"$W/mock.log" 2>&1 & PIDS+=($!)
wait_for http://127.0.0.1:18546/__mock/stats 30
for _ in $(seq 1 600); do [ -s "$W/m/gateway-snippet.yml" ] && break; sleep 0.1; done

mkdir -p "$W/nginx"
cat > "$W/nginx/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
user root;
pid $W/nginx/nginx.pid;
error_log $W/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $W/nginx; proxy_temp_path $W/nginx; fastcgi_temp_path $W/nginx;
  uwsgi_temp_path $W/nginx; scgi_temp_path $W/nginx;
  # APNs keeps a connection for hours: no per-connection request cap (nginx's default is 1,000).
  keepalive_requests 100000000;
  http2_max_concurrent_streams 1000;
  server {
    listen 127.0.0.1:18553 ssl http2;
    ssl_certificate $W/m/mock-server-cert.pem;
    ssl_certificate_key $W/m/mock-server-key.pem;
    client_body_buffer_size 16k;
    location /3/device/ { add_header apns-id \$http_apns_id always; return 200; }
  }
}
NGINX
"$NGINX" -c "$W/nginx/nginx.conf" -e "$W/nginx/error.log" & PIDS+=($!)
"$GOSINK" -addr 127.0.0.1:18563 -cert "$W/m/mock-server-cert.pem" -key "$W/m/mock-server-key.pem" & PIDS+=($!)
sleep 1

JWT=$(curl -s http://127.0.0.1:18546/__mock/apns-jwt)
python3 -c 'import sys; open(sys.argv[1], "w").write("{\"aps\":{\"alert\":{\"title\":\"Bench\",\"body\":\"" + "x" * 200 + "\"}},\"pgbt\":1234567890123456}")' "$W/apns.json"
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
# ended PORT: the gateway's ios deliveries that ended (delivered + failed); failed PORT: the failed ones.
ended() { curl -s "http://127.0.0.1:$1/api/stat/app" | python3 -c 'import json,sys; d=json.load(sys.stdin)["ios"]; print(d["push_success"] + d["push_error"])'; }
failed() { curl -s "http://127.0.0.1:$1/api/stat/app" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ios"]["push_error"])'; }

# gateway SINK_NAME URL ENGINE PORT: a gateway delivering to URL; sets GWPID.
gateway() {
  gateway_config "$W/m/gateway-snippet.yml" "$4" | sed "s|^  endpoint: \"https://127.0.0.1:18543\"|  endpoint: \"$2\"|" > "$W/gw-$1-$3.yml"
  PUSHGATE_QUEUE_ENGINE=$3 PUSHGATE_QUEUE_SQLITE_PATH="$W/gw-$1-$3.sqlite" PUSHGATE_IOS_MAX_CONCURRENT_PUSHES=$INFLIGHT \
    "$BIN" serve --config "$W/gw-$1-$3.yml" >"$W/gw-$1-$3.log" 2>&1 & GWPID=$!; PIDS+=($GWPID)
  wait_for "http://127.0.0.1:$4/healthz" 30
}
# gateway_run PORT PID: COUNT notifications (100 tokens each) through the gateway; prints
# "seconds cpu_seconds delivered" once COUNT more deliveries ended (or 120 s passed); failed ones
# (a sink closing connections under load) are not counted as delivered, and are printed.
gateway_run() {
  local s0 f0 c0 c1 t0 t1 s f
  s0=$(ended "$1"); f0=$(failed "$1"); c0=$(cpu "$2"); t0=$(date +%s.%N)
  "$BIN" bench --gateway-url "http://127.0.0.1:$1" --count "$COUNT" --tokens 100 --concurrency 4 --payload-bytes 200 --quiet >/dev/null 2>&1
  for _ in $(seq 1 1200); do s=$(ended "$1"); [ $((s - s0)) -ge "$COUNT" ] && break; sleep 0.1; done
  t1=$(date +%s.%N); c1=$(cpu "$2"); f=$(( $(failed "$1") - f0 ))
  [ "$f" -gt 0 ] && echo "  ($f deliveries failed on port $1: $(grep -o 'error=[^=]*notif_id' "$W"/gw-*.log | sed 's/ notif_id//' | sort | uniq -c | sort -rn | head -1))" >&2
  awk -v a="$t0" -v b="$t1" -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" -v d="$((s - s0 - f))" 'BEGIN {printf "%.2f %.3f %d\n", b - a, c / hz, d}'
}

printf "%-8s | %-28s | %-36s | %-36s | %s\n" sink "Go client: CPU/100k, req/s" "memory engine: CPU/100k, /s, x Go" "sqlite engine: CPU/100k, /s, x memory" "h2load (the floor): CPU/100k, req/s"
port=18590
for sink in "mock https://127.0.0.1:18543" "nginx https://127.0.0.1:18553" "go-h2 https://127.0.0.1:18563"; do
  set -- $sink; name=$1; url=$2
  case " $SINKS " in *" $name "*) ;; *) continue ;; esac
  gateway "$name" "$url" memory $port; GWM=$GWPID; PM=$port; port=$((port + 1))
  gateway "$name" "$url" sqlite $port; GWS=$GWPID; PS=$port; port=$((port + 1))
  gateway_run $PM $GWM >/dev/null; gateway_run $PS $GWS >/dev/null   # warm-up, not counted
  : > "$W/$name.txt"
  for r in $(seq 1 "$ROUNDS"); do
    /usr/bin/time -f "%U %S" -o "$W/go-cpu.txt" "$GOCLIENT" -n "$COUNT" -c "$INFLIGHT" -url "$url/3/device/" -ca "$W/m/mock-ca.pem" \
      -payload "$W/apns.json" -auth "bearer $JWT" > "$W/go.txt"
    ok=$(sed -n 's/^go-nethttp-h2: \([0-9]*\) ok.*/\1/p' "$W/go.txt"); rate=$(sed -n 's/.*= \([0-9]*\) req\/s.*/\1/p' "$W/go.txt")
    echo "go $ok $(awk '{print $1 + $2}' "$W/go-cpu.txt") $rate" >> "$W/$name.txt"
    if command -v h2load >/dev/null; then
      # The floor: C, nghttp2, no JSON, no queue; the same requests on 2 connections, 50 streams each.
      /usr/bin/time -f "%U %S" -o "$W/h2-cpu.txt" h2load -n "$COUNT" -c 2 -m $((INFLIGHT / 2)) -d "$W/apns.json" \
        -H "authorization: bearer $JWT" -H 'apns-topic: com.example.app' -H 'apns-push-type: alert' \
        "$url/3/device/a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90" > "$W/h2.txt" 2>&1 || true
      h2ok=$(sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p' "$W/h2.txt"); h2rate=$(sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p' "$W/h2.txt")
      echo "h2load ${h2ok:-0} $(awk '{print $1 + $2}' "$W/h2-cpu.txt") ${h2rate:-0}" >> "$W/$name.txt"
    fi
    echo "memory $(gateway_run $PM $GWM)" >> "$W/$name.txt"
    echo "sqlite $(gateway_run $PS $GWS)" >> "$W/$name.txt"
  done
  python3 - "$W/$name.txt" "$name" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
per = lambda kind: [x for x in rows if x[0] == kind]
def agg(kind):
    r = per(kind)
    if kind in ("go", "h2load"):
        n = sum(int(x[1]) for x in r); c = sum(float(x[2]) for x in r)
        return c * 100000 / max(1, n), sum(float(x[3]) for x in r) / max(1, len(r)), n
    n = sum(int(x[3]) for x in r); c = sum(float(x[2]) for x in r); t = sum(float(x[1]) for x in r)
    return c * 100000 / max(1, n), n / max(t, 1e-9), n
g, m, s, h = agg("go"), agg("memory"), agg("sqlite"), agg("h2load")
# Per round (the client and both engines one after the other): how far the rounds agree.
for r, (go, mem, sq) in enumerate(zip(per("go"), per("memory"), per("sqlite")), 1):
    gc, mc, sc = float(go[2]) / max(1, int(go[1])), float(mem[2]) / max(1, int(mem[3])), float(sq[2]) / max(1, int(sq[3]))
    print("  %s round %d: Go client %.2f s, memory %.2f s (%.2f x Go), sqlite %.2f s (%.2f x memory) per 100k" % (
        sys.argv[2], r, gc * 1e5, mc * 1e5, gc / mc, sc * 1e5, mc / sc), file=sys.stderr)
print("%-8s | %5.2f s, %6.0f/s (%d ok)       | %5.2f s, %6.0f/s, %.2f x Go per CPU-s | %5.2f s, %6.0f/s, %.2f x memory per CPU-s | %s" % (
    sys.argv[2], g[0], g[1], g[2], m[0], m[1], g[0] / m[0], s[0], s[1], m[0] / s[0],
    "%5.2f s, %6.0f/s (%d ok)" % h if h[2] else "no h2load"))
PY
  kill $GWM $GWS 2>/dev/null || true
done
