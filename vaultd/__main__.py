"""`python -m vaultd`, and the `vaultd` command's entry point."""

import sys


def run() -> None:
    try:
        from vaultd.cli.commands import main
    except KeyboardInterrupt:
        # Ctrl-C while the command's modules load (a few tenths of a second): nothing has
        # started, so there is nothing to stop and no traceback to show.
        sys.exit(130)
    main()


# Guarded: a spawned worker process may import this module (see vaultd.index.parsers).
if __name__ == "__main__":
    run()
