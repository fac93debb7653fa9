"""Who owns the other end of a loopback TCP connection: the kernel's socket tables (Linux).

A TCP port on 127.0.0.1 is open to every local user, and a source address says nothing about
who connects: anyone may bind 127.0.0.2, or connect from an IPv6 socket as ::ffff:127.0.0.1.
So the page asks the kernel who holds the client's socket: `/proc/net/tcp` and
`/proc/net/tcp6` list every TCP socket of this network namespace with its owner's uid, and
the client's is the one whose local end is the connection's peer and whose remote end is
this server. An IPv4 peer is looked for in both tables, as itself and IPv4-mapped.

An answer is given only when it is certain: exactly one socket that a process still holds
matches. A socket its process has closed (inode 0) tells nothing: kernels that take the owner
from the socket's file list it as root's, whoever made it. A table that cannot be read
(another system than Linux, a sandbox without /proc) leaves the owner unknown too. The caller
refuses what is unknown. Only a kernel built without IPv6 (no /proc/sys/net/ipv6) may lack
tcp6: it then has no IPv6 socket to list.
"""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

#: The tables read: (file, address family). A test points them elsewhere to fail the lookup.
TABLES: tuple[tuple[Path, int], ...] = ((Path("/proc/net/tcp"), 4), (Path("/proc/net/tcp6"), 6))
#: Present whenever the kernel has IPv6, and with it sockets tcp6 would list.
IPV6 = Path("/proc/sys/net/ipv6")
#: Columns of a table's line: local address, remote address, uid, inode.
LOCAL, REMOTE, UID, INODE = 1, 2, 7, 9


def _hex(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """An address as the tables print it: each 32-bit word in the host's byte order."""
    packed = address.packed
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{word:08X}" for word in words)


def _forms(host: str) -> dict[int, str]:
    """How `host` appears in each table (by family): an IPv4 address in both, itself and as
    ::ffff:a.b.c.d; an IPv6 address in tcp6, and if it is IPv4-mapped, in tcp too."""
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if isinstance(address, ipaddress.IPv4Address):
        mapped = ipaddress.IPv6Address(f"::ffff:{address}")
        return {4: _hex(address), 6: _hex(mapped)}
    return {6: _hex(address)}


def socket_owner(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid of the process holding the socket at `peer` connected to `local` (this
    server's end), or None when the kernel does not say so beyond doubt."""
    try:
        peer_forms, local_forms = _forms(peer[0]), _forms(local[0])
    except ValueError:
        return None
    owners: set[int] = set()
    for table, family in TABLES:
        if family not in peer_forms or family not in local_forms:
            continue
        want_local = f"{peer_forms[family]}:{peer[1]:04X}"
        want_remote = f"{local_forms[family]}:{local[1]:04X}"
        try:
            lines = _lines(table, family)
            for line in lines:
                fields = line.split()
                if len(fields) <= INODE:
                    continue
                if fields[LOCAL] != want_local or fields[REMOTE] != want_remote:
                    continue
                if fields[INODE] == "0":
                    continue  # closed by its process: the uid shown is not its maker's
                owners.add(int(fields[UID]))
        except (OSError, ValueError):
            return None  # a table missing or unreadable: the answer could be in it
    return owners.pop() if len(owners) == 1 else None


def _lines(table: Path, family: int) -> list[str]:
    """A table's lines without its header; none for tcp6 on a kernel without IPv6."""
    try:
        text = table.read_text(encoding="ascii")
    except FileNotFoundError:
        if family == 6 and not IPV6.exists():
            return []
        raise
    return text.splitlines()[1:]


def can_tell() -> bool:
    """Whether this system lets the owner of a connection be known (the tables are there)."""
    try:
        for table, family in TABLES:
            _lines(table, family)
    except (OSError, ValueError):
        return False
    return True
