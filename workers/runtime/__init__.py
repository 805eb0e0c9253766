"""The worker runtime: Dramatiq broker and actors, the outbox relay, consumer lag."""
