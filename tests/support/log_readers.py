"""Readers of what the loggers wrote, from the files alone: TensorBoard event files
(TFRecord framing of tensorboardX's Event protos) and wandb's offline run files (its
LevelDB-style log of Record protos)."""

from __future__ import annotations

import glob
import os
import struct

WANDB_BLOCK = 32 * 1024
WANDB_FULL, WANDB_LAST = 1, 4


def tensorboard_scalars(directory: str) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of every scalar in the event files under `directory`."""
    from tensorboardX.proto import event_pb2

    scalars: dict[str, dict[int, float]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "**", "events.out.tfevents.*"),
                                 recursive=True)):
        data, pos = open(path, "rb").read(), 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars


def wandb_history(run_file: str) -> list[dict[str, str]]:
    """The history rows ({key: JSON text}) of an offline wandb run file (run-*.wandb)."""
    from wandb.proto import wandb_internal_pb2

    data = open(run_file, "rb").read()
    assert data[:4] == b":W&B", run_file
    pos, pending, rows = 7, b"", []
    while pos + 7 <= len(data):
        if WANDB_BLOCK - pos % WANDB_BLOCK < 7:  # a block's tail too short for a header
            pos += WANDB_BLOCK - pos % WANDB_BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (WANDB_FULL, WANDB_LAST):
            record = wandb_internal_pb2.Record.FromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): item.value_json
                             for item in record.history.item})
    return rows
