"""A run as the drivers hold it: in a background thread with its `Snapshot` (runner.py), every run of a
server (pool.py), its recording and replay (recording.py, recording_shape.py), its trace for Perfetto
(trace.py) and the lines it prints (console.py). They stand on the engine's layer, beside it."""
