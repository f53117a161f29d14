"""The README's quick start, run as a newcomer runs it: the three marked blocks, as written.

``<!-- quickstart:build -->`` (``make image``) runs to its end; ``<!-- quickstart:cluster -->`` (``make
real-nodes``) is left running as in a first terminal, and the ``export KUBECONFIG=... PATH=...`` line it
prints is pasted in front of ``<!-- quickstart:use -->`` (helm install, the example gang, ``kubectl gang
list``), run in a second shell. It passes when that block exits 0, the example Job's three pods run on
the real nodes, were bound together by gang-extender (its ``GangBound`` Event) and ``kubectl gang list``
printed the gang Bound; then Ctrl-C (SIGINT to the first terminal's process group) stops the cluster and
leaves nothing for ``realnodes.py down`` to undo.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from controlplane import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.realnodes]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK = re.compile(r"<!-- quickstart:(?P<name>[a-z]+) -->\n```sh\n(?P<body>.*?)\n```", re.S)
EXPORT = re.compile(r"^export KUBECONFIG=\S+ PATH=\S+$")


def quickstart_blocks(text: str) -> dict[str, str]:
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def test_the_readme_marks_three_quickstart_blocks() -> None:
    blocks = quickstart_blocks(README.read_text())
    assert list(blocks) == ["build", "cluster", "use"], blocks
    assert "kubectl gang list" in blocks["use"] and "examples/gang-job.yaml" in blocks["use"]


class Terminal:
    """A long-running command in its own process group, its output collected line by line."""

    def __init__(self, script: str) -> None:
        self.proc = subprocess.Popen(["bash", "-c", script], cwd=ROOT, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def export_line(self) -> str | None:
        if self.proc.poll() is not None and not self._reader.is_alive():
            raise AssertionError(f"`make real-nodes` exited {self.proc.returncode}:\n" + "\n".join(self.lines[-60:]))
        return next((line for line in self.lines if EXPORT.match(line)), None)

    def interrupt(self, timeout: float) -> int:
        """What Ctrl-C does: SIGINT to the foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        """Close the output pipe once the reader has read it to its end (an unclosed pipe is a
        ResourceWarning, an error under the project's warning filter). A pipe some process still holds
        open stays open: the warning then says so."""
        self._reader.join(timeout=60)
        if not self._reader.is_alive() and self.proc.stdout is not None:
            self.proc.stdout.close()


def run_block(script: str, *, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_a_newcomer_following_the_readme_reaches_a_gang_of_running_pods(realnode_bin_dir: Path, images: object,
                                                                       helm_bin: Path) -> None:
    blocks = quickstart_blocks(README.read_text())
    built = run_block(blocks["build"], timeout=1800)
    assert built.returncode == 0, (f"{blocks['build']!r} exited {built.returncode}:\n"
                                   f"{built.stdout[-3000:]}{built.stderr[-3000:]}")

    terminal = Terminal(blocks["cluster"])
    try:
        wait_for(lambda: terminal.export_line() is not None, timeout=900, interval=1.0,
                 what="`make real-nodes` to print its export line")
        export = terminal.export_line()
        assert export is not None
        used = run_block(f"{export}\n{blocks['use']}", timeout=900)
        assert used.returncode == 0, (f"the README's second-terminal block exited {used.returncode}:\n"
                                      f"{used.stdout[-4000:]}\n{used.stderr[-4000:]}")

        listed = [line.split() for line in used.stdout.splitlines() if line.startswith("train ")]
        assert listed and listed[0][1:6] == ["annotations", "3", "3", "3", "Bound"], used.stdout

        env = {**os.environ, **dict(pair.split("=", 1) for pair in export.removeprefix("export ").split())}
        env["PATH"] = env["PATH"].replace("$PATH", os.environ["PATH"])

        def kubectl_json(*args: str) -> Any:
            out = subprocess.run(["kubectl", *args, "-o", "json"], env=env, capture_output=True, text=True,
                                 check=True, timeout=60).stdout
            return json.loads(out)

        nodes = {n["metadata"]["name"] for n in kubectl_json("get", "nodes")["items"]}
        pods = kubectl_json("get", "pods", "-l", "app=train")["items"]
        assert len(pods) == 3, pods
        for pod in pods:
            assert pod["status"]["phase"] == "Running", pod["status"]
            assert pod["spec"]["schedulerName"] == "gang-scheduler"
            assert pod["spec"]["nodeName"] in nodes
            logs = subprocess.run(["kubectl", "logs", pod["metadata"]["name"]], env=env, capture_output=True,
                                  text=True, check=True, timeout=60).stdout
            assert f"worker {pod['metadata']['name']} on {pod['spec']['nodeName']}" in logs, logs
        bound = kubectl_json("get", "events", "--field-selector", "reason=GangBound")["items"]
        assert any("default/train: 3 member(s) bound together" in e["message"] for e in bound), bound
    finally:
        if terminal.proc.poll() is None:
            started = time.monotonic()
            code = terminal.interrupt(timeout=240)
            print(f"Ctrl-C: `make real-nodes` exited {code} after {time.monotonic() - started:.1f}s")
        down = subprocess.run([sys.executable, str(ROOT / "hack" / "real-nodes" / "realnodes.py"), "down"], cwd=ROOT,
                              capture_output=True, text=True, check=False, timeout=240)
        terminal.close()
    assert "nothing to undo" in down.stderr, (f"Ctrl-C left something behind:\n{down.stderr}\n"
                                              + "\n".join(terminal.lines[-40:]))
