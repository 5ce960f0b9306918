#!/usr/bin/python3
"""Writes Tests/DNSSECTests/Vectors/vectors.json: DNSSEC signatures made by dnspython (an
independent implementation) for every algorithm the validator supports, to verify in Swift.

Run once; the output is committed (keys are random, so each run differs). Names are .test only.
  /usr/bin/python3 Scripts/make_dnssec_vectors.py
"""
import json
import os

import dns.dnssec
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils

INCEPTION = 1767225600  # 2026-01-01
EXPIRATION = 2082758400  # 2036-01-01
ZONE = dns.name.from_text("sec.test.")

ALGORITHMS = [
    ("RSASHA256", lambda: rsa.generate_private_key(65537, 2048)),
    ("RSASHA512", lambda: rsa.generate_private_key(65537, 2048)),
    ("ECDSAP256SHA256", lambda: ec.generate_private_key(ec.SECP256R1())),
    ("ECDSAP384SHA384", lambda: ec.generate_private_key(ec.SECP384R1())),
    ("ED25519", lambda: ed25519.Ed25519PrivateKey.generate()),
]


def sign_wildcard(records, key, dnskey):
    """dnspython 2.3's sign() counts the "*" label (RFC 4034 §3.1.3 says not to): build the RRSIG
    with the right label count and sign its data here."""
    template = dns.rdata.from_text("IN", "RRSIG", " ".join([
        dns.rdatatype.to_text(records.rdtype), str(int(dnskey.algorithm)), str(len(records.name) - 2),
        str(records.ttl), str(EXPIRATION), str(INCEPTION), str(dns.dnssec.key_id(dnskey)), ZONE.to_text(), "AA==",
    ]))
    data = dns.dnssec._make_rrsig_signature_data(records, template)
    digest = {8: hashes.SHA256(), 10: hashes.SHA512(), 13: hashes.SHA256(), 14: hashes.SHA384()}.get(int(dnskey.algorithm))
    if isinstance(key, rsa.RSAPrivateKey):
        signature = key.sign(data, padding.PKCS1v15(), digest)
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        octets = 32 if int(dnskey.algorithm) == 13 else 48
        r, s_ = utils.decode_dss_signature(key.sign(data, ec.ECDSA(digest)))
        signature = r.to_bytes(octets, "big") + s_.to_bytes(octets, "big")
    else:
        signature = key.sign(data)
    return template.replace(signature=signature)


def wire(rdata):
    return rdata.to_digestable().hex()


def rrset(owner, ttl, rdtype, *texts):
    return dns.rrset.from_text(owner, ttl, "IN", rdtype, *texts)


vectors = []
for name, make in ALGORITHMS:
    algorithm = dns.dnssec.Algorithm.make(name)
    key = make()
    dnskey = dns.dnssec.make_dnskey(key.public_key(), algorithm, flags=257)
    cases = [
        ("www.sec.test.", rrset("www.sec.test.", 300, "A", "192.0.2.1", "192.0.2.2", "192.0.2.3")),
        ("www.sec.test.", rrset("www.sec.test.", 300, "TXT", '"hello"', '"a longer text record"')),
        ("sec.test.", rrset("sec.test.", 3600, "DNSKEY", dnskey.to_text())),
    ]
    entries = []
    for owner, records in cases:
        signature = dns.dnssec.sign(records, key, ZONE, dnskey, inception=INCEPTION, expiration=EXPIRATION)
        entries.append({
            "owner": owner, "type": dns.rdatatype.to_text(records.rdtype), "ttl": records.ttl,
            "rdatas": [wire(r) for r in records], "rrsig": wire(signature),
        })
    # A wildcard: *.wild.sec.test signed, answered for a.b.wild.sec.test (RRSIG labels 3).
    wild = rrset("*.wild.sec.test.", 60, "A", "192.0.2.9")
    signature = sign_wildcard(wild, key, dnskey)
    entries.append({"owner": "a.b.wild.sec.test.", "type": "A", "ttl": 60, "rdatas": [wire(r) for r in wild], "rrsig": wire(signature)})
    vectors.append({
        "algorithm": name, "number": int(algorithm), "dnskey": wire(dnskey), "key_tag": dns.dnssec.key_id(dnskey),
        "ds": {str(t): dns.dnssec.make_ds(ZONE, dnskey, t, policy=dns.dnssec.allow_all_policy).digest.hex() for t in ("SHA1", "SHA256", "SHA384")},
        "cases": entries,
    })

out = os.path.join(os.path.dirname(__file__), "..", "Tests", "DNSSECTests", "Vectors", "vectors.json")
with open(out, "w") as f:
    json.dump({"zone": "sec.test.", "inception": INCEPTION, "expiration": EXPIRATION, "vectors": vectors}, f, indent=1)
print("wrote", out)
