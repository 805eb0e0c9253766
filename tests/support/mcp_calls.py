"""Reading MCP tool results and the environment of an ``oml mcp`` child process, for the MCP, recall and verified-read tests."""
from __future__ import annotations

import json
import os


def payload(result) -> dict:
    """A successful tool call's result as data (its structured content, else its JSON text); asserts it is no error."""
    assert not result.is_error, result.content
    if result.structured_content is not None:
        sc = result.structured_content
        return sc.get("result", sc) if isinstance(sc, dict) and set(sc) == {"result"} else sc
    return json.loads(result.content[0].text)


def error_text(result) -> str:
    """A failed tool call's message; asserts it is an error."""
    assert result.is_error
    return result.content[0].text


def env_for(ctx, keys: str) -> dict[str, str]:
    """The environment of an ``oml mcp`` child serving ``ctx``'s database and home with the API keys ``keys`` (comma-separated)."""
    return {"OML_DATABASE_URL": ctx.settings.database_url, "OML_HOME": str(ctx.settings.home),
            "OML_MASTER_KEY": ctx.settings.master_key, "OML_API_KEY": keys, "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "OML_SHARED_DIR": os.environ.get("OML_SHARED_DIR", "")}
