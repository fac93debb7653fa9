"""vaultd's benchmarks, each a module run from the repository's root as
`python -m bench.<group>.<name>`: `quality` (does search find the right notes), `speed`,
`memory`, `soak` (long runs under faults and hostile input) and `data` (the generated vaults
and question sets). Shared helpers are in `bench.lib`; docs/benchmarks.md has the figures."""
