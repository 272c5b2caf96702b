"""layersched: container-layer-aware scheduling for Kubernetes.

The package is layered one way: the pure ``core``, then adapters, then the install and
the command line, with the harness (``testbed``, ``sim``) on top and out of the
production wheel. The layers are written once, in ``pyproject.toml``'s import-linter
contracts; the README's layer table and each package's README.md are held to them.
"""

__version__ = "0.1.0"
