"""What the benchmarks share. Nothing here imports vaultd: a benchmark that runs another
checkout's vaultd in a child process can import this library first."""
