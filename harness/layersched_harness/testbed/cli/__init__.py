"""The testbed's commands (``layersched testbed``, ``layersched scenario``): the harness's
part of the command line, declared by the harness's distribution
(``harness/pyproject.toml``, entry-point group ``layersched.commands``) and added by
:mod:`layersched.cli.main` in a checkout's venv; absent from the production wheel and image."""
