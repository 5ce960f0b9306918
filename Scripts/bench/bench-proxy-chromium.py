"""The forward-proxy benchmark's third client: headless Chromium (Debian's), the same workloads as
curl's and requests' in Scripts/bench/bench-proxy.sh, over the same four paths.

One browser per path, driven over --remote-debugging-pipe (the DevTools protocol on fds 3 and 4, no
port): the direct one resolves the origin's name to its trusted address by --host-resolver-rules (as
curl's --resolve), the hop path to the splicing TCP forwarder's address the same way, the proxies
through --proxy-server. Every other name maps to NOTFOUND and
background networking is off, so nothing leaves loopback. The test CA is trusted through an NSS
database in a temporary HOME; TLS verification is the browser's own. HTTP/1.1 only (--disable-http2),
as the other clients use it. The page is the origin's /echo, so fetch() is same-origin:

- a 64 MiB download: fetch('/big-fast') read to the end, on the page's kept-alive connection; MB/s
  from the call to the last byte (performance.now());
- new tunnels: 100 sequential fetch('/echo-close'), an nginx location that closes the connection
  after each response, so every request opens a new connection (through a proxy: a new tunnel); the
  block fails if Resource Timing shows one that did not.

    bench-proxy-chromium.py ORIGIN CA OURS_PORT PEER_PORT DOWNLOADS BLOCKS HOP_ADDRESS

Prints one line per path: `path MB/s-median requests-per-second`, as bench-proxy-requests.py does.
"""

import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

from stats import median  # Scripts/bench/stats.py, next to this file

origin, ca, ours_port, peer_port = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
downloads, blocks, hop = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
host = origin.rsplit(":", 1)[0]
quiet = "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"  # no lookup leaves the machine
paths = {
    "direct": [f"--host-resolver-rules=MAP {host} 127.0.0.4, {quiet}"],
    "ours": [f"--proxy-server=http://127.0.0.1:{ours_port}", f"--host-resolver-rules={quiet}"],
    "peer": [f"--proxy-server=http://127.0.0.1:{peer_port}", f"--host-resolver-rules={quiet}"],
    "hop": [f"--host-resolver-rules=MAP {host} {hop}, {quiet}"],
}


class Browser:
    """One headless Chromium and a DevTools session on its page, over a pipe pair."""

    def __init__(self, home, name, flags):
        commands_read, self.commands = os.pipe()
        self.answers, answers_write = os.pipe()
        # Chromium reads on fd 3 and writes on fd 4: the child's ends are first moved above any
        # number those redirections could overwrite.
        child_in, child_out = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100) for fd in (commands_read, answers_write))
        os.close(commands_read)
        os.close(answers_write)
        command = [
            "/usr/lib/chromium/chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--disable-domain-reliability", "--no-pings", "--dns-prefetch-disable",
            "--disable-http2", "--remote-debugging-pipe", f"--user-data-dir={home}/profile-{name}",
        ] + flags + ["about:blank"]
        self.log = open(f"{home}/{name}.log", "w")
        self.process = subprocess.Popen(
            ["/bin/bash", "-c", f'exec "$@" 3<&{child_in} 4>&{child_out}', "bash"] + command,
            pass_fds=(child_in, child_out), env=dict(os.environ, HOME=home), stdout=subprocess.DEVNULL, stderr=self.log)
        os.close(child_in)
        os.close(child_out)
        self.pending = b""
        self.last_id = 0
        self.session = None
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]

    def call(self, method, **params):
        self.last_id += 1
        message = {"id": self.last_id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 120  # no call of this benchmark takes a tenth of that
        while True:  # events and other answers are skipped
            while b"\0" not in self.pending:
                if not select.select([self.answers], [], [], max(0, deadline - time.monotonic()))[0]:
                    raise RuntimeError(f"{method}: no answer from chromium in 120 s")
                chunk = os.read(self.answers, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"chromium closed its DevTools pipe; its log ends:\n{self.log_tail()}")
                self.pending += chunk
            raw, self.pending = self.pending.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self.last_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(json.dumps(result["exceptionDetails"])[:500])
        return result["result"].get("value")

    def open(self, url):
        self.call("Page.navigate", url=url)
        text = ""
        for _ in range(200):
            text = self.evaluate("document.readyState == 'complete' ? document.body.innerText : ''") or ""
            if "sni=" in text:
                return
            time.sleep(0.05)
        raise RuntimeError(f"{url} did not load: the page says {text[:300]!r}; chromium's log ends:\n{self.log_tail()}")

    def log_tail(self):
        """The browser's stderr (kept in the temporary HOME, removed at exit): its last lines."""
        self.log.flush()
        with open(self.log.name) as log:
            return "".join([line for line in log if "dbus" not in line][-20:])  # no D-Bus here: noise

    def close(self):
        try:
            self.call("Browser.close")
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
            self.process.wait()


DOWNLOAD = """(async () => {
  const started = performance.now();
  const response = await fetch('/big-fast?' + Math.random(), {cache: 'no-store'});
  const reader = response.body.getReader();
  let size = 0;
  for (;;) { const {done, value} = await reader.read(); if (done) break; size += value.length; }
  return [response.status, size, performance.now() - started];
})()"""

BLOCK = """(async () => {
  // Idle kept-alive connections (the page's, the favicon's) are used up first: until a request opens
  // its own, each one ends one of them.
  for (let n = 0; n < 8; n++) {
    performance.clearResourceTimings();
    await (await fetch('/echo-close?warm=' + n, {cache: 'no-store'})).text();
    const entry = performance.getEntriesByType('resource')[0];
    if (entry && entry.connectEnd > entry.connectStart) break;
  }
  performance.clearResourceTimings();
  const started = performance.now();
  for (let n = 0; n < 100; n++) {
    const response = await fetch('/echo-close?n=' + n, {cache: 'no-store'});
    if (response.status != 200) return [response.status, 0, 0];
    await response.text();
  }
  const elapsed = performance.now() - started;
  const fresh = performance.getEntriesByType('resource').filter(e => e.connectEnd > e.connectStart).length;
  return [200, fresh, elapsed];
})()"""

home = tempfile.mkdtemp(prefix="bench-chromium-")
browsers = {}
try:
    nss = os.path.join(home, ".pki/nssdb")
    os.makedirs(nss)
    subprocess.run(["certutil", "-d", "sql:" + nss, "-N", "--empty-password"], check=True)
    subprocess.run(["certutil", "-d", "sql:" + nss, "-A", "-t", "C,,", "-n", "bench test CA", "-i", ca], check=True)
    for path, flags in paths.items():
        browsers[path] = Browser(home, path, flags)
        browsers[path].open(f"https://{origin}/echo")
    speeds = {path: [] for path in paths}
    seconds = {path: 0.0 for path in paths}
    for _ in range(downloads):
        for path, browser in browsers.items():
            status, size, ms = browser.evaluate(DOWNLOAD)
            assert status == 200 and size == 64 << 20, f"{path}: status {status}, {size} bytes"
            speeds[path].append(size / ms / 1e3)
    for _ in range(blocks):
        for path, browser in browsers.items():
            status, fresh, ms = browser.evaluate(BLOCK)
            assert status == 200, f"{path}: status {status}"
            assert fresh == 100, f"{path}: {fresh} of 100 requests opened a new connection"
            seconds[path] += ms / 1e3
    for path in paths:
        print(path, f"{median(speeds[path]):.1f}", f"{blocks * 100 / seconds[path]:.1f}")
finally:
    for browser in browsers.values():
        browser.close()
    shutil.rmtree(home, ignore_errors=True)
