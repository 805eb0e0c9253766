"""Simulations: opening, writing inside, closing, and reading a simulation's record."""
