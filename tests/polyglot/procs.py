"""Worker processes of the polyglot runs that talk in lines: a Rust worker (`contend`), a Python
script and a Node script of the same protocol, started alike, each line kept until asked for."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
#: Bounds a hang, never a speed.
BOUND = 60.0

#: Every worker started, so that none outlives the run (`stop_all`).
STARTED: list[subprocess.Popen[str]] = []


@dataclass
class Worker:
    lang: str
    process: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    log: list[str] = field(default_factory=list)

    def expect(self, word: str) -> list[str]:
        """The rest of the next line starting with `word` (earlier lines are kept in the log)."""
        deadline = time.monotonic() + BOUND
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(
                    f"✗ {self.lang} worker: no {word} within {BOUND:.0f} s; {self.log[-5:]}"
                ) from None
            self.log.append(line)
            head, *rest = line.split()
            if head == word:
                return rest

    def said(self, word: str) -> bool:
        """Whether a line starting with `word` came (without waiting)."""
        while True:
            try:
                self.log.append(self.lines.get_nowait())
            except queue.Empty:
                break
        return any(line.split()[0] == word for line in self.log)

    def tell(self, line: str = "go") -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()


def spawn(lang: str, script: str, url: str, namespace: str, *args: str) -> Worker:
    """Starts the `lang` worker: `contend` for Rust, `<script>.py` or `<script>.js` beside this
    file for Python and Node, with the URL, the namespace and `args`."""
    contend = os.environ.get(
        "ACCORD_CONTEND", str(REPO / "target/debug/examples/contend")
    )
    command = {
        "rust": [contend, url, namespace, *args],
        "python": [sys.executable, str(HERE / f"{script}.py"), url, namespace, *args],
        "node": ["node", str(HERE / f"{script}.js"), url, namespace, *args],
    }[lang]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    STARTED.append(process)
    worker = Worker(lang, process)

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            worker.lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return worker


def stop_all() -> None:
    """Kills every worker still running (a stopped one too)."""
    for process in STARTED:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait()
