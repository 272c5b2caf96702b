"""Pods' pull secrets (issue 45): their private images resolved with them, answers kept
per credential and never across, nothing of a secret shown anywhere, memory bounded.

The registry here is a stand-in layer source that answers only the credential it was
made for; the API server a stub whose ``get`` answers a secret, 403 or 404. ``estimate``
reads them with the user's credentials (the CLI's ``UserPullSecrets``) the same way. The real
registry (htpasswd and token) and the real extender process are
tests/integration/test_extender_pull_secrets.py's; the live cluster's the e2e's.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from rich.progress import Progress

from layersched.cli._estimate_cluster import PullSecretNames
from layersched.cli._estimate_layers import resolve_pods
from layersched.cli._pull_secrets import UserPullSecrets
from layersched.core.errors import InputError, KubeError, LayerResolutionError
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.objects import LocalObjectReference, Pod, PodSpec
from layersched.core.placementfacts import PodFacts
from layersched.core.reference import ImageName, ImageReference
from layersched.extender import (
    MAX_PULL_SECRETS_PER_POD,
    DeadlineResolver,
    PullSecrets,
    SecretCache,
    StaticLayerIndexProvider,
    make_extender,
    pull_secret_names,
)
from layersched.kube import secret_path
from layersched.registry import (
    DOCKER_CFG_TYPE,
    DOCKER_CONFIG_JSON_TYPE,
    MAX_SECRET_BYTES,
    CachedLayerSource,
    CredentialSource,
    Fetched,
    PullCredential,
    pull_credentials,
    scrub,
)
from tests.fixtures.strategies import without_spread
from tests.unit.test_extender import Call, _nodes_file, _serve

MB = 1024 * 1024
KEY = b"k" * 32
REGISTRY = "private.example:5000"
IMAGE = ImageName(f"{REGISTRY}/team/app:1")
GOOD = ("robot", "s3cret-Pa55word")
OTHER = ("intruder", "n0t-the-Pa55word")
LAYERS = (Layer("sha256:" + "a" * 64, 30 * MB), Layer("sha256:" + "b" * 64, 10 * MB))


def _config(auths: Mapping[str, Any]) -> str:
    return base64.b64encode(json.dumps({"auths": auths}).encode()).decode()


def _auth(user: str, password: str) -> dict[str, str]:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def secret(
    name: str,
    credentials: tuple[str, str] = GOOD,
    registry: str = REGISTRY,
    *,
    secret_type: str = DOCKER_CONFIG_JSON_TYPE,
) -> dict[str, Any]:
    data = {".dockerconfigjson": _config({registry: _auth(*credentials)})}
    return {"metadata": {"name": name}, "type": secret_type, "data": data}


def _document(value: str) -> dict[str, Any]:
    return {"type": DOCKER_CONFIG_JSON_TYPE, "data": {".dockerconfigjson": value}}


def _leaks(text: str) -> list[str]:
    """The parts of the test credentials ``text`` shows."""
    parts = [*GOOD, *OTHER]
    parts += [base64.b64encode(f"{u}:{p}".encode()).decode() for u, p in (GOOD, OTHER)]
    return [part for part in parts if part in text]


# ------------------------------------------------------------------ a Secret's content
@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        # auth: base64 of user:password, as kubectl create secret docker-registry writes it
        (_auth(*GOOD), GOOD),
        ({"username": "robot", "password": "pw"}, ("robot", "pw")),
        # an identity token wins, as in docker (a refresh token for the token service)
        ({"identitytoken": "refresh", **_auth(*GOOD)}, ("<token>", "refresh")),
    ],
    ids=["auth", "username-password", "identity-token"],
)
def test_a_dockerconfigjson_secret_gives_its_registrys_credentials(
    entry: dict[str, str], expected: tuple[str, str]
) -> None:
    document = {"type": DOCKER_CONFIG_JSON_TYPE, "data": {".dockerconfigjson": _config({
        f"https://{REGISTRY}": entry, "https://index.docker.io/v1/": _auth(*OTHER)})}}  # fmt: skip
    found = pull_credentials(document, "ns/regcred", KEY)
    assert set(found) == {REGISTRY, "docker.io"}  # keys as image references write hosts
    assert found[REGISTRY].credentials == expected


def test_the_legacy_dockercfg_secret_is_read_too() -> None:
    data = base64.b64encode(json.dumps({REGISTRY: _auth(*GOOD)}).encode()).decode()
    document = {"type": DOCKER_CFG_TYPE, "data": {".dockercfg": data}}
    assert pull_credentials(document, "ns/old", KEY)[REGISTRY].credentials == GOOD


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"type": "Opaque", "data": {"password": "eA=="}}, "holds no registry credentials"),
        ({"type": DOCKER_CONFIG_JSON_TYPE, "data": {}}, "is missing"),
        (
            _document("!!" + _auth(*GOOD)["auth"]),
            "not base64 of JSON",
        ),
        (
            _document(base64.b64encode(json.dumps({"x": _auth(*GOOD)}).encode()).decode()),
            "has no auths map",
        ),
        (
            _document("A" * (MAX_SECRET_BYTES * 2)),
            "over 65536 bytes",
        ),
    ],
    ids=["opaque", "no-key", "not-base64", "no-auths", "too-big"],
)  # fmt: skip
def test_a_secret_without_credentials_is_named_never_shown(
    document: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError, match=message) as caught:
        pull_credentials(document, "ns/regcred", KEY)
    assert "ns/regcred" in str(caught.value)
    assert _leaks(str(caught.value)) == []
    # no decoder's exception (it holds the document) travels with the error
    error = caught.value
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def test_a_credential_shows_its_registry_and_an_opaque_id_only() -> None:
    found = pull_credentials(secret("a"), "ns/a", KEY)[REGISTRY]
    again = pull_credentials(secret("b"), "ns/b", KEY)[REGISTRY]
    other = pull_credentials(secret("c", OTHER), "ns/c", KEY)[REGISTRY]
    elsewhere = pull_credentials(secret("a"), "ns/a", b"another process's key 0123456789")
    # equal credentials, equal ids (one cache); others, and another process's, differ
    assert found.id == again.id != other.id
    assert elsewhere[REGISTRY].id != found.id
    for shown in (repr(found), str(found), f"{found}", repr([found])):
        assert _leaks(shown) == [] and REGISTRY in shown


def test_scrub_takes_every_part_of_a_credential_out() -> None:
    basic = base64.b64encode(b"robot:s3cret-Pa55word").decode()
    text = f"401 for account=robot with {basic} and s3cret-Pa55word; ok"
    assert scrub(text, [GOOD]) == "401 for account=*** with *** and ***; ok"
    # a user name too short to take out is left (it would redact every word)
    assert scrub("a b", [("a", "pw")]) == "a b"


# ------------------------------------------------------------------ the stand-ins
class StubKube:
    """``get`` of a secret: the document, or a KubeError with a status."""

    def __init__(self, secrets: Mapping[str, Mapping[str, Any]], forbidden: set[str]) -> None:
        self.secrets = dict(secrets)
        self.forbidden = forbidden
        self.gets: list[str] = []
        self.closed = False

    def get(self, path: str) -> dict[str, Any]:
        self.gets.append(path)
        namespace = path.split("/")[4]
        if namespace in self.forbidden:
            raise KubeError(f"reading {path}: 403 Forbidden", status=403)
        if path not in self.secrets:
            raise KubeError(f"reading {path}: 404 Not Found", status=404)
        return dict(self.secrets[path])

    def close(self) -> None:
        self.closed = True


class PrivateRegistry:
    """A registry whose images only ``GOOD`` may read (a DigestSource, as the real one)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, tuple[str, str] | None]] = []
        self._lock = threading.Lock()

    def source(self, credential: PullCredential | None) -> Any:
        registry = self

        class Source:
            def fetch(self, ref: ImageReference) -> Fetched:
                creds = credential.credentials if credential is not None else None
                with registry._lock:
                    registry.asked.append((str(ref), creds))
                if creds != GOOD:
                    # what a registry's 401 looks like, echoing the account
                    who = creds[0] if creds else "anonymous"
                    raise LayerResolutionError(
                        f"resolving {ref}: 401 unauthorized for account={who} "
                        f"({creds[1] if creds else ''})"
                    )
                return Fetched(LAYERS, "sha256:" + "c" * 64)

            def current_digest(self, ref: ImageReference) -> str | None:
                return "sha256:" + "c" * 64

            def resolve(self, image: ImageName) -> tuple[Layer, ...]:
                return self.fetch(ImageReference.parse(image)).layers

        return Source()


def _pull_secrets(
    kube: StubKube, registry: PrivateRegistry, **options: Any
) -> tuple[PullSecrets, list[DeadlineResolver]]:
    made: list[DeadlineResolver] = []

    def make_resolver(credential: PullCredential, platform_key: str) -> DeadlineResolver:
        source = _ScrubbedStandIn(registry.source(credential), credential)
        made.append(DeadlineResolver(source, timeout_s=5.0, workers=1, warm_workers=1))
        return made[-1]

    return PullSecrets(lambda: kube, make_resolver, timeout_s=5.0, **options), made  # type: ignore[arg-type,return-value]


class _ScrubbedStandIn(CredentialSource):
    """The production wrapper (scrubbing, ``from None``) over the stand-in registry."""

    def __init__(self, source: Any, credential: PullCredential) -> None:
        self._source = source
        self.credential = credential
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _pod(*secrets: str, namespace: str = "team", image: str = IMAGE) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {
            "containers": [{"name": "c", "image": image}],
            "imagePullSecrets": [{"name": s} for s in secrets],
        },
    }


NODES = [
    {"metadata": {"name": "N1"}, "status": {"images": [{"names": ["holder:1"], "sizeBytes": 1}]}},
    {"metadata": {"name": "N2"}, "status": {"images": []}},
]


def _extender(tmp_path: Any, pull_secrets: PullSecrets | None) -> Any:
    # N1 holds the private image's first layer (30 of 40 MiB) through another image
    nodes = _nodes_file(tmp_path, NODES)
    provider = StaticLayerIndexProvider(nodes, StaticLayerSource({"holder:1": LAYERS[:1]}))
    provider.load()
    public = _ScrubbedStandIn(PrivateRegistry().source(None), _nobody())
    return make_extender(
        without_spread("layer-locality"), public, provider, resolve_timeout_s=5.0,
        pull_secrets=pull_secrets,
    )  # fmt: skip


def _nobody() -> PullCredential:
    return PullCredential("nowhere.example", "0" * 64, ("", ""))


def _scores(tmp_path: Any, extender: Any, *bodies: dict[str, Any]) -> list[Any]:
    answers: list[Any] = []

    async def scenario(call: Call) -> None:
        for body in bodies:
            status, answer = await call("POST", "/prioritize", body)
            assert status == 200, answer
            answers.append({e["Host"]: e["Score"] for e in answer})
        answers.append(await call("GET", "/metrics"))
        answers.append(await call("GET", "/debug/decisions"))

    _serve(extender, scenario)
    return answers


# ------------------------------------------------------------------ the extender
def test_a_private_image_is_scored_with_the_pods_secret_and_only_with_it(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # team/regcred holds GOOD, team/stolen OTHER (a wrong password for the same registry)
    caplog.set_level(logging.DEBUG)
    kube = StubKube(
        {secret_path("team", "regcred"): secret("regcred"),
         secret_path("team", "stolen"): secret("stolen", OTHER)},
        forbidden=set(),
    )  # fmt: skip
    registry = PrivateRegistry()
    pull_secrets, made = _pull_secrets(kube, registry)
    extender = _extender(tmp_path, pull_secrets)
    body = lambda *names: {"Pod": _pod(*names), "NodeNames": ["N1", "N2"]}  # noqa: E731
    with_secret, without, stolen, again, metrics, decisions = _scores(
        tmp_path, extender, body("regcred"), body(), body("stolen"), body("regcred")
    )
    # spread off: N1 holds 30 of the image's 40 MiB -> floor(100 * 30 / 40) = 75 -> 7
    assert with_secret == again == {"N1": 7, "N2": 0}
    # the extender's own credentials (none) cannot read it: neutral, as before issue 45
    assert without == {"N1": 0, "N2": 0}
    # another credential for the same image gets nothing of the first one's answer
    assert stolen == {"N1": 0, "N2": 0}
    asked = [creds for _ref, creds in registry.asked]
    assert asked == [GOOD, OTHER], "each credential asks once (the second regcred is cached)"
    assert len(made) == 2  # one resolver per credential
    assert kube.gets == [secret_path("team", "regcred"), secret_path("team", "stolen")]
    # nothing of a secret in the logs, /metrics or /debug
    for text in (caplog.text, metrics[1], json.dumps(decisions[1])):
        assert _leaks(text) == [], text
    assert 'layersched_extender_pull_secret_reads_total{outcome="found"} 2.0' in metrics[1]
    assert "layersched_extender_pull_credentials 2.0" in metrics[1]


def test_a_forbidden_secret_scores_the_pod_as_before_and_says_once_why(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    kube = StubKube({secret_path("team", "regcred"): secret("regcred")}, forbidden={"team"})
    pull_secrets, made = _pull_secrets(kube, PrivateRegistry())
    extender = _extender(tmp_path, pull_secrets)
    body = {"Pod": _pod("regcred"), "NodeNames": ["N1", "N2"]}
    first, second, metrics, _ = _scores(tmp_path, extender, body, body)
    assert first == second == {"N1": 0, "N2": 0}
    assert made == [] and len(kube.gets) == 1  # remembered: not asked again within its TTL
    warnings = [r.getMessage() for r in caplog.records if "pull secret" in r.getMessage()]
    assert len(warnings) == 1 and "team/regcred: forbidden" in warnings[0]
    assert "get on secrets in namespace team" in warnings[0]
    assert 'layersched_extender_pull_secret_reads_total{outcome="forbidden"} 1.0' in metrics[1]


def test_without_pull_secrets_on_no_secret_is_read(tmp_path: Any) -> None:
    extender = _extender(tmp_path, None)
    (answer, metrics, _) = _scores(
        tmp_path, extender, {"Pod": _pod("regcred"), "NodeNames": ["N1", "N2"]}
    )
    assert answer == {"N1": 0, "N2": 0}
    assert "layersched_extender_pull_secret_reads" not in metrics[1]


def test_the_first_of_the_pods_secrets_naming_a_registry_wins() -> None:
    # a: GOOD for the private registry; b: OTHER for it and for docker.io. In pod order
    # (b, a): b's credential for the private registry; in (a, b): a's. docker.io: b's.
    kube = StubKube(
        {
            secret_path("team", "a"): secret("a"),
            secret_path("team", "b"): _document(
                _config({REGISTRY: _auth(*OTHER), "docker.io": _auth(*OTHER)})
            ),
        },
        forbidden=set(),
    )  # fmt: skip
    pull_secrets, _ = _pull_secrets(kube, PrivateRegistry())
    ba = asyncio.run(pull_secrets.credentials("team", ["b", "a"]))
    ab = asyncio.run(pull_secrets.credentials("team", ["a", "b"]))
    assert ba is not None and ab is not None
    assert ba[REGISTRY].credentials == OTHER and ab[REGISTRY].credentials == GOOD
    assert ab["docker.io"].credentials == OTHER
    assert len(kube.gets) == 2  # each read once


def test_a_pods_secret_names_are_bounded_and_checked() -> None:
    refs = [LocalObjectReference(n) for n in ["a", "a", "../x", "", "B", *"bcdefghijk"]]
    pod = Pod(spec=PodSpec(imagePullSecrets=refs))
    # once each, hostile names ("../x", "B": not object names) dropped, the first 8 kept
    assert pull_secret_names(pod) == ("a", *"bcdefgh")
    assert len(pull_secret_names(pod)) == MAX_PULL_SECRETS_PER_POD


def test_the_secret_cache_is_bounded_per_namespace_and_in_all() -> None:
    cache = SecretCache(max_entries=4, max_per_namespace=2)
    read = _read_at(100.0)
    for key in [("a", "1"), ("a", "2"), ("a", "3"), ("b", "1"), ("c", "1"), ("d", "1")]:
        cache.put(key, read)
    # a's oldest went when its third came (2 per namespace); then the oldest in all
    assert len(cache) == 4
    assert cache.get(("a", "1"), 0.0) is None and cache.get(("a", "2"), 0.0) is None
    assert cache.get(("a", "3"), 0.0) is not None and cache.get(("d", "1"), 0.0) is not None
    # a read past its TTL is gone
    assert cache.get(("d", "1"), 100.0) is None and len(cache) == 3


def _read_at(expires_at: float) -> Any:
    from layersched.extender._pull_secrets import FOUND
    from layersched.extender._secret_cache import SecretRead

    return SecretRead({}, FOUND, expires_at)


def test_credentials_past_the_bound_lose_their_resolver_and_its_answers() -> None:
    kube = StubKube({}, forbidden=set())
    pull_secrets, made = _pull_secrets(kube, PrivateRegistry(), max_credentials=2)
    creds = [
        pull_credentials(secret(str(i), (f"user{i}", f"pw{i}")), f"t/{i}", KEY)[REGISTRY]
        for i in range(3)
    ]
    first = pull_secrets.resolver(creds[0], "")
    pull_secrets.resolver(creds[1], "")
    assert pull_secrets.resolver(creds[0], "") is first  # used again: the newest now
    pull_secrets.resolver(creds[2], "")  # one too many: creds[1]'s goes
    assert pull_secrets.credentials_held == 2
    assert made[1].source.closed  # type: ignore[attr-defined]
    assert not made[0].source.closed  # type: ignore[attr-defined]
    assert pull_secrets.resolver(creds[1], "") is not made[1]  # made anew: nothing kept


def test_a_credentials_failure_is_scrubbed_and_carries_no_exception() -> None:
    credential = pull_credentials(secret("x", OTHER), "t/x", KEY)[REGISTRY]

    class Leaky:
        def fetch(self, ref: ImageReference) -> Fetched:
            try:
                raise ValueError("Authorization: Basic " + _auth(*OTHER)["auth"])
            except ValueError as err:
                raise LayerResolutionError(f"401 for {OTHER[0]}: {OTHER[1]}") from err

    source = CredentialSource(Leaky(), credential)  # type: ignore[arg-type]
    with pytest.raises(LayerResolutionError) as caught:
        source.fetch(ImageReference.parse(IMAGE))
    assert _leaks(str(caught.value)) == [] and "***" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_close_stops_readers_resolvers_and_the_client() -> None:
    kube = StubKube({secret_path("team", "regcred"): secret("regcred")}, forbidden=set())
    pull_secrets, made = _pull_secrets(kube, PrivateRegistry())
    found = asyncio.run(pull_secrets.credentials("team", ["regcred"]))
    assert found is not None
    pull_secrets.resolver(found[REGISTRY], "")
    pull_secrets.close()
    assert kube.closed and made[0].source.closed  # type: ignore[attr-defined]
    assert pull_secrets.credentials_held == 0


def test_a_resolver_closed_under_a_waiting_pod_answers_unresolved_not_an_error() -> None:
    # a credential's resolver closed past the bound while a pod waits on it: its queued
    # resolutions are cancelled; the pod is unresolved (neutral), never a 500
    release = threading.Event()
    started = threading.Event()

    class Blocking:
        def resolve(self, image: ImageName) -> tuple[Layer, ...]:
            started.set()
            release.wait(5.0)
            return LAYERS

    resolver = DeadlineResolver(Blocking(), timeout_s=5.0, workers=1)  # type: ignore[arg-type]

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(
            resolver.resolve_pod([ImageName("a.example/x:1"), ImageName("a.example/y:1")])
        )
        await asyncio.to_thread(started.wait, 5.0)
        resolver.close(forget=True)  # y is queued behind x: cancelled
        release.set()
        return await waiting

    assert asyncio.run(scenario()) is None


# ------------------------------------------------------------------ estimate, as the user
def test_estimate_resolves_a_pods_private_image_with_its_secret_as_the_user_reads_it() -> None:
    # issue 45: estimate reads the pod's secrets with the user's own credentials and
    # resolves its private image with the one naming its registry, each credential through
    # its own source; a secret the user may not read leaves the image to the user's source
    # (here anonymous: unknown), said in a note by name, never by content
    kube = StubKube(
        {secret_path("team", "regcred"): secret("regcred"),
         secret_path("team", "stolen"): secret("stolen", OTHER)},
        forbidden={"locked"},
    )  # fmt: skip
    registry = PrivateRegistry()

    def make(credential: PullCredential) -> Any:
        # as the CLI's factory: one credential, its errors scrubbed of it
        return CredentialSource(registry.source(credential), credential)

    def pod(name: str, namespace: str) -> PodFacts:
        return PodFacts(f"{namespace}/{name}", f"uid-{name}", "N1", "layer-locality",
                        (IMAGE,), 100.0, None)  # fmt: skip

    pods = [pod("with", "team"), pod("without", "team"), pod("stolen", "team"),
            pod("locked", "locked")]  # fmt: skip
    pulling: PullSecretNames = {
        "uid-with": ("team", ("regcred",)),
        "uid-stolen": ("team", ("stolen",)),
        "uid-locked": ("locked", ("regcred",)),
    }
    users = UserPullSecrets(kube, make)  # type: ignore[arg-type]
    user = registry.source(None)  # the user's own source: anonymous here
    with Progress(disable=True) as progress:
        out = resolve_pods(pods, {p.uid: {} for p in pods}, CachedLayerSource(user), progress,
                            0.0, 200.0, None, pulling, users)  # fmt: skip
    by_name = {p.key.split("/")[1]: p for p in out}
    assert by_name["with"].image_layers == {IMAGE: LAYERS}
    for name in ("without", "stolen", "locked"):
        assert by_name[name].image_layers is None and "401 unauthorized" in by_name[name].unresolved
    # each credential asks once, the user's own (anonymous) once for its two pods
    asked = [creds for _ref, creds in registry.asked]
    assert sorted(asked, key=str) == sorted([GOOD, OTHER, None], key=str)
    assert kube.gets == [secret_path("team", "regcred"), secret_path("team", "stolen"),
                         secret_path("locked", "regcred")]  # fmt: skip
    notes = users.notes()
    assert len(notes) == 1 and "(locked/regcred)" in notes[0] and "forbidden" in notes[0]
    shown = " ".join(notes) + " ".join(p.unresolved for p in out)
    assert _leaks(shown) == [], shown
