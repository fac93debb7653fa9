"""Seeded damage to a real file, shared by the test and the benchmark of hostile PDFs."""

from __future__ import annotations

import random


def mutated(data: bytes, rng: random.Random) -> bytes:
    """`data` with a few bytes overwritten, inserted or cut, and one time in ten truncated."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 24)):
        at = rng.randrange(len(out))
        action = rng.random()
        if action < 0.6:
            out[at] = rng.randrange(256)
        elif action < 0.8:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        else:
            del out[at : at + rng.randint(1, 512)]
    if rng.random() < 0.1:
        out = out[: rng.randrange(len(out))]  # truncated too
    return bytes(out)
