"""make tools: build (or find cached) the Go tools of plugin/layersched/go-tools.yml.

Each is ``go install -ldflags LDFLAGS PACKAGE@VERSION`` from its Go module (the module
proxy), with GOBIN ``$LAYERSCHED_CACHE_DIR/tools/NAME-VERSION/bin`` and the Kubernetes
build's Go module and build caches (layersched.builds.GoTool). A tool already there is
not built again. Prints a line per tool with its duration; a failure names the tool and
ends with go's last lines.
"""

from __future__ import annotations

import subprocess
import sys
import time

from layersched.builds import find_go, go_tools, kubernetes_build
from layersched.core.errors import LayerschedError

#: go's output quoted when a tool fails.
TAIL_LINES = 30
#: The tools' go.mod files ask for Go 1.24 or older; the machines' Go is newer.
GO_NEEDED = "1.24"


def main() -> int:
    try:
        go, version = find_go(GO_NEEDED)
        env = kubernetes_build().go_env()  # the shared module and build caches
        for tool in go_tools().values():
            binary = tool.binary()
            if binary.is_file():
                print(f"{tool.name} {tool.version}: cached ({binary})")
                continue
            started = time.monotonic()
            argv = [go, "install", f"-ldflags={' '.join(tool.ldflags)}"]
            argv.append(f"{tool.package}@{tool.version}")
            done = subprocess.run(
                argv,
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
