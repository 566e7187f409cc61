"""One run: the phases from the input to the findings, assembled once (`run`)."""
