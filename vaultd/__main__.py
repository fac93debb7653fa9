from vaultd.cli import main

main()
