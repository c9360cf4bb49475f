"""`python -m fitcore`: the tutorial, headless. Prints its lines, or a summary, or one JSON object."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path

from fitcore.core import paths
from fitcore.core.cliparse import Parser, command, error_line
from fitcore.core.config import ConfigError, FitConfig, integer_range
from fitcore.core.csvdata import data_result
from fitcore.core.errors import Listed, Text
from fitcore.core.events import Detail, RunStarted, Status, Step
from fitcore.core.i18n import t
from fitcore.core.outfiles import Pending, check_outputs
from fitcore.core.schema import dumps
from fitcore.core.train import Control
from fitcore.core.uploads import shown_path
from fitcore.engine.torchrun import exit_rank, torchrun_env
from fitcore.kit.flags import add_training_flags, config_from_args, flag_error
from fitcore.protocols import registry
from fitcore.runs.console import data_lines, final_lines, group_line, shard_lines, summary_lines
from fitcore.runs.recording import GROUP, Recorder, check_recordable, replayer
from fitcore.runs.recording import read as read_recording
from fitcore.runs.runner import trainer_for
from fitcore.runs.trace import TraceBuilder
from fitcore.view.results import result_dict


def _count(text: str) -> int:
    """--print-every's value: ASCII digits only, as every number fitcore reads (int() also takes "١٢")."""
    if not re.fullmatch(r"[+-]?[0-9]{1,18}", text.strip(" ")):
        raise argparse.ArgumentTypeError(t("cli.error.got", value=repr(text), allowed=integer_range(1, None)))
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m fitcore", description=t("cli.description"), epilog=t("cli.epilog"),
               formatter_class=argparse.RawDescriptionHelpFormatter)  # the commands' list, a line each
    add_training_flags(p)
    p.add_argument(
        "--print-every",
        type=_count,
        default=1,
        help=t("cli.help.print_every"),
    )
    p.add_argument("--data", help=t("cli.help.data"))
    p.add_argument("--target", help=t("cli.help.target"))
    p.add_argument("--features", help=t("cli.help.features"))
    p.add_argument(
        "--standardize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=t("cli.help.standardize"),
    )
    add_output_flags(p)
    return p


def add_output_flags(p: argparse.ArgumentParser) -> None:
    """The flags a run and a replay share: what is printed, and the files written."""
    p.add_argument("--record", help=t("cli.help.record"))
    p.add_argument("--trace", help=t("cli.help.trace"))
    out = p.add_mutually_exclusive_group()
    out.add_argument("--quiet", action="store_true", help=t("cli.help.quiet"))
    out.add_argument("--json", action="store_true", help=t("cli.help.json"))


def printed(step: int, every: int, last: int) -> bool:
    """Does --print-every `every` print this step? The first, every `every`-th after it, and the last."""
    return (step - 1) % every == 0 or step == last


PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a program whose reader went away


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that nothing (not even the flush at exit) writes to the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


@command  # the language first: --lang, else LANG; the subcommands choose theirs from the same arguments
def main(argv: list[str]) -> int:
    """`python -m fitcore [flags]` and its subcommands; returns the exit status."""
    if argv[:1] == ["check"]:  # the subcommands; every other command line parses as it always has
        from fitcore.kit.check import main as check_main

        return check_main(argv[1:])
    if argv[:1] in (["compare"], ["whatif"]):
        from fitcore import whatif_cli
        from fitcore.lab import compare

        return {"compare": compare, "whatif": whatif_cli}[argv[0]].main(argv[1:])
    if argv[:1] == ["replay"]:
        return replay_main(argv[1:])
    if argv[:1] == ["examples"]:
        return examples_main(argv[1:])
    if argv[:1] == ["serve"]:
        from fitcore import serve

        if {"-h", "--help"} & set(argv[1:]):  # its own usage, not Streamlit's
            print(t("cli.serve.help"))
            return 0
        return serve.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:  # before the data is read: an output named as the input would empty it
        check_outputs({"data": args.data}, {"record": args.record, "trace": args.trace})
        cfg = config_from_args(args)
        if args.record:
            check_recordable(cfg, args.record)
        _check_print_every(args.print_every)
    except ConfigError as exc:
        print(error_line("fitcore", flag_error(exc)), file=sys.stderr)
        return 2
    # under torchrun this process is one rank, and only rank 0 prints
    strategy = registry.strategy(cfg.strategy)
    torchrun = torchrun_env() if strategy.torchrun is not None else None
    trainer = strategy.torchrun if torchrun is not None else trainer_for(cfg)
    source = data_source(cfg) if cfg.data else None
    return play(cfg, trainer, args, torchrun, source)


def _check_print_every(every: int) -> None:
    if every < 1:
        raise ConfigError("--print-every", every, integer_range(1, None))


@command
def replay_main(argv: list[str]) -> int:
    """`python -m fitcore replay run.fitrec`: the recorded run's lines, JSON, trace, as the live run gave."""
    p = Parser(prog="python -m fitcore replay", description=t("cli.replay.description"))
    p.add_argument("recording", nargs="?", help=t("cli.help.recording"))
    p.add_argument("--example", help=t("cli.help.example"))
    p.add_argument("--print-every", type=_count, default=1, help=t("cli.help.replay_print_every"))
    add_output_flags(p)
    args = p.parse_args(argv)
    try:
        _check_print_every(args.print_every)
        if args.record:
            raise ConfigError("record", shown_path(args.record), Text("cli.replay.no_record"))
        path = recording_asked(args.recording, args.example)
        check_outputs({"recording": path}, {"trace": args.trace})
        recording = read_recording(path)
    except ConfigError as exc:
        print(error_line("fitcore", flag_error(exc)), file=sys.stderr)
        return 2
    source = recording.header.get("data")
    return play(recording.config, replayer(recording), args, None, source, recording.label)


def example_recordings() -> dict[str, Path]:
    """The recordings fitcore ships (a checkout's examples/, or the installed package's), by name."""
    return {p.stem: p for p in sorted(paths.EXAMPLES.glob("*.fitrec"))} if paths.EXAMPLES.is_dir() else {}


def recording_asked(path: str | None, example: str | None) -> str:
    """The recording a replay reads: the file named, or a shipped example by its name (one of them)."""
    shipped = example_recordings()
    if path and example:
        raise ConfigError("--example", example, Text("cli.replay.one_of"))
    if example is not None:
        if example.removesuffix(".fitrec") not in shipped:
            raise ConfigError("--example", example, Listed(shipped) if shipped else Text("cli.examples.none"))
        return str(shipped[example.removesuffix(".fitrec")])
    if not path:
        raise ConfigError("recording", "", Text("cli.replay.one_of"))
    return path


@command
def examples_main(argv: list[str]) -> int:
    """`python -m fitcore examples`: the recordings fitcore ships, each with where and what it recorded."""
    p = Parser(prog="python -m fitcore examples", description=t("cli.examples.description"))
    p.parse_args(argv)
    shipped = example_recordings()
    if not shipped:
        print(t("cli.examples.none"))
        return 0
    width = max(len(name) for name in shipped)
    for name, path in shipped.items():
        rec = read_recording(str(path))
        cfg, steps = rec.config, sum(isinstance(e, Step) for e in rec.events)
        what = t("cli.examples.line", steps=steps, strategy=registry.of(cfg).label, devices=cfg.devices)
        print(f"{name:<{width}}  {rec.short_label} · {what}")
    print(t("cli.examples.replay", name=next(iter(shipped))))
    return 0


def data_source(cfg: FitConfig) -> dict:
    """A CSV run's source: the file, its checksum, its columns and their standardisation."""
    from fitcore.core import csvdata

    return csvdata.source(cfg)


def detail_text(event: Detail) -> str:
    """A Detail's lines in the current language: made again from its value, so that a replay of a
    recording made in another language reads in this one."""
    lines = {
        **{key: f for s in registry.STRATEGIES.values() for key, f in s.detail_lines.items()},
        GROUP: lambda v: [group_line(v)],
        "shards": lambda v: shard_lines(v, "first"),
        "final": final_lines,
    }.get(event.key)
    return "\n".join(lines(event.value)) if lines else event.text


def play(cfg, trainer, args, torchrun, source: dict | None = None, label: str = "") -> int:
    """Run `trainer` on cfg and print what args ask for; write the recording and the trace. The exit code."""
    lead = torchrun is None or torchrun.rank == 0
    lines = registry.strategy(cfg.strategy).step_lines
    verbose = lead and not (args.quiet or args.json)
    seen: dict = {}
    listeners = []
    trace_file = None  # the trace's file, made before the run so that a bad path is refused first
    try:
        if lead and getattr(args, "record", None):
            listeners.append(Recorder(args.record, extra={"data": source} if source else None))
        if lead and args.trace:
            tracer = TraceBuilder("replay: " + label if label else "fitcore run", registry.flows)
            trace_file = Pending(args.trace, "trace")
            listeners.append(tracer)
    except ConfigError as exc:
        for listener in listeners:  # the recording's temporary file goes (the trace's was not made)
            listener.close()
        print(error_line("fitcore", flag_error(exc)), file=sys.stderr)
        return 2

    def say(text: str) -> None:
        """Print; once the reader has gone (`python -m fitcore | head`), stop the run instead."""
        if "closed" in seen:
            return
        try:
            print(text, flush=True)
        except BrokenPipeError:
            seen["closed"] = True
            _silence_stdout()
            control.stop(Text("cli.stop.closed"))

    def on_event(event) -> None:
        for listener in listeners:
            listener(event)
        if isinstance(event, RunStarted):
            seen["started"] = event
            if verbose:
                say(event.header)
        elif isinstance(event, Step):
            seen.setdefault("first", event)
            seen["latest"] = event
            if verbose and printed(event.step, args.print_every, cfg.total_steps):
                say("\n".join(lines(event)))
                seen["printed"] = event
        elif isinstance(event, Detail):
            seen.setdefault("details", {})[event.key] = event.value
            if verbose and event.text:
                say(detail_text(event))

    # Ctrl-C ends the run between steps, and the summary is still printed
    control = Control()
    previous = signal.signal(signal.SIGINT, lambda *_: control.stop(Text("cli.stop.interrupted")))
    try:
        if verbose and label:
            say(t("cli.replaying", label=label))
        ended = trainer(cfg, on_event, control)
    except BaseException:  # no run's end: no half recording or trace is left where a good file was
        if trace_file is not None:
            trace_file.discard()
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        for listener in listeners:
            if isinstance(listener, Recorder):
                listener.close()  # written whole at the run's end; otherwise discarded
    started = seen.get("started")
    if verbose and seen.get("latest") is not seen.get("printed"):  # stopped early: its last step still shows
        say("\n".join(lines(seen["latest"])))
    if not lead:
        pass  # rank 0 prints the summary
    elif args.json:
        rate = ended.steps / ended.elapsed if ended.elapsed > 0 else 0.0
        outcome = (ended.steps, ended.final_loss, ended.weights, ended.bias)
        result = result_dict(
            cfg, ended.status, ended.message, started, seen.get("first"), seen.get("latest"), outcome,
            ended.elapsed, rate,
        )  # fmt: skip
        if "details" in seen:  # ddp: the process group, each rank's shards and final parameters
            result["details"] = seen["details"]
            if "memory" in seen["details"]:  # what each rank (or device) held, measured from its tensors
                result["per_rank_memory"] = seen["details"]["memory"]
        if source:  # your own data: the file, and the parameters in its units
            result["data"] = data_result(source, ended.weights, ended.bias)
        say(dumps(result))
    else:
        rate = ended.steps / ended.elapsed if ended.elapsed > 0 else 0.0
        lstsq = (started.lstsq_weights, started.lstsq_bias) if started else (None, None)
        true = (None, None) if source else (cfg.weights, cfg.bias)  # a file has no true parameters
        summary = summary_lines(ended, *true, *lstsq, rate)
        if source:  # its least-squares answer is the reference
            summary[1:1] = data_lines(source, ended.weights, ended.bias)
        say("\n".join(summary))
    if trace_file is not None:
        tracer.write(trace_file)
    code = 0 if ended.status == Status.FINISHED else 130 if ended.status == Status.STOPPED else 1
    if "closed" in seen:
        code = PIPE_CLOSED
    if torchrun is not None:
        exit_rank(code)  # never returns: see its docstring
    return code
