"""OML Python client (``oml.client``): typed methods for every HTTP operation.

    from oml.client import OMLClient

    with OMLClient("http://127.0.0.1:8765", api_key) as oml:
        ...

See ``client/http.py`` for retries and idempotency, ``client/errors.py`` for
the exceptions, and ``docs/quickstart-service.md`` for a walk-through.
"""
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .http import AsyncOMLClient, OMLClient
from .models import Budget, ClaimIn, Filters

__all__ = ["OMLClient", "AsyncOMLClient", "ClaimIn", "Budget", "Filters", *_errors_all]
