"""What the real-node tier may change on this machine, read so that it can be compared and put back.

Owns: reading the host's state in the categories a kubelet, containerd, CNI plugins and kube-proxy
change (:func:`snapshot`), saying where two readings differ (:func:`differences`), and the undo steps
that need nothing but the host (:func:`remove_new_chains`, :func:`restore_sysctls`, :func:`unmount_under`,
:func:`remove_cgroups`, ...). Used by ``realnodes.py`` for its tear-down and by
``tests/realnodes/test_teardown.py`` to check it. Must not: start anything, or change anything that
the reading taken before the tier started does not show as not ours (other parties' iptables chains,
mounts, interfaces and cgroups are never touched).

What is compared (:func:`snapshot`): the sysctls under /proc/sys (the per-interface ones of ``all``,
``default``, ``lo`` and the interfaces that exist in both readings; counters and random values left
out, :data:`VOLATILE_SYSCTLS`), every iptables and ip6tables rule and chain (nf_tables backend; counters
left out), the nftables tables, the mount points, the network interfaces (Docker's containers' veths
left out: other jobs run containers), the network namespaces in /run/netns, the cgroups two levels
deep in every hierarchy, /etc/hosts, the processes that belong to the tier (kubelet, kube-proxy, the
pause program, containerd and its shims started for the tier) and whether the paths a kubelet or
containerd creates by default exist (:data:`WATCHED_PATHS`). Kernel modules the tier loads (netfilter
matches, ``br_netfilter``) stay loaded: :func:`snapshot` lists them under ``modules`` and
:func:`differences` reports them apart (``ignore``), since unloading a module others may use is not safe.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

#: Sysctls whose value changes by itself (counters, random numbers), never compared.
VOLATILE_SYSCTLS: Final = re.compile(
    r"^(kernel\.random\.|kernel\.ns_last_pid$|kernel\.pty\.nr$|fs\.(dentry-state|file-nr|inode-nr|inode-state|"
    r"aio-nr|quota\.)|net\.netfilter\.nf_conntrack_count$|kernel\.sched_|kernel\.perf_|"
    r"net\.ipv4\.tcp_fastopen_key$|fs\.binfmt_misc\.|dev\.|debug\.|kernel\.tainted$|"
    r"net\.netfilter\.nf_conntrack_(buckets|expect_max)$|vm\.(nr_|stat_)|kernel\.usermodehelper\.)"
)
#: The sysctls kubelet (kernel.*, vm.*), the bridge plugin (ip_forward) and kube-proxy (route_localnet,
#: conntrack) may write: recorded before the tier starts and written back at its tear-down.
RESTORED_SYSCTLS: Final = (
    "kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory", "vm.panic_on_oom",
    "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward",
    "net.ipv4.conf.all.forwarding", "net.ipv4.conf.default.forwarding", "net.ipv6.conf.all.forwarding",
    "net.ipv4.conf.all.route_localnet", "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables", "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established", "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
    "net.netfilter.nf_conntrack_udp_timeout", "net.netfilter.nf_conntrack_udp_timeout_stream",
)  # fmt: skip
#: Paths a kubelet, containerd or the CNI plugins create when they are not told otherwise.
WATCHED_PATHS: Final = (
    "/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/usr/libexec/kubernetes", "/etc/kubernetes",
    "/etc/cni", "/opt/cni", "/var/lib/cni", "/run/containerd", "/run/containerd/s", "/run/containerd/runc",
    "/opt/containerd", "/var/lib/containerd", "/run/netns", "/var/run/netns", "/run/flannel", "/run/calico",
)  # fmt: skip
IPTABLES_TABLES: Final = ("filter", "nat", "mangle", "raw")
#: Chains the tier's programs create (kubelet and kube-proxy: KUBE-*, the CNI plugins: CNI-*).
OUR_CHAINS: Final = re.compile(r"^(KUBE-|CNI-)")
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
NETNS_DIR: Final = Path("/run/netns")
HOSTS: Final = Path("/etc/hosts")


# ------------------------------------------------------------------------------------------ reading
def run(argv: Sequence[str], *, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, input=input,
                          stdin=None if input is not None else subprocess.DEVNULL, timeout=120)


def read_sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name.replace(".", "/")).read_text().strip()
    except OSError:
        return None


def sysctls(interfaces: Iterable[str]) -> dict[str, str]:
    """Every readable sysctl but the volatile ones; per-interface ones only for ``interfaces``."""
    keep_ifaces = {"all", "default", *interfaces}
    out: dict[str, str] = {}
    base = Path("/proc/sys")
    for dirpath, dirnames, filenames in os.walk(base):
        rel = Path(dirpath).relative_to(base).parts
        if len(rel) == 3 and rel[0] == "net" and rel[1] in ("ipv4", "ipv6") and rel[2] in ("conf", "neigh"):
            dirnames[:] = [d for d in dirnames if d in keep_ifaces]
        for name in filenames:
            key = ".".join((*rel, name))
            if VOLATILE_SYSCTLS.match(key):
                continue
            try:
                out[key] = (Path(dirpath) / name).read_text().strip()
            except OSError:
                continue  # write-only (e.g. net.ipv4.route.flush) or not readable
    return out


def iptables_dump(family: str = "iptables") -> dict[str, dict[str, list[str]]]:
    """``{table: {chain: [rule, ...]}}`` of ``iptables-save`` (or ``ip6tables-save``), counters left out.
    A table the kernel does not have is left out (reading it would not create it: -t is not used to
    create, iptables-save only lists)."""
    tables: dict[str, dict[str, list[str]]] = {}
    proc = run([f"{family}-save"], check=False)
    table: dict[str, list[str]] | None = None
    for line in proc.stdout.splitlines():
        if line.startswith("*"):
            table = tables.setdefault(line[1:], {})
        elif line.startswith(":") and table is not None:
            table.setdefault(line[1:].split()[0], [])
        elif line.startswith("-A ") and table is not None:
            chain = line.split()[1]
            table.setdefault(chain, []).append(line)
    return tables


def nft_tables() -> list[str]:
    if not Path("/usr/sbin/nft").exists():
        return []
    return sorted(line for line in run(["nft", "list", "tables"], check=False).stdout.splitlines() if line)


def mountinfo() -> list[tuple[str, str]]:
    """(mount point, file system type) of every mount of this mount namespace, in mount order."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        out.append((point, fields[sep + 1]))
    return out


def interfaces() -> dict[str, str]:
    """Network interface name -> the bridge it is attached to ('' if none); Docker containers' veths out."""
    out = {}
    for iface in sorted(os.listdir("/sys/class/net")):
        master = Path("/sys/class/net", iface, "master")
        bridge = master.resolve().name if master.exists() else ""
        if iface.startswith("veth") and (bridge == "docker0" or bridge.startswith("br-")):
            continue
        out[iface] = bridge
    return out


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies: /sys/fs/cgroup itself on a pure v2 machine, else its subdirs."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return sorted(p for p in CGROUP_ROOT.iterdir() if p.is_dir() and os.path.ismount(p))


def cgroups(depth: int = 2) -> list[str]:
    out = []
    for hierarchy in cgroup_hierarchies():
        level = [hierarchy]
        for _ in range(depth):
            nxt = []
            for d in level:
                with contextlib.suppress(OSError):
                    nxt += [c for c in d.iterdir() if c.is_dir()]
            out += [str(p) for p in nxt]
            level = nxt
    return sorted(out)


def tier_processes(markers: Iterable[str]) -> list[str]:
    """``pid cmdline`` of every process whose command line contains one of ``markers`` (the tier's
    run directory and binaries), or that is the pause program."""
    found = []
    marks = [m for m in markers if m]
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path("/proc", pid, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if any(m in cmdline for m in marks) or cmdline == "/pause":
            found.append(f"{pid} {cmdline}")
    return sorted(found)


def loaded_modules() -> list[str]:
    try:
        return sorted(line.split()[0] for line in Path("/proc/modules").read_text().splitlines())
    except OSError:
        return []


def snapshot(markers: Iterable[str] = ()) -> dict[str, Any]:
    """The host state the tier may change (see the module's docstring), as JSON-able values."""
    ifaces = interfaces()
    return {
        "sysctl": sysctls(ifaces),
        "iptables": iptables_dump("iptables"),
        "ip6tables": iptables_dump("ip6tables"),
        "nft": nft_tables(),
        "mounts": sorted(f"{point} {fstype}" for point, fstype in mountinfo()),
        "interfaces": ifaces,
        "netns": sorted(os.listdir(NETNS_DIR)) if NETNS_DIR.is_dir() else [],
        "cgroups": cgroups(),
        "hosts": HOSTS.read_text() if HOSTS.exists() else "",
        "paths": {p: os.path.lexists(p) for p in WATCHED_PATHS},
        "processes": [line.split(" ", 1)[1] for line in tier_processes(markers)],
        "modules": loaded_modules(),
    }


def differences(before: Mapping[str, Any], after: Mapping[str, Any], *,
                ignore: Iterable[str] = ("modules",)) -> list[str]:
    """Where ``after`` differs from ``before``, one line each (``ignore``: categories not compared).

    Sysctls that exist in only one reading (an interface or module came or went) are not compared;
    interfaces that exist in both readings are."""
    skipped = set(ignore)
    out: list[str] = []
    for category in before:
        if category in skipped:
            continue
        a, b = before[category], after.get(category)
        if category == "sysctl":
            common_ifaces = set(before["interfaces"]) & set(after["interfaces"]) | {"all", "default"}
            for key in sorted(set(a) & set(b)):
                parts = key.split(".")
                per_interface = len(parts) > 3 and parts[0] == "net" and parts[2] in ("conf", "neigh")
                if per_interface and parts[3] not in common_ifaces:
                    continue
                if a[key] != b[key]:
                    out.append(f"sysctl {key}: {a[key]!r} -> {b[key]!r}")
        elif isinstance(a, dict):
            for key in sorted(set(a) | set(b)):
                if a.get(key) != b.get(key):
                    out.append(f"{category} {key}: {json.dumps(a.get(key))} -> {json.dumps(b.get(key))}")
        elif isinstance(a, list):
            gone = sorted(set(a) - set(b))
            new = sorted(set(b) - set(a))
            out += [f"{category}: gone {x}" for x in gone] + [f"{category}: new {x}" for x in new]
        elif a != b:
            out.append(f"{category}: changed")
    return out


# ------------------------------------------------------------------------------------------ undoing
def restore_sysctls(values: Mapping[str, str | None]) -> list[str]:
    """Write back every recorded value that differs now; returns what was written."""
    written = []
    for name, value in values.items():
        if value is None:
            continue
        now = read_sysctl(name)
        if now is not None and now != value:
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / name.replace(".", "/")).write_text(value + "\n")
                written.append(f"{name}={value} (was {now})")
    return written


def remove_new_chains(before: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """Delete the KUBE-*/CNI-* chains that were not there ``before`` (``{family: {table: {chain: ...}}}``),
    and first the rules of other chains that jump to them. Returns the chains removed."""
    removed = []
    for family in ("iptables", "ip6tables"):
        old = before.get(family, {})
        now = iptables_dump(family)
        for table, chains in now.items():
            known = set(old.get(table, {}))
            new = [c for c in chains if c not in known and OUR_CHAINS.match(c)]
            if not new:
                continue
            for chain, rules in chains.items():
                if chain in new:
                    continue
                for rule in reversed(rules):
                    args = shlex.split(rule)
                    targets = {args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-j", "-g")}
                    if targets & set(new):
                        run([family, "-w", "-t", table, "-D", *args[1:]], check=False)
            for chain in new:
                run([family, "-w", "-t", table, "-F", chain], check=False)
            for chain in new:
                run([family, "-w", "-t", table, "-X", chain], check=False)
                removed.append(f"{family} {table} {chain}")
    return removed


#: iptables' built-in chains per table: a table that holds only these, empty, is one iptables-nft made.
BUILTIN_CHAINS: Final = {
    "filter": {"INPUT", "FORWARD", "OUTPUT"},
    "nat": {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
    "mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
    "raw": {"PREROUTING", "OUTPUT"},
    "security": {"INPUT", "FORWARD", "OUTPUT"},
}
NFT_FAMILY: Final = {"iptables": "ip", "ip6tables": "ip6"}


def remove_new_tables(before: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Delete the nf_tables tables that iptables-nft made for the tier (absent ``before``, now holding
    nothing but empty built-in chains). Needs ``nft`` (Debian's nftables); without it they stay."""
    removed: list[str] = []
    if not Path("/usr/sbin/nft").exists():
        return removed
    for family, nft_family in NFT_FAMILY.items():
        old = before.get(family, {})
        for table, chains in iptables_dump(family).items():
            if table in old or any(chains.values()) or set(chains) - BUILTIN_CHAINS.get(table, set()):
                continue
            if run(["nft", "delete", "table", nft_family, table], check=False).returncode == 0:
                removed.append(f"{nft_family} {table}")
    return removed


def unmount_under(prefix: str, *, attempts: int = 5) -> list[str]:
    """Unmount every mount point at or below ``prefix``, deepest first (lazily if busy)."""
    done: list[str] = []
    prefix = prefix.rstrip("/")
    for _ in range(attempts):
        points = [p for p, _ in mountinfo() if p == prefix or p.startswith(prefix + "/")]
        if not points:
            break
        for point in sorted(set(points), key=lambda p: p.count("/"), reverse=True):
            if run(["umount", point], check=False).returncode != 0:
                run(["umount", "-l", point], check=False)
            done.append(point)
    return done


def remove_netns(keep: Iterable[str]) -> list[str]:
    """Unmount and remove the entries of /run/netns not in ``keep`` whose names CNI users give (cni-*)."""
    removed = []
    kept = set(keep)
    if not NETNS_DIR.is_dir():
        return removed
    for name in os.listdir(NETNS_DIR):
        if name in kept or not name.startswith("cni-"):
            continue
        path = NETNS_DIR / name
        run(["umount", str(path)], check=False)
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(str(path))
    return removed


def cgroup_dirs(name: str) -> list[Path]:
    """``<hierarchy>/<name>`` in every hierarchy, whether it exists or not."""
    return [h / name.strip("/") for h in cgroup_hierarchies()]


def kill_cgroup_processes(name: str) -> int:
    """SIGKILL every process in cgroup ``name`` or below, in any hierarchy; returns how many."""
    pids: set[int] = set()
    for top in cgroup_dirs(name):
        if not top.is_dir():
            continue
        for dirpath, _, filenames in os.walk(top):
            if "cgroup.procs" in filenames:
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in Path(dirpath, "cgroup.procs").read_text().split()}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def remove_cgroups(name: str, *, timeout: float = 20.0) -> list[str]:
    """Kill what runs in cgroup ``name`` and remove it with its descendants from every hierarchy."""
    removed: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        kill_cgroup_processes(name)
        left = []
        for top in cgroup_dirs(name):
            if not top.is_dir():
                continue
            for dirpath, _, _ in sorted(os.walk(top), key=lambda w: w[0].count("/"), reverse=True):
                try:
                    os.rmdir(dirpath)
                    removed.append(dirpath)
                except FileNotFoundError:
                    pass
                except OSError:
                    left.append(dirpath)
        if not left:
            return removed
        if time.monotonic() >= deadline:
            raise RuntimeError(f"cgroups still busy after {timeout:.0f}s: {left[:5]}")
        time.sleep(0.1)  # the kernel takes a moment to release a killed task's cgroup


def kill_processes(markers: Iterable[str], *, timeout: float = 20.0) -> list[str]:
    """SIGKILL every process :func:`tier_processes` finds and wait until none is left."""
    killed: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        found = tier_processes(markers)
        if not found:
            return killed
        for line in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
            killed.append(line)
        if time.monotonic() >= deadline:
            raise RuntimeError(f"processes still alive after {timeout:.0f}s: {found[:5]}")
        time.sleep(0.1)  # a killed process needs its parent to reap it before it leaves /proc


def remove_hosts_line(marker: str) -> bool:
    """Remove the /etc/hosts lines that end with ``marker`` (written in place: /etc/hosts may be a mount)."""
    if not HOSTS.exists():
        return False
    text = HOSTS.read_text()
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if not line.rstrip("\n").endswith(marker)]
    if len(kept) == len(lines):
        return False
    with HOSTS.open("r+") as f:
        f.write("".join(kept))
        f.truncate()
    return True


def add_hosts_line(line: str) -> None:
    with HOSTS.open("a") as f:
        f.write(line.rstrip("\n") + "\n")
