"""py-spy profiles of a node: recording one during a load, and ranking its functions by
self and total samples."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from loadtest.bench.results.node import Profile, RankedFunction

TOP_FUNCTIONS = 30


_FRAME_RE = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _short_file(path: str) -> str:
    """``chronos/...`` for the package's files (absolute or relative paths), the path inside
    ``site-packages`` or the standard library for the rest."""
    rooted = "/" + path  # a relative chronos/... path matches /chronos/ too
    for marker in ("site-packages/", "/chronos/", "/loadtest/", "lib/python"):
        idx = rooted.rfind(marker)
        if idx >= 0:
            tail = rooted[idx + len(marker) :]
            return ("chronos/" + tail) if marker == "/chronos/" else tail
    return "/".join(path.split("/")[-2:])


def _frame_name(frame: str) -> str:
    m = _FRAME_RE.match(frame.strip())
    if not m:
        return frame.strip()
    return f"{m.group('func')} ({_short_file(m.group('file'))})"


def aggregate_profile(raw: str, top: int = TOP_FUNCTIONS) -> Profile:
    """Self and total samples per function from py-spy's ``raw`` (collapsed stacks) output.

    Each line is ``frame;frame;...;frame count`` (outermost first); with ``--threads`` the first
    frame names the thread. Self time goes to the innermost frame, total time once to every
    distinct function on the stack.
    """
    total_samples = 0
    self_counts: dict[str, int] = {}
    total_counts: dict[str, int] = {}
    threads: dict[str, int] = {}
    for line in raw.splitlines():
        line = line.rstrip()
        if not line:
            continue
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        if frames[0].startswith(("thread ", "process ")):
            threads[frames[0]] = threads.get(frames[0], 0) + count
            frames = frames[1:]
            if frames and frames[0].startswith("thread "):
                threads[frames[0]] = threads.get(frames[0], 0) + count
                frames = frames[1:]
        total_samples += count
        if not frames:
            continue
        names = [_frame_name(f) for f in frames]
        self_counts[names[-1]] = self_counts.get(names[-1], 0) + count
        for name in set(names):
            total_counts[name] = total_counts.get(name, 0) + count

    def ranked(counts: dict[str, int]) -> list[RankedFunction]:
        items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        return [
            RankedFunction(k, v, round(100 * v / total_samples, 1) if total_samples else 0.0)
            for k, v in items
        ]

    return Profile(
        samples=total_samples,
        threads=dict(sorted(threads.items(), key=lambda kv: -kv[1])),
        self=ranked(self_counts),
        total=ranked(total_counts),
    )


def profile_text(profile: Profile) -> str:
    lines = [f"{profile.samples} samples"]
    for title, ranked in (("self", profile.self), ("total", profile.total)):
        lines += ["", f"{title:>5}  % samples  function"]
        for item in ranked:
            lines.append(f"{item.percent:>6.1f}  {item.samples:>8}  {item.function}")
    if profile.threads:
        lines += ["", "threads"]
        lines += [f"{count:>8}  {name}" for name, count in profile.threads.items()]
    return "\n".join(lines) + "\n"


def py_spy_binary() -> str | None:
    sibling = Path(sys.executable).parent / "py-spy"
    return str(sibling) if sibling.exists() else shutil.which("py-spy")


class Profiler(threading.Thread):
    """py-spy on one node for ``seconds``, ``delay`` seconds after the load starts: on its
    main process (``raw_path``) and on its intake process (``intake_raw_path``), each its own
    recording (py-spy's ``--subprocesses`` records nothing once a short-lived header probe
    exits)."""

    def __init__(self, pid: int, delay: float, seconds: float, raw_path: Path) -> None:
        super().__init__(name="bench-profiler", daemon=True)
        self.pid, self.delay, self.seconds, self.raw_path = pid, delay, seconds, raw_path
        self.intake_raw_path = raw_path.with_name(raw_path.name.replace("node", "intake"))
        self.cancel = threading.Event()
        self.error: str | None = None
        self.procs: list[subprocess.Popen[bytes]] = []

    def _record(self, binary: str, pid: int, raw: Path) -> subprocess.Popen[bytes]:
        argv = [binary, "record", "-p", str(pid), "-d", str(int(self.seconds)), "-r", "100"]
        argv += ["-f", "raw", "-o", str(raw), "--threads", "--gil", "--nonblocking"]
        with raw.with_suffix(".log").open("wb") as sink:
            return subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)

    def run(self) -> None:
        binary = py_spy_binary()
        if binary is None:
            self.error = "py-spy not found"
            return
        if self.cancel.wait(self.delay):
            return
        self.procs.append(self._record(binary, self.pid, self.raw_path))
        intake = intake_pid(self.pid)
        if intake is not None:
            self.procs.append(self._record(binary, intake, self.intake_raw_path))
        for proc in self.procs:
            try:
                code = proc.wait(self.seconds + 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code != 0 and self.error is None:
                self.error = f"py-spy exited with {code} (see {self.raw_path.stem}.log)"

    def stop(self) -> None:
        self.cancel.set()
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGINT)
        self.join(90)


def intake_pid(node: int) -> int | None:
    """The pid of a node's intake process (``python -m chronos.intake.child``), if it runs."""
    try:
        for child in psutil.Process(node).children():
            if "chronos.intake.child" in " ".join(child.cmdline()):
                return int(child.pid)
    except psutil.Error:
        return None
    return None


def finish_profile(profiler: Profiler, sdir: Path) -> Profile:
    raw = profiler.raw_path
    if not raw.exists():
        return Profile(samples=0, error=profiler.error or "no profile written")
    prof = aggregate_profile(raw.read_text(errors="replace"))
    (sdir / "profile-node0.txt").write_text(profile_text(prof))
    intake = profiler.intake_raw_path
    if intake.exists():
        text = profile_text(aggregate_profile(intake.read_text(errors="replace")))
        (sdir / "profile-intake0.txt").write_text(text)
    return prof
