import Crypto
import DaemonHTTP
import Foundation
import NIOCore

/// `GET /ui`: one self-contained page (no framework, no outside resource) that polls `/v1/status` and
/// `/metrics` every 2 s and shows the watched names with their verdicts and recent history, the
/// upstreams' health, the cache and the query rate.
///
/// It is protected like the API: with `auth_token` set, a browser is asked for it (HTTP Basic: any
/// user name, the token as the password) and sends it again with the page's own requests. Every value
/// from the daemon is written with `textContent`, never as markup, and the Content-Security-Policy
/// admits only this page's one script (by its hash) and requests to the daemon itself.
enum StatusPage {
    static func answer() -> HTTPAnswer {
        HTTPAnswer(
            status: 200,
            headers: [
                ("content-type", "text/html; charset=utf-8"),
                ("cache-control", "no-store"),
                ("x-content-type-options", "nosniff"),
                ("referrer-policy", "no-referrer"),
                ("content-security-policy", contentSecurityPolicy),
            ],
            body: ByteBuffer(string: html))
    }

    static let contentSecurityPolicy: String = {
        let digest = Data(SHA256.hash(data: Data(script.utf8))).base64EncodedString()
        return "default-src 'none'; script-src 'sha256-\(digest)'; style-src 'unsafe-inline'; connect-src 'self'; "
            + "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    }()

    static let html = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>resolve daemon</title>
        <style>
        :root { color-scheme: light dark; --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --muted: #6e7781; }
        body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem auto; max-width: 72rem; padding: 0 1rem; }
        h1 { font-size: 1.3rem; margin: 0 0 .2rem; } h2 { font-size: 1.05rem; margin: 1.6rem 0 .5rem; }
        #summary { color: var(--muted); }
        table { border-collapse: collapse; width: 100%; }
        th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid #8884; vertical-align: top; }
        th { font-weight: 600; color: var(--muted); }
        .badge { display: inline-block; padding: 0 .5rem; border-radius: 1rem; font-weight: 600; color: #fff; }
        .consistent, .up, .secure { background: var(--ok); } .hijacked, .down, .circuit_open, .bogus { background: var(--bad); }
        .suspicious, .unreachable, .unknown, .insecure, .indeterminate, .pending { background: var(--warn); }
        .history span { display: inline-block; width: .7rem; height: .9rem; margin-right: 2px; border-radius: 2px; }
        .tiles { display: flex; gap: 1rem; flex-wrap: wrap; }
        .tile { border: 1px solid #8886; border-radius: .5rem; padding: .6rem 1rem; min-width: 9rem; }
        .tile b { display: block; font-size: 1.4rem; }
        .mono { font-family: ui-monospace, monospace; font-size: 13px; }
        #error { color: var(--bad); }
        </style>
        </head>
        <body>
        <h1>resolve daemon</h1>
        <div id="summary">loading…</div>
        <div id="error"></div>
        <h2>Traffic and cache</h2>
        <div class="tiles">
          <div class="tile">queries/s<b id="qps">–</b></div>
          <div class="tile">cache hits<b id="hits">–</b></div>
          <div class="tile">cache misses<b id="misses">–</b></div>
          <div class="tile">stale answers<b id="stale">–</b></div>
          <div class="tile">hit ratio<b id="ratio">–</b></div>
        </div>
        <h2>Watched names</h2>
        <table><thead><tr><th>name</th><th>verdict</th><th>reason</th><th>trusted</th><th>system</th><th>DNSSEC</th><th>last checks</th><th>checked</th></tr></thead>
        <tbody id="hosts"></tbody></table>
        <h2>Upstreams</h2>
        <table><thead><tr><th>upstream</th><th>state</th><th>last answer</th><th>last failure</th><th>failures in a row</th><th>latency</th></tr></thead>
        <tbody id="upstreams"></tbody></table>
        <script>\(script)</script>
        </body>
        </html>
        """

    /// The page's one script (its hash is in the Content-Security-Policy).
    static let script = """

        "use strict";
        const $ = (id) => document.getElementById(id);
        function cell(row, text, cls) {
          const td = row.insertCell();
          if (cls) { const span = document.createElement("span"); span.className = "badge " + cls; span.textContent = text; td.appendChild(span); }
          else td.textContent = text;
          return td;
        }
        function ago(seconds) {
          if (seconds === null || seconds === undefined) return "never";
          if (seconds < 60) return Math.round(seconds) + " s ago";
          if (seconds < 3600) return Math.round(seconds / 60) + " min ago";
          return Math.round(seconds / 3600) + " h ago";
        }
        function sum(metrics, name, filter) {
          let total = 0, seen = false;
          for (const line of metrics.split("\\n")) {
            if (!line.startsWith(name)) continue;
            const rest = line.slice(name.length);
            if (rest[0] !== " " && rest[0] !== "{") continue;
            if (filter && !line.includes(filter)) continue;
            const value = parseFloat(line.slice(line.lastIndexOf(" ") + 1));
            if (!isNaN(value)) { total += value; seen = true; }
          }
          return seen ? total : null;
        }
        // location.origin, not a relative URL: one opened as http://user:token@host/ui would carry the
        // credentials into every request URL, which fetch refuses; the browser resends them itself.
        let previous = null;
        function traffic(metrics) {
          const now = performance.now();
          const queries = (sum(metrics, "httpdns_dns_stub_queries_total") || 0) + (sum(metrics, "hb_requests", 'http_route="/dns-query"') || 0);
          const hits = sum(metrics, "httpdns_cache_hits_total"), misses = sum(metrics, "httpdns_cache_misses_total");
          const stale = sum(metrics, "httpdns_cache_stale_served_total");
          $("hits").textContent = hits ?? 0; $("misses").textContent = misses ?? 0; $("stale").textContent = stale ?? 0;
          const lookups = (hits || 0) + (misses || 0);
          $("ratio").textContent = lookups ? (100 * (hits || 0) / lookups).toFixed(1) + " %" : "–";
          if (previous) $("qps").textContent = ((queries - previous.queries) / ((now - previous.at) / 1000)).toFixed(1);
          previous = { queries, at: now };
        }
        function hosts(status) {
          const body = $("hosts"); body.replaceChildren();
          for (const host of status.hosts) {
            const row = body.insertRow(); row.dataset.host = host.host;
            cell(row, host.host + ":" + (host.port ?? 443)).className = "mono";
            cell(row, host.verdict ?? "pending", host.verdict ?? "pending").dataset.field = "verdict";
            cell(row, host.reason ?? "").dataset.field = "reason";
            cell(row, (host.trusted || []).join(" ")).className = "mono";
            cell(row, (host.system || []).join(" ")).className = "mono";
            cell(row, host.trusted_dnssec ?? "–", host.trusted_dnssec);
            const history = cell(row, ""); history.className = "history";
            for (const check of host.history || []) {
              const mark = document.createElement("span"); mark.className = check.verdict; mark.title = check.checked_at + ": " + check.verdict + " — " + check.reason;
              history.appendChild(mark);
            }
            cell(row, host.last_check ? new Date(host.last_check).toLocaleTimeString() : "–");
          }
          if (!status.hosts.length) cell(body.insertRow(), "no watched names (watch: in the config)").colSpan = 8;
        }
        function upstreams(status) {
          const body = $("upstreams"); body.replaceChildren();
          for (const upstream of status.upstreams || []) {
            const row = body.insertRow(); row.dataset.upstream = upstream.upstream;
            cell(row, upstream.upstream).className = "mono";
            cell(row, upstream.state.replace("_", " "), upstream.state).dataset.field = "state";
            cell(row, ago(upstream.last_response_seconds_ago));
            cell(row, ago(upstream.last_failure_seconds_ago));
            cell(row, String(upstream.consecutive_failures));
            cell(row, upstream.rtt_ms === null ? "–" : upstream.rtt_ms.toFixed(1) + " ms");
          }
        }
        async function refresh() {
          try {
            const [status, metrics] = await Promise.all([
              fetch(location.origin + "/v1/status", { credentials: "same-origin", cache: "no-store" }).then((r) => { if (!r.ok) throw new Error("/v1/status: " + r.status); return r.json(); }),
              fetch(location.origin + "/metrics", { credentials: "same-origin", cache: "no-store" }).then((r) => { if (!r.ok) throw new Error("/metrics: " + r.status); return r.text(); }),
            ]);
            const hijacked = status.hosts.filter((h) => h.verdict === "hijacked").length;
            $("summary").textContent = (status.ready ? "ready" : "NOT ready") + " · " + status.hosts.length + " watched, " + hijacked + " hijacked · " +
              (status.upstreams || []).filter((u) => u.state === "up").length + "/" + (status.upstreams || []).length + " upstreams up · updated " + new Date().toLocaleTimeString();
            document.body.dataset.ready = status.ready;
            $("error").textContent = "";
            hosts(status); upstreams(status); traffic(metrics);
          } catch (error) {
            $("error").textContent = "cannot reach the daemon: " + error.message;
          }
        }
        refresh();
        setInterval(refresh, 2000);

        """
}
