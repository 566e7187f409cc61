"""The floor every stage stands on: the vocabularies, formatting, errors, the chip table, numeric helpers and output naming."""
