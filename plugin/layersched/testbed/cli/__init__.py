"""The testbed's commands (``layersched testbed``, ``layersched scenario``): the harness's
part of the command line, found by :mod:`layersched.cli.main` when the harness is
installed (a checkout's venv), absent from the production wheel and image."""
