"""The backend these tests check. The harness and the op tests read its names
from here, so that they are the same in every project of a template release
that chose the same ops and implementation; only launched.py, test_install.py
and test_runtime.py, whose scripts start processes of their own, name it too."""

#: The name torch.distributed knows the backend by, and its Python package.
NAME = "single"
PACKAGE = "single_collectives"
#: The prefix of the backend's settings (SINGLE_VERBOSE...) and of these tests' own.
ENV = "SINGLE_"

