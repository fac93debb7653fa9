from vaultd.cli.commands import main

main()
