"""Counting a process's sockets from /proc, without asking the engine: its file descriptors that
are sockets, classified by the namespace's TCP tables (established connections, listeners) and
unix-domain table. The scale benchmark's ranks count their own (a cross-check of the engine's
counters, when it has them) and the harness can count any process's from outside."""

import os

TCP_STATES = {"01": "established", "0A": "listen"}


def _socket_inodes(pid):
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue            # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _table_inodes(pid, table, inode_column):
    """{inode: state} of /proc/<pid>/net/<table> (the process's network namespace)."""
    rows = {}
    try:
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                cols = line.split()
                if len(cols) > inode_column:
                    rows[cols[inode_column]] = cols[3] if table.startswith("tcp") else "unix"
    except OSError:
        pass
    return rows


def count(pid="self"):
    """{"sockets": all socket fds, "tcp": TCP sockets, "tcp_established", "tcp_listen", "unix"}."""
    mine = _socket_inodes(pid)
    tcp = {**_table_inodes(pid, "tcp", 9), **_table_inodes(pid, "tcp6", 9)}
    unix = _table_inodes(pid, "unix", 6)
    states = [tcp[i] for i in mine if i in tcp]
    return {"sockets": len(mine), "tcp": len(states),
            "tcp_established": sum(1 for s in states if s == "01"),
            "tcp_listen": sum(1 for s in states if s == "0A"),
            "unix": sum(1 for i in mine if i in unix)}


def memory(pid="self"):
    """Resident memory in bytes from /proc/<pid>/status: VmRSS, VmHWM (peak), RssAnon, RssShmem."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssShmem", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out
