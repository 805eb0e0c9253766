"""The HTTP API (FastAPI): one router module per area, RFC 9457 problems for every refusal."""
