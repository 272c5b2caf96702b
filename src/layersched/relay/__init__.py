"""CRI relay: a gRPC proxy between the kubelet and its container runtime.

``layersched relay`` listens on a unix socket and forwards every
RuntimeService/ImageService call, of CRI ``runtime.v1alpha2`` or ``runtime.v1``
or any method it does not know, to the runtime's socket as raw bytes, with the
caller's deadline and cancellation, and the runtime's own status codes back.
On the way it can

* dump the calls it is told to (selectors like seed 002's ``reset,full:.*``,
  with globs: ``reset,full:*``) to a rotated JSON-lines file of mode 0600,
  credentials redacted, calls that carry secrets in full only with
  ``--allow-sensitive-dumps``, and never failing a call it cannot dump,
* time every ``PullImage`` (Prometheus histogram and counter, optional log line),
* add the Ryax-patched CRI-O's ``imageLayer.<digest>`` annotations to
  ``ListImages``/``ImageStatus`` answers from a layer source (off by default),

and take those settings, live, from layered ConfigMaps (node, group, default).

See ``docs/relay.md``.
"""

from layersched.relay._annotate import (
    Annotator,
    ContentStoreLayers,
    ImageLayers,
    LayersByName,
    layer_annotations,
)
from layersched.relay._config import (
    DEFAULT_CONFIG_INTERVAL_S,
    DEFAULT_CONFIG_NAMESPACE,
    GROUP_LABEL,
    Capabilities,
    ConfigPoller,
    KubeConfigSource,
    LayeredConfig,
    LiveSettings,
    RelayResources,
    config_map_names,
    options_for,
    parse_settings,
    warn_held_back,
)
from layersched.relay._dump import (
    DEFAULT_DUMP_BACKUPS,
    DEFAULT_DUMP_MAX_BYTES,
    DEFAULT_DUMP_MESSAGE_MAX_BYTES,
    Dumper,
    DumpFile,
    DumpLevel,
    DumpSelector,
    parse_selectors,
)
from layersched.relay._methods import CRI_PACKAGES, KNOWN_METHODS, Method, parse_method
from layersched.relay._metrics import RelayMetrics
from layersched.relay._redact import REDACTED, SENSITIVE_METHODS, is_sensitive, redact
from layersched.relay._server import Relay, RelayOptions, serve

__all__ = [
    "CRI_PACKAGES",
    "DEFAULT_CONFIG_INTERVAL_S",
    "DEFAULT_CONFIG_NAMESPACE",
    "DEFAULT_DUMP_BACKUPS",
    "DEFAULT_DUMP_MAX_BYTES",
    "DEFAULT_DUMP_MESSAGE_MAX_BYTES",
    "GROUP_LABEL",
    "KNOWN_METHODS",
    "REDACTED",
    "SENSITIVE_METHODS",
    "Annotator",
    "Capabilities",
    "ConfigPoller",
    "ContentStoreLayers",
    "DumpFile",
    "DumpLevel",
    "DumpSelector",
    "Dumper",
    "ImageLayers",
    "KubeConfigSource",
    "LayeredConfig",
    "LayersByName",
    "LiveSettings",
    "Method",
    "Relay",
    "RelayMetrics",
    "RelayOptions",
    "RelayResources",
    "config_map_names",
    "is_sensitive",
    "layer_annotations",
    "options_for",
    "parse_method",
    "parse_selectors",
    "parse_settings",
    "redact",
    "serve",
    "warn_held_back",
]
