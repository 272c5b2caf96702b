"""Pods' pull secrets read with the user's own credentials, for ``estimate`` and
``explain`` (issue 45): what the extender does with its Role, the CLI does with the
user's kubeconfig, so that a private image a pod pulled with its secret is resolved with
that secret here too.

Each secret is read once (``get``, by name), each credential gets a layer source of its
own (a registry client knowing that credential alone, behind its own cache: answers are
never shared between credentials), and what could not be read is counted by outcome and
said in the estimate's approximations: the secrets by name, never their content.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from layersched.core.errors import InputError, KubeError, LayerschedError
from layersched.core.layers import LayerSource
from layersched.core.reference import ImageName
from layersched.extender import registry_of
from layersched.kube import HTTP_NOT_FOUND, KubeClient, secret_path
from layersched.registry import CachedLayerSource, PullCredential, pull_credentials

#: Secrets named in a note of what could not be read (the rest are counted).
MAX_NAMED = 5
HTTP_FORBIDDEN = 403
FORBIDDEN, NOT_FOUND, MALFORMED, FAILED = "forbidden", "missing", "without credentials", "failed"


class UserPullSecrets:
    """Pull secrets read through ``kube`` (the user's identity), and a cached layer source
    per credential from ``make_source``."""

    def __init__(
        self,
        kube: KubeClient,
        make_source: Callable[[PullCredential], LayerSource] | None = None,
    ) -> None:
        self._kube = kube
        self._make_source = make_source
        #: Credential ids are HMACs under a key of this run.
        self._key = secrets.token_bytes(32)
        self._read: dict[tuple[str, str], dict[str, PullCredential]] = {}
        self._sources: dict[str, LayerSource] = {}
        #: Secrets that could not be used, by outcome (``namespace/name``).
        self.unread: dict[str, list[str]] = {}
        self.used: Counter[str] = Counter()

    def credentials(self, namespace: str, names: Sequence[str]) -> dict[str, PullCredential]:
        """The credentials of the pod's secrets ``names`` by registry, the first secret
        naming a registry winning (the pod's order)."""
        found: dict[str, PullCredential] = {}
        for name in names:
            for registry, credential in self._secret(namespace, name).items():
                found.setdefault(registry, credential)
        return found

    def _secret(self, namespace: str, name: str) -> dict[str, PullCredential]:
        key = (namespace, name)
        if key in self._read:
            return self._read[key]
        where = f"{namespace}/{name}"
        found: dict[str, PullCredential] = {}
        try:
            found = pull_credentials(self._kube.get(secret_path(namespace, name)), where, self._key)
        except KubeError as err:
            outcome = {HTTP_FORBIDDEN: FORBIDDEN, HTTP_NOT_FOUND: NOT_FOUND}.get(err.status, FAILED)
            self.unread.setdefault(outcome, []).append(where)
        except InputError:
            self.unread.setdefault(MALFORMED, []).append(where)
        except LayerschedError:
            self.unread.setdefault(FAILED, []).append(where)
        except Exception:  # noqa: BLE001 (never its text: the secret may be in it)
            self.unread.setdefault(FAILED, []).append(where)
        self._read[key] = found
        return found

    def source(
        self, image: ImageName, credentials: dict[str, PullCredential]
    ) -> LayerSource | None:
        """The layer source of ``image`` for a pod with ``credentials``: its registry's
        credential's own, or None (the user's default source)."""
        credential = credentials.get(registry_of(image) or "")
        if credential is None:
            return None
        source = self._sources.get(credential.id)
        if source is None:
            if self._make_source is None:
                return None
            source = self._sources[credential.id] = CachedLayerSource(self._make_source(credential))
        self.used[credential.id] += 1
        return source

    def describe(
        self, namespace: str, names: Sequence[str], images: Sequence[ImageName]
    ) -> list[dict[str, Any]]:
        """For ``explain``: each of the pod's secrets, whether the user can read it and the
        registries it names, and the pod's images it covers (never its content)."""
        out = []
        for name in names:
            found = self._secret(namespace, name)
            where = f"{namespace}/{name}"
            unread = next((o for o, w in self.unread.items() if where in w), None)
            out.append(
                {
                    "secret": where,
                    "readable": unread is None,
                    "outcome": unread or "read",
                    "registries": sorted(found),
                    "images": [i for i in images if (registry_of(i) or "") in found],
                }
            )
        return out

    def notes(self) -> list[str]:
        """What the estimate should say of the secrets it could not use."""
        out = []
        for outcome, where in sorted(self.unread.items()):
            named = ", ".join(where[:MAX_NAMED]) + (
                f" and {len(where) - MAX_NAMED} more" if len(where) > MAX_NAMED else ""
            )
            hint = (
                ": your credentials may not get them (kubectl auth can-i get secrets -n NS)"
                if outcome == FORBIDDEN
                else ""
            )
            out.append(
                f"{len(where)} pull secret(s) {outcome} ({named}){hint}; the private images "
                "of the pods naming them were resolved without them"
            )
        return out
