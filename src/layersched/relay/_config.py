"""Layered relay configuration from ConfigMaps (seeds 002 and 003), applied without a restart.

A relay started with ``--config-from-configmaps`` looks, in its namespace, for

1. ``layersched-config.node.<NODE>``,
2. ``layersched-config.group.<GROUP>`` when its Node is labelled
   ``layersched.io/group=<GROUP>``,
3. ``layersched-config.default``,

and uses **the first that exists, whole** (levels replace each other, as in seed 002:
nothing is merged across levels). A key the chosen ConfigMap does not set takes the
value of the relay's command-line flag, which is also the whole configuration when no
ConfigMap exists. Keys (all strings, as ConfigMap data is):

``dump``
    dump selectors (``reset,name:*,full:PullImage``: method names or globs, not
    regular expressions; empty = no dump); needs the relay started with
    ``--dump-file``. It can only ask for what the relay's flags allow: calls
    that carry secrets (PullImage, CreateContainer, …) are dumped in full only
    if the relay was started with ``--allow-sensitive-dumps``, else at
    ``name`` level, with a warning in the relay's log;
``logPulls``
    ``true``/``false``: the per-pull log line;
``injectLayers``
    ``true``/``false``: ``imageLayer.*`` annotations; needs the relay started with a
    layer source.

A ConfigMap with an unknown key or a bad value is rejected whole: a warning names the
ConfigMap and the key (and a Kubernetes Event of reason ``InvalidConfig`` is recorded
on the ConfigMap), and the last good configuration stays in force.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from layersched.core.errors import InputError, KubeError
from layersched.relay._annotate import Annotator
from layersched.relay._dump import (
    DEFAULT_DUMP_MESSAGE_MAX_BYTES,
    Dumper,
    DumpFile,
    DumpSelector,
    parse_selectors,
)
from layersched.relay._server import RelayOptions

_log = logging.getLogger(__name__)

CONFIG_PREFIX = "layersched-config"
GROUP_LABEL = "layersched.io/group"
#: How often the ConfigMaps and the Node's group label are read again.
DEFAULT_CONFIG_INTERVAL_S = 10.0
#: seed 002's agent reads its ConfigMaps from kube-system.
DEFAULT_CONFIG_NAMESPACE = "kube-system"
KEY_DUMP = "dump"
KEY_LOG_PULLS = "logPulls"
KEY_INJECT_LAYERS = "injectLayers"
KEYS = (KEY_DUMP, KEY_LOG_PULLS, KEY_INJECT_LAYERS)
_BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True, slots=True)
class LiveSettings:
    """The relay settings a ConfigMap can change while it runs."""

    dump: DumpSelector
    log_pulls: bool
    inject_layers: bool
    #: Where they came from: ``flags`` or ``ConfigMap NS/NAME@RESOURCEVERSION``.
    origin: str = "flags"


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the relay was started with, which some settings need."""

    dump_file: bool
    layer_source: bool
    #: ``--allow-sensitive-dumps``: full dumps of calls that carry secrets.
    sensitive_dumps: bool = False


def warn_held_back(settings: LiveSettings, can: Capabilities) -> None:
    """Log the full dumps ``settings`` ask for that the start-up flags do not allow."""
    held_back = [] if can.sensitive_dumps else settings.dump.held_back()
    if held_back:
        _log.warning(
            "dump selectors from %s ask for full dumps of %s, which carry secrets: the relay "
            "was started without --allow-sensitive-dumps, so those calls (and calls of methods "
            "it does not know) are dumped at level name; a ConfigMap cannot change that, only "
            "restarting the relay with --allow-sensitive-dumps can",
            settings.origin,
            ", ".join(held_back),
        )


def config_map_names(node: str, group: str | None) -> list[str]:
    """The ConfigMaps to look for, most specific first."""
    names = [f"{CONFIG_PREFIX}.node.{node}"]
    if group:
        names.append(f"{CONFIG_PREFIX}.group.{group}")
    names.append(f"{CONFIG_PREFIX}.default")
    return names


def _boolean(where: str, value: str) -> bool:
    found = _BOOLEANS.get(value.strip().lower())
    if found is None:
        raise InputError(f"{where}: {value!r} is not true or false")
    return found


def parse_settings(
    config_map: Mapping[str, Any], fallback: LiveSettings, can: Capabilities
) -> LiveSettings:
    """The settings of one ConfigMap object; InputError naming the ConfigMap and key."""
    meta = config_map.get("metadata") or {}
    name = f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
    data = config_map.get("data") or {}
    if not isinstance(data, Mapping):
        raise InputError(f"ConfigMap {name}: data is not a map of strings")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise InputError(
            f"ConfigMap {name} key {unknown[0]!r}: unknown (known keys: {', '.join(KEYS)})"
        )
    dump, log_pulls, inject = fallback.dump, fallback.log_pulls, fallback.inject_layers
    if KEY_DUMP in data:
        where = f"ConfigMap {name} key {KEY_DUMP!r}"
        dump = parse_selectors(str(data[KEY_DUMP]), where)
        if dump.enabled and not can.dump_file:
            raise InputError(f"{where}: dumping needs the relay started with --dump-file")
    if KEY_LOG_PULLS in data:
        log_pulls = _boolean(f"ConfigMap {name} key {KEY_LOG_PULLS!r}", str(data[KEY_LOG_PULLS]))
    if KEY_INJECT_LAYERS in data:
        where = f"ConfigMap {name} key {KEY_INJECT_LAYERS!r}"
        inject = _boolean(where, str(data[KEY_INJECT_LAYERS]))
        if inject and not can.layer_source:
            raise InputError(
                f"{where}: injection needs the relay started with a layer source "
                "(--inject-layers-from-containerd)"
            )
    version = meta.get("resourceVersion", "?")
    return LiveSettings(dump, log_pulls, inject, origin=f"ConfigMap {name}@{version}")


class ConfigSource(Protocol):
    """Reads the Kubernetes objects the layered configuration needs."""

    def node_labels(self, node: str) -> Mapping[str, str]:
        """The Node's labels (raises KubeError)."""
        ...

    def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The ConfigMap, or None when it does not exist (raises KubeError)."""
        ...

    def warn(self, config_map: Mapping[str, Any], message: str) -> None:
        """Record a Warning event about ``config_map`` (best effort)."""
        ...


class KubeConfigSource:
    """:class:`ConfigSource` over :class:`layersched.kube.KubeClient`."""

    def __init__(self, client: Any, reporter: str) -> None:
        self.client = client
        self.reporter = reporter

    def node_labels(self, node: str) -> Mapping[str, str]:
        document = self.client.get(f"/api/v1/nodes/{node}")
        labels = (document.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            document: Mapping[str, Any] = self.client.get(
                f"/api/v1/namespaces/{namespace}/configmaps/{name}"
            )
        except KubeError as err:
            if err.status == 404:
                return None
            raise
        return document

    def warn(self, config_map: Mapping[str, Any], message: str) -> None:
        meta = config_map.get("metadata") or {}
        namespace = str(meta.get("namespace", DEFAULT_CONFIG_NAMESPACE))
        now = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'layersched-config')}."},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "namespace": namespace,
                "name": meta.get("name"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": "InvalidConfig",
            "message": message,
            "type": "Warning",
            "source": {"component": "layersched-relay", "host": self.reporter},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.client.create(f"/api/v1/namespaces/{namespace}/events", event)
        except KubeError as err:
            _log.warning("recording the InvalidConfig event: %s", err)


class LayeredConfig:
    """Chooses and parses the node's ConfigMap; keeps the last good settings."""

    def __init__(
        self,
        source: ConfigSource,
        node: str,
        namespace: str,
        fallback: LiveSettings,
        can: Capabilities,
        apply: Callable[[LiveSettings], None],
    ) -> None:
        self.source = source
        self.node = node
        self.namespace = namespace
        self.fallback = fallback
        self.can = can
        self.apply = apply
        self.current = fallback
        self._rejected: set[str] = set()

    def refresh(self) -> LiveSettings:
        """Read the objects once and apply what they say (if it changed and is valid).

        Raises KubeError when the API cannot be read (the settings stay as they are).
        """
        group = self.source.node_labels(self.node).get(GROUP_LABEL)
        chosen = None
        for name in config_map_names(self.node, group):
            chosen = self.source.config_map(self.namespace, name)
            if chosen is not None:
                break
        if chosen is None:
            wanted = self.fallback
        else:
            try:
                wanted = parse_settings(chosen, self.fallback, self.can)
            except InputError as err:
                key = f"{(chosen.get('metadata') or {}).get('name')}@" + str(
                    (chosen.get("metadata") or {}).get("resourceVersion")
                )
                if key not in self._rejected:
                    self._rejected.add(key)
                    message = f"{err}: keeping the last good config ({self.current.origin})"
                    _log.warning("%s", message)
                    self.source.warn(chosen, message)
                return self.current
        if wanted != self.current:
            self.current = wanted
            self.apply(wanted)
            _log.warning(
                "relay config from %s: dump=%r logPulls=%s injectLayers=%s",
                wanted.origin,
                wanted.dump.text,
                wanted.log_pulls,
                wanted.inject_layers,
            )
            warn_held_back(wanted, self.can)
        return self.current


class ConfigPoller:
    """Calls :meth:`LayeredConfig.refresh` every ``interval_s`` on a daemon thread."""

    def __init__(self, config: LayeredConfig, interval_s: float = DEFAULT_CONFIG_INTERVAL_S):
        self.config = config
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay-config", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            try:
                self.config.refresh()
            except KubeError as err:
                _log.warning("reading the relay's ConfigMaps: %s (settings unchanged)", err)
            if self._stop.wait(self.interval_s):
                return


@dataclass(frozen=True, slots=True)
class RelayResources:
    """What the settings switch on and off: opened once, when the relay starts."""

    dump_file: DumpFile | None
    annotator: Annotator | None
    node_name: str = ""
    dump_message_max_bytes: int = DEFAULT_DUMP_MESSAGE_MAX_BYTES
    #: ``--allow-sensitive-dumps``: no setting can turn this on.
    allow_sensitive_dumps: bool = False

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            self.dump_file is not None, self.annotator is not None, self.allow_sensitive_dumps
        )


def options_for(settings: LiveSettings, resources: RelayResources) -> RelayOptions:
    """The relay options that put ``settings`` in force."""
    dumper = None
    if settings.dump.enabled and resources.dump_file is not None:
        dumper = Dumper(
            settings.dump,
            resources.dump_file,
            resources.dump_message_max_bytes,
            allow_sensitive=resources.allow_sensitive_dumps,
        )
    return RelayOptions(
        dumper=dumper,
        annotator=resources.annotator if settings.inject_layers else None,
        log_pulls=settings.log_pulls,
        node_name=resources.node_name,
    )
