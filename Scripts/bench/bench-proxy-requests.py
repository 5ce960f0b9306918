"""The forward-proxy benchmark's second client: Python `requests` (urllib3), the same workloads as
curl's in Scripts/bench/bench-proxy.sh, interleaved over the same four paths.

Run by bench-proxy.sh inside a mount namespace whose /etc/hosts maps the origin's name to its
trusted address, so the direct path resolves it there (as curl's --resolve does) and the proxy
paths send `CONNECT name:port` without resolving anything here. The hop path dials HOP_ADDRESS (the
splicing TCP forwarder) for the origin's name, as curl's --resolve does; the name stays the URL's,
the SNI's and the one the certificate is checked against.

    bench-proxy-requests.py ORIGIN CA OURS_PORT PEER_PORT DOWNLOADS BLOCKS HOP_ADDRESS

Prints one line per path: `path MB/s-median requests-per-second` (MB/s: the median of DOWNLOADS
64 MiB downloads; requests/s: BLOCKS blocks of 100 requests, each on a new connection or tunnel).
"""

import sys
import time

import requests
import urllib3.util.connection

from stats import median  # Scripts/bench/stats.py, next to this file

origin, ca, ours_port, peer_port = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
downloads, blocks, hop = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
proxies = {
    "direct": None,
    "ours": f"http://127.0.0.1:{ours_port}",
    "peer": f"http://127.0.0.1:{peer_port}",
    "hop": None,
}
# The address urllib3 dials instead of the name's (the hop path's), or None: urllib3 opens every
# connection through this module's create_connection, with the URL's host (server_hostname and
# the certificate check keep it).
dial_instead = None
resolving_connection = urllib3.util.connection.create_connection


def create_connection(address, *args, **kwargs):
    return resolving_connection((dial_instead or address[0], address[1]), *args, **kwargs)


urllib3.util.connection.create_connection = create_connection


def session(path):
    global dial_instead
    dial_instead = hop if path == "hop" else None
    s = requests.Session()
    s.trust_env = False  # no proxy from the environment: each path says its own
    s.verify = ca  # the test CA; verification stays on
    if proxies[path]:
        s.proxies = {"https": proxies[path]}
    return s


def download(path):
    """One 64 MiB download on a new connection: MB/s from the request to the last byte."""
    with session(path) as s:
        started = time.perf_counter()
        with s.get(f"https://{origin}/big-fast", stream=True, headers={"Connection": "close"}, timeout=60) as response:
            response.raise_for_status()
            size = sum(len(chunk) for chunk in response.iter_content(chunk_size=1 << 20))
        elapsed = time.perf_counter() - started
    assert size == 64 << 20, f"{path}: {size} bytes"
    return size / elapsed / 1e6


def block(path):
    """100 small requests, each on a new connection (a new tunnel through a proxy): seconds."""
    started = time.perf_counter()
    for n in range(100):
        with session(path) as s:
            response = s.get(f"https://{origin}/echo?n={n}", headers={"Connection": "close"}, timeout=60)
            assert response.status_code == 200, f"{path}: {response.status_code}"
    return time.perf_counter() - started


speeds = {path: [] for path in proxies}
seconds = {path: 0.0 for path in proxies}
for _ in range(downloads):
    for path in proxies:
        speeds[path].append(download(path))
for _ in range(blocks):
    for path in proxies:
        seconds[path] += block(path)
for path in proxies:
    print(path, f"{median(speeds[path]):.1f}", f"{blocks * 100 / seconds[path]:.1f}")
