"""Comparing runs: two analyses side by side, op matching across runs, step-time budgets and their JUnit form."""
