"""subproblems."""
