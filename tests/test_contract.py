"""The strategy contract, held to every registered strategy, and proved by one that lives in tests/ only.

tests/solo_strategy.py's `solo` is registered through the public registration (what an installed package's
`fitcore.strategies` entry point does) and runs through the command line, the page, a recording, `check`,
`compare` and `whatif` without a line changed outside tests/: the standing proof that a strategy is one
package, its drawer and one registration.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcore import api, cli
from fitcore.core import i18n
from fitcore.core.config import FitConfig, validate
from fitcore.core.data import least_squares, make_data
from fitcore.core.devices import parse_devices
from fitcore.core.events import RunEnded, RunStarted, Step
from fitcore.core.phases import ring_bytes
from fitcore.core.projection import Projection
from fitcore.kit import check, live
from fitcore.lab import compare, whatif
from fitcore.protocols import registry
from fitcore.protocols.split import COLUMNS, ROWS, WHOLE
from fitcore.runs import recording
from fitcore.runs.pool import RunPool
from fitcore.view.contract import StrategyView
from tests import solo_strategy, test_app, test_static, zero_strategy
from tests.helpers import installed_site, wait_for
from tests.view_helpers import plan_of

ROOT = Path(__file__).resolve().parents[1]
page = test_app.page  # fresh sessions of the page, every run stopped afterwards
VIEW = ("planned_step", "sections", "parallelism", "console_frame", "CONSOLE_HINT")
SOLO = dict(strategy="solo", devices="cpu", epochs=300, data_size=64, batch_size=64, lr=0.5)


def registered(entry):
    """The strategy registered for one test, as an installed package's is, and taken out again after it."""
    registry.register(entry)
    try:
        yield entry
    finally:
        registry.unregister(entry.name)


@pytest.fixture
def solo():
    """The one-device strategy in tests/ (tests/solo_strategy.py)."""
    yield from registered(solo_strategy.STRATEGY)


def config_of(entry) -> FitConfig:
    """A small valid run of the strategy: ranks on the CPU where it has them."""
    return validate(FitConfig(strategy=entry.name, devices="cpu" if entry.processes else "virtual:2",
                              data_size=12, batch_size=4, epochs=2))  # fmt: skip


def lstsq_gap(cfg: FitConfig, weights, bias) -> float:
    w, b = least_squares(*make_data(cfg))
    return max(abs(x - y) for x, y in zip((*weights, bias), (*w, b)))


@pytest.fixture
def zero():
    """The ranked strategy in tests/ (tests/zero_strategy.py)."""
    yield from registered(zero_strategy.STRATEGY)


def test_every_function_a_builtin_strategy_hooks_is_held_to_its_type_by_the_checker():
    """tests/typed_contracts.py binds each public function a built-in strategy's record names (its trainers,
    console lines, picture part, questions, check rows, compare causes, ...) to the hook's signature with
    the floor's types, for mypy; a function a record names and that file does not bind fails here. Lambdas
    and a package's private helpers in its __init__.py are the record's own and are left out."""
    import fitcore
    from fitcore.protocols.registry import Hook
    from tests import typed_contracts

    parts = [value for value in vars(typed_contracts).values() if isinstance(value, tuple)]
    bound = {id(part) for value in parts for part in value}
    missing = []
    for package in fitcore.BUILTIN:
        entry = package.STRATEGY
        for field in dataclasses.fields(entry):
            value = getattr(entry, field.name)
            for target in value.values() if isinstance(value, dict) else (value,):
                target = target.resolve() if isinstance(target, Hook) else target
                public = inspect.isfunction(target) and not target.__name__.startswith(("_", "<"))
                if public and id(target) not in bound:
                    missing.append(f"{entry.name}.{field.name}: {target.__module__}.{target.__qualname__}")
    assert missing == []


@pytest.mark.parametrize("name", [*registry.NAMES, solo_strategy.NAME, zero_strategy.NAME])
def test_every_registered_strategy_keeps_the_contract(solo, zero, name):
    entry = registry.strategy(name)
    assert entry.name == name and registry.of(FitConfig(strategy=name)) is entry
    for role in registry.WORDS:  # its words are its catalog's keys, in both languages
        entry_words = i18n.catalog()[entry.words[role]]
        assert entry_words["en"] and entry_words["zh"]
    cfg = config_of(entry)
    assert isinstance(entry.steps_per_epoch(cfg), int)
    assert cfg.total_steps == cfg.epochs * cfg.batches_per_epoch == cfg.epochs * entry.steps_per_epoch(cfg)
    assert all(hasattr(entry.view_module, part) for part in VIEW)
    assert isinstance(entry.view_module, StrategyView)  # its names; its types: mypy, tests/typed_contracts.py
    assert entry.split in (ROWS, COLUMNS, WHOLE) and entry.rules(cfg, parse_devices(cfg.devices)) is None
    step, labels = entry.planned_step(cfg, plan_of(cfg))
    assert isinstance(step, Step) and len(labels) >= 1
    assert entry.phases() and all(isinstance(p, str) for p in entry.phases())
    assert all(isinstance(p, Projection) for p in entry.projections())  # FSDP: the ZeRO-3 row stands for it
    assert isinstance(entry.bytes_of_step(cfg.batch_size, len(labels), cfg.n_features, 4, cfg), int)
    plan = parse_devices(cfg.devices)
    assert entry.markdown() and entry.engine(plan) and entry.engine_word(plan)


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_hook_a_record_names_resolves_to_what_it_says(name):
    """A package's record names its modules' functions by where they live (registry.hook, registry.value):
    each resolves, the function to a callable, the value to its object, and a record holds no other kind of
    deferred hook (no forwarder of its own in its `__init__.py`)."""
    entry = registry.strategy(name)
    hooks = [v for v in vars(entry).values() if isinstance(v, registry.Hook)]
    hooks += [v for v in entry.detail_lines.values() if isinstance(v, registry.Hook)]
    assert len(hooks) >= 6
    for found in hooks:
        module, _, attr = found.path.partition(":")
        # its own package's, the shared questions, or the engine's own trainers that run its Engine
        shared = ("fitcore.view.quiz", "fitcore.engine.")
        assert module.startswith((f"fitcore.strategies.{name}", *shared)), found.path
        target = found.resolve()
        assert target is not None if found.is_value else callable(target), found.path
    package = importlib.import_module(f"fitcore.strategies.{name}")
    tree = ast.parse(Path(package.__file__).read_text(encoding="utf-8"))
    imports = (ast.Import, ast.ImportFrom)
    functions = [f for f in tree.body if isinstance(f, ast.FunctionDef)]
    forwarders = [f.name for f in functions if any(isinstance(n, imports) for n in ast.walk(f))]
    assert forwarders == []  # no function that imports a module to call it: the record names it instead


# each hook as its consumers call it: the arguments it is given (fitcore.protocols.registry.Strategy's
# docstring)
CALLS = {
    "steps_per_epoch": ("cfg",), "train": ("cfg", "on_event"), "torchrun": ("cfg", "on_event"),
    "step_lines": ("step",), "markdown": (), "bytes_of_step": ("rows", "k", "d", "itemsize", "cfg"),
    "check_rows": ("machine",), "comparer": ("cfg", "data", "device", "plan", "toggles"),
    "compare_causes": ("cfg", "plan", "toggles", "trained"), "engine": ("plan",), "engine_word": ("plan",),
    "questions": ("step", "cfg", "labels", "extra"), "presets": ("tutorial",), "phases": (),
    "projections": (), "picture": ("cfg", "step", "devices", "extra"), "flows": ("cfg", "step"),
    "calibrate": ("cfg", "k"), "rules": ("cfg", "plan"), "lab_skip": ("cfg",), "check_config": ("cfg",),
    "one_device": ("cfg",), "ranks": ("cfg",), "view": (),
}  # fmt: skip
KEYWORDS = {"train": ("control", "plan"), "torchrun": ("control", "plan"), "markdown": ("cfg",)}


@pytest.mark.parametrize("name", [*registry.NAMES, solo_strategy.NAME, zero_strategy.NAME])
def test_every_hook_takes_the_arguments_its_consumers_give(solo, zero, name):
    """Each hook of each registered strategy, resolved, binds the call its consumers make: a hook from an
    outside package with the wrong parameters fails here, not in a class."""
    entry = registry.strategy(name)
    for field, args in CALLS.items():
        found = getattr(entry, field)
        if found is None:
            continue  # an optional hook the strategy has not (torchrun, calibrate, one_device, ranks)
        if isinstance(found, registry.Hook):
            if found.is_value:
                assert found() is not None, (name, field)
                continue
            found = found.resolve()
        signature = inspect.signature(found)
        signature.bind(*args)  # raises TypeError naming what does not fit
        signature.bind(*args, **dict.fromkeys(KEYWORDS.get(field, ())))
    for lines in entry.detail_lines.values():
        inspect.signature(lines.resolve() if isinstance(lines, registry.Hook) else lines).bind("value")
    with pytest.raises(TypeError):  # and the check can fail: a hook that takes too few arguments
        inspect.signature(lambda cfg: None).bind(*CALLS["rules"])


def test_a_hook_imports_its_module_at_its_first_call_only():
    late = registry.hook("fitcore.strategies.tp.view:markdown")
    assert late._target is None and "Hook('fitcore.strategies.tp.view:markdown')" == repr(late)
    assert late() == registry.strategy("tp").markdown() and late._target is not None
    assert registry.value("fitcore.strategies.tp.layout:TP_PHASES")() == registry.strategy("tp").phases()
    with pytest.raises(ModuleNotFoundError):
        registry.hook("fitcore.strategies.nowhere:f")()


def test_a_name_already_taken_or_a_word_missing_is_refused(solo):
    twin = {**vars(solo_strategy.STRATEGY), "label": "x"}
    with pytest.raises(ValueError, match="registered already"):
        registry.register(solo_strategy.STRATEGY.__class__(**twin))
    wordless = {**vars(solo_strategy.STRATEGY), "name": "mute", "words": {"title": "solo.title"}}
    with pytest.raises(ValueError, match="no words for explain, lab, who"):
        registry.register(solo_strategy.STRATEGY.__class__(**wordless))
    assert "mute" not in registry.NAMES


def test_solo_runs_from_the_command_line_to_least_squares(solo, capsys):
    code = cli.main(["--strategy", "solo", "--devices", "cpu", "--epochs", "300", "--data-size", "64",
                     "--batch-size", "64", "--lr", "0.5", "--json"])  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["status"] == "finished" and result["config"]["strategy"] == "solo"
    cfg = validate(FitConfig(**SOLO))
    assert result["steps"] == cfg.total_steps == 300
    assert lstsq_gap(cfg, result["weights"], result["bias"]) < 1e-3


def test_solo_records_and_replays_its_run(solo, tmp_path, capsys):
    path = tmp_path / "solo.fitrec"
    argv = ["--strategy", "solo", "--devices", "cpu", "--epochs", "5", "--data-size", "64"]
    argv += ["--batch-size", "16"]
    assert cli.main([*argv, "--record", str(path), "--json"]) == 0
    live_json = json.loads(capsys.readouterr().out)
    rec = recording.read(str(path))
    assert rec.config.strategy == "solo" and isinstance(rec.events[0], RunStarted)
    assert sum(isinstance(e, Step) for e in rec.events) == 20 and isinstance(rec.ended, RunEnded)
    assert cli.main(["replay", str(path), "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert (replayed["weights"], replayed["bias"]) == (
        live_json["weights"], live_json["bias"],
    )  # fmt: skip


def test_solo_in_the_live_payload_and_on_the_page(solo, page):
    pool = RunPool()
    try:
        snap = pool.submit("owner", validate(FitConfig(**SOLO)))
        wait_for(lambda: not pool.snapshot("owner", snap.run_id).active, what="the solo run to end")
        body = live.payload(pool.snapshot("owner", snap.run_id), 0, 1)
        assert body["run"]["status"] == "finished" and body["picture"]["drawer"] == "solo"
        assert body["picture"]["drawer_url"] == f"{live.DRAWER_PATH}/solo.js"  # its own, the page serves it
        assert len(body["loss"]) == 300
    finally:
        pool.shutdown()
    at = page({"strategy": "solo", "epochs": "300", "data_size": "64", "batch_size": "64", "lr": "0.5"})
    assert not at.error and at.header[0].value == "One device: the whole batch, the whole model"
    assert at.radio(key="strategy").value == "solo" and "One device" in at.radio(key="strategy").options
    at.selectbox(key="pace").set_value("max")
    at.button(key="start").click().run()
    at = test_app.wait_until_ended(at)
    assert not at.exception and not at.error
    pool, owner = at.session_state["pool"], at.session_state["owner"]
    ended = pool.snapshot(owner, at.session_state["run_id"])
    assert ended.status == "finished" and ended.config.strategy == "solo"
    assert lstsq_gap(ended.config, ended.weights, ended.bias) < 1e-3


def get_drawer(name: str):
    return test_static.get(name, files=api.drawer_files, path=live.DRAWER_PATH)


def test_solo_ships_its_own_drawer_which_the_page_serves(solo):
    served = get_drawer("solo.js")
    assert served.status_code == 200 and served.headers["content-type"] == "text/javascript; charset=utf-8"
    assert served.body == Path(solo_strategy.STRATEGY.drawer_file).read_bytes()
    assert b'key: "solo"' in served.body  # the key its pictures carry
    # only a registered strategy's drawer from outside frontend/: no built-in's, no other file, no path
    for name in ("ddp.js", "dataparallel.js", "solo", "../solo_strategy.py", "mount.js", "solo.js.map"):
        assert get_drawer(name).status_code == 404, name
    registry.unregister(solo_strategy.NAME)
    try:
        assert get_drawer("solo.js").status_code == 404  # gone with its strategy
    finally:
        registry.register(solo_strategy.STRATEGY)
    with pytest.raises(ValueError, match="a .js file"):
        registry.register(replace(solo_strategy.STRATEGY, name="solo2", drawer_file=__file__))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_other_drawer_name_is_404(name):
    """The drawers' route, fuzzed: any name but a registered strategy's own drawer answers 404, never 5xx."""
    assert name == "solo.js" or get_drawer(name).status_code == 404


def test_solo_has_its_check_row_compare_column_and_whatif_row(solo):
    rows = [r for r in check.plan_rows(check.safe_probe()) if r.name == "solo on cpu"]
    (result,) = [check.run_row(r) for r in rows]
    assert result.status == check.PASSED and result.figures["diff"] < 1e-3

    cfg = validate(FitConfig(strategy="solo", devices="virtual:2", data_size=12, batch_size=4, epochs=3))
    column = {r["strategy"]: r for r in compare.run(cfg)["results"]}
    assert set(registry.NAMES) <= set(column)  # every registered strategy has its column, solo among them
    assert column["solo"]["max_abs_diff"] == 0.0  # one device on the reference's own batches: exactly it
    assert len(column["solo"]["per_step"]) == len(column["ddp"]["per_step"])

    measured = whatif.Measured(1e-3, 100.0, 16, 2, 3, "here")
    (row,) = [r for r in whatif.table(measured, devices=(8,)) if r["strategy"] == "solo"]
    assert row["name"] == "One device" and row["comm_bytes_per_device"] == 0.0
    assert row["memory_per_device_bytes"] == whatif.memory_per_device("solo", 3, 8)


# ---------------------------------------------------------------------------------------------------------
# The ranked strategy from tests/: DDP with torch's ZeroRedundancyOptimizer, on the engine's own launchers,
# with its own view, drawer and words, and no line of it outside tests/.

ZERO = ["--strategy", "zero_ddp", "--devices", "cpu", "--workers", "2", "--data-size", "64"]
ZERO += ["--batch-size", "64"]


@pytest.mark.slow  # spawns ranks
def test_a_ranked_strategy_from_tests_runs_on_the_engine_to_least_squares(zero, tmp_path, capsys):
    path = tmp_path / "zero.fitrec"
    code = cli.main([*ZERO, "--epochs", "300", "--lr", "0.5", "--record", str(path), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["status"] == "finished", result["message"]
    cfg = validate(FitConfig(strategy="zero_ddp", devices="cpu", workers=2, data_size=64, batch_size=64,
                             epochs=300, lr=0.5))  # fmt: skip
    assert result["steps"] == cfg.total_steps == 300
    assert lstsq_gap(cfg, result["weights"], result["bias"]) < 1e-3
    # ZeRO-1, measured: every rank holds every parameter and gradient, and Adam's state (two moments and a
    # step count) of the parameters it owns only: W's d = 2 numbers on rank 0, b on rank 1
    held = {row["rank"]: row for row in result["per_rank_memory"]}
    assert [held[r]["parameters"] for r in (0, 1)] == [(2 + 1) * 4] * 2
    assert [held[r]["optimizer_state"] for r in (0, 1)] == [2 * 2 * 4 + 4, 2 * 1 * 4 + 4]
    assert zero_strategy.owners((2, 1), 2) == [0, 1] and zero_strategy.owners((5, 1, 1, 1), 3) == [0, 1, 2, 1]
    # its step's bytes, by its own phases: the ring all-reduce of the d + 1 gradients inside backward, then
    # each owner's broadcast of its parameters
    moved = [rank["bytes"] for rank in result["first_step"]["step_bytes_per_device"]]  # rank 0, rank 1
    assert [b["backward"] for b in moved] == [ring_bytes(2, (2 + 1) * 4)] * 2 == [12, 12]  # 2(k-1)/k (d+1)·4
    assert [b["optimizer"] for b in moved] == [2 * 4, 1 * 4]  # W's 2 numbers to rank 1, b's to rank 0
    # its recording replays to the same parameters
    assert cli.main(["replay", str(path), "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert (replayed["weights"], replayed["bias"]) == (result["weights"], result["bias"])


@pytest.mark.slow  # spawns ranks
def test_the_ranked_strategy_has_its_check_row_compare_column_and_whatif_row(zero):
    rows = [r for r in check.plan_rows(check.safe_probe()) if r.name == "zero_ddp gloo 2 ranks (CPU)"]
    (result,) = [check.run_row(r) for r in rows]
    assert result.status == check.PASSED, result.detail
    cfg = FitConfig(strategy="zero_ddp", devices="cpu", workers=2, data_size=11, batch_size=4, epochs=3)
    cfg = validate(cfg)
    column = {r["strategy"]: r for r in compare.run(cfg)["results"]}
    assert column["zero_ddp"]["per_step"] == column["ddp"]["per_step"]  # DDP's arithmetic, wherever its state
    measured = whatif.Measured(1e-3, 100.0, 16, 2, 3, "here")
    (row,) = [r for r in whatif.table(measured, devices=(8,)) if r["strategy"] == "zero_ddp"]
    (ddp,) = [r for r in whatif.table(measured, devices=(8,)) if r["strategy"] == "ddp"]
    assert row["comm_bytes_per_device"] == ddp["comm_bytes_per_device"]
    assert row["memory_per_device_bytes"] < ddp["memory_per_device_bytes"]  # the optimizer state, over 8


@pytest.mark.slow  # spawns ranks
def test_the_ranked_strategy_runs_on_the_page(zero, page):
    at = page({"strategy": "zero_ddp", "devices": "cpu", "workers": "2", "epochs": "30", "data_size": "64",
               "batch_size": "64", "lr": "0.1"})  # fmt: skip
    assert not at.error and at.header[0].value.startswith("DDP + ZeroRedundancyOptimizer")
    at.selectbox(key="pace").set_value("max")
    at.button(key="start").click().run()
    at = test_app.wait_until_ended(at)
    assert not at.exception and not at.error
    ended = at.session_state["pool"].snapshot(at.session_state["owner"], at.session_state["run_id"])
    assert ended.status == "finished" and ended.step == 30 and ended.config.strategy == "zero_ddp"
    body = live.payload(ended, 0, 1)
    assert body["picture"]["drawer"] == "zero_ddp"
    assert body["picture"]["drawer_url"] == f"{live.DRAWER_PATH}/zero_ddp.js"
    assert get_drawer("zero_ddp.js").body == Path(zero_strategy.STRATEGY.drawer_file).read_bytes()


@pytest.mark.slow  # spawns ranks
def test_the_ranked_strategy_runs_under_torchrun_as_an_installed_package(tmp_path):
    """torchrun's two processes register it from its entry point, as an installed package's, and each runs
    its Engine through the engine's torchrun side: rank 0 prints the result."""
    site = installed_site(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "fitcore", *ZERO, "--epochs", "300", "--lr", "0.5", "--json"]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("{")]  # rank 0 alone prints
    result = json.loads(line)
    assert result["status"] == "finished" and result["details"]["group"]["launcher"] == "launched by torchrun"
    cfg = validate(FitConfig(strategy=registry.DEFAULT, data_size=64, batch_size=64, epochs=300))
    assert lstsq_gap(cfg, result["weights"], result["bias"]) < 1e-3
