"""Allow ``python -m new_backend``."""

from new_backend.command import main

main()
