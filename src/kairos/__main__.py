"""The ``kairos`` command (and ``python -m kairos``).

Nothing is imported before the ``try``: Ctrl-C while the command line loads (or at any moment
after) ends the process quietly with exit code 130, as a shell expects, never with a traceback.
"""

import sys


def main() -> None:
    """Run the ``kairos`` command line."""
    try:
        from kairos.cli import main as cli

        cli()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
