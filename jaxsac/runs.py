"""Runs kept apart: every run has an id, each of its folders records it, and a run never
writes into another run's files.

A run is one training from its first env step to its last, across resumes. `train`
gives a new run a fresh id (`new_run_id`); its log_dir records it in `run.json` when
the run starts, its checkpoint_dir with the first save (`claim`, called by
`checkpoint.save`), and every checkpoint step's meta holds it too. A resumed run keeps
the id of the checkpoints it continues.

    run = check_run(config, "train")     # errors when a new run would mix with another
    start_logs(config, run)              # log_dir's run.json; a resume drops later rows
    clear(log_dir, checkpoint_dir)       # delete a previous run's files (CLI --overwrite)
    directory, step = locate(directory, step, "load_policy")   # a run or a step folder

A new run (resume=False) refuses a log_dir holding a previous run's logs and a
checkpoint_dir holding checkpoints; a resume refuses a log_dir of another run and a
checkpoint_dir without a checkpoint. Errors say what to do instead.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import shutil
import time
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxsac import storage
from jaxsac.config import SACConfig

RECORD = "run.json"
"""The file in each of a run's folders that records the run."""
LOG_FILES = (RECORD, "metrics.csv", "curve.png", "tb", "policy.mp4")
"""What a run writes into its log_dir (jaxsac.logger, the CLI's --video, its record)."""
BEST = "best"
"""The folder in checkpoint_dir holding the checkpoint of the best evaluation so far
(`keep_best`): one step, replaced atomically by a better one."""
TMP_SUFFIX = ".orbax-checkpoint-tmp"
"""The suffix of a step folder whose save did not finish."""


class Run(NamedTuple):
    """A run about to train: its id, and the checkpoint step a resumed run continues
    from (None for a new run)."""

    run_id: str
    resume_step: int | None


def new_run_id() -> str:
    """A fresh run id: the UTC start time and 6 random hex digits, e.g.
    "20261206-231512-3fa9c1"; on several hosts the first host's, the same on all."""
    run_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)
    if jax.process_count() == 1:
        return run_id
    text = np.frombuffer(run_id.encode().ljust(32), np.uint8)
    return bytes(np.asarray(multihost_utils.broadcast_one_to_all(text))).decode().strip()


# --- records -------------------------------------------------------------------------


def read_record(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The run record of `directory` ({"run_id": ..., ...}); None when it has none."""
    path = os.path.join(os.fspath(directory), RECORD)
    try:
        with open(path) as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a readable run record ({e}); delete it to let "
                         "the folder be claimed again") from e
    if not isinstance(record, dict) or not isinstance(record.get("run_id"), str):
        raise ValueError(f"{path} is not a run record (no run_id); delete it to let the "
                         "folder be claimed again")
    return record


def write_record(directory: str | os.PathLike, record: dict[str, Any]) -> None:
    """Write `directory`'s run record atomically (a whole file or the previous one)."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, RECORD)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def claim(directory: str, run_id: str | None, key_checksum: Any, owner: str) -> str:
    """The run id a save into checkpoint folder `directory` records: `run_id`, or when
    None the run the folder records (a state of the same key) or a new one. Writes the
    folder's record when the folder has none or no checkpoint left.

    Raises FileExistsError when the folder holds checkpoints of another run: another
    `run_id`, or (run_id None) a state whose key differs from the recorded run's. On
    several hosts every host checks the same and only the first writes the record.
    """
    if run_id is not None and (not isinstance(run_id, str) or not run_id):
        raise ValueError(f"{owner}: run_id={run_id!r} is invalid: must be None or a "
                         "non-empty string")
    steps = _finished_steps(directory)
    record = read_record(directory)
    if record is not None and steps:
        same = (record["run_id"] == run_id if run_id is not None
                else record.get("key_checksum") == key_checksum)
        if not same:
            this = (f"run {run_id}" if run_id is not None else
                    "this state (its key differs: another seed or another run)")
            raise FileExistsError(
                f"{owner}: {directory} holds the checkpoints of run {record['run_id']} "
                f"(steps {steps}), not of {this}: save into another directory, continue "
                f"run {record['run_id']} (train with resume=True), or delete its "
                "checkpoints first (jaxsac.runs.clear; CLI: --overwrite)")
        return record["run_id"]
    run_id = run_id or new_run_id()
    if jax.process_index() == 0:
        write_record(directory, {"run_id": run_id, "key_checksum": key_checksum,
                                 "claimed": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                          time.gmtime())})
    return run_id


def _finished_steps(directory: str) -> list[int]:
    """The complete steps of `directory` from the file system alone: step folders with
    Orbax's finalized marker (no Orbax reader, which on several hosts is a barrier that
    every host must reach: the first host creates the folder while the others look)."""
    if not os.path.isdir(directory):
        return []
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit() and
                  os.path.isfile(os.path.join(directory, name, storage.FINALIZED_MARKER)))


# --- which runs a checkpoint folder holds --------------------------------------------


def step_runs(directory: str) -> dict[str, list[int]]:
    """{run: its complete steps in `directory`}: each step's run id from its meta, or for
    a step written before run ids, "the run of key checksum [a, b]" (its run's key)."""
    steps = storage.complete_steps(directory)
    if not steps:
        return {}
    runs: dict[str, list[int]] = {}
    manager = storage.reader(directory)
    try:
        for step in steps:
            meta = storage.read_json(manager, directory, step, ("meta",))["meta"]
            key = meta.get("checksums", {}).get("progress", {}).get("key")
            runs.setdefault(meta.get("run_id") or f"of key checksum {key}", []).append(step)
    finally:
        manager.close()
    return runs


def check_one_run(directory: str, owner: str) -> None:
    """ValueError when checkpoint folder `directory` holds the steps of several runs (so
    its newest step may be another run's)."""
    runs = step_runs(directory)
    if len(runs) > 1:
        listed = "; ".join(f"run {run}: steps {steps}" for run, steps in runs.items())
        raise ValueError(f"{owner}: {directory} holds the checkpoints of {len(runs)} runs "
                         f"({listed}), so its newest step is not one run's: pass step=... "
                         "to choose one, or move each run's steps to a folder of its own")


def locate(directory: str | os.PathLike, step: int | None, owner: str
           ) -> tuple[str, int | None]:
    """(checkpoint folder, step) for `directory` given as a checkpoint folder, a step
    folder `<checkpoint folder>/<step>`, or a run folder (a log_dir whose record names
    its checkpoint folder, or a folder with one sub-folder of checkpoints). Any other
    folder comes back as it is (reading it then says that it holds no checkpoint).

    Raises FileNotFoundError naming the sub-folders to pass when a run folder has
    several, and ValueError for a `step` that contradicts a step folder.
    """
    directory = storage.check_directory(directory, owner)
    if storage.complete_steps(directory):
        return directory, step
    parent, name = os.path.split(directory)
    if name.isdigit() and int(name) in storage.complete_steps(parent):
        if step is not None and step != int(name):
            raise ValueError(f"{owner}: step={step!r} is invalid for the step folder "
                             f"{directory}: must be None or {int(name)}")
        return parent, int(name)
    if not os.path.isdir(directory):
        return directory, step
    record = read_record(directory)
    named = record.get("checkpoint_dir") if record else None
    if named and storage.complete_steps(os.path.join(directory, named)):
        return os.path.normpath(os.path.join(directory, named)), step
    found = [os.path.join(directory, sub) for sub in sorted(os.listdir(directory))
             if storage.complete_steps(os.path.join(directory, sub))]
    if len(found) > 1:
        raise FileNotFoundError(f"{owner}: no checkpoint in {directory}; its folders "
                                f"{found} hold checkpoints: pass one of them")
    return (found[0], step) if found else (directory, step)


def best_directory(directory: str | os.PathLike, owner: str) -> str:
    """The folder of the best evaluation's checkpoint of the run whose checkpoint, step
    or run folder is `directory`; FileNotFoundError when the run kept none."""
    directory, _ = locate(directory, None, owner)
    best = directory if os.path.basename(directory) == BEST else os.path.join(directory, BEST)
    if not storage.complete_steps(best):
        raise FileNotFoundError(f"{owner}: no best checkpoint in {best}: train with "
                                "keep_best=True (CLI: --keep-best) to keep one")
    return best


# --- starting a run ------------------------------------------------------------------


def check_run(config: SACConfig, owner: str) -> Run:
    """The run `config` starts or continues, after checking its folders (only reads).

    Raises FileExistsError when a new run's log_dir holds a previous run's logs or its
    checkpoint_dir holds checkpoints, or when a resumed run's log_dir holds another
    run's logs; FileNotFoundError when resume=True finds no checkpoint; ValueError when
    the checkpoints are of several runs.
    """
    checkpoint_dir = config.checkpoint_dir and os.path.abspath(config.checkpoint_dir)
    log_dir = config.log_dir if jax.process_index() == 0 else None  # the host that logs
    if not config.resume:
        _check_new_run(log_dir, checkpoint_dir, owner)
        return Run(new_run_id(), None)
    steps = storage.complete_steps(checkpoint_dir)
    if not steps:
        there = "empty directory" if os.path.isdir(checkpoint_dir) else "no such directory"
        raise FileNotFoundError(
            f"{owner}: resume=True, but checkpoint_dir={config.checkpoint_dir!r} holds no "
            f"checkpoint ({there}): check the path, or start a new run (resume=False; CLI: "
            "--resume-if-present resumes only when there is a checkpoint)")
    check_one_run(checkpoint_dir, owner)
    [stored] = step_runs(checkpoint_dir)
    record = read_record(checkpoint_dir)
    run_id = (record["run_id"] if record else
              stored if not stored.startswith("of key") else new_run_id())
    logged = read_record(log_dir) if log_dir else None
    if logged is not None and logged["run_id"] != run_id:
        raise FileExistsError(
            f"{owner}: log_dir={config.log_dir!r} holds the logs of run {logged['run_id']}, "
            f"not of run {run_id} that checkpoint_dir={config.checkpoint_dir!r} holds: pass "
            "that run's log_dir, or another one")
    return Run(run_id, steps[-1])


def _check_new_run(log_dir: str | None, checkpoint_dir: str | None, owner: str) -> None:
    problems = []
    if checkpoint_dir:
        steps = storage.complete_steps(checkpoint_dir)
        if steps:
            problems.append(f"checkpoint_dir={checkpoint_dir!r} holds the checkpoints of "
                            f"{_which(checkpoint_dir)} (steps {steps})")
    if log_dir:
        found = [name for name in LOG_FILES if os.path.exists(os.path.join(log_dir, name))]
        if found:
            problems.append(f"log_dir={log_dir!r} holds the logs of {_which(log_dir)} "
                            f"({', '.join(found)})")
    if problems:
        raise FileExistsError(
            f"{owner}: a new run, but {'; '.join(problems)}: continue that run with "
            "resume=True (CLI: --resume), start this one in another directory, or delete "
            "the previous run's files first (jaxsac.runs.clear(log_dir, checkpoint_dir); "
            "CLI: --overwrite)")


def _which(directory: str) -> str:
    record = read_record(directory)
    return f"run {record['run_id']}" if record else "a previous run"


def start_logs(config: SACConfig, run: Run) -> None:
    """Record `run` in config.log_dir (naming its checkpoint folder, relative to it);
    a resumed run's metrics.csv loses the rows after the step it resumes from (the
    resumed run writes them again)."""
    if not config.log_dir or jax.process_index() != 0:
        return
    checkpoint_dir = (os.path.relpath(os.path.abspath(config.checkpoint_dir),
                                      os.path.abspath(config.log_dir))
                      if config.checkpoint_dir else None)
    if run.resume_step is not None:
        _drop_rows_after(os.path.join(config.log_dir, "metrics.csv"), run.resume_step)
    write_record(config.log_dir, {"run_id": run.run_id, "env_id": config.env_id,
                                  "seed": config.seed, "checkpoint_dir": checkpoint_dir,
                                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                           time.gmtime())})


def _drop_rows_after(path: str, env_steps: int) -> None:
    """Rewrite metrics.csv (atomically) without its rows beyond `env_steps`."""
    if not os.path.exists(path):
        return
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
        fields = list(rows[0]) if rows else []
    kept = [row for row in rows if int(float(row["env_steps"])) <= env_steps]
    if len(kept) == len(rows):
        return
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept)
    os.replace(tmp, path)


def clear(log_dir: str | os.PathLike | None, checkpoint_dir: str | os.PathLike | None
          ) -> list[str]:
    """Delete what a run wrote: its logs in `log_dir` (LOG_FILES) and its checkpoint
    steps (finished or not), best checkpoint and record in `checkpoint_dir`. Other
    files stay. Returns the paths deleted."""
    paths = []
    if log_dir:
        paths += [os.path.join(log_dir, name) for name in LOG_FILES]
    if checkpoint_dir and os.path.isdir(checkpoint_dir):
        paths += [os.path.join(checkpoint_dir, name) for name in sorted(os.listdir(checkpoint_dir))
                  if name.isdigit() or name.endswith(TMP_SUFFIX) or name in (BEST, RECORD)]
    deleted = []
    for path in map(os.fspath, paths):
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
        else:
            continue
        deleted.append(path)
    return deleted
