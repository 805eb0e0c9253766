"""``oml demo``: OML's whole job on real conversations, every role over the real interfaces (docs/demo.md).

Modules: :mod:`.corpus` (LoCoMo or the pydoc fallback), :mod:`.server`
(HTTP API + in-process workers), :mod:`.agent` (the MCP SDK client over
stdio), :mod:`.steps` (timed, self-checking steps), :mod:`.scenario` (the
run). Entry point: :func:`oml_tools.demo.scenario.run`.
"""
