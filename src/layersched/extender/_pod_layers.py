"""A pod's layers in each node platform, the first half of a prioritize (the Go plugin's
``Index.ResolvePod``): what the held inventory's nodes agree on, else the registry within
the deadline."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Mapping, Sequence

from layersched.core.errors import InputError
from layersched.core.layers import Layer
from layersched.core.nodeimages import prefixed_name
from layersched.core.reference import ImageName, ImageReference
from layersched.core.votes import PINNED_CACHE_SIZE, pinned
from layersched.extender._metrics import ExtenderMetrics
from layersched.extender._platforms import Platforms
from layersched.extender._providers import LayerIndexProvider
from layersched.extender._pull_secrets import PullSecrets
from layersched.extender._resolver import DeadlineResolver
from layersched.registry import PullCredential


@functools.lru_cache(maxsize=PINNED_CACHE_SIZE)
def registry_of(image: ImageName) -> str | None:
    """The registry ``image`` is pulled from, as pull secrets name it (None: no
    reference): remembered like :func:`pinned`, bounded alike."""
    try:
        return ImageReference.parse(image).domain
    except InputError:
        return None


class PodLayers:
    """A :class:`DeadlineResolver` per platform (the default's given, the others' made on
    first use from it, each over its platform's layer source), and a pod's layers
    through them; also the status images of nodes without an agent, for the watch's
    warm-up (a :class:`~layersched.extender.watch._warmup.StatusImages`: the same resolvers,
    cache and TTLs)."""

    def __init__(
        self,
        resolver: DeadlineResolver,
        provider: LayerIndexProvider,
        metrics: ExtenderMetrics,
        platforms: Platforms | None,
        pull_secrets: PullSecrets | None = None,
    ) -> None:
        self.provider = provider
        #: Pods' pull secrets and a resolver per credential (``--pull-secrets``), or None.
        self.pull_secrets = pull_secrets
        self.metrics = metrics
        self.platforms = platforms
        #: The default platform's key ("" when every node is scored in one platform).
        self.default_key = platforms.default_key if platforms is not None else ""
        self._resolvers: dict[str, DeadlineResolver] = {self.default_key: resolver}
        # the loop and the warm-up's worker both make resolvers
        self._lock = threading.Lock()

    def resolver(self, key: str) -> DeadlineResolver:
        """The resolver of platform ``key`` (made on first use, like the first's); the
        default's for a platform without a source of its own (dropped meanwhile)."""
        resolver = self._resolvers.get(key)
        if resolver is None:
            with self._lock:
                resolver = self._resolvers.get(key)
                if resolver is None:
                    default = self._resolvers[self.default_key]
                    if self.platforms is None or key not in self.platforms.active():
                        return default
                    resolver = default.sibling(self.platforms.source(key))
                    self._resolvers[key] = resolver
        return resolver

    def sweep(self) -> None:
        """Drop the resolvers (their workers, their cached answers) of the platforms no
        longer reported by two nodes (issue 44: a platform's slot is never held for
        good)."""
        if self.platforms is None:
            return
        for key in self.platforms.dropped():
            with self._lock:
                resolver = self._resolvers.pop(key, None)
            if resolver is not None:
                resolver.close(forget=True)

    def _status_resolver(self, key: str) -> DeadlineResolver:
        return self.resolver(key if self.platforms is not None else self.default_key)

    def status_layers(self, key: str, names: Sequence[ImageName]) -> tuple[Layer, ...] | None:
        """On the loop: a status image's layers in platform ``key``, as its own names
        resolved (the cache only)."""
        return self._status_resolver(key).cached_names(names)

    def resolve_status(
        self, key: str, names: Sequence[ImageName]
    ) -> tuple[tuple[Layer, ...] | None, float | None]:
        """On the warm-up's worker: a status image's layers in platform ``key``, its names
        resolved each for itself, and when to look again."""
        return self._status_resolver(key).resolve_names_now(names)

    async def resolve(
        self,
        key: str,
        images: Sequence[ImageName],
        from_inventory: bool,
        credentials: Mapping[str, PullCredential] | None = None,
    ) -> dict[ImageName, tuple[Layer, ...]] | None:
        """The pod's layers for platform ``key``: from the held inventory first (an image
        some node's agent published needs no registry call), else the resolver; an image
        of a registry the pod's pull secrets name (``credentials``, by registry) through
        that credential's own resolver, never the extender's."""
        if from_inventory:
            lookup = self.provider.image_layers
            known = {image: self._checked(key, image, lookup(image, key)) for image in images}
            if all(layers is not None for layers in known.values()):
                self.metrics.pod_images_from_inventory.inc(len(known))
                return {image: layers for image, layers in known.items() if layers is not None}
        if not credentials or self.pull_secrets is None:
            return await self.resolver(key).resolve_pod(images)
        groups: dict[int, tuple[DeadlineResolver, list[ImageName]]] = {}
        for image in dict.fromkeys(images):
            credential = credentials.get(registry_of(image) or "")
            resolver = (
                self.pull_secrets.resolver(credential, key)
                if credential is not None
                else self.resolver(key)
            )
            groups.setdefault(id(resolver), (resolver, []))[1].append(image)
        answers = await asyncio.gather(
            *(resolver.resolve_pod(names) for resolver, names in groups.values())
        )
        found: dict[ImageName, tuple[Layer, ...]] = {}
        for answer in answers:
            if answer is None:
                return None
            found.update(answer)
        return found

    def _checked(
        self, key: str, image: ImageName, agreed: tuple[Layer, ...] | None
    ) -> tuple[Layer, ...] | None:
        """A digest-pinned pod image's layers as the nodes agree on them, checked against
        the layer source (the registry) once: its answer when it has one (kept for good: a
        digest names its content), the nodes' meanwhile (the source is asked in the
        background, never awaited). Issue 30: agreeing liars are outvoted by the registry;
        issue 44: the nodes' answer for a pinned image comes with no dissenting publisher
        (:meth:`~layersched.core.votes.ImageVotes.layers`), else the registry is
        awaited like any unknown image's."""
        if agreed is None or not pinned(image):
            return agreed
        registry = self.resolver(key).known_layers(image)
        if registry is None:
            return agreed
        if registry != agreed:
            self.metrics.pod_images_disputed.inc()
        return registry

    def changed(self) -> set[ImageName]:
        """Revalidate tags past their TTL in the background, in every platform; the names
        whose layers changed since the last call (another platform's prefixed with its
        key, as its nodes' image names are in a snapshot)."""
        changed: set[ImageName] = set()
        for platform, resolver in list(self._resolvers.items()):
            resolver.revalidate_due()
            names = resolver.changed()
            if platform != self.default_key:
                names = {prefixed_name(platform, name) for name in names}
            changed |= names
        return changed

    def cached_bytes(self) -> int:
        """Bytes every platform's layer cache (and the registries refused) hold: their one
        budget's."""
        return self._resolvers[self.default_key].cache.budget.held_bytes

    def close(self) -> None:
        """Stop every resolver's workers (every credential's too)."""
        for resolver in self._resolvers.values():
            resolver.close()
        if self.pull_secrets is not None:
            self.pull_secrets.close()
