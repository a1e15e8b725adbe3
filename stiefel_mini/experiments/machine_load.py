"""The load a timing was measured under, stored with it, and whether that load was too high to trust it.

A benchmark that times arms side by side (``benchmarks/``) wraps its measurement in
:class:`LoadMeter`, which records the machine's load averages before and after, the CPU the process
itself used and the CPU the rest of the machine used meanwhile (``/proc/stat``, with the part of it
run at a lower priority, ``nice``), in cores. :func:`run_load` reads that record back from a stored
benchmark file (and the one-minute load average that older files stored alone), and
:func:`load_sentence` says it in words for a chapter, flagging a run during which the run and other
work kept the cores busy (for an older file: the load average above the machine's core count): then
other work competed for the cores, so the times are longer than on an idle machine and the per-round
ratios noisier.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

__all__ = ["LoadMeter", "machine_cpu", "run_load", "overloaded", "load_sentence"]

_STAT = Path("/proc/stat")
BUSY = 0.95
"""The share of the cores' time that the run and other work together used, at or above which a run counts
as measured under load (:func:`overloaded`): the cores were all busy, so other work waited for them or
they for it."""


def machine_cpu() -> dict[str, float] | None:
    """The machine's CPU time since boot in seconds, from ``/proc/stat``: ``{"busy", "nice"}``
    (``busy``: all but idle and iowait; ``nice``: the part run at a lower priority); ``None``
    where there is no ``/proc/stat`` (macOS, Windows)."""
    try:
        fields = [int(x) for x in _STAT.read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    tick = os.sysconf("SC_CLK_TCK")
    return {"busy": (user + nice + system + irq + softirq + steal) / tick, "nice": nice / tick}


def _own_cpu() -> float:
    """CPU seconds used by this process (all its threads) and its finished children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class LoadMeter:
    """Measure the load over a ``with`` block; :attr:`record` holds it afterwards.

    ``record``: ``{"cores", "loadavg_before", "loadavg_after", "seconds", "process_cores",
    "other_cores", "other_niced_cores"}``: the CPUs this process may use, the 1, 5 and 15 minute
    load averages before and after, the block's wall-clock seconds, the CPU this process used
    (CPU seconds over wall seconds, e.g. 2.0 for two busy threads) and the CPU the rest of the
    machine used, all of it and its niced part (``None`` without ``/proc/stat``).

    >>> with LoadMeter() as meter:
    ...     pass  # the timed rounds
    >>> sorted(meter.record)[:2]
    ['cores', 'loadavg_after']
    """

    def __init__(self) -> None:
        self.record: dict | None = None

    def __enter__(self) -> "LoadMeter":
        self._load, self._machine = os.getloadavg(), machine_cpu()
        self._own, self._start = _own_cpu(), time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        wall = max(time.monotonic() - self._start, 1e-9)
        own, machine = _own_cpu() - self._own, machine_cpu()
        other = niced = None
        if machine is not None and self._machine is not None:
            other = round(max(0.0, machine["busy"] - self._machine["busy"] - own) / wall, 2)
            niced = round((machine["nice"] - self._machine["nice"]) / wall, 2)
        self.record = {"cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                       "loadavg_before": [round(x, 2) for x in self._load],
                       "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                       "seconds": round(wall, 1), "process_cores": round(own / wall, 2),
                       "other_cores": other, "other_niced_cores": niced}


def run_load(record: dict) -> dict | None:
    """The load a stored benchmark record was measured under, or ``None`` where it does not say.

    A record of :class:`LoadMeter` (key ``"load"``) is returned as it is; an older record that
    stored only the one-minute load average as it began (``"load_average"``: a number, or the
    1, 5 and 15 minute averages) becomes ``{"cores", "loadavg_before"}``, with the cores from
    ``"cores"`` or the provenance's ``cpu_count``.
    """
    if "load" in record:
        return record["load"]
    if "load_average" not in record:
        return None
    avg = record["load_average"]
    cores = record.get("cores") or record.get("provenance", {}).get("cpu_count")
    return {"cores": cores, "loadavg_before": [avg] if isinstance(avg, (int, float)) else list(avg)}


def _cpu_measured(load: dict) -> bool:
    """Whether the run measured the CPU it and the rest of the machine used (where ``/proc/stat`` exists)."""
    return load.get("process_cores") is not None and load.get("other_cores") is not None


def overloaded(load: dict) -> bool:
    """Whether other work competed for the cores: where the run measured the CPU it and the rest of the
    machine used, whether together they kept the cores busy (:data:`BUSY` of them or more); else whether
    the one-minute load average, before or after, was above the core count. The measured CPU comes first
    because the load average trails by about a minute: work stopped just before the run (a study paused
    for it) still counts in it."""
    if not load.get("cores"):
        return False
    if _cpu_measured(load):
        return load["process_cores"] + load["other_cores"] >= BUSY * load["cores"]
    peaks = [load[k][0] for k in ("loadavg_before", "loadavg_after") if load.get(k)]
    return max(peaks, default=0.0) > load["cores"]


def load_sentence(record: dict) -> str:
    """What the stored benchmark ``record`` says of its load, in one or two sentences for a chapter:
    the load average before (and after) on the machine's cores, the CPU the process and the rest
    of the machine used, and a flag when the load was above the core count."""
    load = run_load(record)
    if load is None:
        return "The run did not record the machine's load."
    span = f"{load['loadavg_before'][0]:.1f}"
    if load.get("loadavg_after"):
        span += f" before and {load['loadavg_after'][0]:.1f} after"
    text = f"The machine's load average was {span}, on {load['cores']} cores"
    if load.get("process_cores") is not None:
        text += f"; the benchmark used {load['process_cores']:.2f} cores"
        if load.get("other_cores") is not None:
            text += (f" and other work {load['other_cores']:.2f} (of which {load['other_niced_cores']:.2f} "
                     "at a lower priority)")
    text += "."
    if overloaded(load):
        why = (f"it and other work kept the {load['cores']} cores busy" if _cpu_measured(load)
               else f"the load average was above the {load['cores']} cores")
        text += (f" Measured under load: {why}, so other work competed for them: these times are longer than on "
                 "an idle machine and their ratios noisier; remeasure on an idle machine before relying on them.")
    return text
