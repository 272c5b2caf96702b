"""The service shell every layersched server runs in: probes, metrics, TLS, listening, signals.

The extender, the admission webhook, the relay and the agent each bring their own routes
and checks; this package gives them the rest, once (kube-scheduler's
``newHealthEndpointsAndMetricsHandler`` is the model: one function installs the health
and metrics handlers, each component adds only its checks):

* :func:`add_health_routes`, :func:`json_response`, :func:`decode_json`: the HTTP side
  every server shares (:mod:`._http`);
* :class:`ReloadingTls`: a server TLS context whose certificate can be re-read when its
  files change (:mod:`._tls`);
* :func:`serve`: bind every :class:`Listener`, serve until SIGTERM/SIGINT, then stop
  taking connections and give requests in flight a grace period (:mod:`._shell`).
"""

from layersched.serving._http import (
    HEALTHZ_PATH,
    HTTP_BAD_REQUEST,
    HTTP_CLIENT_CLOSED,
    HTTP_FORBIDDEN,
    HTTP_NOT_FOUND,
    HTTP_OK,
    HTTP_REQUEST_TIMEOUT,
    HTTP_SERVER_ERROR,
    HTTP_TOO_LARGE,
    HTTP_UNAUTHORIZED,
    HTTP_UNAVAILABLE,
    LIVEZ_PATH,
    METRICS_PATH,
    READYZ_PATH,
    Check,
    ServingError,
    add_health_routes,
    always_ok,
    decode_json,
    json_response,
)
from layersched.serving._shell import SHUTDOWN_GRACE_S, Listener, Serving, bind, serve
from layersched.serving._tls import TLS_RELOAD_PERIOD_S, ReloadingTls

__all__ = [
    "HEALTHZ_PATH",
    "HTTP_BAD_REQUEST",
    "HTTP_CLIENT_CLOSED",
    "HTTP_FORBIDDEN",
    "HTTP_NOT_FOUND",
    "HTTP_OK",
    "HTTP_REQUEST_TIMEOUT",
    "HTTP_SERVER_ERROR",
    "HTTP_TOO_LARGE",
    "HTTP_UNAUTHORIZED",
    "HTTP_UNAVAILABLE",
    "LIVEZ_PATH",
    "METRICS_PATH",
    "READYZ_PATH",
    "SHUTDOWN_GRACE_S",
    "TLS_RELOAD_PERIOD_S",
    "Check",
    "Listener",
    "ReloadingTls",
    "Serving",
    "ServingError",
    "add_health_routes",
    "always_ok",
    "bind",
    "decode_json",
    "json_response",
    "serve",
]
