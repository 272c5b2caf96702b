"""Where ``layersched explain`` finds the extender's answer for a pod: its
``/debug/decisions`` (read within a bound, kept only for this very pod's uid), at
``--extender-url`` or through ``kubectl port-forward`` to each running scheduler pod of the
install (the latest answer wins), and how to install layersched when none runs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import httpx
import msgspec

from layersched.core.errors import InputError, KubeError
from layersched.deploy import (
    EXTENDER_PORT,
    NEWEST_MINOR,
    OLDEST_MINOR,
    labels,
    parse_kubernetes_version,
)
from layersched.kube import (
    VERSION_PATH,
    KubeClient,
    find_kubectl,
    pods_path,
    port_forward,
    selector,
)

#: The extender answers /debug/decisions from memory, in milliseconds.
EXTENDER_TIMEOUT_S = 5.0
#: An answer for one pod is a few hundred bytes a node: 5,000 nodes fit in a few MiB.
MAX_ANSWER_BYTES = 32 * 1024 * 1024
#: Scheduler pods asked at most (one is the leader; the others stand by).
MAX_SCHEDULER_PODS = 8


class DecisionDoc(msgspec.Struct):
    """What ``/debug/decisions?pod=`` answers (older extenders: no strategy, no bytes)."""

    pod: str
    uid: str
    at_s: float
    mode: str
    neutral: str
    scores: dict[str, int]
    strategy: str = ""
    bytes: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)


@dataclass
class Lookup:
    """What asking the extender(s) found: the answer for this very pod (its uid), and
    what every place asked said otherwise."""

    decision: DecisionDoc | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)
    reached: bool = False


def ask(url: str, key: str, uid: str, source: str) -> Lookup:
    """The extender at ``url``'s latest answer for pod ``key``, kept only if it is about
    this very pod (``uid``: names repeat, uids do not)."""
    lookup = Lookup()
    endpoint = f"{url.rstrip('/')}/debug/decisions"
    try:
        with (
            httpx.Client(timeout=EXTENDER_TIMEOUT_S) as client,
            client.stream("GET", endpoint, params={"pod": key}) as response,
        ):
            body = _bounded_body(response)
    except _TooLarge as err:
        lookup.reached = True
        lookup.notes.append(f"{source}: {err}, not read")
        return lookup
    except httpx.HTTPError as err:
        lookup.notes.append(f"{source}: unreachable ({type(err).__name__}: {err})")
        return lookup
    lookup.reached = True
    if response.status_code == httpx.codes.NOT_FOUND:
        lookup.notes.append(f"{source}: no answer for {key} is remembered")
        return lookup
    if response.status_code != httpx.codes.OK:
        lookup.notes.append(f"{source}: answered {response.status_code} (is /debug served?)")
        return lookup
    try:
        decision = msgspec.json.decode(body, type=DecisionDoc)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as err:
        lookup.notes.append(f"{source}: an answer that is not a decision ({err})")
        return lookup
    if decision.uid != uid:
        lookup.notes.append(
            f"{source}: only an earlier pod of that name (uid {decision.uid[:36]}) was scored"
        )
        return lookup
    lookup.decision, lookup.source = decision, source
    return lookup


class _TooLarge(Exception):
    """An answer past MAX_ANSWER_BYTES (not read to its end)."""


def _bounded_body(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    read = 0
    for chunk in response.iter_bytes():
        read += len(chunk)
        if read > MAX_ANSWER_BYTES:
            raise _TooLarge(f"an answer larger than {MAX_ANSWER_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def ask_install(kube: KubeClient, args: argparse.Namespace, key: str, uid: str) -> Lookup:
    """Ask the extender sidecar of every running scheduler pod of the install; the one
    that scored this pod (the leader at the time) answers for its uid."""
    namespace = args.extender_namespace
    pods, _ = kube.list(pods_path(namespace), label_selector=selector(labels(args.scheduler_name)))
    running = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    ][:MAX_SCHEDULER_PODS]
    found = Lookup()
    if not running:
        found.notes.append(
            f"no running {args.scheduler_name} scheduler pod in namespace {namespace} "
            f"(is layersched installed? {install_hint(kube)})"
        )
        return found
    kubectl = find_kubectl(args.kubectl, "give --extender-url URL")
    for item in running:
        pod = str((item.get("metadata") or {}).get("name") or "")
        source = f"{namespace}/{pod}"
        try:
            with port_forward(
                kubectl,
                namespace,
                pod,
                EXTENDER_PORT,
                kubeconfig=args.kubeconfig,
                context=args.context,
            ) as url:
                lookup = ask(url, key, uid, source)
        except KubeError as err:
            found.notes.append(f"{source}: {err}")
            continue
        found.notes.extend(lookup.notes)
        found.reached = found.reached or lookup.reached
        if lookup.decision is not None and (
            found.decision is None or lookup.decision.at_s > found.decision.at_s
        ):
            found.decision, found.source = lookup.decision, lookup.source
    return found


def install_hint(kube: KubeClient) -> str:
    """How to install layersched on this cluster: the install rendered for its version
    (read from ``/version``; a version we do not support, or none read, says so)."""
    render = "layersched deploy render --kubernetes-version {} --dir layersched-install"
    apply = "kubectl apply -k layersched-install"
    try:
        found = str(kube.get(VERSION_PATH).get("gitVersion") or "")
        version = parse_kubernetes_version(found, "the cluster's version")
    except (KubeError, InputError):
        return f"{render.format('auto')} && {apply}"
    if not OLDEST_MINOR <= version.minor <= NEWEST_MINOR:
        return (
            f"the cluster runs {version.tag}; layersched installs on 1.{OLDEST_MINOR} to "
            f"1.{NEWEST_MINOR}"
        )
    return f"{render.format(f'1.{version.minor}')} && {apply}"
