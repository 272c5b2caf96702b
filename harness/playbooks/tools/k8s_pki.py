#!/usr/bin/env python3
"""The testbed cluster's PKI: a CA and the certificates every component presents.

    k8s_pki.py --dir PKI --spec SPEC.json

SPEC is a JSON list of certificates, each ``{"name", "cn", "orgs": [...], "usage":
"server"|"client"|"both", "ips": [...], "dns": [...]}``. The CA (``ca.crt``/``ca.key``)
and the service-account signing key pair (``sa.key``/``sa.pub``) are made first. A file
that exists is kept, so a second run changes nothing: a certificate is re-issued only
when its key or certificate is missing, or when its subject or SANs differ from the spec
(for example a node added to the testbed). Prints one JSON object (``changed``, ``made``)
for Ansible's ``changed_when``; on failure prints openssl's message and exits 1.

Keys are RSA 2048, certificates are valid for ``--days`` (default 3650: a testbed is not
a place to rotate certificates). Only ``openssl`` and the standard library are used.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

KEY_BITS = "2048"
DEFAULT_DAYS = 3650
CA_SUBJECT = "/CN=layersched-testbed-ca"
USAGES = {
    "server": "serverAuth",
    "client": "clientAuth",
    "both": "serverAuth,clientAuth",
}


class PkiError(Exception):
    """openssl failed."""


def _openssl(*args: str) -> str:
    argv = ["openssl", *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as err:
        raise PkiError(f"cannot run openssl ({err}): apt-get install openssl") from err
    if done.returncode != 0:
        raise PkiError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def _subject(cert: dict[str, object]) -> str:
    orgs = "".join(f"/O={o}" for o in cert.get("orgs", []))  # type: ignore[union-attr]
    return f"{orgs}/CN={cert['cn']}"


def _sans(cert: dict[str, object]) -> list[str]:
    ips = [f"IP:{ip}" for ip in cert.get("ips", [])]  # type: ignore[union-attr]
    dns = [f"DNS:{name}" for name in cert.get("dns", [])]  # type: ignore[union-attr]
    return dns + ips


def _current(crt: Path) -> tuple[str, str]:
    """(subject, SAN text) of an existing certificate, as openssl prints them."""
    text = _openssl("x509", "-in", str(crt), "-noout", "-subject", "-ext", "subjectAltName")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    subject = lines[0] if lines else ""
    # the subject's line, a header line, then the SANs
    sans = lines[-1] if len(lines) > 2 else ""
    return subject, sans


def _wanted_matches(crt: Path, cert: dict[str, object]) -> bool:
    subject, sans = _current(crt)
    for org in cert.get("orgs", []):  # type: ignore[union-attr]
        if f"O = {org}" not in subject:
            return False
    if f"CN = {cert['cn']}" not in subject:
        return False
    have = {s.strip() for s in sans.replace("IP Address:", "IP:").split(",") if s.strip()}
    return have == set(_sans(cert))


def _ca(pki: Path, days: int) -> bool:
    key, crt = pki / "ca.key", pki / "ca.crt"
    if key.exists() and crt.exists():
        return False
    _openssl("genrsa", "-out", str(key), KEY_BITS)
    key.chmod(0o600)
    _openssl(
        "req", "-x509", "-new", "-key", str(key), "-out", str(crt), "-days", str(days),
        "-subj", CA_SUBJECT,
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )  # fmt: skip
    return True


def _sa(pki: Path) -> bool:
    key, pub = pki / "sa.key", pki / "sa.pub"
    if key.exists() and pub.exists():
        return False
    _openssl("genrsa", "-out", str(key), KEY_BITS)
    key.chmod(0o600)
    _openssl("rsa", "-in", str(key), "-pubout", "-out", str(pub))
    return True


def _leaf(pki: Path, cert: dict[str, object], days: int) -> bool:
    name = str(cert["name"])
    key, crt = pki / f"{name}.key", pki / f"{name}.crt"
    if key.exists() and crt.exists() and _wanted_matches(crt, cert):
        return False
    if not key.exists():
        _openssl("genrsa", "-out", str(key), KEY_BITS)
        key.chmod(0o600)
    ext = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={USAGES[str(cert['usage'])]}",
    ]
    sans = _sans(cert)
    if sans:
        ext.append(f"subjectAltName={','.join(sans)}")
    with tempfile.TemporaryDirectory() as tmp:
        csr, extfile = Path(tmp) / "req.csr", Path(tmp) / "ext.cnf"
        extfile.write_text("\n".join(ext) + "\n")
        _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", _subject(cert))
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"),
            "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-out", str(crt),
            "-days", str(days), "-extfile", str(extfile),
        )  # fmt: skip
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dir", type=Path, required=True, help="where the PKI lives")
    parser.add_argument("--spec", type=Path, required=True, help="JSON list of certificates")
    parser.add_argument("--days", type=int, default=DEFAULT_DAYS)
    args = parser.parse_args(argv)
    try:
        spec = json.loads(args.spec.read_text())
        args.dir.mkdir(parents=True, exist_ok=True)
        made = []
        if _ca(args.dir, args.days):
            made.append("ca")
        if _sa(args.dir):
            made.append("sa")
        for cert in spec:
            if _leaf(args.dir, cert, args.days):
                made.append(str(cert["name"]))
    except (PkiError, OSError, ValueError, KeyError) as err:
        print(f"k8s_pki: {err}", file=sys.stderr)
        return 1
    print(json.dumps({"changed": bool(made), "made": made}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
