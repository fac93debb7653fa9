from vaultd.cli.commands import main

# Guarded: a spawned worker process may import this module (see vaultd.index.parsers).
if __name__ == "__main__":
    main()
