"""``layersched explain pod NS/NAME``: why a pod landed where it did.

It reads the pod and its ``Scheduled`` event through the API (the node chosen, and by
which scheduler), and the extender's latest answer for it (``/debug/decisions``: each
candidate node's score, the bytes of the pod it held and those it lacked). The
extender is reached through ``kubectl port-forward`` to each running scheduler pod of
the install (:mod:`layersched.kube._portforward` says why not the API's pod proxy), or at
``--extender-url`` (the local testbed's host process, or a port-forward of your own).

It says plainly when the pod was placed without us: its ``schedulerName`` is not the
layersched scheduler's, the extender was unreachable or had no answer for it (the
scheduler's extender is ``ignorable``: it then places by its own plugins alone), or the
extender answered neutrally (and why).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.markup import escape

from layersched.cli._explain_extender import Lookup, ask, ask_install
from layersched.cli._kube import add_cluster_options, open_client
from layersched.cli._output import add_output_option, is_document, print_document
from layersched.cli._pull_secrets import UserPullSecrets
from layersched.cli._tables import console, size, table, table_width
from layersched.core.errors import InputError, KubeError
from layersched.core.events import SCHEDULED_REASON, scheduled_event
from layersched.core.objects import decode_pod, pod_images
from layersched.core.strategies.image_locality import NAME as IMAGE_LOCALITY
from layersched.deploy import LAYER_LOCALITY_SCHEDULER, NAMESPACE
from layersched.extender import pull_secret_names
from layersched.kube import (
    HTTP_NOT_FOUND,
    KubeClient,
    checked_name,
    events_path,
    pod_path,
    selector,
)

#: What the extender's verdicts mean (``Decision.neutral``).
NEUTRAL_REASONS = {
    "not_ready": "its layer inventory was not loaded yet",
    "pod_unresolved": "the pod's image layers could not be resolved within its deadline "
    "(a registry slow or unreachable from the extender)",
    "overloaded": "it was past its concurrency limit (--max-concurrent-requests)",
}
#: The verdicts (``-o json``'s ``verdict``).
SCORED = "scored"
NEUTRAL = "neutral"
NOT_OURS = "not_ours"
PENDING = "pending"
NO_ANSWER = "no_answer"
UNREACHABLE = "unreachable"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``explain`` subcommand."""
    p = sub.add_parser(
        "explain",
        help="why a pod landed where it did: each node's score, held and missing bytes",
    )
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    pod = kinds.add_parser(
        "pod",
        help="the extender's decision for one pod, and the node chosen",
        description="Reads the pod and its Scheduled event through the API, and the "
        "extender's latest answer for it (through kubectl port-forward to the install's "
        "scheduler pods, or at --extender-url).",
    )
    pod.add_argument(
        "pod", metavar="[NAMESPACE/]NAME", help="the pod (its namespace: -n, else the context's)"
    )
    add_cluster_options(
        pod, namespace_help="the pod's namespace (default: the kubeconfig context's)"
    )
    pod.add_argument(
        "--extender-url",
        metavar="URL",
        help="ask the extender here instead (e.g. the local testbed's, or a port-forward "
        "of your own: http://127.0.0.1:8888)",
    )
    pod.add_argument(
        "--extender-namespace",
        default=NAMESPACE,
        metavar="NS",
        help="namespace of the install's scheduler pods (default: %(default)s)",
    )
    pod.add_argument(
        "--scheduler-name",
        default=LAYER_LOCALITY_SCHEDULER,
        metavar="NAME",
        help="the schedulerName that calls layersched's extender (default: %(default)s)",
    )
    pod.add_argument(
        "--kubectl",
        metavar="PATH",
        help="kubectl for the port-forward (default: kubectl on PATH)",
    )
    add_output_option(pod, old="--format")
    pod.set_defaults(handler=run)


def parse_pod_key(text: str, default_namespace: str | None = None) -> tuple[str, str]:
    """``NAMESPACE/NAME`` (or ``NAME`` in ``default_namespace``) as (namespace, name),
    both valid object names."""
    namespace, sep, name = text.partition("/")
    if not sep and default_namespace:
        namespace, sep, name = default_namespace, "/", text
    if not sep or not namespace or not name:
        raise InputError(
            f"pod {text[:80]!r}: give it as NAMESPACE/NAME or NAME with -n NAMESPACE, "
            "e.g. default/web-1"
        )
    try:
        return checked_name(namespace, "namespace"), checked_name(name, "pod")
    except KubeError as err:
        raise InputError(str(err)) from None


def run(args: argparse.Namespace) -> int:
    """Explain one pod's placement."""
    if "/" in args.pod and args.namespace:
        raise InputError(f"pod {args.pod!r} names its namespace: drop -n {args.namespace}")
    with open_client(args) as kube:
        namespace, name = parse_pod_key(args.pod, args.namespace or kube.config.namespace)
        key = f"{namespace}/{name}"
        pod = _read_pod(kube, namespace, name)
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        uid = str(meta.get("uid") or "")
        fields = selector({"involvedObject.name": name, "reason": SCHEDULED_REASON})
        events, _ = kube.list(events_path(namespace), field_selector=fields)
        scheduled = scheduled_event(events, uid)
        if args.extender_url:
            lookup = ask(args.extender_url, key, uid, args.extender_url)
        else:
            lookup = ask_install(kube, args, key, uid)
        pulls = _pull_secrets(kube, pod)
    explained = explain(
        key=key,
        uid=uid,
        scheduler=str(spec.get("schedulerName") or ""),
        node=str(spec.get("nodeName") or ""),
        scheduled=scheduled,
        ours=args.scheduler_name,
        lookup=lookup,
    )
    _add_pull_secrets(explained, pulls)
    if is_document(args.output):
        print_document(explained, args.output)
    else:
        print_explanation(explained, console(wide=args.output == "wide"), args.output)
    return 0


def _pull_secrets(kube: KubeClient, document: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's pull secrets as the user's credentials read them (issue 45): readable or
    why not, the registries each names and the pod's images it covers."""
    try:
        pod = decode_pod(document, "the pod")
        images = pod_images(pod, "the pod").pulled
    except InputError:
        return []
    names = pull_secret_names(pod)
    if not names or not pod.metadata.namespace:
        return []
    return UserPullSecrets(kube).describe(pod.metadata.namespace, names, images)


def _add_pull_secrets(explained: dict[str, Any], pulls: list[dict[str, Any]]) -> None:
    """``pull_secrets`` in the document, and what they mean for the answer in its notes."""
    explained["pull_secrets"] = pulls
    private = sorted({image for pull in pulls for image in pull["images"]})
    for pull in pulls:
        if not pull["readable"]:
            explained["notes"].append(
                f"pull secret {pull['secret']}: {pull['outcome']} with your credentials"
            )
    if private:
        explained["notes"].append(
            f"{', '.join(private)}: pulled with the pod's pull secret; the extender resolves "
            "them with it only where a Role lets it get that secret (layersched deploy "
            "render --pull-secret-namespace NS; the chart's extender.pullSecrets), else "
            "from the nodes' agents alone"
        )


def _read_pod(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    try:
        return kube.get(pod_path(namespace, name))
    except KubeError as err:
        if err.status == HTTP_NOT_FOUND:
            raise KubeError(
                f"pod {namespace}/{name} does not exist (kubectl -n {namespace} get pods): "
                "a pod deleted since cannot be explained"
            ) from None
        raise


# ---------------------------------------------------------------------- the verdict


def explain(
    *,
    key: str,
    uid: str,
    scheduler: str,
    node: str,
    scheduled: tuple[str, str, float | None] | None,
    ours: str,
    lookup: Lookup,
) -> dict[str, Any]:
    """The explanation as a document (``-o json``): the verdict and why, the node
    chosen, and each candidate node's score and bytes when the extender scored it."""
    decision = lookup.decision
    verdict, why = _verdict(scheduler, node, ours, lookup)
    nodes: list[dict[str, Any]] = []
    if decision is not None and verdict in (SCORED, PENDING):
        for host, score in decision.scores.items():
            held = decision.bytes.get(host, {})
            present = int(held.get("present_bytes", 0))
            total = int(held.get("total_bytes", 0))
            nodes.append(
                {
                    "node": host,
                    "score": score,
                    "present_bytes": present if held else None,
                    "total_bytes": total if held else None,
                    "missing_bytes": max(total - present, 0) if held else None,
                    "chosen": host == node,
                }
            )
        nodes.sort(key=lambda n: (-n["score"], -(n["present_bytes"] or 0), n["node"]))
    return {
        "pod": key,
        "uid": uid,
        "scheduler": scheduler,
        "node": node,
        "scheduled_by": scheduled[0] if scheduled else None,
        "scheduled_at_s": scheduled[2] if scheduled else None,
        "verdict": verdict,
        "why": why,
        "extender": lookup.source or None,
        "decision": None
        if decision is None
        else {
            "at_s": decision.at_s,
            "mode": decision.mode,
            "neutral": decision.neutral,
            "strategy": decision.strategy or None,
        },
        "nodes": nodes,
        "notes": lookup.notes,
    }


def _verdict(scheduler: str, node: str, ours: str, lookup: Lookup) -> tuple[str, str]:
    decision = lookup.decision
    if scheduler != ours:
        return NOT_OURS, (
            f"placed without us: its schedulerName is {scheduler or 'default-scheduler'!r}, "
            f"which does not call layersched's extender (set schedulerName: {ours})"
        )
    if decision is None:
        if not lookup.reached:
            return UNREACHABLE, (
                "placed without us: the extender could not be reached, and kube-scheduler "
                "(its extender is ignorable) then scores with its own plugins alone"
            )
        return NO_ANSWER, (
            "placed without us, or the answer is gone: the extender has no answer for this "
            "pod (kube-scheduler does not score when one node fits; the extender keeps the "
            "latest 1,024 pods and forgets on restart)"
        )
    if decision.neutral:
        reason = NEUTRAL_REASONS.get(decision.neutral, "no reason it knows")
        return NEUTRAL, (
            f"placed without us: the extender answered 0 for every node "
            f"({decision.neutral}: {reason}), so kube-scheduler's own plugins decided"
        )
    if not node:
        return PENDING, "scored by the extender, not bound to a node yet"
    if node not in decision.scores:
        return SCORED, (
            f"scored by the extender, but {node} was not among the nodes it was asked about"
        )
    best = max(decision.scores.values())
    if decision.scores[node] < best:
        return SCORED, (
            f"scored by the extender; {node} was not its highest score ({best}/10): "
            "kube-scheduler's other scores outweighed it"
        )
    return SCORED, "scored by the extender; the node chosen had its highest score"


# ---------------------------------------------------------------------- printing


def _when(at_s: float | None) -> str:
    if at_s is None:
        return "?"
    return datetime.fromtimestamp(at_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def print_explanation(explained: dict[str, Any], out: Console, output: str | None = None) -> None:
    """The explanation for a terminal: the verdict, then the node table when scored."""
    node = explained["node"] or "(not bound)"
    out.print(f"pod {explained['pod']} (uid {explained['uid']})", markup=False)
    by = explained["scheduled_by"]
    out.print(
        f"scheduler {explained['scheduler'] or 'default-scheduler'}; node {node}"
        + (f", bound by {by} at {_when(explained['scheduled_at_s'])}" if by else ""),
        markup=False,
    )
    out.print(explained["why"], style="bold", markup=False)
    decision = explained["decision"]
    nodes: Sequence[dict[str, Any]] = explained["nodes"]
    if decision is not None and nodes:
        strategy = decision["strategy"] or "?"
        out.print(
            f"extender answer ({explained['extender']}) at {_when(decision['at_s'])}, "
            f"{decision['mode']} mode, strategy {strategy}",
            markup=False,
        )
        by_layer = strategy != IMAGE_LOCALITY
        headers = (
            ("node", "held", "missing", "score 0-10", "")
            if by_layer
            else ("node", "matched (scaled)", "threshold", "score 0-10", "")
        )
        rows = [
            (
                escape(n["node"]),  # the extender's words: printed, never read as markup
                "?" if n["present_bytes"] is None else size(n["present_bytes"]),
                "?"
                if n["present_bytes"] is None
                else size(n["missing_bytes"] if by_layer else n["total_bytes"]),
                str(n["score"]),
                "chosen" if n["chosen"] else "",
            )
            for n in nodes
        ]
        width = table_width(out, output)
        out.print(table(f"nodes scored for {explained['pod']}", headers, rows, width, drop=(2, 1)))
        if any(n["present_bytes"] is None for n in nodes):
            out.print("(this extender reports scores only: upgrade it for held/missing bytes)")
    for note in explained["notes"]:
        out.print(f" - {note}", markup=False)  # notes quote the extender's and kubectl's words
