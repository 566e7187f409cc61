"""The programmatic doors beside the CLI: the notebook API, the MCP server, `info`, the JSON Schema and the Perfetto export."""
