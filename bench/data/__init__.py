"""Generated vaults and the labelled question sets (`questions/`) the benchmarks read."""
