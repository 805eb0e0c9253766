"""Process runtime: settings, the home, wiring, authentication, tracing, health checks."""
