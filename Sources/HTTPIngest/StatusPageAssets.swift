import GatewayCore
import PushgateCore

/// The status page's static files (`/ui`, `/ui/app.js`, `/ui/app.css`): no data in them, no
/// third-party code, nothing fetched from elsewhere. The script reads the gateway's JSON routes
/// with the admin key the operator types in, and writes every value with `textContent` (never as
/// markup), so a notif_id, token or error text is shown as text.
enum StatusPageAssets {
    /// The page; `{{…}}` are filled in (HTML-escaped) with the routes it reads.
    static let htmlTemplate = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="referrer" content="no-referrer">
        <title>Pushgate status</title>
        <link rel="stylesheet" href="{{base}}/app.css">
        <script defer src="{{base}}/app.js"></script>
        </head>
        <body data-stat-app="{{statApp}}" data-stat-go="{{statGo}}" data-live="{{live}}" data-push="{{push}}">
        <header>
          <h1>Pushgate</h1>
          <span id="version" class="muted"></span>
          <span id="state" class="state">loading…</span>
        </header>
        <form id="keyform" class="hidden" autocomplete="off">
          <label for="key">Admin key</label>
          <input id="key" type="password" spellcheck="false" placeholder="a key of core.admin_keys">
          <button type="submit">Show</button>
          <span class="muted">sent only as <code>Authorization: Bearer</code> to this gateway's JSON routes; kept in this tab until it closes</span>
        </form>
        <main id="main" class="hidden">
          <section class="cards">
            <div class="card"><div class="label">accepted (total_count)</div><div class="value" data-k="total_count">–</div></div>
            <div class="card"><div class="label">delivered (success_tasks)</div><div class="value ok" data-k="success_tasks">–</div></div>
            <div class="card"><div class="label">failed (failure_tasks)</div><div class="value bad" data-k="failure_tasks">–</div></div>
            <div class="card"><div class="label">being sent (busy_workers)</div><div class="value" data-k="busy_workers">–</div></div>
            <div class="card"><div class="label">queue pending / capacity</div><div class="value"><span data-k="queue.pending">–</span> / <span data-k="queue.capacity">–</span></div></div>
            <div class="card"><div class="label">oldest pending</div><div class="value" data-k="queue.oldest_pending">–</div></div>
            <div class="card"><div class="label">dead tokens</div><div class="value bad" data-k="dead_tokens.total">–</div></div>
            <div class="card"><div class="label">memory (RSS) · uptime</div><div class="value"><span data-k="go.rss">–</span> · <span data-k="go.uptime">–</span></div></div>
          </section>
          <section>
            <h2>Deliveries per second, last 10 minutes</h2>
            <div id="legend" class="legend"></div>
            <svg id="chart" viewBox="0 0 900 220" role="img" aria-label="deliveries per second per provider"></svg>
          </section>
          <section class="cols">
            <div>
              <h2>Provider answers by class</h2>
              <table id="answers"><thead><tr><th>provider</th>{{answerClassHeaders}}</tr></thead><tbody></tbody></table>
              <p class="muted">last 10 minutes (since start in brackets); one per attempt</p>
            </div>
            <div>
              <h2>Per app</h2>
              <table id="apps"><thead><tr><th>app</th><th>pending</th><th>provider</th><th>push_success</th><th>push_error</th><th>health</th></tr></thead><tbody></tbody></table>
            </div>
          </section>
          <section class="cols">
            <div>
              <h2>Connection pools (HTTP/2)</h2>
              <table id="pools"><thead><tr><th>origin</th><th>pool</th><th>connections</th><th>opened</th><th>waiting</th></tr></thead><tbody></tbody></table>
            </div>
            <div>
              <h2>Latest dead tokens</h2>
              <table id="dead"><thead><tr><th>at</th><th>app</th><th>provider</th><th>token</th><th>reason</th></tr></thead><tbody></tbody></table>
            </div>
          </section>
          <section>
            <h2>A notification's deliveries</h2>
            <form id="lookup" autocomplete="off">
              <input id="notif" type="text" spellcheck="false" placeholder="notif_id (X-Pushgate-Notif-Ids)">
              <button type="submit">Look up</button>
              <span id="lookup-state" class="muted"></span>
            </form>
            <table id="deliveries" class="hidden"><thead><tr><th>app</th><th>provider</th><th>token</th><th>state</th><th>attempts</th><th>detail</th></tr></thead><tbody></tbody></table>
          </section>
        </main>
        </body>
        </html>

        """#

    static let cssTemplate = #"""
        :root { color-scheme: light dark; --fg: #1b1f24; --muted: #667085; --bg: #ffffff; --card: #f4f6f8; --line: #d0d5dd; --ok: #1a7f37; --bad: #cf222e; }
        @media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #8b949e; --bg: #0d1117; --card: #161b22; --line: #30363d; --ok: #3fb950; --bad: #f85149; } }
        body { font: 14px/1.4 system-ui, sans-serif; margin: 0 auto; padding: 16px 24px; max-width: 1200px; color: var(--fg); background: var(--bg); }
        header { display: flex; align-items: baseline; gap: 16px; }
        h1 { font-size: 22px; margin: 0; }
        h2 { font-size: 15px; margin: 20px 0 8px; }
        .muted { color: var(--muted); font-size: 12px; }
        .hidden { display: none; }
        .state { margin-left: auto; font-size: 12px; color: var(--muted); }
        .state.err { color: var(--bad); }
        form { display: flex; align-items: center; gap: 8px; margin: 12px 0; flex-wrap: wrap; }
        input { font: inherit; padding: 4px 8px; min-width: 320px; border: 1px solid var(--line); border-radius: 4px; background: var(--bg); color: var(--fg); }
        button { font: inherit; padding: 4px 12px; }
        .cards { display: grid; grid-template-columns: repeat(4, 1fr); gap: 10px; margin-top: 12px; }
        .card { background: var(--card); border-radius: 6px; padding: 10px 12px; }
        .label { font-size: 12px; color: var(--muted); }
        .value { font-size: 20px; font-variant-numeric: tabular-nums; }
        .ok { color: var(--ok); } .bad { color: var(--bad); }
        .cols { display: grid; grid-template-columns: 1fr 1fr; gap: 24px; }
        table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
        th, td { text-align: left; padding: 3px 8px 3px 0; border-bottom: 1px solid var(--line); overflow-wrap: anywhere; }
        th { font-size: 12px; color: var(--muted); font-weight: 500; }
        #chart { width: 100%; height: 220px; background: var(--card); border-radius: 6px; }
        #chart .grid { stroke: var(--line); stroke-width: 1; }
        #chart text { fill: var(--muted); font-size: 11px; }
        .legend { display: flex; gap: 16px; font-size: 12px; margin-bottom: 4px; }
        .swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; }
        {{platformClasses}} .p-failed { background: #cf222e; }

        """#

    static let jsTemplate = #"""
        "use strict";
        // Reads the gateway's JSON routes every 2 s with the admin key (if one is needed) and writes
        // every value with textContent: nothing from a response is ever parsed as markup.
        (function () {
          const body = document.body;
          const routes = { statApp: body.dataset.statApp, statGo: body.dataset.statGo, live: body.dataset.live, push: body.dataset.push };
          const COLORS = {{platformColors}};
          const SVG = "http://www.w3.org/2000/svg";
          const KEY_ITEM = "pushgate-admin-key";
          let key = sessionStorage.getItem(KEY_ITEM) || "";
          let timer = null;

          const $ = (id) => document.getElementById(id);
          function setState(text, error) {
            const s = $("state");
            s.textContent = text;
            s.className = error ? "state err" : "state";
          }
          function headers() { return key ? { Authorization: "Bearer " + key } : {}; }
          async function getJSON(path) {
            const r = await fetch(path, { headers: headers(), cache: "no-store", credentials: "omit" });
            if (r.status === 401 || r.status === 403) { const e = new Error("auth"); e.status = r.status; throw e; }
            if (!r.ok) { const e = new Error(path + ": HTTP " + r.status); e.status = r.status; throw e; }
            return r.json();
          }
          function put(k, value) {
            for (const el of document.querySelectorAll('[data-k="' + CSS.escape(k) + '"]')) el.textContent = String(value);
          }
          function cell(tr, text, cls) {
            const td = document.createElement("td");
            td.textContent = text === undefined || text === null ? "" : String(text);
            if (cls) td.className = cls;
            tr.appendChild(td);
            return td;
          }
          function rows(tableID, list, fill) {
            const tbody = $(tableID).tBodies[0];
            const fresh = document.createElement("tbody");
            for (const item of list) { const tr = document.createElement("tr"); fill(tr, item); fresh.appendChild(tr); }
            tbody.replaceWith(fresh);
          }
          function age(seconds) {
            if (seconds === null || seconds === undefined) return "none";
            if (seconds < 90) return seconds.toFixed(1) + " s";
            if (seconds < 5400) return (seconds / 60).toFixed(1) + " min";
            return (seconds / 3600).toFixed(1) + " h";
          }
          function bytes(n) { return (n / 1048576).toFixed(1) + " MiB"; }

          function showCounters(app, go, live) {
            put("total_count", app.total_count);
            put("success_tasks", app.success_tasks);
            put("failure_tasks", app.failure_tasks);
            put("busy_workers", app.busy_workers);
            put("queue.pending", live.queue.pending);
            put("queue.capacity", live.queue.capacity);
            put("queue.oldest_pending", age(live.queue.oldest_pending_seconds));
            put("dead_tokens.total", live.dead_tokens.total);
            put("go.rss", bytes(go.memory_rss_bytes));
            put("go.uptime", age(go.uptime_seconds));
            $("version").textContent = "version " + app.version;
          }

          function showApps(app, providers, live) {
            // With apps configured, /api/stat/app has them; a gorush config has one (the default).
            const list = [];
            const apps = app.apps || { default: Object.assign({ pending: live.queue.pending }, app) };
            for (const id of Object.keys(apps).sort()) {
              const a = apps[id];
              const names = providers.length ? providers : {{platformNames}};
              names.forEach((p, i) => list.push({ id: id, first: i === 0, pending: a.pending, p: p, c: a[p] || {} }));
            }
            rows("apps", list, (tr, r) => {
              cell(tr, r.first ? r.id : "");
              cell(tr, r.first ? (r.pending === null ? "–" : r.pending) : "").dataset.k = r.first ? "apps." + r.id + ".pending" : "";
              cell(tr, r.p);
              cell(tr, r.c.push_success, "ok").dataset.k = "apps." + r.id + "." + r.p + ".push_success";
              cell(tr, r.c.push_error, "bad").dataset.k = "apps." + r.id + "." + r.p + ".push_error";
              // The provider's own state: failing while its service refuses the app's configuration.
              const h = ((live.health || {})[r.id] || {})[r.p];
              const failing = h && h.state === "failing";
              const text = !h ? "" : failing ? "failing since " + new Date(h.since).toLocaleTimeString() + ": " + h.reason : "ok";
              cell(tr, text, failing ? "bad" : "ok").dataset.k = "apps." + r.id + "." + r.p + ".health";
            });
          }

          function showAnswers(live) {
            const classes = {{answerClasses}};
            rows("answers", live.providers, (tr, p) => {
              cell(tr, p);
              const a = live.answers[p] || { window: {}, total: {} };
              for (const c of classes) {
                cell(tr, (a.window[c] || 0) + " (" + (a.total[c] || 0) + ")", c === "delivered" ? "ok" : "").dataset.k = "answers." + p + "." + c;
              }
            });
          }

          function showPools(live) {
            rows("pools", live.pools, (tr, p) => {
              cell(tr, p.origin);
              cell(tr, p.label, "pool-label");
              cell(tr, p.active_connections);
              cell(tr, p.connections_opened);
              cell(tr, p.pending_requests);
            });
          }

          function showDead(live) {
            rows("dead", live.dead_tokens.recent, (tr, d) => {
              cell(tr, new Date(d.at).toLocaleTimeString());
              cell(tr, d.app);
              cell(tr, d.platform);
              cell(tr, d.token);
              cell(tr, d.reason, "bad");
            });
          }

          function svg(name, attrs, parent) {
            const el = document.createElementNS(SVG, name);
            for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
            if (parent) parent.appendChild(el);
            return el;
          }

          function showChart(live) {
            const chart = $("chart");
            while (chart.firstChild) chart.removeChild(chart.firstChild);
            // The drawing's width is the element's, so text is not stretched.
            const W = Math.max(300, Math.round(chart.clientWidth || 900)), H = 220, L = 44, R = 16, T = 10, B = 22;
            chart.setAttribute("viewBox", "0 0 " + W + " " + H);
            const step = live.bucket_seconds;
            const lines = [];
            const failed = [];
            for (const p of live.providers) {
              const s = live.series[p];
              lines.push({ p: p, v: s.delivered.map((d, i) => (d + s.failed[i]) / step) });
              s.failed.forEach((f, i) => { failed[i] = (failed[i] || 0) + f / step; });
            }
            const n = lines.length ? lines[0].v.length : 120;
            let max = 1;
            for (const l of lines) for (const v of l.v) max = Math.max(max, v);
            const nice = Math.pow(10, Math.floor(Math.log10(max)));
            max = Math.ceil(max / nice) * nice;
            const x = (i) => L + (i / Math.max(1, n - 1)) * (W - L - R);
            const y = (v) => T + (1 - v / max) * (H - T - B);
            for (let g = 0; g <= 4; g++) {
              const v = (max * g) / 4;
              svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }, chart);
              svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, chart).textContent = v % 1 ? v.toFixed(1) : String(v);
            }
            for (let m = 0; m <= 10; m += 2) {
              const i = n - 1 - (m * 60) / step;
              if (i < 0) continue;
              svg("text", { x: x(i), y: H - 6, "text-anchor": m === 0 ? "end" : "middle" }, chart).textContent = m === 0 ? "now" : "-" + m + " min";
            }
            const path = (values) => values.map((v, i) => (i ? "L" : "M") + x(i).toFixed(1) + " " + y(v).toFixed(1)).join(" ");
            for (const l of lines) svg("path", { d: path(l.v), fill: "none", stroke: COLORS[l.p] || "#888", "stroke-width": 2 }, chart);
            if (failed.some((v) => v > 0)) svg("path", { d: path(failed), fill: "none", stroke: "#cf222e", "stroke-width": 1.5, "stroke-dasharray": "4 3" }, chart);
            const legend = $("legend");
            while (legend.firstChild) legend.removeChild(legend.firstChild);
            const entries = live.providers.map((p) => [p, "p-" + p]).concat([["failed (all)", "p-failed"]]);
            for (const [name, cls] of entries) {
              const span = document.createElement("span");
              const sw = document.createElement("span");
              sw.className = "swatch " + cls;
              span.appendChild(sw);
              span.appendChild(document.createTextNode(name));
              legend.appendChild(span);
            }
          }

          async function refresh() {
            try {
              const [app, go, live] = await Promise.all([getJSON(routes.statApp), getJSON(routes.statGo), getJSON(routes.live)]);
              $("keyform").classList.add("hidden");
              $("main").classList.remove("hidden");
              showCounters(app, go, live);
              showApps(app, live.providers, live);
              showAnswers(live);
              showPools(live);
              showDead(live);
              showChart(live);
              body.dataset.loaded = String(live.now);
              setState("updated " + new Date().toLocaleTimeString(), false);
            } catch (e) {
              if (e.message === "auth") {
                stop();
                $("main").classList.add("hidden");
                $("keyform").classList.remove("hidden");
                if (e.status === 403) setState("that key is not an admin key", true);
                else setState(key ? "the key was refused" : "this gateway needs an admin key", !!key);
                if (key) { key = ""; sessionStorage.removeItem(KEY_ITEM); }
              } else {
                setState("cannot read the gateway: " + e.message, true);
              }
            }
          }
          function start() { stop(); refresh(); timer = setInterval(refresh, 2000); }
          function stop() { if (timer) clearInterval(timer); timer = null; }

          $("keyform").addEventListener("submit", (ev) => {
            ev.preventDefault();
            key = $("key").value.trim();
            $("key").value = "";
            if (key) sessionStorage.setItem(KEY_ITEM, key);
            start();
          });

          $("lookup").addEventListener("submit", async (ev) => {
            ev.preventDefault();
            const id = $("notif").value.trim();
            const table = $("deliveries");
            const state = $("lookup-state");
            if (!id) return;
            state.textContent = "…";
            try {
              const r = await fetch(routes.push + "/" + encodeURIComponent(id), { headers: headers(), cache: "no-store", credentials: "omit" });
              const data = await r.json();
              if (!r.ok) {
                table.classList.add("hidden");
                state.textContent = "HTTP " + r.status + ": " + (data.message || "") + " " + (data.detail || "");
                return;
              }
              const c = data.counts || {};
              state.textContent = Object.keys(c).map((k) => k + " " + c[k]).join(" · ");
              rows("deliveries", data.deliveries || [], (tr, d) => {
                cell(tr, d.app || "default");
                cell(tr, d.platform);
                cell(tr, d.token);
                cell(tr, d.state, d.state === "delivered" ? "ok" : d.state === "failed" ? "bad" : "");
                cell(tr, d.attempts);
                const detail = d.state === "delivered" ? d.provider_id : d.state === "failed" ? d.reason : d.state === "retrying" ? (d.last_error || "") + (d.next_try ? " next " + d.next_try : "") : "";
                cell(tr, detail);
              });
              table.classList.remove("hidden");
            } catch (e) {
              state.textContent = "lookup failed: " + e.message;
            }
          });

          start();
        })();

        """#

    /// The page with a column per provider answer class (`SendOutcome.classNames`).
    static let html = htmlTemplate.replacingOccurrences(
        of: "{{answerClassHeaders}}", with: SendOutcome.classNames.map { "<th>\($0)</th>" }.joined())

    /// The stylesheet with a legend colour class per registered platform (`.p-ios`).
    static let css = cssTemplate.replacingOccurrences(
        of: "{{platformClasses}}",
        with: platforms.map { ".p-\($0.name) { background: \($0.color); }" }.joined(separator: " "))

    /// The script with the registered platforms' names and series colours.
    static let js = jsTemplate.replacingOccurrences(
        of: "{{platformColors}}", with: "{ " + platforms.map { "\($0.name): \"\($0.color)\"" }.joined(separator: ", ") + " }"
    ).replacingOccurrences(of: "{{platformNames}}", with: "[" + platforms.map { "\"\($0.name)\"" }.joined(separator: ", ") + "]")
        .replacingOccurrences(of: "{{answerClasses}}", with: "[" + SendOutcome.classNames.map { "\"\($0)\"" }.joined(separator: ", ") + "]")

    /// Every registered platform's name and colour, in registry order; a colour that is not `#` and
    /// hex digits (it goes into CSS and a script) is shown grey.
    static let platforms: [(name: String, color: String)] = ProviderRegistry.presentations.map { p in
        let c = p.presentation.color
        let safe = c.utf8.count <= 9 && c.first == "#" && c.dropFirst().allSatisfy(\.isHexDigit)
        return (p.platform.name, safe ? c : "#888888")
    }
}
