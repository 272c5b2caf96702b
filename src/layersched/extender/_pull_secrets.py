"""A pod's pull secrets (``spec.imagePullSecrets``): its private images resolved with
them, through a resolver per credential (issue 45).

**Reading.** The extender reads a named secret of the pod's namespace with ``get``, one
secret by name, never a list or a watch (``--pull-secrets``; the install grants ``get``
on secrets through a Role only in the namespaces the user names: docs/extender.md, "Pull
secrets"). A secret it may not read (403), that is missing (404) or that holds no docker
config is remembered as such for :data:`SECRET_NEGATIVE_TTL_S`, and the pod's images are
resolved without it, as before. Reads run on a small pool of their own, each awaited no
longer than the resolver's deadline: a pod whose secrets are not read in time scores
neutrally, as a pod whose layers are late does, and the read warms the cache.

**Answers are kept per (credential, image)**, never across credentials: each credential
(one registry's user and password, known by an opaque id, :class:`PullCredential`) gets
a :class:`DeadlineResolver` of its own, over a registry client that knows that
credential alone, with its own layer cache charged to the extender's one memory budget.
An image is resolved with the first of the pod's secrets (in the pod's order) that names
its registry, else as any other pod's image.

**Bounded by construction:** at most :data:`MAX_PULL_SECRETS_PER_POD` secrets of a pod
count, ``MAX_SECRETS_PER_NAMESPACE`` per namespace and ``MAX_CACHED_SECRETS`` in all
are remembered (least recently used first out: :class:`SecretCache`), and at most
:data:`MAX_CREDENTIALS` credentials have resolvers (the least recently used one's
resolver is closed and its cache dropped).

**Nothing of a secret is logged, counted or shown:** logs name the secret
(``namespace/name``) and what happened; metrics count outcomes; ``/debug`` shows none of
it; errors are scrubbed of the credential (:class:`~layersched.registry.CredentialSource`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from layersched.core.errors import InputError, KubeError, LayerschedError
from layersched.core.objects import Pod
from layersched.extender._resolver import DeadlineResolver
from layersched.extender._secret_cache import MAX_CACHED_SECRETS, SecretCache, SecretKey, SecretRead
from layersched.kube import HTTP_NOT_FOUND, KubeClient, checked_name, secret_path
from layersched.registry import PullCredential, pull_credentials

log = logging.getLogger(__name__)

#: A pod's secrets read at most (kubelet reads every one; pods name one or two).
MAX_PULL_SECRETS_PER_POD = 8
#: Credentials with a resolver of their own at most (each a registry client, two worker
#: threads at most, and its answers in the shared budget).
MAX_CREDENTIALS = 64
#: A secret read is used this long: a rotated pull secret counts within two minutes.
SECRET_TTL_S = 120.0
#: A secret that could not be used (missing, forbidden, malformed, the API failing) is
#: asked again after this long.
SECRET_NEGATIVE_TTL_S = 60.0
#: Threads reading secrets, and reads in flight or queued at most (beyond: not read now).
READ_WORKERS = 2
MAX_PENDING_READS = 64
#: A credential's resolver: workers for pod images and for warming.
CREDENTIAL_WORKERS = 2
#: Warnings about one secret (forbidden, malformed) at most once per this long.
WARNING_PERIOD_S = 600.0

#: Read outcomes, the label of ``layersched_extender_pull_secret_reads``.
FOUND, NOT_FOUND, FORBIDDEN, MALFORMED, FAILED = (
    "found",
    "not_found",
    "forbidden",
    "malformed",
    "failed",
)
OUTCOMES = (FOUND, NOT_FOUND, FORBIDDEN, MALFORMED, FAILED)
HTTP_FORBIDDEN = 403


def pull_secret_names(pod: Pod) -> tuple[str, ...]:
    """The pull secrets ``pod`` names, in its order, once each, at most
    :data:`MAX_PULL_SECRETS_PER_POD`."""
    spec = pod.spec
    refs = (spec.imagePullSecrets if spec is not None else None) or ()
    names = dict.fromkeys(ref.name for ref in refs if valid_secret_name(ref.name))
    return tuple(names)[:MAX_PULL_SECRETS_PER_POD]


class PullSecrets:
    """Reads pods' pull secrets through ``client()`` (the extender's API identity) and
    keeps a resolver per credential (``make_resolver``); see the module docstring."""

    def __init__(
        self,
        client: Callable[[], KubeClient],
        make_resolver: Callable[[PullCredential, str], DeadlineResolver],
        *,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_credentials: int = MAX_CREDENTIALS,
        cache: SecretCache | None = None,
    ) -> None:
        self._client_factory = client
        self._client: KubeClient | None = None
        self._make_resolver = make_resolver
        self.timeout_s = timeout_s
        self.clock = clock
        self.max_credentials = max_credentials
        self.secrets = cache or SecretCache()
        #: A key of this process: credential ids are HMACs under it.
        self._key = secrets.token_bytes(32)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._reading: dict[SecretKey, concurrent.futures.Future[SecretRead]] = {}
        self._resolvers: OrderedDict[tuple[str, str], DeadlineResolver] = OrderedDict()
        self._lock = threading.Lock()
        self._warned: dict[SecretKey, float] = {}
        #: Reads by outcome; reads not started because MAX_PENDING_READS were under way.
        self.reads: Counter[str] = Counter()
        self.rejected = 0
        self.resolvers_closed = 0

    # ------------------------------------------------------------------ secrets
    async def credentials(
        self, namespace: str, names: Sequence[str]
    ) -> dict[str, PullCredential] | None:
        """The credentials of ``names`` (the pod's secrets, in its order) by registry, the
        first secret naming a registry winning; None when a read did not end in time (the
        pod scores neutrally; the read goes on and warms the cache)."""
        now = self.clock()
        reads: dict[SecretKey, SecretRead] = {}
        waiting: dict[SecretKey, concurrent.futures.Future[SecretRead]] = {}
        for name in names:
            key = (namespace, name)
            read = self.secrets.get(key, now)
            if read is not None:
                reads[key] = read
                continue
            future = self._start(key)
            if future is None:
                return None
            waiting[key] = future
        if waiting:
            wrapped = {key: asyncio.wrap_future(f) for key, f in waiting.items()}
            done, _ = await asyncio.wait(wrapped.values(), timeout=self.timeout_s)
            if len(done) < len(wrapped):
                log.info(
                    "pull secrets %s not read within %.3f s: scoring neutrally, the read goes on",
                    ", ".join(f"{ns}/{n}" for ns, n in waiting),
                    self.timeout_s,
                )
                return None
            reads.update({key: task.result() for key, task in wrapped.items()})
        found: dict[str, PullCredential] = {}
        for name in names:
            for registry, credential in reads[(namespace, name)].credentials.items():
                found.setdefault(registry, credential)
        return found

    def _start(self, key: SecretKey) -> concurrent.futures.Future[SecretRead] | None:
        with self._lock:
            future = self._reading.get(key)
            if future is not None:
                return future
            if len(self._reading) >= MAX_PENDING_READS:
                self.rejected += 1
                return None
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    READ_WORKERS, thread_name_prefix="layersched-pull-secret"
                )
            future = self._pool.submit(self._read, key)
            self._reading[key] = future
        future.add_done_callback(lambda f: self._finished(key, f))
        return future

    def _finished(self, key: SecretKey, future: concurrent.futures.Future[SecretRead]) -> None:
        with self._lock:
            if self._reading.get(key) is future:
                del self._reading[key]

    def _kube(self) -> KubeClient:
        with self._lock:
            if self._client is None:
                self._client = self._client_factory()
            return self._client

    def _read(self, key: SecretKey) -> SecretRead:
        """Read one secret now (a worker thread) and remember what it holds."""
        namespace, name = key
        where = f"{namespace}/{name}"
        credentials: Mapping[str, PullCredential] = {}
        try:
            document = self._kube().get(secret_path(namespace, name))
            credentials = pull_credentials(document, where, self._key)
            outcome = FOUND
        except KubeError as err:
            outcome = {HTTP_FORBIDDEN: FORBIDDEN, HTTP_NOT_FOUND: NOT_FOUND}.get(
                err.status or 0, FAILED
            )
            self._warn(key, outcome, f"{err}")
        except InputError as err:  # no pull secret (its text names the field, not the data)
            outcome = MALFORMED
            self._warn(key, outcome, f"{err}")
        except LayerschedError as err:
            outcome = FAILED
            self._warn(key, outcome, f"{err}")
        except Exception as err:  # noqa: BLE001 (a bug: its type only, the secret may be in it)
            outcome = FAILED
            self._warn(key, outcome, f"unexpected {type(err).__name__}")
        ttl_s = SECRET_TTL_S if outcome == FOUND else SECRET_NEGATIVE_TTL_S
        read = SecretRead(credentials, outcome, self.clock() + ttl_s)
        self.secrets.put(key, read)
        with self._lock:
            self.reads[outcome] += 1
        return read

    def _warn(self, key: SecretKey, outcome: str, why: str) -> None:
        """Once per :data:`WARNING_PERIOD_S` and secret: why it is not used."""
        now = self.clock()
        with self._lock:
            last = self._warned.get(key)
            if last is not None and now - last < WARNING_PERIOD_S:
                return
            if len(self._warned) >= MAX_CACHED_SECRETS:
                self._warned.clear()
            self._warned[key] = now
        hint = (
            f"grant the extender get on secrets in namespace {key[0]} (docs/extender.md, "
            "'Pull secrets'), or leave the pod's images resolved without it"
            if outcome == FORBIDDEN
            else "pods naming it are scored without it "
            f"(asked again in {SECRET_NEGATIVE_TTL_S:.0f} s)"
        )
        log.warning("pull secret %s/%s: %s (%s): %s", key[0], key[1], outcome, why, hint)

    # ------------------------------------------------------------------ resolvers
    def resolver(self, credential: PullCredential, platform_key: str) -> DeadlineResolver:
        """The resolver of ``credential`` for platform ``platform_key`` (made on first use;
        the least recently used one's closed past :attr:`max_credentials`)."""
        key = (credential.id, platform_key)
        with self._lock:
            resolver = self._resolvers.get(key)
            if resolver is not None:
                self._resolvers.move_to_end(key)
                return resolver
            resolver = self._resolvers[key] = self._make_resolver(credential, platform_key)
            evicted = []
            while len(self._resolvers) > self.max_credentials:
                evicted.append(self._resolvers.popitem(last=False)[1])
                self.resolvers_closed += 1
        for old in evicted:
            old.close(forget=True)
            _close_source(old)
        return resolver

    @property
    def credentials_held(self) -> int:
        """Credentials (per platform) with a resolver now."""
        return len(self._resolvers)

    def close(self) -> None:
        """Stop the readers and every credential's resolver, and drop what they hold."""
        with self._lock:
            resolvers = list(self._resolvers.values())
            self._resolvers.clear()
            pool, self._pool = self._pool, None
            client, self._client = self._client, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        for resolver in resolvers:
            resolver.close(forget=True)
            _close_source(resolver)
        if client is not None:
            client.close()

    def collector(self) -> Collector:
        """The ``/metrics`` collector of what this holds and did (no name, no id)."""
        return _PullSecretsCollector(self)


def _close_source(resolver: DeadlineResolver) -> None:
    close = getattr(resolver.source, "close", None)
    if callable(close):
        close()


def valid_secret_name(name: str) -> bool:
    """Whether ``name`` can name a Secret (a hostile pod may write anything there)."""
    try:
        checked_name(name, "secret")
    except KubeError:
        return False
    return True


class _PullSecretsCollector(Collector):
    def __init__(self, pull_secrets: PullSecrets) -> None:
        self._pull_secrets = pull_secrets

    def collect(self) -> Iterator[Metric]:
        held = self._pull_secrets
        reads = CounterMetricFamily(
            "layersched_extender_pull_secret_reads",
            "Pull secrets read (--pull-secrets), by outcome: found, not_found, forbidden "
            "(no Role grants get in the namespace), malformed (no docker config), failed.",
            labels=["outcome"],
        )
        for outcome in OUTCOMES:
            reads.add_metric([outcome], float(held.reads[outcome]))
        yield reads
        for kind, name, documentation, value in (
            (
                GaugeMetricFamily,
                "layersched_extender_pull_secrets_cached",
                "Pull secrets remembered (at most 512, 32 per namespace).",
                len(held.secrets),
            ),
            (
                GaugeMetricFamily,
                "layersched_extender_pull_credentials",
                "Pull credentials (per platform) with a layer resolver and cache of their own.",
                held.credentials_held,
            ),
            (
                CounterMetricFamily,
                "layersched_extender_pull_secret_reads_rejected",
                "Pull secret reads not started because 64 were already under way.",
                held.rejected,
            ),
        ):
            family = kind(name, documentation)
            family.add_metric([], float(value))
            yield family
