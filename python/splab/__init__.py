"""splab from Python: runs of the model, sweeps, and the run store.

    import splab
    r = splab.run({"workload": "gups", "log2_table": 16, "arch": "arm64"})
    r["figure"]["value"]                      # GUP/s
    splab.sweep("sweep.toml", jobs=2)         # or a dict; ray="127.0.0.1:6379"
    df = splab.runs("splab-runs.db")          # a pandas.DataFrame
    df.groupby(["arch", "policy"])["figure"].median()

A spec is a dict of the fields `splab sim` takes as flags, named with `_`
for `-` (docs/python.md). Bad input raises `splab.InputError` (a
`ValueError`) naming the value; a run that fails raises `splab.RunError`
(a `RuntimeError`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Union

from ._splab import InputError, RunError
from . import _splab

__all__ = ["run", "resolve", "sweep", "runs", "reproduce", "published", "build", "InputError", "RunError", "DEFAULT_STORE"]

#: The run store `sweep` and `runs` use unless told otherwise.
DEFAULT_STORE = "splab-runs.db"

Spec = Mapping[str, Any]


def _spec_json(spec: Spec) -> str:
    if not isinstance(spec, Mapping):
        raise InputError(f"spec: expected a dict of fields (workload, arch, policy, ...), got {type(spec).__name__}")
    return json.dumps(dict(spec))


def run(spec: Spec) -> Dict[str, Any]:
    """Runs one spec in this process and returns its JSON document as a
    dict: `figure`, `sim_seconds`, `tlb`, `sysctl`, ..., and `spec`, the
    spec with every default written out."""
    return json.loads(_splab.run(_spec_json(spec)))


def resolve(spec: Spec) -> Dict[str, Any]:
    """The spec with every default written out: what the run store keys a
    run by."""
    return json.loads(_splab.resolve(_spec_json(spec)))


def build() -> str:
    """The splab build (git commit) this package is."""
    return _splab.build()


def _worker() -> List[str]:
    """The command that runs one point: this package's command line."""
    return [sys.executable, "-m", "splab"]


def sweep(
    definition: Union[str, os.PathLike, Mapping[str, Any]],
    jobs: Optional[int] = None,
    ray: Optional[str] = None,
    store: Union[str, os.PathLike] = DEFAULT_STORE,
    python: Optional[str] = None,
    dry_run: bool = False,
) -> Dict[str, Any]:
    """Runs every point of a sweep not yet in `store`, each in its own
    process: `jobs` at once here (default: one per CPU), or as Ray tasks
    on the cluster at `ray` (e.g. "127.0.0.1:6379"). `definition` is the
    path of a sweep file (TOML) or a dict of the same shape. Returns the
    summary (runs, already, ran, failed, failures); with `dry_run`, the
    points as a list instead, running nothing. Ctrl-C stops it, keeping
    every finished run, and raises KeyboardInterrupt."""
    if isinstance(definition, Mapping):
        d, path = json.dumps(dict(definition)), None
    elif isinstance(definition, (str, os.PathLike)):
        d, path = None, os.fspath(definition)
    else:
        raise InputError(f"sweep: expected a dict or the path of a TOML file, got {type(definition).__name__}")
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise InputError(f"jobs={jobs!r}: expected a positive number")
    out = _splab.sweep(d, path, os.fspath(store), json.dumps(_worker()), jobs, ray, python or sys.executable, dry_run)
    return json.loads(out)


def reproduce(names: Optional[List[str]] = None, quick: bool = False, jobs: Optional[int] = None) -> Dict[str, Any]:
    """Runs the published superpage experiments `names` (default: all;
    `splab reproduce --list` names them), each on its machine's profile,
    superpages off and on, `jobs` at once (default: one per CPU), each in a
    process of its own; returns the document `splab reproduce --json`
    prints: `outcomes` (each experiment's figures off and on, counters,
    command), `published` (every published figure beside the prediction,
    with the errors and whether the change agrees) and `summary`. With
    `quick`, each at a tiny size: a check that they run, the figures not
    comparable. Ctrl-C ends the runs and raises KeyboardInterrupt (with
    jobs=1, once the experiment running ends)."""
    if isinstance(names, str):
        names = [names]
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise InputError(f"jobs={jobs!r}: expected a positive number")
    return json.loads(_splab.reproduce(list(names or []), json.dumps(_worker()), quick, jobs))


def published(reproduction: Mapping[str, Any]) -> "pandas.DataFrame":  # noqa: F821
    """A reproduction's published figures beside the predictions (its
    `published` list) as a pandas DataFrame: a row per figure, with the
    experiment, seed and place, the published and predicted off, on and
    change, the errors and `agrees`."""
    import pandas

    return pandas.DataFrame(reproduction["published"])


def runs(store: Union[str, os.PathLike] = DEFAULT_STORE, sweep: Optional[str] = None, where: Optional[str] = None, full: bool = False) -> "pandas.DataFrame":  # noqa: F821
    """The runs in the store as a pandas DataFrame: a row per run, a column
    per field of its spec (workload, arch, policy, memory, log2_table,
    ...), the headline figures (figure, figure_unit, sim_seconds,
    tlb_misses, promotions, ...), build, host and status. `sweep` keeps
    that sweep's runs and adds its point and axes (`axis.NAME`); `where`
    is an SQL condition over the columns; `full` adds each run's resolved
    spec and whole JSON document."""
    import pandas

    t = json.loads(_splab.runs(os.fspath(store), sweep, where, full))
    return pandas.DataFrame(t["rows"], columns=t["columns"])
