"""Entrypoints: the HTTP API, the CLI and the MCP server. They import capabilities, never the reverse."""
