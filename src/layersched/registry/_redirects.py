"""Redirects, followed hop by hop: a chain that loops, runs past :data:`MAX_REDIRECTS`,
downgrades HTTPS to plain HTTP, or reaches an internal address the registry is not on is
refused (:class:`RedirectError`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import httpx

from layersched.registry._addresses import internal_target_refusal

# registry.k8s.io answers with one redirect to a regional mirror and S3-backed
# registries with one to storage; a chain longer than this is a loop or a misconfiguration.
MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class RedirectError(Exception):
    """A redirect chain that loops, runs too long or downgrades HTTPS to HTTP."""

    def __init__(self, problem: str, chain: Sequence[httpx.URL], *, internal: bool = False) -> None:
        super().__init__(problem)
        self.problem = problem
        self.chain = tuple(chain)
        #: the target is on an internal (loopback, link-local) address
        self.internal = internal


@contextlib.contextmanager
def following(
    http: httpx.Client, method: str, url: str, headers: Mapping[str, str] | None = None
) -> Iterator[httpx.Response]:
    """Send a GET or HEAD, following at most MAX_REDIRECTS redirects; yield the last answer.

    Each hop is a request of its own, so the auth flow sees the hop's host:
    another host never gets this host's credentials or tokens, and a Bearer
    challenge from the redirect target is answered with a token for it.
    The response is streamed; the caller decides how much of it to read.
    """
    chain = [httpx.URL(url)]
    while True:
        with http.stream(method, chain[-1], headers=headers) as response:
            location = response.headers.get("Location")
            if response.status_code not in REDIRECT_STATUSES or not location:
                yield response
                return
        target = response.url.join(location)
        if target in chain:
            raise RedirectError("redirect loop", [*chain, target])
        if len(chain) > MAX_REDIRECTS:
            raise RedirectError(f"more than {MAX_REDIRECTS} redirects", [*chain, target])
        if chain[-1].scheme == "https" and target.scheme != "https":
            raise RedirectError("redirect from HTTPS to plain HTTP refused", [*chain, target])
        refusal = internal_target_refusal(chain[0].netloc.decode(), target.host)
        if refusal is not None:
            raise RedirectError(f"redirect refused: {refusal}", [*chain, target], internal=True)
        chain.append(target)
