"""Throughput and latency: indexing, search, start-up, and what each part of them costs."""
