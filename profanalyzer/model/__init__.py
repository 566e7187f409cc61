"""The records that cross a stage boundary (Analysis, Findings and their parts), the trace model, the invariants and saved documents."""
