"""A server TLS context (TLS 1.2 or later, optionally verifying client certificates) whose
certificate is re-read when its files change (:class:`ReloadingTls`; the shell checks
every ``reload_period_s``, :func:`keep_reloading`): a renewed certificate is served
without a restart, and a half-written one is not taken.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import Callable
from pathlib import Path

from layersched.serving._http import ServingError

log = logging.getLogger("layersched.serving")

#: How often a reloading certificate's files are checked for a renewal.
TLS_RELOAD_PERIOD_S = 60.0


class ReloadingTls:
    """A server TLS context (TLS 1.2 or later) whose certificate :meth:`reload` re-reads
    when its files changed (:func:`serve` does so every ``reload_period_s``; None: never).

    With ``client_ca_file``, client certificates that CA issued are asked for and verified:
    required (``require_client_cert``: the handshake fails without one), or optional (the
    component then refuses a caller without one, with a message). ``client`` names who
    presents that certificate, and ``hint`` where the files come from, for the errors.
    """

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        client_ca_file: str | None = None,
        *,
        require_client_cert: bool = True,
        reload_period_s: float | None = TLS_RELOAD_PERIOD_S,
        client: str = "the client",
        hint: str = "",
    ) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.reload_period_s = reload_period_s
        self._hint = f" ({hint})" if hint else ""
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        if client_ca_file is not None:
            try:
                self.context.load_verify_locations(cafile=client_ca_file)
            except (OSError, ssl.SSLError) as err:
                raise ServingError(
                    f"loading the client CA {client_ca_file!r}: {err}: pass the PEM certificate "
                    f"of the CA that issued {client}'s client certificate with "
                    f"--client-ca-file{self._hint}"
                ) from None
            self.context.verify_mode = (
                ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
            )
        self._fingerprint = ""
        self.reload()

    def _read_fingerprint(self) -> str:
        digest = hashlib.sha256()
        for path in (self.cert_file, self.key_file):
            digest.update(Path(path).read_bytes())
        return digest.hexdigest()

    def reload(self) -> bool:
        """Load the files if they changed; True when they were (re)loaded. Raises
        :class:`ServingError` when they cannot be read or do not match."""
        try:
            fingerprint = self._read_fingerprint()
            if fingerprint == self._fingerprint:
                return False
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as err:
            raise ServingError(
                f"loading the TLS certificate {self.cert_file!r} and key {self.key_file!r}: "
                f"{err}: pass a PEM certificate (chain) with --tls-cert-file and its PEM "
                f"private key with --tls-key-file{self._hint}"
            ) from None
        self._fingerprint = fingerprint
        return True


async def keep_reloading(tls: ReloadingTls, period_s: float, on_reload: Callable[[], None]) -> None:
    """Re-read ``tls`` every ``period_s`` (``on_reload`` after a change); a failed read
    keeps the certificate held, and says why."""
    while True:
        await asyncio.sleep(period_s)
        try:
            if tls.reload():
                on_reload()
                log.info("serving certificate %s re-read (it changed)", tls.cert_file)
        except ServingError as err:
            # keep serving the certificate held: a half-written renewal fixes itself
            log.error("%s", err)
