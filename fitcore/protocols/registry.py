"""The training strategies' registry: every part of fitcore asks it about a strategy, and it knows none.

A strategy is one package, `fitcore/strategies/<name>/`, one drawer file (`frontend/draw_<name>.js`, or its
own `drawer_file` for a package from outside), and one line in fitcore/__init__.py's `BUILTIN` list, the top
floor, which registers the packages here before any other module of fitcore is imported (an installed
package adds one through the `fitcore.strategies` entry point, or calls `register`). The package's
`__init__.py` holds its `STRATEGY`, a `Strategy` whose fields are callables; the package owns its trainer
(or, with ranks, its Engine, which the engine's trainers run: `ranked`), its view (`view.py`), its console
lines, the bytes of its step, its explanation, its catalog keys (`locale.json`, read by fitcore.core.i18n) and
its hooks for `check`, `compare`, `whatif` and the classroom quiz. Nothing outside the package spells its
name: the rest of fitcore asks the registry (`strategy(name)`, `of(cfg)`, `STRATEGIES`), and
tests/test_strategy_names.py fails on a name written anywhere else.

This module imports no strategy, so that fitcore.core.config, which checks `strategy` and counts steps through
it, stays below every package: the packages import the floor, the floor asks the registry, and only the top
floor imports the packages. Nor does it import fitcore.core.config, not even for its types: the config asks
the registry, so the registry is written for any config type `C` (`Strategy[C]`, `StrategyView[C]`), and each
package binds `C` to the config its hooks read (`Strategy[FitConfig]`); that keeps the two free of a circle
even counting typing-only imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar

from fitcore.protocols.mesh import DP
from fitcore.protocols.split import ROWS, Split

C = TypeVar("C")  # the config a strategy's hooks read (fitcore.core.config.FitConfig, bound by each package)
C_contra = TypeVar("C_contra", contravariant=True)


class Trainer(Protocol[C_contra]):
    """A strategy's training, as the runner, the command line and the checks call it: it emits the run's
    events (fitcore.core.events) to `on_event` and returns its RunEnded; `control` pauses, paces and stops it,
    `plan` is the checked device plan (parsed from the config where none is given). Typed with the floor's
    types (which this module sits below) as fitcore.core.train.Trainer; tests/typed_contracts.py holds every
    trainer to that one."""

    def __call__(
        self, cfg: C_contra, on_event: Callable[[Any], None] = ..., control: Any = None, plan: Any = None
    ) -> Any: ...


class Explains(Protocol[C_contra]):
    """A strategy's explanation for the page, in the current language, its examples on cfg's sizes where a
    config is given (the run shown)."""

    def __call__(self, cfg: C_contra | None = None) -> str: ...


@dataclass(frozen=True)
class Strategy(Generic[C]):
    """One way of training on several devices: its words, and the callables every part of fitcore uses.

    The hooks' signatures (a new package provides each):
        steps_per_epoch(cfg) -> int                  optimizer steps per epoch (pure arithmetic)
        train(cfg, on_event, control=None, plan=None) -> RunEnded     emits fitcore.core.events, nothing else
        step_lines(step) -> list[str]                its console lines for one Step
        detail_lines: {Detail.key: (value) -> list[str]}   console lines of its own Detail events
        detail_schemas: {Detail.key: schema check}  the shape of its own Detail values, as read back
        markdown(cfg=None) -> str                    its explanation for the page, in the current language,
                                                     its examples on cfg's sizes (the run shown) where given
        bytes_of_step(rows, k, d, itemsize, cfg) -> int   one step's bytes on k devices (cfg: its options)
        view() -> module                             planned_step, sections, parallelism, console_frame,
                                                     CONSOLE_HINT: a fitcore.view.contract.StrategyView
        check_rows(machine) -> list[check.Row]       its rows of `fitcore check`
        comparer(cfg, data, device, plan, toggles) -> equivalence.Comparer    its column of `fitcore compare`
        compare_causes(cfg, plan, toggles, trained) -> list[str]   why it differs, each cause measured
        engine(plan) -> str, engine_word(plan) -> str   what ran it in compare, in a sentence and a word
        projections: tuple[whatif.Projection, ...]   its rows of `fitcore whatif`'s projection
        questions(step, cfg, labels, extra) -> list[quiz.Question]   the classroom's questions on a step
        presets(tutorial) -> ((name, cfg, key), ...)   its presets on the page, made from the tutorial's
                                                     config; `key` names its catalog keys view.preset.<key>.*
        phases() -> tuple[str, ...]                  the phases of its step picture, in order
        picture(cfg, step, devices, extra) -> dict   its part of the live picture: fields it adds to each
                                                     device (its `devices`, changed in place) and to the
                                                     picture; `extra` is the run's Snapshot.extra
        calibrate(cfg, k) -> dict                    (optional) its projected row's calibration point: the
                                                     bytes its real collectives sent at k ranks (`whatif
                                                     --calibrate`)
        torchrun(cfg, on_event, control) -> RunEnded   (optional) one rank of a torchrun launch; without it,
                                                     the command line refuses the strategy under torchrun
        ranks(cfg) -> Engine                         (a ranked strategy) its part of the engine's rank loop;
                                                     its train and torchrun are then the engine's own
        rules(cfg, plan) -> None                     its own rules of a config, each a ConfigError with one
                                                     line (TP: ranks torch.chunk gives columns); run by
                                                     fitcore.core.config.validate after the common ones
    `options` names the FitConfig fields only this strategy reads: another strategy refuses them set.
    `words` gives each of WORDS a key of its catalog, and `locale` that catalog's file.
    """

    name: str  # the value of FitConfig.strategy
    label: str  # what the page and the messages call it
    short: str  # its short name, where strategies stand side by side ("DDP")
    processes: bool  # one process per worker: `workers` applies, `cpu` means workers CPU processes
    drawer: str  # the key of its step picture's drawer in the browser (frontend/), sent with every picture
    steps_per_epoch: Callable[[C], int]
    train: Trainer[C]
    step_lines: Callable[[Any], list[str]]
    markdown: Explains[C]
    bytes_of_step: Callable[[int, int, int, int, C | None], int]  # (rows, k, d, itemsize, cfg)
    view: Callable[[], ModuleType]  # its view module, a fitcore.view.contract.StrategyView
    check_rows: Callable[[Any], list[Any]]
    comparer: Callable[[C, Any, Any, Any, Any], Any]  # (cfg, data, device, plan, toggles) -> its column
    compare_causes: Callable[[C, Any, Any, Any], list[str]]  # (cfg, plan, toggles, trained)
    engine: Callable[[Any], str]
    engine_word: Callable[[Any], str]
    questions: Callable[[Any, C, Sequence[str], dict[str, Any] | None], list[Any]]
    # its words, by role, as keys of its catalog: "title" (the page's heading over its run), "explain" (its
    # explanation's title), "lab" (its name in the lab's table), "who" (its name in a message)
    words: Mapping[str, str]
    locale: str  # the path of its catalog, a locale.json beside its package (fitcore.core.i18n merges it)
    projections: Callable[[], tuple[Any, ...]] = tuple
    presets: Callable[[C], tuple[tuple[str, C, str], ...]] = lambda tutorial: ()
    detail_lines: Mapping[str, Callable[[dict[str, Any]], list[str]]] = field(default_factory=dict)
    # the declared shape of each of its own Detail values (fitcore.core.schema), through which a recording's
    # are read: a detail key that no strategy and not the engine declares is refused, never passed to a view
    detail_schemas: Mapping[str, Callable[[Any, str], Any]] = field(default_factory=dict)
    preload: tuple[str, ...] = ()  # the modules its ranks run, imported once by the warm start's server
    phases: Callable[[], tuple[str, ...]] = tuple
    picture: Callable[[C, Any, list[dict[str, Any]], dict[str, Any]], dict[str, Any]] = (
        lambda cfg, step, devices, extra: {}
    )
    # its ranks' sends inside a step, for the trace's flow arrows (fitcore.runs.trace.Flow): none by default
    flows: Callable[[C, Any], Sequence[tuple[str, float, str, float]]] = lambda cfg, step: ()
    options: tuple[str, ...] = ()  # FitConfig fields only this strategy reads (their defaults elsewhere)
    # the path of its drawer's ES module where that is not one of frontend/'s (an installed package's, the
    # tests' own): the page serves it at fitcore.kit.live.DRAWER_PATH/<drawer>.js and imports it the first
    # time a picture names it (frontend/drawers.js); "" for a built-in drawer
    drawer_file: str = ""
    # the values a text option may take (a pipeline's schedule), drawn as a choice on the page; a bool
    # option is a switch, a number one a number box
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    calibrate: Callable[[C, int], dict[str, Any]] | None = None  # (cfg, k) -> whatif's calibration point
    torchrun: Trainer[C] | None = None  # its trainer for one rank of a torchrun launch, if it has one
    # (cfg) -> its Engine (fitcore.engine.contract), where it has ranks: its part of the engine's one rank
    # loop, which the engine's own trainers run (fitcore.engine.launcher.launch spawns the ranks,
    # fitcore.engine.torchrun.train_torchrun is one rank of a torchrun launch); None: it trains in one process
    ranks: Callable[[C], Any] | None = None
    rules: Callable[[C, Any], None] = lambda cfg, plan: None  # its own config rules: raise ConfigError
    # (cfg) -> why the lab has no column of it for this config (a pipeline's microbatches that do not cut
    # the batch equally: a real run refuses the config), or "" where it has one
    lab_skip: Callable[[C], str] = lambda cfg: ""
    # (cfg) -> the config its checks run (fitcore check's, across hosts'): a pipeline's deep model wants Adam
    # where the one-layer checks take SGD; and (cfg) -> the parameters one device learns of its own model,
    # where that is not the one-layer model (None: one process of the default strategy)
    check_config: Callable[[C], C] = lambda cfg: cfg
    one_device: Callable[[C], tuple[float, ...]] | None = None
    split: Split = ROWS  # which rows and columns of the batch each device takes (fitcore.protocols.split)
    dim: str = DP  # the mesh dimension it runs (mesh.py beside this module): its ranks' name (TP's: mesh.TP)
    composes: tuple[str, ...] = ()  # the other dimensions a mesh of it may have

    @property
    def view_module(self) -> ModuleType:
        return self.view()

    @property
    def planned_step(self) -> Callable[[C, Any], tuple[Any, tuple[str, ...]]]:
        """planned_step(cfg, plan) -> (its first Step before a run, the device labels): its view module's
        (fitcore.view.contract.StrategyView types it)."""
        planned: Callable[[C, Any], tuple[Any, tuple[str, ...]]] = self.view().planned_step
        return planned


class Hook:
    """A hook a package's record names by where it lives, "module:function", as an entry point names its
    object: imported at its first call, then called directly.

    A package's `STRATEGY` is made while fitcore/__init__.py registers the packages, before any module
    that reads the registry is imported. Were the record to import its modules then, they would import the
    floor and the views, and a view that reads the registry as it is imported (the page's presets, every
    strategy's) would read a half-filled one; the ranks' modules also import torch.distributed.tensor,
    most of a second that only a run needs. tests/test_contract.py resolves every hook of every package.
    """

    __slots__ = ("path", "is_value", "_target")

    def __init__(self, path: str, value: bool = False) -> None:
        self.path = path  # "fitcore.strategies.ddp.check:check_rows", or a module alone
        self.is_value = value  # a call gives the object itself (a table, a module, an Engine), not its call
        self._target: Any = None

    def resolve(self) -> Any:
        if self._target is None:
            from importlib import import_module

            module, _, name = self.path.partition(":")
            found = import_module(module)
            self._target = getattr(found, name) if name else found
        return self._target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve() if self.is_value else self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"


def hook(path: str) -> Callable[..., Any]:
    """The function at "module:function", imported at its first call (see `Hook`)."""
    return Hook(path)


def value(path: str) -> Callable[[], Any]:
    """A callable that gives the object at "module:name", or the module itself, imported at its first call:
    a strategy's phases, its what-if rows, its view module."""
    return Hook(path, value=True)


# The engine's own trainers, named by where they live (the registry sits below the engine): they run a ranked
# strategy's Engine, which they take from its record (fitcore.engine.contract.engine_of)
SPAWNED = "fitcore.engine.launcher:launch"
TORCHRUN = "fitcore.engine.torchrun:train_torchrun"


def ranked(ranks: Callable[[C], Any]) -> dict[str, Any]:
    """A ranked strategy's record fields from its Engine alone: `ranks`, and as its `train` and `torchrun`
    the engine's trainers, which run it (`Strategy(..., **ranked(value(f"{__name__}.rank:ENGINE")))`)."""
    return {"ranks": ranks, "train": Hook(SPAWNED), "torchrun": Hook(TORCHRUN)}


WORDS = ("title", "explain", "lab", "who")  # the roles of a strategy's words that the rest of fitcore shows


# The registry, filled by register() (fitcore/__init__.py registers the built-in packages first of all): the
# table keeps its identity, the tuples below are made again at each registration
STRATEGIES: dict[str, Strategy[Any]] = {}
NAMES: tuple[str, ...] = ()
DEFAULT = ""  # the first registered: one process, the page's and the config's default
OPTIONS: tuple[str, ...] = ()  # every strategy's own config fields


def register(entry: Strategy[C]) -> Strategy[C]:
    """Add a strategy (the built-in packages' and an installed package's `STRATEGY`); a name already taken
    is refused, so that no package silently replaces another."""
    global NAMES, DEFAULT, OPTIONS
    if entry.name in STRATEGIES and STRATEGIES[entry.name] is not entry:
        raise ValueError(f"a strategy called {entry.name!r} is registered already")
    missing = [role for role in WORDS if role not in entry.words]
    if missing:
        raise ValueError(f"strategy {entry.name!r} gives no words for {', '.join(missing)}")
    if entry.drawer_file and not entry.drawer_file.endswith(".js"):
        raise ValueError(f"strategy {entry.name!r}: its drawer_file is an ES module, a .js file")
    STRATEGIES[entry.name] = entry
    NAMES = tuple(STRATEGIES)
    DEFAULT = NAMES[0]
    OPTIONS = tuple(f for s in STRATEGIES.values() for f in s.options)
    return entry


def unregister(name: str) -> None:
    """Take a strategy out again (a test's own, once the test is done); the first one stays."""
    global NAMES, OPTIONS
    if name == DEFAULT:
        raise ValueError("the default strategy stays registered")
    STRATEGIES.pop(name, None)
    NAMES = tuple(STRATEGIES)
    OPTIONS = tuple(f for s in STRATEGIES.values() for f in s.options)


def owners(option: str) -> str:
    """The strategies that read the config field `option`, by label ("FSDP")."""
    return ", ".join(s.label for s in STRATEGIES.values() if option in s.options)


def strategy(name: Any) -> Strategy[Any]:
    """The strategy called `name`, or the default one for a name that is not one (the config check refuses
    it with its own message)."""
    return STRATEGIES.get(name, STRATEGIES[DEFAULT])


def of(source: Any) -> Strategy[Any]:
    """The strategy of a FitConfig, or of anything with a `.config` (a Snapshot, a RunStarted)."""
    cfg = getattr(source, "config", source)
    return strategy(cfg.strategy)


def flows(cfg: Any, step: Any) -> Sequence[tuple[str, float, str, float]]:
    """The sends between a run's ranks in one step (its strategy's `flows`), for the trace's arrows."""
    return of(cfg).flows(cfg, step)
