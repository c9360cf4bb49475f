"""Several hosts on one machine: a network namespace per host, a bridge between them, torchrun in each.

Each host is `ip netns` namespace `fitcore-<pid>-node<i>` with its own loopback, one interface `eth0` at
192.0.2.(10+i)/24 (the range kept for documentation: nothing is routed there) on a bridge in a namespace of
its own (`fitcore-<pid>-switch`), its own /etc/hosts (`ip netns exec` binds /etc/netns/<name>/ over /etc) and,
through `unshare --uts`, its own hostname. No address outside 192.0.2.0/24 exists in them, so nothing
can be sent anywhere else. `tc qdisc ... tbf` on each eth0 limits the link. Everything made is removed at
the end, also when the run fails or is interrupted: every process in each namespace, then the namespaces
and their /etc/netns folders; namespaces of this prefix whose maker has gone are removed first.

Needs root and iproute2 (`ip`, `tc`) and util-linux's `unshare`; `available()` says why not, where not.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fitcore.core.i18n import t

SUBNET = "192.0.2"  # RFC 5737 TEST-NET-1, inside the namespaces only
PREFIX = "fitcore-"  # every namespace made here is fitcore-<maker's pid>-<name>
NETNS_ETC = Path("/etc/netns")
PORT = 29500  # the rendezvous port on node 0's address, inside the namespaces
IP_TIMEOUT = 10  # seconds for one `ip` or `tc` command
TBF = ("burst", "64kb", "latency", "50ms")  # with `rate R`: tbf's bucket and queue (see docs/scaling.md)


class HostsError(RuntimeError):
    """Hosts could not be made here (not root, no iproute2, namespaces refused): the message says which."""


def available() -> str:
    """'' where namespaces can be made; otherwise the reason (the check's skip, the test's failure)."""
    if os.geteuid() != 0:
        return t("cli.check.skip.root")
    missing = [tool for tool in ("ip", "tc", "unshare") if shutil.which(tool) is None]
    return t("cli.check.skip.tools", tools=", ".join(missing)) if missing else ""


def ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """One `ip` (or, with args[0] == 'tc', `tc`) command, in netns where given; bounded in time."""
    tool, rest = ("tc", args[1:]) if args[0] == "tc" else ("ip", args)
    cmd = (["ip", "netns", "exec", netns] if netns else []) + [tool, *rest]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=IP_TIMEOUT)
    if check and done.returncode:
        raise HostsError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")
    return done


def namespaces() -> list[str]:
    """Every namespace of fitcore's prefix, made by any process."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=IP_TIMEOUT).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def kill_namespace(name: str) -> None:
    """SIGKILL every process in the namespace, wait (bounded) until none is left, then delete it."""
    for _ in range(50):  # at most about 5 s
        pids = ip("netns", "pids", name, check=False).stdout.split()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        time.sleep(0.1)
    ip("netns", "del", name, check=False)
    shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


def remove_stale() -> list[str]:
    """Remove the namespaces of this prefix whose maker is no longer running; return their names."""
    stale = []
    for name in namespaces():
        match = re.match(re.escape(PREFIX) + r"([0-9]+)-", name)
        if match and not Path("/proc", match.group(1)).exists():
            kill_namespace(name)
            stale.append(name)
    return stale


@dataclass
class Hosts:
    """`nodes` namespace hosts on one bridge; a context manager that removes all of them on leaving.

    Args:
        nodes: how many hosts (2 to 200).
        rate: tbf's rate on every host's interface (`100mbit`), or '' for the veth's own speed.
    """

    nodes: int
    rate: str = ""
    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}-")
    made: list[str] = field(default_factory=list)

    def name(self, i: int) -> str:
        return f"{self.tag}node{i}"

    def address(self, i: int) -> str:
        return f"{SUBNET}.{10 + i}"

    def hostname(self, i: int) -> str:
        return f"node{i}"

    def __enter__(self) -> "Hosts":
        reason = available()
        if reason:
            raise HostsError(reason)
        if not 2 <= self.nodes <= 200:
            raise HostsError(f"nodes: got {self.nodes}; allowed: 2 to 200")
        remove_stale()
        try:
            self._make()
        except BaseException:
            self.remove()
            raise
        return self

    def _make(self) -> None:
        switch = self.tag + "switch"
        self._add(switch)
        ip("link", "add", "br0", "type", "bridge", netns=switch)
        ip("link", "set", "br0", "up", netns=switch)
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{self.address(i)} {self.hostname(i)}\n" for i in range(self.nodes)
        )
        for i in range(self.nodes):
            ns, port = self.name(i), f"p{i}"
            self._add(ns)
            (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / ns / "hosts").write_text(hosts)
            (NETNS_ETC / ns / "resolv.conf").write_text("")  # no DNS server: names come from hosts only
            # the veth is made with one end in each namespace, so no name is taken in this one
            ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", switch)
            ip("link", "set", port, "master", "br0", "up", netns=switch)
            ip("addr", "add", f"{self.address(i)}/24", "dev", "eth0", netns=ns)
            ip("link", "set", "eth0", "up", netns=ns)
            ip("link", "set", "lo", "up", netns=ns)
            if self.rate:
                ip("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", self.rate, *TBF, netns=ns)

    def _add(self, ns: str) -> None:
        ip("netns", "add", ns)
        self.made.append(ns)

    def popen(self, i: int, argv: list[str], env: dict, **kw) -> subprocess.Popen:
        """Start argv on host i, under its own hostname, in a process group of its own."""
        script = 'hostname "$0" && exec "$@"'
        cmd = ["ip", "netns", "exec", self.name(i), "unshare", "--uts", "sh", "-c", script, self.hostname(i)]
        return subprocess.Popen(cmd + argv, env=env, start_new_session=True, **kw)

    def kill(self, i: int) -> None:
        """SIGKILL every process on host i (the host dies; its namespace stays until remove())."""
        for pid in ip("netns", "pids", self.name(i), check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def remove(self) -> None:
        for ns in reversed(self.made):
            kill_namespace(ns)
        self.made.clear()

    def __exit__(self, *exc) -> None:
        self.remove()


def python_env(python: str | None) -> tuple[str, dict]:
    """The interpreter the hosts run and its environment: an installed fitcore's venv as it is, or this
    interpreter with this fitcore's source tree on PYTHONPATH."""
    env = dict(os.environ)
    if python:
        env.pop("PYTHONPATH", None)
        return python, env
    tree = str(Path(__file__).resolve().parents[2])  # the folder that holds the fitcore package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH", "")) if p)
    return sys.executable, env
