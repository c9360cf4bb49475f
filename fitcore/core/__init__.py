"""The floor: what every strategy, the engine and the page stand on, knowing no strategy (it asks
fitcore.protocols.registry). The config and its checks, the data, the devices, the events a run emits, the
words in English and Chinese, the bytes a rank holds, the files read and written, a class's rooms and
identities; `tests/test_layout.py` holds docs/architecture.md's table of what each module holds."""
