"""The MCP server: one tool, ``propose_watch``, that can only propose (seed 003)."""
