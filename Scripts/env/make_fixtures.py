#!/usr/bin/env python3
"""Writes the hostile resolver's fixed responses and the JSON API files for the test zone.

usage: make_fixtures.py OUTDIR ZONE_LIST
ZONE_LIST holds "name type value ttl" lines (Scripts/env/testenv.sh zone_names).
"""
import json
import os
import random
import struct
import sys

TYPES = {"A": 1, "AAAA": 28, "CNAME": 5, "SOA": 6}
SOA_TTL, SOA_MIN = 300, 60


def wire_name(name):
    out = b""
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def ip_bytes(kind, value):
    import ipaddress
    return ipaddress.ip_address(value).packed


def response(qname, qtype, answers, rcode=0, qid=0, qr=True):
    flags = (0x8000 if qr else 0) | 0x0100 | 0x0080 | rcode
    out = struct.pack(">HHHHHH", qid, flags, 1, len(answers), 0, 0)
    out += wire_name(qname) + struct.pack(">HH", TYPES[qtype], 1)
    for name, rtype, ttl, rdata in answers:
        out += wire_name(name) + struct.pack(">HHIH", TYPES[rtype], 1, ttl, len(rdata)) + rdata
    return out


def main():
    outdir, zone_file = sys.argv[1], sys.argv[2]
    records = [line.split() for line in open(zone_file) if line.strip()]
    os.makedirs(os.path.join(outdir, "json"), exist_ok=True)

    def write(name, data):
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)

    valid = response("www.hd.test", "A", [("www.hd.test", "A", 300, ip_bytes("A", "198.18.0.10"))])
    write("valid.bin", valid)
    write("truncated.bin", valid[: len(valid) - 3])
    write("mismatched.bin", response("other.hd.test", "A", [("other.hd.test", "A", 300, ip_bytes("A", "198.18.9.9"))]))
    write("query.bin", response("www.hd.test", "A", [], qr=False))
    rng = random.Random(8484)
    write("garbage.bin", bytes(rng.randrange(256) for _ in range(300)))
    # Oversized: a valid-looking header followed by 100 KiB, past the 64 KiB cap.
    write("oversized.bin", valid + bytes(100 * 1024))

    # JSON API: json/NAME.TYPE.json for every name and address type, NXDOMAIN for the rest.
    names = sorted({r[0] for r in records})
    by_name = {}
    for name, rtype, value, ttl in records:
        by_name.setdefault(name, []).append((rtype, value, int(ttl)))
    soa = [{"name": "hd.test.", "type": 6, "TTL": SOA_TTL,
            "data": f"ns.hd.test. admin.hd.test. 1 3600 600 86400 {SOA_MIN}"}]
    for qtype in ("A", "AAAA"):
        for name in names:
            answers, target, seen = [], name, 0
            while seen < 16:
                seen += 1
                recs = by_name.get(target, [])
                cname = [r for r in recs if r[0] == "CNAME"]
                addrs = [r for r in recs if r[0] == qtype]
                for rtype, value, ttl in addrs:
                    answers.append({"name": target + ".", "type": TYPES[qtype], "TTL": ttl, "data": value})
                if addrs or not cname:
                    break
                answers.append({"name": target + ".", "type": 5, "TTL": cname[0][2], "data": cname[0][1] + "."})
                target = cname[0][1]
            body = {"Status": 0, "TC": False, "RD": True, "RA": True, "AD": False, "CD": False,
                    "Question": [{"name": name + ".", "type": TYPES[qtype]}]}
            if any(a["type"] == TYPES[qtype] for a in answers):
                body["Answer"] = answers
            else:
                body["Authority"] = soa
            with open(os.path.join(outdir, "json", f"{name}.{qtype}.json"), "w") as f:
                json.dump(body, f)
        # nginx cannot echo the asked name into a static file; the client must notice that the
        # question differs, so absent names get an answer whose question is the zone apex.
        with open(os.path.join(outdir, "json", f"nxdomain.{qtype}.json"), "w") as f:
            json.dump({"Status": 3, "Question": [{"name": "nxdomain.hd.test.", "type": TYPES[qtype]}],
                       "Authority": soa}, f)


if __name__ == "__main__":
    main()
