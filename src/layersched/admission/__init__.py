"""Per-node write authority on ``NodeLayerInventory``: a validating admission webhook.

An agent may create or update only its own node's object, only for a Node that exists,
and only owned by that Node (:func:`decide`, the rule; docs/inventory.md, the trust
model). Kubernetes before 1.30 cannot say this with a ValidatingAdmissionPolicy (the
API is GA from 1.30, and service-account tokens carry their node's name from 1.30), so
``layersched admission`` serves it as a webhook: it reads the agent pod that a bound
token names (:class:`ApiLookup`) and compares the pod's node with the object. From 1.30
``install/kustomize/`` installs the policy instead (:mod:`layersched.deploy`); this package is
then not deployed.
"""

from layersched.admission._lookup import (
    DEFAULT_MAX_NODES,
    DEFAULT_MAX_PODS,
    DEFAULT_NODE_TTL_S,
    ApiLookup,
    LookupStats,
)
from layersched.admission._metrics import AdmissionMetrics
from layersched.admission._review import (
    ADMISSION_API_VERSION,
    ADMISSION_KIND,
    AGENT_GROUP,
    AGENT_USER_PREFIX,
    CHECKED_OPERATIONS,
    NODE_NAME_KEY,
    NODE_UID_KEY,
    POD_NAME_KEY,
    POD_UID_KEY,
    SERVICE_ACCOUNT_PREFIX,
    AdmissionRequest,
    AdmissionReview,
    AgentIdentities,
    ClusterLookup,
    LookupFailed,
    Missing,
    Verdict,
    decide,
    response,
)
from layersched.admission._server import (
    BODY_TIMEOUT_S,
    CLIENT_COMMON_NAME,
    MAX_CONCURRENT_REVIEWS,
    MAX_REQUEST_BYTES,
    REVIEW_TIMEOUT_S,
    SHUTDOWN_GRACE_S,
    VALIDATE_PATH,
    create_app,
    serve,
)
from layersched.serving import LIVEZ_PATH, METRICS_PATH, READYZ_PATH

__all__ = [
    "ADMISSION_API_VERSION",
    "ADMISSION_KIND",
    "AGENT_GROUP",
    "AGENT_USER_PREFIX",
    "BODY_TIMEOUT_S",
    "CHECKED_OPERATIONS",
    "CLIENT_COMMON_NAME",
    "DEFAULT_MAX_NODES",
    "DEFAULT_MAX_PODS",
    "DEFAULT_NODE_TTL_S",
    "LIVEZ_PATH",
    "MAX_CONCURRENT_REVIEWS",
    "MAX_REQUEST_BYTES",
    "METRICS_PATH",
    "NODE_NAME_KEY",
    "NODE_UID_KEY",
    "POD_NAME_KEY",
    "POD_UID_KEY",
    "READYZ_PATH",
    "REVIEW_TIMEOUT_S",
    "SERVICE_ACCOUNT_PREFIX",
    "SHUTDOWN_GRACE_S",
    "VALIDATE_PATH",
    "AdmissionMetrics",
    "AdmissionRequest",
    "AdmissionReview",
    "AgentIdentities",
    "ApiLookup",
    "ClusterLookup",
    "LookupFailed",
    "LookupStats",
    "Missing",
    "Verdict",
    "create_app",
    "decide",
    "response",
    "serve",
]
