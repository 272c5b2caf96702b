"""The admission webhook's TLS, issued when an overlay is written: never committed.

The API server calls the webhook over HTTPS and verifies its certificate against the
``caBundle`` of the ValidatingWebhookConfiguration, for the Service's DNS name
(``<service>.<namespace>.svc``). :func:`issue_webhook_tls` makes a CA and a serving
certificate signed by it (ECDSA P-256), and the API server's client certificate (issue
30: the webhook authenticates its caller, common name :data:`CLIENT_COMMON_NAME`, client
authentication only), and **throws the CA's key away**: nobody can issue another
certificate this bundle trusts. The serving key goes into the overlay's Secret only (a
file of mode 0600), the client key into the API server's admission kubeconfig only (mode
0600, for the control plane's disk); the CA certificate into the caBundle and the
webhook's Secret (the CA its callers must come from).

Renewal: an overlay written again keeps a certificate that still has
:data:`RENEW_BEFORE` to live; otherwise a new CA and certificate are issued and the
caBundle carries the old CA and the new one, so that the webhook pods, which re-read
their Secret within a minute or two, are trusted before and after they do.

Needs the ``cryptography`` package (``pip install 'layersched[deploy]'``; ``make venv``
installs it): imported only here, so the images, which never issue certificates, do not
carry it.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layersched.admission import CLIENT_COMMON_NAME
from layersched.core.errors import InputError

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

#: How long a serving certificate is valid.
VALIDITY = datetime.timedelta(days=365)
#: A certificate with less than this to live is replaced when an overlay is written.
RENEW_BEFORE = datetime.timedelta(days=30)
#: Allowed clock skew between the machine writing the overlay and the cluster.
BACKDATE = datetime.timedelta(minutes=5)
CA_COMMON_NAME = "layersched-admission-ca"


@dataclass(frozen=True, slots=True)
class WebhookTls:
    """PEM: the CA bundle the API server trusts, the serving certificate and its key."""

    ca_bundle_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    #: The API server's client certificate and key ("": an overlay written before issue
    #: 30, renewed when written again).
    client_cert_pem: bytes = b""
    client_key_pem: bytes = b""


def _crypto() -> object:
    try:
        import cryptography
    except ImportError as err:
        raise InputError(
            f"issuing the admission webhook's certificate needs the cryptography package "
            f"({err}): pip install 'layersched[deploy]' (make venv installs it)"
        ) from None
    return cryptography


def issue_webhook_tls(
    dns_names: Sequence[str],
    *,
    now: datetime.datetime | None = None,
    validity: datetime.timedelta = VALIDITY,
    previous_ca_pem: bytes | None = None,
) -> WebhookTls:
    """A new CA and a serving certificate for ``dns_names`` (the CA's key is discarded).

    ``previous_ca_pem`` (the CA of the certificate being replaced) is kept in the bundle
    while it is still valid, so that a pod serving the old certificate stays trusted
    until it re-reads its Secret.
    """
    _crypto()
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not dns_names:
        raise InputError("a webhook certificate needs at least one DNS name")
    start = (now or datetime.datetime.now(datetime.UTC)) - BACKDATE
    end = start + BACKDATE + validity
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_COMMON_NAME)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            _key_usage(x509, ca=True),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common_name: str, usage: Any, names: Sequence[str]) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(x509, ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(name) for name in names]),
                critical=False,
            )
        return builder.sign(ca_key, hashes.SHA256()), key

    cert, key = leaf(dns_names[-1], ExtendedKeyUsageOID.SERVER_AUTH, dns_names)
    client_cert, client_key = leaf(CLIENT_COMMON_NAME, ExtendedKeyUsageOID.CLIENT_AUTH, ())
    bundle = ca.public_bytes(serialization.Encoding.PEM)
    if previous_ca_pem is not None:
        still_valid = [
            old
            for old in _certificates(previous_ca_pem)
            if old.not_valid_after_utc > start + BACKDATE and old.subject == ca_name
        ]
        bundle = (
            b"".join(old.public_bytes(serialization.Encoding.PEM) for old in still_valid) + bundle
        )
    private = (
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return WebhookTls(
        ca_bundle_pem=bundle,
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(*private),
        client_cert_pem=client_cert.public_bytes(serialization.Encoding.PEM),
        client_key_pem=client_key.private_bytes(*private),
    )


def _key_usage(x509: Any, *, ca: bool) -> Any:
    """A CA signs certificates (and CRLs); a serving certificate signs handshakes (ECDSA)."""
    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _certificates(pem: bytes) -> list[Certificate]:
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as err:
        raise InputError(f"not PEM certificates ({err})") from None


def still_usable(
    tls: WebhookTls, dns_names: Sequence[str], *, now: datetime.datetime | None = None
) -> bool:
    """True when ``tls``'s certificate names ``dns_names``, was signed by a CA of its
    bundle, and has more than :data:`RENEW_BEFORE` to live (an overlay keeps it)."""
    _crypto()
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization

    moment = now or datetime.datetime.now(datetime.UTC)
    try:
        [cert] = _certificates(tls.cert_pem)[:1]
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        key = serialization.load_pem_private_key(tls.key_pem, password=None)
        [client] = _certificates(tls.client_cert_pem)[:1]
        client_key = serialization.load_pem_private_key(tls.client_key_pem, password=None)
    except (InputError, ValueError, TypeError, x509.ExtensionNotFound):
        return False
    public = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    for made, its_key in ((cert, key), (client, client_key)):
        if its_key.public_key().public_bytes(*public) != made.public_key().public_bytes(*public):
            return False
    if client.not_valid_after_utc - moment < RENEW_BEFORE:
        return False
    if sorted(names.value.get_values_for_type(x509.DNSName)) != sorted(dns_names):
        return False
    if cert.not_valid_after_utc - moment < RENEW_BEFORE or cert.not_valid_before_utc > moment:
        return False
    for ca in _certificates(tls.ca_bundle_pem):
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False
