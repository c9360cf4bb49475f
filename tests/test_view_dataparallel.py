"""fitcore.strategies.dataparallel.view: each replica's shapes in a step, and the first step planned."""

from __future__ import annotations

import dataclasses

import pytest

from fitcore.core.config import FitConfig
from fitcore.core.phases import step_bytes
from fitcore.protocols import registry
from fitcore.strategies.dataparallel import view as dataparallel
from tests.view_helpers import plan_of, trained_steps


def test_split_table_of_a_real_step():
    step = trained_steps(FitConfig(devices="virtual:3", epochs=1))[0]
    rows = dataparallel.split_table(step)
    assert [r["Device"] for r in rows] == [
        "virtual:0 (emulated on CPU)",
        "virtual:1 (emulated on CPU)",
        "virtual:2 (emulated on CPU)",
        "Outside (gathered)",
    ]
    assert [r["Rows"] for r in rows] == [67, 67, 66, 200]
    assert [r["Batch rows"] for r in rows] == ["0–66", "67–133", "134–199", "0–199"]
    assert [r["Input shape"] for r in rows] == ["[67, 2]", "[67, 2]", "[66, 2]", "[200, 2]"]
    assert [r["Output shape"] for r in rows] == ["[67, 1]", "[67, 1]", "[66, 1]", "[200, 1]"]


@pytest.mark.parametrize(
    "cfg",
    [
        FitConfig(),
        FitConfig(devices="virtual:3"),
        FitConfig(data_size=40, batch_size=5, devices="virtual:8", weights=(1.0, 2.0, 3.0)),
        FitConfig(data_size=9, batch_size=9, devices="virtual:4"),
        FitConfig(data_size=50, batch_size=40, devices="virtual:1"),
    ],
)
def test_planned_split_is_what_the_trainer_records(cfg):
    first = trained_steps(dataclasses.replace(cfg, epochs=1))[0]
    assert dataparallel.planned_split(cfg, plan_of(cfg)) == dataparallel.split_table(first)


VIEW_NAMES = ("planned_step", "sections", "parallelism", "console_frame", "CONSOLE_HINT")


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_strategys_view_module_exposes_the_same_names(name):
    """A strategy is a plug-in: the page and the live view reach its parts only through these names."""
    entry = registry.strategy(name)
    view = entry.view_module
    assert view is entry.view() and view.__name__ == f"fitcore.strategies.{name}.view"
    assert [n for n in VIEW_NAMES if not hasattr(view, n)] == []
    assert entry.planned_step is view.planned_step
    assert view.sections(None, None, None) == []  # no run and no valid controls: no panel
    # each entry's own bytes of a step, side by side under the strategies' names
    assert step_bytes(200, 2, 2, 4)[name] == entry.bytes_of_step(200, 2, 2, 4)


def test_dataparallels_panel_is_the_planned_split_before_a_run():
    cfg = FitConfig(devices="virtual:3")
    section, memory = dataparallel.sections(None, cfg, plan_of(cfg))  # the split, then what each device holds
    assert memory.name == "memory"
    assert section.title == "Shapes inside and outside the model"
    assert section.tables == (dataparallel.planned_split(cfg, plan_of(cfg)),)
    assert [r["Rows"] for r in section.tables[0]] == [67, 67, 66, 200]


def test_what_each_device_holds_is_measured_and_says_why_device_0_fills_up():
    """DataParallel on virtual:3, trained to its end: device 0 holds W, b (3 numbers, 12 B), their
    gradients and all of Adam's state (two moments, 24 B, and two 4-byte step counts); each other device a
    copy of W, b and their gradients; device 0 also gathers the 200 outputs and the loss (800 + 4 B)."""
    from fitcore.strategies.dataparallel import view as dp_view
    from tests.view_helpers import run_to_end

    snap = run_to_end(FitConfig(devices="virtual:3", epochs=2, data_size=200, batch_size=200))
    (memory,) = [s for s in dp_view.sections(snap, snap.config, snap.plan) if s.name == "memory"]
    (rows,) = memory.tables
    assert [(r["Parameters"], r["Gradients"], r["Optimizer state"], r["Gathered outputs and loss"])
            for r in rows] == [("12 B", "12 B", "32 B", "804 B"), ("12 B", "12 B", "0 B", "none"),
                               ("12 B", "12 B", "0 B", "none")]  # fmt: skip
    assert [m["parameters"] for m in snap.extra["memory"]] == [12, 12, 12]  # the same figures, measured
    assert memory.notes[0].startswith(
        "Bytes each device or rank holds, measured from its tensors after its first"
    )
    assert memory.notes[1].startswith("Why device 0 fills up") and "[200, 1]" in memory.notes[1]
    # before a run: the formula's, said so
    (planned,) = [s for s in dp_view.sections(None, snap.config, plan_of(snap.config)) if s.name == "memory"]
    assert planned.tables[0] == rows and planned.notes[0].startswith("Bytes each device or rank will hold")


def test_on_gpus_each_device_shows_what_its_allocator_handed_out(monkeypatch):
    # torch.cuda.memory_allocated per GPU, as a machine with 3 GPUs answers it (here made up, by index)
    import torch

    from fitcore.core.memory import allocated
    from fitcore.strategies.dataparallel.memory import dataparallel_memory
    from fitcore.view.common import memory_notes, memory_rows

    asked = []
    monkeypatch.setattr(
        torch.cuda, "memory_allocated", lambda device: asked.append(str(device)) or 1024 * (1 + device.index)
    )
    assert allocated("cpu") == {} and allocated("cuda:2") == {"allocated": 3072}
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(4, 2)).sum().backward()
    optimizer.step()
    asked.clear()
    rows = dataparallel_memory(list(model.parameters()), optimizer, 3, device_ids=(0, 1, 2))
    assert asked == ["cuda:0", "cuda:1", "cuda:2"]  # each GPU asked once, for its own row
    assert [(r["optimizer_state"], r["allocated"]) for r in rows] == [(32, 1024), (0, 2048), (0, 3072)]
    table = memory_rows(("cuda:0", "cuda:1", "cuda:2"), rows)
    assert [r["Allocated on its GPU"] for r in table] == ["1.0 kB", "2.0 kB", "3.1 kB"]
    assert memory_notes(rows, True)[1].startswith("Allocated on its GPU: torch.cuda.memory_allocated")
    # virtual devices (or one GPU holding them all) have no allocated bytes of their own: no column
    plain = dataparallel_memory(list(model.parameters()), optimizer, 3)
    assert all("allocated" not in r for r in plain) and len(memory_notes(plain, True)) == 1
