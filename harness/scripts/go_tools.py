"""make tools: build (or find cached) the Go tools of
harness/layersched_harness/testbed/go-tools.yml; make crio (``--crio``): CRI-O, as
harness/layersched_harness/testbed/crio-build.yml pins it.

Each is ``go install -tags TAGS -ldflags LDFLAGS PACKAGE@VERSION`` from its Go module (the
module proxy), or ``go build -o BIN PACKAGE`` in a module of ours that requires it (CRI-O:
harness/crio), with GOBIN ``$LAYERSCHED_CACHE_DIR/tools/NAME-VERSION/bin``, the Kubernetes
build's Go module and build caches and cgo off (layersched_harness.testbed.builds.GoTool).
A tool already there is not built again. Prints a line per tool with the command and its duration; a
failure names the tool and ends with go's last lines.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from layersched.builds import REPO_ROOT
from layersched.core.errors import LayerschedError
from layersched_harness.testbed.builds import (
    GoTool,
    crio_build,
    find_go,
    go_tools,
    kubernetes_build,
)

#: go's output quoted when a tool fails.
TAIL_LINES = 30
#: The tools' go.mod files ask for Go 1.24 or older; the machines' Go is newer.
GO_NEEDED = "1.24"
#: CRI-O v1.36.3's go.mod asks for Go 1.26.3.
CRIO_GO_NEEDED = "1.26.3"


def install_argv(go: str, tool: GoTool) -> list[str]:
    """The go command that builds ``tool``: ``go install PACKAGE@VERSION``, or ``go build
    -o BIN PACKAGE`` in the tool's own module (run it there)."""
    verb = ["build", "-o", str(tool.binary())] if tool.module else ["install"]
    argv = [go, *verb, "-trimpath", f"-ldflags={' '.join(tool.ldflags)}"]
    if tool.tags:
        argv.append(f"-tags={','.join(tool.tags)}")
    return [*argv, tool.package if tool.module else f"{tool.package}@{tool.version}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crio", action="store_true", help="build CRI-O (crio-build.yml)")
    args = parser.parse_args(argv)
    try:
        go, version = find_go(CRIO_GO_NEEDED if args.crio else GO_NEEDED)
        env = kubernetes_build().go_env()  # the shared module and build caches; cgo off
        tools = [crio_build()] if args.crio else list(go_tools().values())
        for tool in tools:
            binary = tool.binary()
            if binary.is_file():
                print(f"{tool.name} {tool.version}: cached ({binary})")
                continue
            started = time.monotonic()
            command = install_argv(go, tool)
            print(f"{tool.name} {tool.version}: {' '.join(command[1:])} ({version})", flush=True)
            done = subprocess.run(
                command,
                cwd=REPO_ROOT / tool.module if tool.module else None,
                env={**env, "GOBIN": str(tool.bin_dir())},
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                tail = "\n".join(done.stderr.strip().splitlines()[-TAIL_LINES:])
                print(f"{tool.name} {tool.version}: go install failed ({version}):\n{tail}")
                return 1
            print(f"{tool.name} {tool.version}: built in {time.monotonic() - started:.0f} s")
    except LayerschedError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
