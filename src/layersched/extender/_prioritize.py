"""The prioritize and filter verbs, independent of the HTTP server around them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

import msgspec
import numpy as np

from layersched.core.errors import InputError
from layersched.core.indexstorage import IndexArray
from layersched.core.layerindex import LayerIndex
from layersched.core.layers import Layer
from layersched.core.objects import Pod, pod_images, pod_name
from layersched.core.pod import PodImages
from layersched.core.reference import ImageName
from layersched.core.strategies import NodeScores, PlatformGroup, Strategy, pod_layers
from layersched.core.strategies.base import MAX_NODE_SCORE
from layersched.core.strategies.in_flight import InFlight
from layersched.extender._decisions import Decisions, Held, held_bytes
from layersched.extender._metrics import ExtenderMetrics
from layersched.extender._platforms import Platforms
from layersched.extender._pod_layers import PodLayers
from layersched.extender._providers import LayerIndexProvider
from layersched.extender._pull_secrets import PullSecrets, pull_secret_names
from layersched.extender._request_indexes import LogOnce, RequestIndexes
from layersched.extender._resolver import DeadlineResolver
from layersched.extender._wire import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderFilterResult,
    FilterArgs,
    HostPriority,
    NamesOnlyArgs,
    NodeNamesList,
)
from layersched.extender.watch._pending import PendingPods
from layersched.registry import PullCredential

log = logging.getLogger("layersched.extender")
#: The pod's bytes a decision records saturate here (only an explanation: a hostile size
#: past int64 was scored in units, ``core.strategies.base.overflow_shift``).
_INT64_MAX = int(np.iinfo(np.int64).max)

#: Framework scores (0..100) become extender scores (0..10) by integer division.
SCORE_DIVISOR = MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY
#: Unknown node names are logged once each; the least recently seen past this many
#: are forgotten (and logged again if they come back).
MAX_LOGGED_UNKNOWN_NODES = 10_000


#: A request's nodes: names, the index (None for full Nodes, until the pod resolves),
#: platform keys (None: all the default), positions in the index, names it lacks.
_Nodes = tuple[list[str], LayerIndex | None, Sequence[str] | None, IndexArray, list[str]]

#: What a prioritize request without a pod is told.
_NO_POD = "Pod is missing: a prioritize request is ExtenderArgs {Pod, Nodes|NodeNames}"


class Extender:
    """Answers prioritize/filter for one strategy; shared by every request."""

    def __init__(
        self,
        strategy: Strategy,
        resolver: DeadlineResolver,
        provider: LayerIndexProvider,
        metrics: ExtenderMetrics,
        platforms: Platforms | None = None,
        pull_secrets: PullSecrets | None = None,
    ) -> None:
        self.strategy = strategy
        self.provider = provider
        self.metrics = metrics
        #: Per-platform layer sources; None: every node is scored in the default platform.
        self.platforms = (
            platforms
            if platforms is not None and platforms.enabled and strategy.needs_layers
            else None
        )
        #: The pod's layers in each platform, and the resolvers behind them (which also
        #: resolve the status images of nodes without an agent, for a watching provider).
        self.pod_layers = PodLayers(resolver, provider, metrics, self.platforms, pull_secrets)
        provider.use_resolvers(self.pod_layers)
        #: What was answered for recent pods (``/debug/decisions``).
        self.decisions = Decisions()
        self._logged_unknown = LogOnce(MAX_LOGGED_UNKNOWN_NODES)
        self._request_indexes = RequestIndexes(strategy.needs_layers, self.pod_layers, metrics)
        self._indices_memo: tuple[LayerIndex, list[str], IndexArray, list[str], int] | None = None
        self._groups_memo: tuple[IndexArray, Sequence[str], dict[str, IndexArray] | None] | None = (
            None
        )
        #: The pods bound to nodes whose pulls in-flight scoring counts (None: another
        #: strategy, or a provider that cannot watch pods).
        self.pending_pods: PendingPods | None = None
        if isinstance(strategy, InFlight):
            self._track_pending(strategy)

    def _track_pending(self, strategy: InFlight) -> None:
        """Have the provider keep ``strategy``'s pending pulls current, each node's
        backlog summed when its pods or layers change (never in a request)."""

        def changed(node: str) -> None:
            inventory = self.provider.current()
            if inventory is not None:
                strategy.refresh_node(node, inventory)

        pods = PendingPods(strategy.pending, self._pending_layers, changed)
        if self.provider.track_pending(pods):
            self.pending_pods = pods
            self.metrics.registry.register(pods)
            return
        log.warning(
            "--strategy in-flight without --watch sees no pod bound to a node: no pull is "
            "known to be in flight, and nodes are scored by their held bytes and links "
            "alone (as pull-time, with the weight on the pod's own bytes); pass --watch"
        )

    def _pending_layers(
        self, node: str, images: Sequence[ImageName]
    ) -> tuple[tuple[Layer, ...], bool]:
        """A pending pod's distinct layers on ``node`` (its platform's), from what the
        nodes agree on, else the layer cache (an image not cached is resolved in the
        background, never waited for), and whether every image's were known."""
        key = self.pod_layers.default_key
        keys = self.provider.platform_keys if self.platforms is not None else None
        inventory = self.provider.current()
        idx = inventory.index_of(node) if inventory is not None and keys is not None else None
        if keys is not None and idx is not None:
            key = keys[idx]
        found: dict[ImageName, tuple[Layer, ...]] = {}
        for image in images:
            layers = self.provider.image_layers(image, key)
            if layers is None:
                layers = self.pod_layers.resolver(key).known_layers(image)
            if layers is not None:
                found[image] = layers
        complete = len(found) == len(set(images))
        return pod_layers(images, lambda image: found.get(image, ())), complete

    @property
    def resolver(self) -> DeadlineResolver:
        """The default platform's resolver (held by :attr:`pod_layers`)."""
        return self.pod_layers.resolver(self.pod_layers.default_key)

    def cached_bytes(self) -> int:
        """Estimated bytes the resolvers' layer caches hold."""
        return self.pod_layers.cached_bytes()

    def close(self) -> None:
        """Stop every resolver's workers."""
        self.pod_layers.close()

    # ------------------------------------------------------------- prioritize
    async def prioritize(self, args: ExtenderArgs) -> msgspec.Raw:
        """Scores 0..10 for every requested node, in request order (recorded for
        ``/debug/decisions``): a JSON array of ``{Host, Score}``, encoded."""
        answer, neutral, held = await self._prioritize(args)
        assert args.Pod is not None  # _prioritize refused a request without one
        mode = "Nodes" if args.Nodes is not None else "NodeNames"
        return self.decisions.record(args.Pod.metadata, mode, answer, neutral, held)

    async def _prioritize(self, args: ExtenderArgs) -> tuple[list[HostPriority], str, Held | None]:
        """The answer, why it is all zeros ("" when it was scored), and what explains it."""
        if args.Pod is None:
            raise InputError(_NO_POD)
        pod = pod_images(args.Pod, f"pod {pod_name(args.Pod.metadata)!r}")
        nodes = self._nodes(args)
        if self.platforms is not None:
            self.pod_layers.sweep()  # platforms no longer reported by two nodes
        if nodes is None:
            assert args.NodeNames is not None
            return self._neutral(args.NodeNames, "not_ready", pod), "not_ready", None
        names, inventory, node_keys, candidates, missing = nodes
        groups = self._platform_groups(node_keys, candidates)
        credentials = await self._pull_credentials(args.Pod)
        if credentials is None:
            return self._neutral(names, "pod_unresolved", pod), "pod_unresolved", None
        layers = await self._layers(pod, groups, args.Nodes is None, credentials)
        if layers is None:
            return self._neutral(names, "pod_unresolved", pod), "pod_unresolved", None
        if inventory is None:
            assert args.Nodes is not None
            inventory = self._request_indexes.build(args.Nodes.items or [], node_keys)
        result, parts, totals = self._score(pod, layers, inventory, candidates, groups)
        if missing:
            self._note_unknown(missing)
        if log.isEnabledFor(logging.DEBUG):
            for part in parts:
                self._log_decision(pod, inventory, part)
        answer = _answer(names, inventory, result, bool(missing))
        return answer, "", held_bytes(self.strategy.name, names, inventory, result, totals, missing)

    def _nodes(self, args: ExtenderArgs) -> _Nodes | None:
        """The request's nodes: their names, the index to score them in (None for full
        Nodes: built once the pod resolves), their platform keys (None: all the default),
        their positions in the index and the names it lacks. None: no inventory yet."""
        if args.Nodes is not None:
            items = args.Nodes.items or []
            node_keys = None
            if self.platforms is not None:
                # each node's own platform when two of the request's nodes report it
                key = self.platforms.key
                node_keys = self.platforms.effective_keys([key(node) for node in items])
            names = [node.metadata.name for node in items]
            return names, None, node_keys, np.arange(len(names), dtype=np.int64), []
        if args.NodeNames is None:
            raise InputError("neither Nodes nor NodeNames is set: send one of them")
        inventory = self.provider.current()
        if inventory is None:
            return None
        node_keys = self.provider.platform_keys if self.platforms is not None else None
        candidates, missing = self._indices(inventory, args.NodeNames)
        return args.NodeNames, inventory, node_keys, candidates, missing

    async def _pull_credentials(self, pod: Pod) -> dict[str, PullCredential] | None:
        """The credentials of the pod's pull secrets by registry (empty: it names none, or
        the extender reads none: no ``--pull-secrets``, a strategy without layers); None
        when they were not read in time."""
        pull_secrets = self.pod_layers.pull_secrets
        if pull_secrets is None or not self.strategy.needs_layers:
            return {}
        names = pull_secret_names(pod)
        if not names or not pod.metadata.namespace:
            return {}
        return await pull_secrets.credentials(pod.metadata.namespace, names)

    async def _layers(
        self,
        pod: PodImages,
        groups: dict[str, IndexArray] | None,
        from_inventory: bool,
        credentials: Mapping[str, PullCredential] | None = None,
    ) -> dict[str, tuple[Layer, ...]] | None:
        """The pod's layers in each platform of ``groups`` (the default's alone when None),
        resolved once per platform (a private image with its pull secret's
        ``credentials``); None if they are not known in time. Empty for a strategy that
        needs no layers."""
        layers: dict[str, tuple[Layer, ...]] = {}
        if not self.strategy.needs_layers:
            return layers
        keys = list(groups) if groups is not None else [self.pod_layers.default_key]
        answers = await asyncio.gather(
            *(self.pod_layers.resolve(key, pod.pulled, from_inventory, credentials) for key in keys)
        )
        for key, resolved in zip(keys, answers, strict=True):
            if resolved is None:
                return None
            layers[key] = pod_layers(pod.pulled, resolved.__getitem__)
        return layers

    def _score(
        self,
        pod: PodImages,
        layers: dict[str, tuple[Layer, ...]],
        index: LayerIndex,
        candidates: IndexArray,
        groups: dict[str, IndexArray] | None,
    ) -> tuple[NodeScores, list[NodeScores], IndexArray]:
        """The strategy's scores of ``candidates`` (once per platform group), its parts (one
        per group), and per candidate the pod's bytes in its platform."""
        totals = np.full(len(candidates), 0, dtype=np.int64)
        if groups is None:
            result = self.strategy.score(pod, next(iter(layers.values()), ()), index, candidates)
            totals[:] = min(result.total_bytes, _INT64_MAX)
            return result, [result], totals
        result, parts = self.strategy.score_groups(
            pod,
            [PlatformGroup(positions, layers[key]) for key, positions in groups.items()],
            index,
            candidates,
        )
        for positions, part in zip(groups.values(), parts, strict=True):
            totals[positions] = min(part.total_bytes, _INT64_MAX)
        return result, parts, totals

    def _platform_groups(
        self, node_keys: Sequence[str] | None, candidates: IndexArray
    ) -> dict[str, IndexArray] | None:
        """Positions in ``candidates`` by platform key; None when all are the default."""
        if node_keys is None or self.platforms is None:
            return None
        memo = self._groups_memo  # NodeNames: the same candidates (memoised) pod after pod
        if memo is not None and memo[0] is candidates and memo[1] is node_keys:
            return memo[2]
        groups = self._group(node_keys, candidates)
        self._groups_memo = (candidates, node_keys, groups)
        return groups

    def _group(
        self, node_keys: Sequence[str], candidates: IndexArray
    ) -> dict[str, IndexArray] | None:
        assert self.platforms is not None
        default = self.platforms.default_key
        keys = [node_keys[i] for i in candidates.tolist()]
        if all(key == default for key in keys):
            return None
        positions: dict[str, list[int]] = {}
        for position, key in enumerate(keys):
            positions.setdefault(key, []).append(position)
        return {key: np.asarray(p, dtype=np.int64) for key, p in positions.items()}

    def overloaded(self, args: NamesOnlyArgs) -> msgspec.Raw:
        """Neutral scores at once, for a request past the concurrency limit (no resolution,
        no scoring: the pod is placed by kube-scheduler's own plugins)."""
        if args.Pod is None:
            raise InputError(_NO_POD)
        if args.Nodes is not None:
            names = [node.metadata.name for node in args.Nodes.items or []]
        elif args.NodeNames is not None:
            names = args.NodeNames
        else:
            raise InputError("neither Nodes nor NodeNames is set: send one of them")
        meta = args.Pod.metadata
        answer = self._neutral_named(names, "overloaded", pod_name(meta))
        mode = "Nodes" if args.Nodes is not None else "NodeNames"
        return self.decisions.record(meta, mode, answer, "overloaded")

    def _indices(self, index: LayerIndex, names: list[str]) -> tuple[IndexArray, list[str]]:
        """``inventory.indices_of(names)``, remembered: kube-scheduler sends the same
        feasible-node list pod after pod, and comparing it costs a third of looking it up."""
        memo = self._indices_memo
        membership = index.membership  # a live inventory's indices move when nodes go
        if memo is not None and memo[0] is index and memo[4] == membership and memo[1] == names:
            return memo[2], memo[3]
        candidates, missing = index.indices_of(names)
        self._indices_memo = (index, names, candidates, missing, membership)
        return candidates, missing

    def _neutral(self, names: Sequence[str], reason: str, pod: PodImages) -> list[HostPriority]:
        return self._neutral_named(names, reason, pod.name)

    def _neutral_named(
        self, names: Sequence[str], reason: str, pod_name: str
    ) -> list[HostPriority]:
        self.metrics.neutral.labels(reason).inc()
        log.info("pod %s: neutral scores for %d nodes (%s)", pod_name, len(names), reason)
        return [HostPriority(name, 0) for name in names]

    def _note_unknown(self, missing: list[str]) -> None:
        self.metrics.unknown_nodes.inc(len(missing))
        for name in missing:
            if self._logged_unknown.first(name):
                log.warning("node %r is not in the held inventory: scoring it 0", name)

    def _log_decision(self, pod: PodImages, index: LayerIndex, result: NodeScores) -> None:
        lines = [
            f"  {index.nodes[int(i)].name}: present {int(p)} / total {result.total_bytes} "
            f"bytes -> {int(s)}/100 -> {int(s) // SCORE_DIVISOR}/10"
            for i, p, s in zip(result.nodes, result.present_bytes, result.scores, strict=True)
        ]
        log.debug("pod %s (%s):\n%s", pod.name, self.strategy.name, "\n".join(lines))

    # ----------------------------------------------------------------- filter
    def filter(self, args: FilterArgs) -> ExtenderFilterResult:
        """Every node passes: layer locality is a preference, never a requirement."""
        if bytes(args.Pod) == b"null":
            raise InputError(
                "Pod is missing: a filter request is ExtenderArgs {Pod, Nodes|NodeNames}"
            )
        if bytes(args.Nodes) == b"null":
            if args.NodeNames is None:
                raise InputError("neither Nodes nor NodeNames is set: send one of them")
        else:
            try:
                msgspec.json.decode(args.Nodes, type=NodeNamesList)  # a wrong shape is a 400
            except (RecursionError, UnicodeDecodeError) as err:
                raise InputError(f"Nodes: malformed JSON ({type(err).__name__})") from None
        return ExtenderFilterResult(
            Nodes=args.Nodes,
            NodeNames=args.NodeNames,
            FailedNodes={},
            FailedAndUnresolvableNodes={},
            Error="",
        )


def _answer(
    names: Sequence[str], index: LayerIndex, result: NodeScores, has_missing: bool
) -> list[HostPriority]:
    scores = (result.scores // SCORE_DIVISOR).tolist()
    if not has_missing:
        return [HostPriority(n, s) for n, s in zip(names, scores, strict=True)]
    by_index = dict(zip(result.nodes.tolist(), scores, strict=True))
    index_of = index.index_of
    answer = []
    for name in names:
        idx = index_of(name)
        answer.append(HostPriority(name, 0 if idx is None else by_index[idx]))
    return answer
