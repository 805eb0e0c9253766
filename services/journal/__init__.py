"""The journal: the act runner, signed appends, group commits, projections, checkpoints and proofs."""
