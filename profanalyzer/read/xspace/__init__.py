"""The XSpace capture decoder: the wire format, planes, op tables and the trace model's build (the read room's)."""
