"""``gang-extender serve`` raises its soft open-file limit so every worker thread can hold a socket."""

from __future__ import annotations

import resource

from extender.http import server


def test_open_file_limit_is_raised_for_the_threads() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        needed, now = server.ensure_open_files(1000)
        assert needed == 1000 + server.KEEPALIVE_CONNECTIONS + server.FDS_BESIDES_CONNECTIONS
        assert now == resource.getrlimit(resource.RLIMIT_NOFILE)[0] == (needed if hard == resource.RLIM_INFINITY
                                                                         else min(needed, hard))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_worker_connections_leave_room_for_keep_alive_at_any_thread_count() -> None:
    for threads in (1, 256, 1000, 1024, 10_000):
        assert server.worker_connections(threads) - threads == server.KEEPALIVE_CONNECTIONS
