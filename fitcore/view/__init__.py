"""What the page shows, computed without Streamlit: plain values in, plain values out.

  common.py        shapes and parameter names as written on the page, `Section` (a panel as data);
  controls.py      presets, the pace, the link, and config values <-> the widgets' values;
  status.py        the status line and its colour, the controls' differences from a run, the console panel;
  results.py       the parameters' table, every rank's parameters, the history CSV and the result JSON;
  datasource.py    a CSV upload's values and preview, parameters in the file's units, recordings;
  quiz.py          the classroom's questions on a step, each strategy choosing its own.

A strategy's own view module (`fitcore/strategies/<name>/view.py`) exposes `planned_step`, `sections`,
`parallelism`, `console_frame` and `CONSOLE_HINT`, so that app.py and fitcore.kit.live never ask which
strategy a run has.
"""
