"""Every input surface fuzzed: arbitrary text, numbers and bytes thrown at each place a user's input enters,
asserting a value or one refusal naming the field (a 4xx, exit status 2 and one line, a ConfigError), and
never another exception, a traceback or a 5xx.

The surfaces: the live routes (method, query parameters, the owner cookie; tests/test_api.py drives them
through ASGI), the link's query parameters, the command line's flags, and FitConfig.from_mapping + validate.
The strategies (`hostile_text`, `hostile_value`) and the checks (`one_line`, `refusal_field`) are shared, so
that a new reader of user input gets its property beside these. The examples are fixed (the profile in
tests/conftest.py) and each property is bounded by max_examples.

At the end, plain regression rows for what the fuzzing found.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import string
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fitcore import api
from fitcore.cli import build_parser, config_from_args, main
from fitcore.core.config import MAX_WORKERS, ConfigError, FitConfig, Limits, validate
from fitcore.core.devices import GPU, parse_devices
from fitcore.core.errors import SHOWN_CHARS, PathValue
from fitcore.core.errors import ConfigError as BaseConfigError
from fitcore.protocols import registry
from fitcore.runs.pool import CLASSROOM_LIMITS
from fitcore.view.controls import (
    CONTROL_FIELDS,
    PACE_CHOICES,
    config_values,
    control_values,
    error_text,
    script_from_query,
    widget_values,
)
from fitcore.view.link import classroom_from_query, from_query  # the link
from tests.test_api import ALICE, BOB, call, finished_pool, server

FIELDS = tuple(FitConfig.__dataclass_fields__)
ASCII_DIGITS = set(string.digits)
GPUS = ([], [GPU(0, "GPU A", 2**34)], [GPU(0, "GPU A", 2**34), GPU(1, "GPU B", 2**34)])
MEMORY = 16 * 2**30  # bytes available to validate(): the same answer on every machine

# Text that broke, or could break, a reader of numbers: Unicode digits that str.isdigit() takes (some of
# which int() reads and some it refuses), Python-only spellings, spaces of every kind, line breaks, the
# special floats, numbers beyond every bound, and device specs built of them.
TRICKY = [
    "²", "①", "٣", "١٢", "１", "𝟙", "߁", "৩", "Ⅻ", "½", "1_000", "1 000", " 1 ", "1\u00a0", "\u20031", "+1",
    "-1", "-0", "0x10", "0b1", "0o7", "1e3", "1E-3", ".5", "5.", "1e999", "-1e999", "nan", "-NaN", "inf",
    "-Infinity", "", " ", "\t", "\x00", "\n", "\r\n", "\x1c", "\u2028", "\x85", "9" * 30, "9" * 5000,
    "1" + "0" * 400, "true", "on", "adam", "ddp", "virtual:²", "virtual:٣", "virtual:2@cuda:²", "cuda:０",
    "cuda:0,0", "virtual:" + "9" * 5000, "virtual:0002", "cpu", "run-1", "run-１", "../", "%00", "<b>",
]  # fmt: skip
HUGE = [10**400, -(10**400), 10**5000, 2**63, 2**53 + 1, -(2**63) - 1]


def hostile_text(surrogates: bool = True) -> st.SearchStrategy[str]:
    """Arbitrary text, numbers as text and (where `surrogates`) undecodable bytes, as argv can hold them."""
    parts = [
        st.sampled_from(TRICKY),
        st.text(max_size=30),
        st.text(st.characters(categories=["Nd", "No", "Nl", "Zs", "Cc", "Zl"]), max_size=6),
        st.integers().map(str),
        st.integers(min_value=-(10**400), max_value=10**400).map(str),
        st.floats().map(repr),
        st.lists(st.floats(allow_nan=False, width=32).map(repr), min_size=1, max_size=20).map(",".join),
    ]
    if surrogates:
        parts.append(st.binary(max_size=16).map(lambda b: b.decode("utf-8", "surrogateescape")))
    return st.one_of(parts)


def hostile_value() -> st.SearchStrategy:
    """What a Python caller could hand FitConfig.from_mapping: text, numbers of any size, containers."""
    scalar = st.one_of(
        hostile_text(),
        st.integers(),
        st.sampled_from(HUGE),
        st.floats(),
        st.booleans(),
        st.none(),
        st.binary(),
    )
    return st.one_of(
        scalar, st.lists(scalar, max_size=4), st.tuples(scalar), st.dictionaries(st.text(), scalar)
    )


def one_line(text: str) -> bool:
    """Exactly one line: no line break of any kind (str.splitlines' list) inside it."""
    return len(text.splitlines()) == 1 and not text.endswith(("\n", "\r"))


def refusal_field(exc: ConfigError) -> str:
    assert isinstance(exc, BaseConfigError)
    text = str(exc)
    assert one_line(text) and text.startswith(f"{exc.field}: got ") and "; allowed: " in text, text
    return exc.field


# -- FitConfig.from_mapping and validate --------------------------------------------------------------------


@settings(max_examples=400)
@given(
    st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), hostile_value(), max_size=6),
    st.sampled_from([Limits(), CLASSROOM_LIMITS]),
    st.sampled_from(GPUS),
)
def test_any_mapping_gives_a_valid_config_or_one_refusal(values, limits, gpus):
    try:
        cfg = validate(FitConfig.from_mapping(values), limits, available=MEMORY, gpus=gpus)
    except ConfigError as exc:
        assert refusal_field(exc) in (*FIELDS, *values, *map(repr, values))
        return
    assert set(values) <= set(FIELDS)
    ints = [cfg.data_size, cfg.batch_size, cfg.epochs, cfg.seed, cfg.workers]
    assert all(type(v) is int for v in ints) and 1 <= cfg.batch_size <= cfg.data_size
    assert all(math.isfinite(v) for v in (*cfg.weights, cfg.bias, cfg.noise, cfg.lr))
    assert 1 <= len(parse_devices(cfg.devices, gpus).labels) <= cfg.data_size


@settings(max_examples=400)
@given(st.lists(hostile_text(), min_size=1, max_size=12).map("/".join))
def test_a_path_in_an_error_is_one_line_that_ends_as_the_path_does(text):
    # a long path is cut at its start, never its end: what is quoted is the path's own last characters,
    # escaped as repr escapes them (a newline, a control character), on one line of bounded length
    line = BaseConfigError("data", PathValue(text), "x").named("--data")
    assert "\n" not in line and "\r" not in line and len(line) <= 140, line
    if len(repr(text)) <= SHOWN_CHARS:
        assert line == f"--data: got {text!r}; allowed: x"
    else:
        got = re.match(r"--data: got (.)…(.*)\1 \((\d+) characters in all\); allowed: x$", line, re.S)
        assert got and int(got.group(3)) == len(text), line
        end = eval(got.group(1) + got.group(2) + got.group(1))  # the quoted end, as repr wrote it
        assert text.endswith(end) and 0 < len(repr(end)) <= SHOWN_CHARS - 10


@given(hostile_text())
def test_numbers_are_read_in_ascii_only_and_exactly(text):
    """An integer field reads exactly what int() reads of ASCII digits; anything non-ASCII is refused."""
    try:
        seed = FitConfig.from_mapping({"seed": text}).seed
    except ConfigError as exc:
        assert refusal_field(exc) == "seed"
        seed = None
    try:
        lr = FitConfig.from_mapping({"lr": text}).lr
    except ConfigError as exc:
        assert refusal_field(exc) == "lr"
        lr = None
    stripped = text.strip(" \t\n\r\f\v")
    if not stripped.isascii():
        assert (seed, lr) == (None, None), "non-ASCII text was read as a number"
    if re.fullmatch(r"[+-]?[0-9]{1,4000}", stripped):
        assert seed == int(stripped) and lr == float(stripped)
    if lr is not None:
        assert lr == float(stripped) or (math.isnan(lr) and math.isnan(float(stripped)))


# -- the link's query parameters --------------------------------------------------------------------------


query_value = st.one_of(hostile_text(), st.lists(hostile_text(), min_size=1, max_size=3))


@settings(max_examples=250)
@given(
    st.dictionaries(
        st.one_of(st.sampled_from([*CONTROL_FIELDS, "pace", "embed"]), st.text(max_size=8)),
        query_value,
        max_size=6,
    ),
    st.sampled_from(GPUS),
)
def test_any_link_gives_control_values_or_one_refusal_each(params, gpus):
    values, pace, errors = from_query(params, gpus)
    assert set(values) <= set(CONTROL_FIELDS)
    assert pace is None or pace in PACE_CHOICES
    refused = {refusal_field(exc) for exc in errors}
    assert all(one_line(error_text(exc)) for exc in errors)
    # a value is quoted to 80 characters: a line stays readable however long the link's value
    assert all(len(error_text(exc)) <= 400 for exc in errors), [error_text(e) for e in errors]
    # a setting given two values is refused, never silently one of them
    for name, raw in params.items():
        if name in {*CONTROL_FIELDS, "pace"} and isinstance(raw, list) and len(set(raw)) > 1:
            assert name in refused, name
    # every control the link names is read or refused, never silently dropped
    for name in set(params) & {*CONTROL_FIELDS, "pace"}:
        assert name in values or name in refused or (name == "pace" and pace is not None), name
    # the page builds its run from the defaults and the link's values: a config or a refusal
    controls = {**config_values(FitConfig()), **values}
    try:
        validate(FitConfig.from_mapping(controls), CLASSROOM_LIMITS, available=MEMORY, gpus=gpus)
    except ConfigError as exc:
        assert refusal_field(exc) in FIELDS


# The run's settings that decide each other's meaning: the strategy, its devices and workers, and a switch.
RUN_WORDS = [
    "-1", "0", "1", "2", "3", "8", "9", "dataparallel", "ddp", "DDP", "fsdp", "cpu", "virtual:2",
    "virtual:3@cuda:0", "false",
    "cuda", "cuda:0", "cuda:0,1", "cuda:1,0", "yes", "no", "maybe", "", " true ",
]  # fmt: skip


@settings(max_examples=200)
@given(
    st.dictionaries(
        st.sampled_from(["strategy", "devices", "workers", "shuffle", "reshard_after_forward"]),
        st.one_of(st.sampled_from(RUN_WORDS), hostile_text()),
        min_size=1,
    ),
    st.sampled_from(GPUS),
)
@example({"reshard_after_forward": "false"}, [])  # FSDP's switch under DataParallel: refused, not dropped
@example({"workers": "-1"}, [])  # what it found: kept out of sight where no control shows the count
@example({"strategy": "ddp", "devices": "cuda:0,1", "workers": "3"}, GPUS[2])  # 2 processes, not 3
@example({"devices": "cuda:1,0"}, GPUS[2])  # the page's GPU list would put GPU 0 first
def test_a_links_run_settings_reach_the_run_as_given_or_are_refused(params, gpus):
    values, _, errors = from_query(params, gpus)
    refused = {refusal_field(exc) for exc in errors}
    for name in params:
        assert (name in values) != (name in refused), name
    # the page's widgets hold the link's values and give them back to the run, unchanged
    widgets = {"gpus": [], **widget_values(config_values(FitConfig()), gpus), **widget_values(values, gpus)}
    run = control_values(widgets)
    processes = registry.strategy(run["strategy"]).processes
    for name in set(values) & {"strategy", "shuffle", "reshard_after_forward"}:
        assert run[name] == values[name], name
    if "workers" in values:  # used by a strategy with processes; else held for a switch to one, in range
        assert run["workers"] == values["workers"] if processes else 1 <= values["workers"] <= MAX_WORKERS
    if "devices" in values:  # with processes, virtual:K is what fitcore reads it as: the workers on the CPU
        same = values["devices"] if not (processes and values["devices"].startswith("virtual:")) else "cpu"
        assert run["devices"] == same, (values, run["devices"])


@settings(max_examples=150)
@given(
    st.dictionaries(
        st.sampled_from(["hide", "lock", "presenter", "ask"]),
        st.one_of(
            st.sampled_from(RUN_WORDS + ["1", "on", "off", "seed", "seed,bias", "pace, preset"]),
            hostile_text(),
            st.lists(hostile_text(), min_size=1, max_size=2),
        ),
        min_size=1,
    )
)
@example({"ask": ""})  # was read as off
@example({"ask": "yes", "presenter": "No"})
def test_a_teachers_link_is_used_as_given_or_refused(params):
    room, errors = classroom_from_query(params)
    refused = {refusal_field(exc) for exc in errors}
    assert all(one_line(error_text(exc)) for exc in errors)
    for name in ("presenter", "ask"):  # a switch is on or off exactly as written, else refused and off
        if name in params and name not in refused:
            text = str(params[name][0] if isinstance(params[name], list) else params[name]).strip().lower()
            assert getattr(room, name) == (text in ("1", "true", "on", "yes"))
            assert text in ("1", "true", "on", "yes", "0", "false", "off", "no"), text
        elif name in refused:
            assert getattr(room, name) is False
    for name in ("hide", "lock"):
        if name not in params or name in refused:
            continue
        raw = params[name][0] if isinstance(params[name], list) else params[name]
        given_names = {n.strip().lower() for n in str(raw).split(",") if n.strip()}
        assert set(getattr(room, name)) == given_names, (params, room)


@settings(max_examples=100)
@given(st.one_of(query_value, st.lists(st.sampled_from(["tutorial", "ddp", "lesson", ",", " "]), max_size=6)
                 .map("".join)))  # fmt: skip
def test_any_script_link_plays_presets_or_one_refusal(raw):
    presets, errors = script_from_query({"script": raw})
    assert bool(presets) != bool(errors)  # a script, or one error naming the field, never both or a traceback
    assert [refusal_field(exc) for exc in errors] in ([], ["script"])
    assert all(one_line(error_text(exc)) for exc in errors)


# -- the command line ---------------------------------------------------------------------------------------


VALUE_FLAGS = [
    "--weights", "--bias", "--noise", "--data-size", "--batch-size", "--epochs", "--lr", "--optimizer",
    "--seed", "--devices", "--strategy", "--workers", "--print-every",
]  # fmt: skip
TINY = ["--epochs", "1", "--data-size", "8", "--batch-size", "8", "--devices", "cpu", "--json"]
MOST_ROWS_TRAINED = 2_000  # a valid command line is run when it trains at most this many rows in all


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m fitcore` with argv, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own exits
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def check_command_line(argv: list[str]) -> None:
    """A refused command line exits 2 with one line; a valid one is a config, and runs when tiny."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cfg = config_from_args(build_parser().parse_args(argv))
    except (SystemExit, ConfigError) as exc:
        code, out, err = run_main(argv)
        if isinstance(exc, SystemExit) and exc.code == 0:  # -h, --he...: the help, and nothing else
            assert (code, err) == (0, "") and out.startswith("usage: python -m fitcore")
            return
        assert (code, out) == (2, ""), (code, out, err)
        assert err.startswith("fitcore: error: ") and err.endswith("\n") and one_line(err[:-1]), err
        return
    if cfg.epochs * cfg.data_size <= MOST_ROWS_TRAINED and cfg.strategy == "dataparallel":
        code, out, err = run_main(argv)
        assert (code, err) == (0, ""), (code, err)
        assert json.loads(out)["config"]["epochs"] == cfg.epochs


flag_value = st.one_of(hostile_text(), st.sampled_from(["1", "2", "8", "0", "-1", "sgd", "virtual:2", "ddp"]))


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from(VALUE_FLAGS), st.lists(flag_value, min_size=1, max_size=3)), max_size=3
    )
)
def test_any_flag_value_exits_2_with_one_line_or_runs(pairs):
    argv = list(TINY)
    for flag, given_values in pairs:
        argv += [flag, *(given_values if flag == "--weights" else given_values[:1])]
    check_command_line(argv)


@settings(max_examples=60)
@given(
    st.lists(
        st.one_of(hostile_text(), st.sampled_from([*VALUE_FLAGS, "--quiet", "--no-shuffle"])), max_size=4
    )
)
def test_any_words_after_the_flags_exit_2_with_one_line_or_run(words):
    check_command_line([*TINY, *words])


# -- the live routes ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real():
    pool, run_id = finished_pool()  # six steps, ALICE's
    yield server(pool), run_id
    pool.shutdown()


ALLOWED = {api.LIVE_PATH: ("GET", "HEAD"), api.BYE_PATH: ("POST",), api.PAUSE_PATH: ("POST",)}
ACTIONS = (api.BYE_PATH, api.PAUSE_PATH)  # a press on one of the owner's runs: its id is required
METHODS = st.one_of(
    st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]),
    st.text(string.ascii_uppercase, min_size=1, max_size=8),
)
url_text = hostile_text(surrogates=False)
# an owner the cookie names: ALICE (who has the run), BOB (who has none), or text holding no owner id at all
owners = st.one_of(
    st.sampled_from([ALICE, BOB, None, "A" * 32, ALICE[:-1], ALICE + "0", "g" * 32, "٣" * 32, ""]),
    url_text.filter(lambda t: not re.search("[0-9a-f]{32}", t)),
)
extra_params = st.dictionaries(
    # "room" and "lang" are parameters of their own (a room's student; the words' language), fuzzed elsewhere
    st.text(max_size=8).filter(lambda k: k not in ("run", "since", "room", "lang")), url_text, max_size=3
)


def ascii_number(text: str, most_digits: int) -> bool:
    return 1 <= len(text) <= most_digits and set(text) <= ASCII_DIGITS


def expected(method: str, path: str, owner: str | None, run: str | None, since: str | None, run_id: str):
    """(status, field refused or None), worked out from the routes' rules, not from their code."""
    if method not in ALLOWED[path]:
        return 405, "method"
    if owner not in (ALICE, BOB):
        return 403, api.OWNER_COOKIE
    if run is not None and not (run.startswith("run-") and ascii_number(run[4:], 12)):
        return 400, "run"
    if since is not None and not (ascii_number(since, 13) and int(since) <= 10**12):
        return 400, "since"
    if path in ACTIONS and run is None:
        return 400, "run"
    if owner != ALICE or run not in (None, run_id) or (path in ACTIONS and run != run_id):
        return 404, "run"
    return (200 if path == api.LIVE_PATH else 204), None


@settings(max_examples=300)
@given(
    method=METHODS,
    path=st.sampled_from(list(ALLOWED)),
    owner=owners,
    run=st.one_of(
        st.none(), st.just("real"), st.sampled_from(["run-999", "run-١", "run-1x", "run-"]), url_text
    ),
    since=st.one_of(st.none(), st.integers(0, 2 * 10**12).map(str), url_text),
    extra=extra_params,
    other_cookie=st.sampled_from(["", "theme=dark; ", "fitcore_owner=; ", f"x={BOB}; "]),
)
def test_routes_answer_any_request_by_their_rules(real, method, path, owner, run, since, extra, other_cookie):
    app, run_id = real
    run = run_id if run == "real" else run
    query = {
        **extra,
        **({"run": run} if run is not None else {}),
        **({"since": since} if since is not None else {}),
    }
    headers = [] if owner is None else [(b"cookie", f"{other_cookie}{api.OWNER_COOKIE}={owner}".encode())]
    got = call(app, method, path, urlencode(query).encode(), headers)
    status, field = expected(method, path, owner, run, since, run_id)
    assert got.status == status, (got.status, got.body)
    if field is not None:
        assert got.json()["error"].startswith(f"{field}: got ") and "; allowed: " in got.json()["error"]
    if status == 405:
        assert got.headers["allow"] == ", ".join(ALLOWED[path])
    if status == 200:
        after = int(since or 0)
        body = got.json()
        assert body["run"]["id"] == run_id
        assert [s for s, _ in body["loss"]] == [s for s in range(1, 7) if s > after]


@settings(max_examples=300)
@given(
    method=METHODS,
    path=st.sampled_from(list(ALLOWED)),
    query=st.binary(max_size=60),
    cookie=st.one_of(st.none(), st.binary(max_size=60), st.just(f"{api.OWNER_COOKIE}={ALICE}".encode())),
)
def test_routes_answer_any_bytes_below_500(real, method, path, query, cookie):
    app, _ = real
    got = call(app, method, path, query, [] if cookie is None else [(b"cookie", cookie)])
    assert got.status in (200, 204, 400, 403, 404, 405), (got.status, got.body)
    if got.status == 200:
        assert json.loads(got.body)["run"]["id"].startswith("run-")
    elif got.status >= 400:
        field = got.json()["error"].split(": got ", 1)[0]
        assert field in ("method", api.OWNER_COOKIE, "run", "since")


# -- what the fuzzing found, row by row ------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, text, value",
    [
        ("seed", "١٢", None),  # Arabic-Indic digits: int() read 12
        ("seed", "1_000", None),  # Python's digit grouping: int() read 1000
        ("seed", "\u20031", None),  # an em space: int() stripped it
        ("seed", " 12\t", 12),
        ("seed", "1e3", 1000),
        ("seed", "9" * 5000, None),  # more digits than int() converts: a ValueError of its own
        ("lr", "１", None),  # full-width: float() read 1.0
        ("lr", "1\u00a0", None),
        ("lr", "-1E-3", -0.001),
        ("weights", "1\u20032", None),  # split on Unicode spaces: read as two weights
        ("weights", "1, 2\t3", (1.0, 2.0, 3.0)),
        ("bias", 10**400, None),  # an int beyond float: OverflowError
        ("optimizer", 10**5000, None),  # str() of it: ValueError
        ("shuffle", 10**5000, None),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 else type(v).__name__,  # pytest's str() of a
)  # 5000-digit int is the very ValueError found
def test_fields_read_ascii_numbers_and_refuse_the_rest(field, text, value):
    if value is None:
        with pytest.raises(ConfigError) as info:
            FitConfig.from_mapping({field: text})
        assert refusal_field(info.value) == field
    else:
        assert getattr(FitConfig.from_mapping({field: text}), field) == value


@pytest.mark.parametrize(
    "spec, gpus",
    [
        ("virtual:²", []),
        ("virtual:٣", []),
        ("virtual:2@cuda:²", GPUS[1]),
        ("cuda:０", GPUS[1]),
        ("cuda:0,١", GPUS[2]),
    ],
)
def test_device_specs_take_ascii_digits_only(spec, gpus):
    """virtual:² was a ValueError from int(): a traceback on the page and the CLI; virtual:٣ ran 3 devices."""
    with pytest.raises(ConfigError) as info:
        parse_devices(spec, gpus)
    assert refusal_field(info.value) == "devices"
    values, _, errors = from_query({"devices": spec}, gpus)
    assert "devices" not in values and [e.field for e in errors] == ["devices"]


def test_messages_stay_one_line_for_any_key_and_any_size():
    with pytest.raises(ConfigError) as info:
        FitConfig.from_mapping({"\r": 1})  # an unknown key with a line break
    message = str(info.value)
    assert message.startswith("'\\r': got 1; allowed: one of batch_size") and one_line(message)
    with pytest.raises(ConfigError) as info:
        FitConfig.from_mapping({"weights": {"w": 10**5000}})  # repr() of the value was a ValueError
    assert "got a dict holding an integer of more than 4300 digits" in str(info.value)


def test_a_data_size_beyond_int64_is_refused_by_its_bound():
    # the memory estimate's MiB was an OverflowError for a data size of some 300 digits
    with pytest.raises(ConfigError) as info:
        validate(FitConfig(data_size=10**400, batch_size=1), available=MEMORY, gpus=[])
    assert info.value.allowed == "at most 9223372036854775807 rows (torch's sizes are int64)"


@pytest.mark.parametrize(
    "argv, line",
    [
        (["\x1e"], "fitcore: error: unrecognized arguments: \\x1e (see python -m fitcore --help)"),
        (["--data-size", "9" * 400], "fitcore: error: --data-size: got 999"),
        (
            ["--print-every", "١"],
            "fitcore: error: argument --print-every: got '١'; allowed: an integer 1 or more",
        ),
    ],
)
def test_command_line_refusals_found_by_fuzzing_are_one_line(argv, line):
    code, out, err = run_main([*TINY, *argv])
    assert (code, out) == (2, "") and err.startswith(line) and err.endswith("\n") and one_line(err[:-1])
