"""Allow ``python -m new_backend``."""

from new_backend.cli import main

main()
