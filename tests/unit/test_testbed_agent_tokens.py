"""The local testbed's node-bound agent tokens: what is asked of the API (a TokenRequest
bound to the Node), when a token is replaced (at 80 % of its life, as the kubelet does),
how it is written (atomically, 0600), and what a refused request does (the others are
still issued; the loop retries with back-off). The real API server issues them in
tests/e2e/test_local_scenario.py."""

from __future__ import annotations

import base64
import json
import stat
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from layersched.core.errors import InputError, KubeError
from layersched_harness.testbed.local._agent_tokens import (
    AgentTokens,
    NodeToken,
    parse_node_tokens,
    refresh_at,
    token_lifetime,
)

START = 1_800_000_000.0
HOUR_S = 3600


def jwt(issued: float, expires: float) -> str:
    """A token shaped as the API server's (only its claims matter here)."""

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part({'iat': issued, 'exp': expires})}.c2ln"


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


class TokenApi:
    """The TokenRequest endpoint: a token of the asked life, from the clock's now."""

    def __init__(self, clock: Clock, missing: frozenset[str] = frozenset()) -> None:
        self.clock = clock
        self.missing = missing
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def create(self, path: str, document: Mapping[str, Any]) -> dict[str, Any]:
        self.requests.append((path, json.loads(json.dumps(document))))
        node = document["spec"]["boundObjectRef"]["name"]
        if node in self.missing:
            raise KubeError(f"creating in {path}: 404 nodes {node!r} not found", 404)
        life_s = document["spec"]["expirationSeconds"]
        return {"status": {"token": jwt(self.clock.now, self.clock.now + life_s)}}


def issuer(
    tmp_path: Path, clock: Clock, missing: frozenset[str] = frozenset()
) -> tuple[AgentTokens, TokenApi]:
    api = TokenApi(clock, missing)
    tokens = [NodeToken(n, tmp_path / f"agent-{n}.token") for n in ("n1", "n2")]
    return AgentTokens(api, "layersched-testbed", "layersched-agent", tokens, clock=clock), api


@pytest.mark.parametrize(
    ("token", "due"),
    [
        # issued at START for an hour: replaced 48 min in (80 % of 3600 s = 2880 s)
        (jwt(START, START + HOUR_S), START + 2880),
        # a ten-minute token (the API's shortest): at 8 minutes
        (jwt(START, START + 600), START + 480),
        # not a token (an empty or hand-edited file): now
        ("", 0.0),
        ("not.a-token", 0.0),
        # expiry before issue: not a lifetime
        (jwt(START, START - 1), 0.0),
    ],
    ids=["hour", "ten-minutes", "empty", "garbage", "backwards"],
)
def test_a_token_is_replaced_at_80_percent_of_its_life(token: str, due: float) -> None:
    assert refresh_at(token) == due


def test_each_node_gets_a_token_bound_to_its_node_written_0600(tmp_path: Path) -> None:
    clock = Clock()
    tokens, api = issuer(tmp_path, clock)
    assert tokens.refresh() == ["n1", "n2"]
    path, request = api.requests[0]
    assert path == "/api/v1/namespaces/layersched-testbed/serviceaccounts/layersched-agent/token"
    # bound to the Node object, for the API server's own audience (none named)
    assert request["spec"] == {
        "expirationSeconds": HOUR_S,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    for node in ("n1", "n2"):
        written = tmp_path / f"agent-{node}.token"
        assert stat.S_IMODE(written.stat().st_mode) == 0o600
        assert token_lifetime(written.read_text()) == (START, START + HOUR_S)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent-n1.token", "agent-n2.token"]


def test_tokens_are_kept_until_due_then_replaced(tmp_path: Path) -> None:
    clock = Clock()
    tokens, api = issuer(tmp_path, clock)
    tokens.refresh()
    clock.now = START + 2879  # a second before 80 %
    assert tokens.refresh() == []
    assert tokens.next_refresh_s() == 1.0
    clock.now = START + 2880
    assert tokens.refresh() == ["n1", "n2"]
    assert len(api.requests) == 4
    # the new token lives an hour from now: the agents never hold an expired one
    assert token_lifetime((tmp_path / "agent-n1.token").read_text()) == (
        START + 2880,
        START + 2880 + HOUR_S,
    )
    # a token file removed by hand comes back at the next look
    (tmp_path / "agent-n2.token").unlink()
    assert tokens.refresh() == ["n2"]


def test_a_node_that_does_not_exist_gets_no_token_and_the_others_do(tmp_path: Path) -> None:
    clock = Clock()
    tokens, _ = issuer(tmp_path, clock, missing=frozenset({"n1"}))
    with pytest.raises(KubeError, match=r"n1: .*404"):
        tokens.refresh()
    assert not (tmp_path / "agent-n1.token").exists()
    assert (tmp_path / "agent-n2.token").exists()
    assert (tokens.issued, tokens.failures) == (1, 1)


class Waits(threading.Event):
    """Records each wait of the loop (no time passes) and stops it after ``rounds``."""

    def __init__(self, clock: Clock, rounds: int) -> None:
        super().__init__()
        self.clock = clock
        self.rounds = rounds
        self.waited: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waited.append(timeout)
        self.clock.now += timeout
        if len(self.waited) >= self.rounds:
            self.set()
        return self.is_set()


def test_the_loop_sleeps_until_due_and_backs_off_on_failures(tmp_path: Path) -> None:
    clock = Clock()
    tokens, api = issuer(tmp_path, clock, missing=frozenset({"n1"}))
    stopped = Waits(clock, rounds=3)
    tokens.run(stopped)
    # n1 refused each round: retried after 1 s, then 2 s, then 4 s
    assert stopped.waited == [1.0, 2.0, 4.0]
    # n2 was issued once, and not again within its life
    assert [r["spec"]["boundObjectRef"]["name"] for _, r in api.requests].count("n2") == 1


def test_with_every_token_issued_the_loop_looks_again_each_minute(tmp_path: Path) -> None:
    clock = Clock()
    tokens, api = issuer(tmp_path, clock)
    stopped = Waits(clock, rounds=60)
    tokens.run(stopped)
    # due in 48 min: it looks every minute (a file removed by hand comes back) meanwhile
    assert stopped.waited[:3] == [60.0, 60.0, 60.0]
    # an hour went by: each node's token was replaced once, at 80 % of its life
    assert len(api.requests) == 4


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([], "no --token NODE=FILE"),
        (["n1"], "expected NODE=FILE"),
        (["=x"], "expected NODE=FILE"),
        (["N_1=/x"], "not a Kubernetes object name"),
    ],
    ids=["none", "no-file", "no-node", "bad-node"],
)
def test_token_options_are_checked(items: list[str], message: str) -> None:
    with pytest.raises((InputError, KubeError), match=message):
        parse_node_tokens(items)


def test_a_life_shorter_than_the_api_issues_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="at least 600 s"):
        AgentTokens(
            TokenApi(Clock()), "ns", "sa", [NodeToken("n1", tmp_path / "t")], expiration_s=60
        )
