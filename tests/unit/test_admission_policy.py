"""The ValidatingAdmissionPolicy of Kubernetes 1.30+, as far as it can be checked without a
1.30 API server (none can run here: Debian builds no newer control plane).

* Its CEL, the very strings ``install/kustomize/`` renders, is compiled and evaluated by cel-cpp
  (PyPI ``cel-expr-python``, Google's CEL implementation; Kubernetes runs cel-go, and
  both pass CEL's conformance suite) against the AdmissionRequests of
  :mod:`tests.fixtures.admission`, the same table the webhook is held to, in the API
  server's order: the match condition, then every validation (a false one refuses with
  its message). ``request``, ``object`` and ``variables`` are maps here, typed objects
  there; the expressions use only what both have (``has()`` on a field, ``in`` on a
  map's keys, list ``size()``, string ``startsWith`` and ``+``).
* The objects are validated strictly against each minor's OpenAPI schema from 1.30 to
  1.36 (PyPI ``kubernetes-validate``): an unknown or misspelled field fails.

Never evaluated by a real 1.30 API server: its type checker (and its cost limits) are
not exercised here.
"""

from __future__ import annotations

from typing import Any

import pytest

from layersched.deploy import (
    StackSpec,
    admission_objects,
    policy_expressions,
    stack_spec_for,
    uses_policy,
)
from tests.fixtures import prereq
from tests.fixtures.admission import CASES, NAMESPACE, Case

POLICY_CASES = [c for c in CASES if c.policy is not None]
POLICY_MINORS = [f"1.{minor}" for minor in range(30, 37)]
WEBHOOK_MINORS_WITH_SCHEMAS = [f"1.{minor}" for minor in range(25, 30)]


def _cel() -> Any:
    try:
        from cel_expr_python import cel
    except ImportError as err:
        prereq.missing(f"cel-expr-python is needed to evaluate the policy's CEL ({err}): make venv")
    return cel


class Policy:
    """The policy's CEL compiled once, evaluated per request as the API server does."""

    def __init__(self, spec: StackSpec) -> None:
        cel = _cel()
        dyn_map = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
        self.env = cel.NewEnv(
            variables={"request": dyn_map, "object": dyn_map, "variables": dyn_map}
        )
        cel_parts = policy_expressions(spec)
        self.conditions = [self.env.compile(c["expression"]) for c in cel_parts["matchConditions"]]
        self.variables = [
            (v["name"], self.env.compile(v["expression"])) for v in cel_parts["variables"]
        ]
        self.validations = [
            (
                self.env.compile(v["expression"]),
                v.get("message"),
                self.env.compile(v["messageExpression"]) if "messageExpression" in v else None,
            )
            for v in cel_parts["validations"]
        ]

    def judge(self, request: dict[str, Any]) -> tuple[bool, list[str]]:
        """(allowed, the messages of the failed validations)."""
        data: dict[str, Any] = {"request": request, "object": request["object"], "variables": {}}
        if not all(c.eval(data=data).plain_value() is True for c in self.conditions):
            return True, []  # the policy does not apply to this requester
        for name, expression in self.variables:
            data["variables"][name] = expression.eval(data=data).plain_value()
        messages = []
        for expression, message, message_expression in self.validations:
            if expression.eval(data=data).plain_value() is not True:
                if message_expression is not None:
                    message = message_expression.eval(data=data).plain_value()
                messages.append(str(message))
        return not messages, messages


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(stack_spec_for("1.30"))


@pytest.mark.parametrize("case", POLICY_CASES, ids=[c.id for c in POLICY_CASES])
def test_the_policy_judges_each_write(policy: Policy, case: Case) -> None:
    # the worked reason of each case is its comment in tests/fixtures/admission.py
    allowed, messages = policy.judge(case.request())
    assert allowed is case.policy, messages


def test_the_policy_tells_n1s_agent_why(policy: Policy) -> None:
    [case] = [c for c in CASES if c.id == "sa-other-node"]
    allowed, messages = policy.judge(case.request())
    assert not allowed
    # the name is wrong, and so is the owner's uid (n2's object owned by n2, but the
    # token's node is n1): both validations say so
    assert messages == [
        "the layersched agent system:serviceaccount:layersched:layersched-agent on node n1 "
        "may write only its own node's NodeLayerInventory, not n2",
        "NodeLayerInventory n2 must have exactly one ownerReference, its Node (apiVersion v1, "
        "kind Node, name n2, uid node-uid-1), so that it is deleted with the Node",
    ]


def test_a_token_without_a_node_is_refused_with_the_fix(policy: Policy) -> None:
    [case] = [c for c in CASES if c.id == "sa-own-node-1.20-token"]
    allowed, messages = policy.judge(case.request())
    assert not allowed
    assert "ServiceAccountTokenPodNodeInfo" in messages[0]


def test_every_expression_type_checks_as_a_bool(policy: Policy) -> None:
    # cel-cpp's checker: each condition and validation is a boolean expression (a string
    # or a list there would be refused by the API server when the policy is created)
    cel = _cel()
    for expression in policy.conditions:
        assert expression.return_type() == cel.Type.BOOL
    for expression, _, message_expression in policy.validations:
        assert expression.return_type() == cel.Type.BOOL
        if message_expression is not None:
            assert message_expression.return_type() == cel.Type.STRING


def _validate(objects: list[dict[str, Any]], minor: str) -> None:
    try:
        import kubernetes_validate
    except ImportError as err:
        prereq.missing(f"kubernetes-validate is needed for the API schemas ({err}): make venv")
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, f"{minor}.0", strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} on {minor}: {err}")


@pytest.mark.parametrize("minor", POLICY_MINORS)
def test_the_policy_objects_match_each_minors_schema(minor: str) -> None:
    spec = stack_spec_for(minor)
    assert uses_policy(spec.kubernetes_version)
    objects = admission_objects(spec)
    assert [o["kind"] for o in objects] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    _validate(objects, minor)


@pytest.mark.parametrize("minor", WEBHOOK_MINORS_WITH_SCHEMAS)
def test_the_webhook_objects_match_each_minors_schema(minor: str) -> None:
    # before 1.30 the webhook (1.25-1.29 have schemas in kubernetes-validate)
    spec = stack_spec_for(minor)
    assert not uses_policy(spec.kubernetes_version)
    objects = admission_objects(spec)
    assert "ValidatingWebhookConfiguration" in [o["kind"] for o in objects]
    _validate(objects, minor)


def test_the_policy_names_the_installs_agent_account() -> None:
    # another namespace: the service account in the match condition follows it
    spec = stack_spec_for("1.31", namespace="edge")
    condition = policy_expressions(spec)["matchConditions"][0]["expression"]
    assert "'system:serviceaccount:edge:layersched-agent'" in condition
    assert f"system:serviceaccount:{NAMESPACE}:" not in condition
