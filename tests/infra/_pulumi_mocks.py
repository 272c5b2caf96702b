"""Run a Pulumi program under ``pulumi.runtime.set_mocks`` and read back what it registered.

No CLI, no engine, no cloud: the mocks answer every resource registration and
invoke, and :class:`Graph` holds the resources (types, parents via URNs, inputs),
what each component registered as outputs, and the stack's exports.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks

#: Library components whose registered outputs are resources, not values.
FOREIGN_COMPONENTS = frozenset({"kubernetes:kustomize:Directory", "kubernetes:yaml:ConfigFile"})


class Monitor(pulumi_mocks.MockMonitor):
    """The mock monitor, also keeping what each component registered as outputs."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.component_outputs: dict[str, dict[str, Any]] = {}
        #: Resource options as the engine receives them, by URN.
        self.delete_before_replace: dict[str, bool] = {}
        #: Each resource's explicit provider reference, by URN.
        self.providers: dict[str, str] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        self.delete_before_replace[response.urn] = bool(request.deleteBeforeReplace)
        self.providers[response.urn] = request.provider
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        # A component whose outputs hold resources (kustomize.Directory's ``resources``)
        # is not read back: rehydrating a resource reference registers it again through
        # this very monitor, from inside its call, and never returns.
        if request.urn.split("::")[2].split("$")[-1] not in FOREIGN_COMPONENTS:
            self.component_outputs[request.urn] = pulumi.runtime.rpc.deserialize_properties(
                request.outputs
            )
        return super().RegisterResourceOutputs(request)


@dataclass
class Graph:
    """What the program registered, by URN."""

    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    component_outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    delete_before_replace: dict[str, bool] = field(default_factory=dict)
    providers: dict[str, str] = field(default_factory=dict)
    #: What the program passed to ``pulumi.export``, resolved.
    exports: dict[str, Any] = field(default_factory=dict)

    def of_type(self, typ: str) -> dict[str, dict[str, Any]]:
        """Resources whose own type (last URN type segment) is ``typ``, by name."""
        found = {}
        for urn, state in self.resources.items():
            qualified, name = urn.split("::")[2], urn.split("::")[3]
            if qualified.split("$")[-1] == typ:
                found[name] = state
        return found

    def urn(self, name: str) -> str:
        [urn] = [u for u in self.resources if u.split("::")[3] == name]
        return urn

    def outputs_of(self, name: str) -> dict[str, Any]:
        """The registered outputs of the component called ``name``."""
        [outputs] = [o for urn, o in self.component_outputs.items() if urn.endswith(f"::{name}")]
        return outputs


def run_program(
    program_dir: Path, project: str, stack: str, mocks: pulumi.runtime.Mocks,
    config: dict[str, str],
) -> Graph:  # fmt: skip
    """``program_dir/__main__.py`` under ``mocks`` with this stack config."""
    monitor = Monitor(mocks)
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config({f"{project}:{k}": v for k, v in config.items()})

    exported: dict[str, Any] = {}
    resolved: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[None]:
        real_export = pulumi.export
        pulumi.export = lambda name, value: exported.__setitem__(name, value)
        try:
            runpy.run_path(str(program_dir / "__main__.py"), run_name="__main__")
        finally:
            pulumi.export = real_export
        # The test harness waits for this Output: every export is resolved on return.
        return pulumi.Output.all(**exported).apply(resolved.update)

    program()
    return Graph(
        exports=resolved,
        resources={urn: dict(reg.state) for urn, reg in monitor.resources.items()},
        component_outputs=monitor.component_outputs,
        delete_before_replace=monitor.delete_before_replace,
        providers=monitor.providers,
    )


@contextmanager
def program_on_path(program_dir: Path, package: str) -> Iterator[None]:
    """The program's component package importable, and forgotten afterwards."""
    sys.path.insert(0, str(program_dir))
    try:
        yield
    finally:
        sys.path.remove(str(program_dir))
        for module in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
            del sys.modules[module]
