"""Registry credentials from a pod's pull secrets, kept so that nothing of them leaks.

A pod names pull secrets (``spec.imagePullSecrets``) of its own namespace; the kubelet
pulls its images with them. Two Secret types carry them:

* ``kubernetes.io/dockerconfigjson``: ``data[".dockerconfigjson"]``, base64 of a docker
  ``config.json`` (``{"auths": {registry: {...}}}``);
* ``kubernetes.io/dockercfg``: ``data[".dockercfg"]``, base64 of the legacy form, the
  ``auths`` map alone.

An entry is read as docker config files are (:mod:`layersched.registry._config`):
``auth`` (base64 ``user:password``), or ``username`` and ``password``, or an
``identitytoken``. A registry is matched by its host as image references write it (the
kubelet also matches paths and ``*`` wildcards in keys: those keys match nothing here,
and such an image is resolved as without the secret).

**Nothing of a secret is shown.** A :class:`PullCredential`'s ``repr`` is its registry
and an opaque id (an HMAC under a key of this process: equal credentials have equal ids,
and an id cannot be turned back into the credential, nor compared across processes).
Errors name the secret and the field, never its content, and are raised ``from None`` so
that no decoder's exception (which holds the document) travels with them; :func:`scrub`
takes a credential's user name and password out of a registry's error text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from layersched.core.errors import InputError, LayerResolutionError, LayerschedError
from layersched.core.layers import Layer
from layersched.core.reference import ImageName, ImageReference
from layersched.registry._config import Credentials, auth_key_host, decode_auth_entry
from layersched.registry._entries import Fetched
from layersched.registry._source import RegistryLayerSource

T = TypeVar("T")

#: Secret type -> the data key holding its docker config.
DOCKER_CONFIG_JSON_TYPE = "kubernetes.io/dockerconfigjson"
DOCKER_CFG_TYPE = "kubernetes.io/dockercfg"
SECRET_KEYS = {DOCKER_CONFIG_JSON_TYPE: ".dockerconfigjson", DOCKER_CFG_TYPE: ".dockercfg"}
#: A docker config for a handful of registries is a few hundred bytes; the API server
#: allows 1 MiB per Secret. More than this is no pull secret, and is not decoded.
MAX_SECRET_BYTES = 64 * 1024
#: Registries one secret may name (the rest are ignored): a real one names a few.
MAX_REGISTRIES_PER_SECRET = 32
#: What :func:`scrub` writes instead of a credential's parts.
REDACTED = "***"


@dataclass(frozen=True, slots=True)
class PullCredential:
    """One registry's credentials from a pull secret; shown as its registry and id only."""

    #: The registry as image references write it (``docker.io``, ``10.0.0.1:5000``).
    registry: str
    #: Opaque and stable within this process: the cache key of answers got with it.
    id: str
    credentials: Credentials = field(repr=False, compare=False, hash=False)

    def __repr__(self) -> str:
        return f"PullCredential(registry={self.registry!r}, id={self.id[:12]!r})"

    __str__ = __repr__


def credential_id(key: bytes, registry: str, credentials: Credentials) -> str:
    """HMAC-SHA256 under ``key`` of the registry, user name and password (hex)."""
    message = "\0".join((registry, *credentials)).encode("utf-8", "surrogatepass")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def pull_credentials(
    secret: Mapping[str, Any], where: str, key: bytes
) -> dict[str, PullCredential]:
    """A Secret object's credentials by registry; InputError naming ``where`` (the secret,
    ``namespace/name``) and what is wrong with it, never its content."""
    secret_type = secret.get("type")
    data_key = SECRET_KEYS.get(secret_type) if isinstance(secret_type, str) else None
    if data_key is None:
        raise InputError(
            f"pull secret {where}: type {secret_type!r} holds no registry credentials: "
            f"make it a {DOCKER_CONFIG_JSON_TYPE} Secret (kubectl create secret "
            "docker-registry)"
        )
    data = secret.get("data")
    encoded = data.get(data_key) if isinstance(data, dict) else None
    if not isinstance(encoded, str):
        raise InputError(f"pull secret {where}: data[{data_key!r}] is missing")
    if len(encoded) > MAX_SECRET_BYTES * 4 // 3 + 4:
        raise InputError(
            f"pull secret {where}: data[{data_key!r}] is over {MAX_SECRET_BYTES} bytes: "
            "not a docker config"
        )
    document = _decoded(encoded, where, data_key)
    auths = document.get("auths") if data_key == SECRET_KEYS[DOCKER_CONFIG_JSON_TYPE] else document
    if not isinstance(auths, dict):
        raise InputError(
            f"pull secret {where}: data[{data_key!r}] has no auths map "
            '({"auths": {"REGISTRY": {"auth": ...}}})'
        )
    found: dict[str, PullCredential] = {}
    for entry_key, entry in list(auths.items())[:MAX_REGISTRIES_PER_SECRET]:
        credentials = decode_auth_entry(entry)
        if not isinstance(entry_key, str) or credentials is None:
            continue
        registry = auth_key_host(entry_key)
        if registry and registry not in found:
            found[registry] = PullCredential(
                registry, credential_id(key, registry, credentials), credentials
            )
    return found


def _decoded(encoded: str, where: str, data_key: str) -> dict[str, Any]:
    """The JSON object base64 ``encoded`` holds; InputError from None otherwise (the
    decoders' exceptions hold the document: none travels with the error)."""
    problem = ""
    try:
        document = json.loads(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        document, problem = None, "is not base64 of JSON"
    if problem or not isinstance(document, dict):
        raise InputError(
            f"pull secret {where}: data[{data_key!r}] {problem or 'is not a JSON object'}"
        ) from None
    return document


#: User names shorter than this are left in a text (``a`` would redact every word);
#: passwords always go.
MIN_SCRUBBED_USER_CHARS = 4


def scrub(text: str, credentials: Iterable[Credentials]) -> str:
    """``text`` with every password of ``credentials``, user name (of
    :data:`MIN_SCRUBBED_USER_CHARS` or more) and basic-auth encoding replaced by
    :data:`REDACTED` (a registry's or token service's error text may echo them)."""
    for user, password in credentials:
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        parts = {basic, password} | ({user} if len(user) >= MIN_SCRUBBED_USER_CHARS else set())
        for part in sorted(parts - {""}, key=len, reverse=True):
            text = text.replace(part, REDACTED)
    return text


class CredentialSource:
    """A registry layer source that resolves with one pull credential (its client knows
    no other: never a docker config file, never another credential), whose errors carry
    no part of it: their text scrubbed (:func:`scrub`), raised ``from None`` (the
    client's exceptions hold requests, with their ``Authorization`` headers)."""

    def __init__(self, source: RegistryLayerSource, credential: PullCredential) -> None:
        self._source = source
        self.credential = credential

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        return self._call(lambda: self._source.resolve(image))

    def fetch(self, ref: ImageReference) -> Fetched:
        return self._call(lambda: self._source.fetch(ref))

    def current_digest(self, ref: ImageReference) -> str | None:
        return self._call(lambda: self._source.current_digest(ref))

    def close(self) -> None:
        """Close the client (its connections, its tokens)."""
        self._source.client.close()

    def _call(self, call: Callable[[], T]) -> T:
        secret = (self.credential.credentials,)
        try:
            return call()
        except LayerschedError as err:
            problem = scrub(str(err), secret)
        except Exception as err:  # noqa: BLE001 (a bug's text, scrubbed, never its object)
            problem = scrub(f"the layer source failed unexpectedly ({err!r})", secret)
        raise LayerResolutionError(problem) from None
