"""Node-bound service-account tokens for the local testbed's host-side agents.

In a cluster the agent runs as a DaemonSet pod, and the kubelet gives it a token bound to
its pod, which carries the pod's node (``userInfo.extra['authentication.kubernetes.io/
node-name']`` and ``…/node-uid``): the per-node guard (the ValidatingAdmissionPolicy
``install/kustomize/`` installs) holds it to that node's ``NodeLayerInventory``. The testbed's
agents
are host processes, with no pod to bind a token to. They get what the policy judges the
same way: a token of the testbed's agent service account bound to the **Node object
itself** (TokenRequest with ``boundObjectRef`` kind Node: ServiceAccountTokenNodeBinding,
GA and locked on from 1.33). The API server puts the Node's name and uid in the token, so
its ``userInfo.extra`` carries the same two keys a pod-bound token does; it refuses to
issue one for a Node that does not exist, and refuses the token once its Node is deleted
or replaced (ServiceAccountTokenNodeBindingValidation, GA from 1.32: it checks the Node
and its uid on every request).

This module plays the kubelet's part: :class:`AgentTokens` asks for each node's token
with an identity that may do nothing but that (``create`` on the agent account's
``token`` subresource), writes it where the agent's kubeconfig names it (``tokenFile``,
which the agent re-reads on every request), and asks again when 80 % of its life has
passed (the kubelet's rule for projected tokens), so agents that run for hours never hold
an expired one. A token is written atomically and mode 0600, and never logged.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from layersched.core.errors import InputError, KubeError, LayerschedError
from layersched.kube import checked_name

log = logging.getLogger(__name__)

TOKEN_REQUEST_API = "authentication.k8s.io/v1"  # noqa: S105 (an API version)
#: What the testbed asks for: an hour, the kubelet's default for a projected token.
DEFAULT_EXPIRATION_S = 3600
#: The API refuses a shorter one (TokenRequest validation).
MIN_EXPIRATION_S = 600
#: A token is replaced once this share of its life has passed (the kubelet's rule).
REFRESH_FRACTION = 0.8
#: A failed request is retried this soon, doubling up to the cap (never past expiry).
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0
#: The loop looks again at least this often (a token file removed by hand comes back).
CHECK_MAX_S = 60.0
#: A JWT: header, payload, signature.
JWT_PARTS = 3


class TokenApi(Protocol):
    """What issuing needs of the API (``layersched.kube.KubeClient`` fits)."""

    def create(self, path: str, document: Mapping[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class NodeToken:
    """Where one node's agent reads its token."""

    node: str
    path: Path


def parse_node_tokens(items: Sequence[str]) -> list[NodeToken]:
    """``NODE=FILE`` options as :class:`NodeToken` (InputError naming a bad one)."""
    tokens: list[NodeToken] = []
    for item in items:
        node, sep, path = item.partition("=")
        if not sep or not node or not path:
            raise InputError(f"--token {item!r}: expected NODE=FILE, e.g. n1=/srv/n1.token")
        tokens.append(NodeToken(checked_name(node, "--token node"), Path(path)))
    if not tokens:
        raise InputError("no --token NODE=FILE given: name each agent's node and token file")
    return tokens


def token_request_path(namespace: str, account: str) -> str:
    """The TokenRequest subresource of ``namespace/account``."""
    return (
        f"/api/v1/namespaces/{checked_name(namespace, 'namespace')}/serviceaccounts/"
        f"{checked_name(account, 'service account')}/token"
    )


def token_request(node: str, expiration_s: int) -> dict[str, Any]:
    """A TokenRequest for the API server's own audience, bound to Node ``node``."""
    return {
        "apiVersion": TOKEN_REQUEST_API,
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": expiration_s,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
    }


def token_lifetime(token: str) -> tuple[float, float] | None:
    """A JWT's issued-at and expiry (Unix seconds), read without verifying it (the file is
    ours; the API server verifies); None when it is not a JWT with both."""
    parts = token.strip().split(".")
    if len(parts) != JWT_PARTS:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
        issued, expires = float(claims["iat"]), float(claims["exp"])
    except (binascii.Error, ValueError, KeyError, TypeError):
        return None
    return (issued, expires) if expires > issued else None


def refresh_at(token: str) -> float:
    """When ``token`` should be replaced (Unix seconds): at 80 % of its life; 0 (now) for
    anything that is not a token with a lifetime."""
    lifetime = token_lifetime(token)
    if lifetime is None:
        return 0.0
    issued, expires = lifetime
    return issued + REFRESH_FRACTION * (expires - issued)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a reader sees the old file or the new one),
    mode 0600 from the start."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(text)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return ""


class AgentTokens:
    """Keeps each node's token file holding a live token bound to that Node."""

    def __init__(
        self,
        kube: TokenApi,
        namespace: str,
        account: str,
        tokens: Sequence[NodeToken],
        *,
        expiration_s: int = DEFAULT_EXPIRATION_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if expiration_s < MIN_EXPIRATION_S:
            raise InputError(
                f"--expiration-s {expiration_s}: the API issues tokens of at least "
                f"{MIN_EXPIRATION_S} s"
            )
        self.kube = kube
        self.path = token_request_path(namespace, account)
        self.account = f"{namespace}/{account}"
        self.tokens = tuple(tokens)
        self.expiration_s = expiration_s
        self._clock = clock
        #: Tokens issued, and failed requests, since start (logged; read by tests).
        self.issued = 0
        self.failures = 0

    def refresh(self) -> list[str]:
        """Issue a token for each node whose file is missing, unreadable or past 80 % of
        its life; the nodes refreshed. KubeError (after trying every node) when one could
        not be issued."""
        refreshed: list[str] = []
        failed: list[str] = []
        for entry in self.tokens:
            if refresh_at(_read(entry.path)) > self._clock():
                continue
            try:
                answer = self.kube.create(self.path, token_request(entry.node, self.expiration_s))
                token = str((answer.get("status") or {}).get("token") or "")
                if token_lifetime(token) is None:
                    raise KubeError(f"issuing {entry.node}'s token: the API answered no token")
            except KubeError as err:
                self.failures += 1
                failed.append(f"{entry.node}: {err}")
                continue
            write_private(entry.path, token)
            self.issued += 1
            refreshed.append(entry.node)
            log.info(
                "issued %s's agent token (%s, bound to Node %s, %d s) into %s",
                entry.node,
                self.account,
                entry.node,
                self.expiration_s,
                entry.path,
            )
        if failed:
            raise KubeError("; ".join(failed))
        return refreshed

    def next_refresh_s(self) -> float:
        """Seconds until the first token is due (0: one is due now)."""
        due = min(refresh_at(_read(entry.path)) for entry in self.tokens)
        return max(0.0, due - self._clock())

    def run(self, stopped: threading.Event) -> None:
        """Refresh until ``stopped``: each token at 80 % of its life, failures retried
        with back-off, at least every :data:`CHECK_MAX_S`."""
        retry_s = RETRY_FIRST_S
        while not stopped.is_set():
            try:
                self.refresh()
                retry_s = RETRY_FIRST_S
                wait_s = min(self.next_refresh_s(), CHECK_MAX_S)
            except LayerschedError as err:
                log.warning("issuing agent tokens: %s: again in %.0f s", err, retry_s)
                wait_s, retry_s = retry_s, min(retry_s * 2, RETRY_MAX_S)
            stopped.wait(wait_s)
